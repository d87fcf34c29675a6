//! What the claim loop asks of the transfer service: work, the leases of the units it
//! runs, and their ends. A trait, so that the loop runs against the service's HTTPS
//! client and against a test's service in memory alike.

use std::future::Future;

use hetch_service_api::client::{Client, ClientError};
use hetch_service_api::{
    ClaimRequest, ClaimedUnit, FinishAll, FinishAllReply, FinishReply, FinishRequest,
    HeartbeatReply, HeartbeatRequest,
};

/// The service's calls a worker's loop makes (`/api/work/claim`, `/heartbeat`,
/// `/finish`, `/finish-all`), with the client's errors: [`ClientError::is_not_allowed`] ends the
/// worker, any other is waited out.
pub trait Service: Send + Sync + 'static {
    /// Asks for up to `req.max` units.
    fn claim(
        &self,
        req: &ClaimRequest,
    ) -> impl Future<Output = Result<Vec<ClaimedUnit>, ClientError>> + Send;

    /// Extends the leases of the units named; the answer says which the service still
    /// holds for this worker, at what rate.
    fn heartbeat(
        &self,
        req: &HeartbeatRequest,
    ) -> impl Future<Output = Result<HeartbeatReply, ClientError>> + Send;

    /// Reports a unit's end.
    fn finish(
        &self,
        req: &FinishRequest,
    ) -> impl Future<Output = Result<FinishReply, ClientError>> + Send;

    /// Reports several units' ends at once; the answer says which were taken.
    fn finish_all(
        &self,
        req: &FinishAll,
    ) -> impl Future<Output = Result<FinishAllReply, ClientError>> + Send;
}

impl Service for Client {
    fn claim(
        &self,
        req: &ClaimRequest,
    ) -> impl Future<Output = Result<Vec<ClaimedUnit>, ClientError>> + Send {
        Client::claim(self, req)
    }

    fn heartbeat(
        &self,
        req: &HeartbeatRequest,
    ) -> impl Future<Output = Result<HeartbeatReply, ClientError>> + Send {
        Client::heartbeat(self, req)
    }

    fn finish(
        &self,
        req: &FinishRequest,
    ) -> impl Future<Output = Result<FinishReply, ClientError>> + Send {
        Client::finish(self, req)
    }

    fn finish_all(
        &self,
        req: &FinishAll,
    ) -> impl Future<Output = Result<FinishAllReply, ClientError>> + Send {
        Client::finish_all(self, req)
    }
}
