//! `hetch doctor`: what on this host limits a transfer, by how much, and the command
//! that fixes it.
//!
//! - [`window`]: the arithmetic of TCP windows: the bandwidth-delay product of a path,
//!   the window one autotuned stream reaches under the kernel's `tcp_rmem`/`tcp_wmem`
//!   limits, the streams a path then needs, and the limits that would let fewer do.
//! - [`host`]: the limits as this host (this network namespace) has them, read from
//!   `/proc/sys` and `/sys` (or test trees standing in for them).
//! - [`check`]: the findings for a path of a given rate and round-trip time, worst
//!   first, each with the exact commands that fix it; [`Report`] prints them as a
//!   short table or as JSON.
//! - [`predict`]: a transfer's duration from its shape and the rates of the chain's
//!   links (a bottleneck model), and the accuracy measure of seed 003 (MAPE).
//! - [`tune`]: autotuning: the data streams a session opens, from the round trip
//!   measured while connecting and these limits.
//! - `measure` (feature `measure`): the links measured on this host: one core's
//!   hashing, one TLS stream over loopback, a directory's storage.
//! - [`sysctl`]: running a report's sysctl fixes with a way back (`--apply`,
//!   `--undo`).
//!
//! Only [`sysctl`] changes the system, and only when called; the rest reads (the
//! storage measurement writes a temporary file of its own).

pub mod check;
pub mod host;
#[cfg(feature = "measure")]
pub mod measure;
pub mod predict;
pub mod sysctl;
pub mod tune;
pub mod window;

pub use check::{check, host_findings, Capacity, Finding, Path, Probe, Report};
pub use host::Host;
