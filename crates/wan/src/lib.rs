//! hetch's WAN testbed (issue 4, in progress): two emulated hosts joined by a link with a
//! chosen round-trip time, rate and loss.
//!
//! The kernel's `netem` is the usual tool, but many kernels (this project's CI machine
//! among them) lack it; so hetch carries its own *delay line*: a TUN device in each
//! network namespace and a forwarder that queues each packet, serialises it at the
//! link's rate, drops it with the link's loss probability, and releases it after the
//! one-way delay. This crate starts with that delay line's logic, without I/O
//! ([`DelayLine`]), so that its timing and loss are unit-tested with virtual time.

#![deny(missing_docs)]

mod delay;
pub mod forward;
pub mod netns;
pub mod testbed;
pub mod tun;

pub use delay::{DelayLine, Dropped, LinkConfig};
