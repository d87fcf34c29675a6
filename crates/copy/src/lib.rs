//! A hetch copy as a library: what the user asked for ([`CopyJob`]), run as a local
//! copy, a push, a pull or a relay between two servers (either end may be an object
//! store), with lost sessions to a server recovered by new ones that resume from what
//! the destination verified.
//!
//! - [`job`]: the job, and what its summary says of it (autotuning, a dry run's
//!   prediction).
//! - [`dispatch`](mod@dispatch): one session of a job.
//! - [`run`]: sessions until one completes ([`recover`]), the manifest ([`Copy`]);
//!   sessions until stopped, for a copy that follows its sources ([`forever`]).
//! - [`retry`]: when a lost session is followed by another ([`RetryPolicy`]).
//! - [`buckets`]: the object store clients of a job's operands (with the `cloud`
//!   feature).
//! - [`operand`]: operands as this build takes them (object stores refused without
//!   `cloud`).
//! - [`overlap`]: refusing a local copy onto or into itself (from `hetch-location`,
//!   which the transfer service checks its jobs with too).
//! - [`error`]: [`CopyError`], which says whether another session may get past it.
//! - [`summary`]: what a copy says of itself at its end (and while it runs), as the
//!   commands print it: JSON, or lines for people.
//!
//! It prints nothing: progress, warnings and the mirror's changes go to the
//! [`hetch_engine::Progress`] the caller passes, and the `hetch` binary shows them.

#![deny(missing_docs)]

#[cfg(feature = "cloud")]
pub mod buckets;
pub mod dispatch;
pub mod error;
pub mod job;
pub mod operand;
pub mod retry;
pub mod run;
pub mod summary;

#[cfg(feature = "cloud")]
pub use buckets::Buckets;
pub use dispatch::dispatch;
pub use error::{one_line, CopyError, SessionError};
/// Copies onto or into their own source, found where both are local paths.
pub use hetch_location::overlap::{self, copy_into_itself};
/// The command line's object store settings a job carries (`--s3-endpoint`).
pub use hetch_location::S3Options;
pub use job::{CopyJob, DestServer, DEFAULT_STREAMS};
pub use operand::{parse_operand, OBJECT_STORES};
pub use retry::{moved, Recovery, RetryPolicy};
pub use run::{forever, recover, Copied, Copy, Recovered};
