//! A worker's relay units: one source of a copy between two servers, which the
//! worker asks the source server to push to the destination server (a third-party
//! copy: the data goes from server to server, not through the worker). The service
//! cannot list the source server, so the unit is the whole operand; a run after a
//! lost lease or a failure resumes from what the destination verified.

use std::sync::Arc;

use anyhow::{anyhow, bail};
use hetch_engine::{Progress, RateLimiter, StopSignal};
use hetch_service_api::ClaimedUnit;

use crate::unit::{unit_options, Done, Pace, Runner, Running, UnitContext};
use hetch_copy::DestServer;
use hetch_jobs::UnitSpec;
use hetch_session::location::Location;

/// Runs relay units ([`UnitSpec::Relay`]).
pub(crate) struct RelayUnit;

impl Runner for RelayUnit {
    fn run<'a>(&'a self, ctx: &'a UnitContext, u: &'a ClaimedUnit, p: Pace) -> Running<'a> {
        Box::pin(async move {
            let UnitSpec::Relay { operand } = u.unit else {
                bail!("not a relay unit");
            };
            ctx.relay_unit(u, operand, p.stop, p.rate, p.progress).await
        })
    }
}

impl UnitContext {
    /// Has source operand `operand` of the unit's job pushed by its server into the
    /// job's destination (what it moved counted into `progress` as the source server
    /// reports it); returns the files (copied or found in place) and bytes moved.
    pub(crate) async fn relay_unit(
        &self,
        u: &ClaimedUnit,
        operand: u64,
        stop: StopSignal,
        rate: Arc<RateLimiter>,
        progress: Arc<Progress>,
    ) -> anyhow::Result<Done> {
        let spec = &u.spec;
        let source = usize::try_from(operand)
            .ok()
            .and_then(|i| spec.sources.get(i))
            .ok_or_else(|| anyhow!("the service sent a relay of source {operand}"))?;
        let (source, source_host) = match Location::parse(source) {
            Ok(Location::Remote { host, path }) => (
                Location::Remote {
                    host: host.clone(),
                    path,
                },
                host,
            ),
            _ => bail!("source {source}: not a hetch:// URL"),
        };
        let dest = self.dest_of(u)?;
        let Location::Remote {
            host: dest_host, ..
        } = &dest
        else {
            bail!("dest {}: not a hetch:// URL", spec.dest);
        };
        // Both servers pinned by the operator: the source server is told to pin the
        // destination's key as this worker knows it.
        let dest_server = DestServer {
            token: Some(self.server_token(self.dest_token.as_ref())?),
            fingerprint: Some(self.pinned(dest_host)?),
        };
        let mut opts = unit_options(spec, stop, rate.clone())?;
        // The source server paces the push: it takes the unit's share of the job's
        // rate as it is when the relay starts.
        opts.shared_rate = None;
        opts.rate_limit = rate.rate();
        let source_token = self.source_token.as_ref().or(self.dest_token.as_ref());
        let client = self.client_config(&source_host, source_token)?;
        let mut job = self.unit_copy(
            spec,
            vec![source],
            dest,
            opts,
            (Some(client), hetch_copy::DEFAULT_STREAMS),
        )?;
        job.dest_server = dest_server;
        let s = crate::unit::copy_through(&job, &progress).await?.summary;
        Ok(Done::moved(s.files + s.skipped, s.bytes))
    }
}
