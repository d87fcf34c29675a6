//! Why a worker stopped.

use hetch_service_api::client::ClientError;

/// Why [`crate::run`] (or [`crate::claim_loop::claim_loop`]) ended other than idle.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The metrics endpoint could not be bound (`--metrics ADDR`).
    #[error(transparent)]
    Metrics(std::io::Error),
    /// The service's client could not be set up (its key, the known-hosts file).
    #[error(transparent)]
    Connect(ClientError),
    /// The root could not be resolved.
    #[error("{path}: {source}", path = .path.display())]
    Root {
        /// The root as given.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The service does not take this worker's token (or not for workers): asking
    /// again will not help.
    #[error(transparent)]
    NotAllowed(ClientError),
    /// A unit's task panicked or was cancelled.
    #[error("unit task: {0}")]
    UnitTask(#[from] tokio::task::JoinError),
}
