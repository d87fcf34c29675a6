//! The transfer service's jobs, as code without I/O or clock (see
//! `docs/design/service.md`): the service and the database layer feed them what
//! happened and act on what they decide, and property tests check them alone.
//!
//! - [`plan`]: a job's listing cut into work units: batches of small files, block
//!   ranges of large files, and the one commit of each large file.
//! - [`lease`]: the life of one unit: ready, leased to a worker until a deadline,
//!   done or failed; expiry and bounded attempts.

#![deny(missing_docs)]

pub mod lease;
pub mod plan;

pub use lease::{Lease, Refused, Unit, UnitState};
pub use plan::{PlanError, Planner, UnitSpec, MAX_RANGE_BLOCKS};
