//! A transfer service's worker, the parts of it without I/O.
//!
//! [`lease::Leases`] keeps the leases of the units a worker runs: fed the time and
//! the service's answers, it says when to send a heartbeat and which units to stop,
//! so that a worker never writes after the service may have handed a unit to another
//! worker. The worker's loop (in the `hetch` binary) performs what it says; property
//! tests check it against the service's own lease model (`hetch-jobs`).

pub mod lease;
