//! hetch's WAN testbed: emulated hosts (two, or N sources and N destinations, see
//! [`hosts`]) joined by links with a chosen round-trip time, rate and loss.
//!
//! The kernel's `netem` is the usual tool, but many kernels (this project's CI machine
//! among them) lack it; so hetch carries its own *delay line*: a TUN device in each
//! network namespace and a forwarder that queues each packet, serialises it at the
//! link's rate, drops it with the link's loss probability (or damages its payload and
//! fixes its TCP checksum, see [`damage`]), and releases it after the one-way delay
//! ([`forward`], [`tun`]). The forwarder is the router of a star: each host's packets
//! cross its own line and go to the host their destination names ([`route`]). The
//! delay line's logic is kept free of I/O ([`DelayLine`]), so that its timing and loss
//! are unit-tested with virtual time. Where the kernel does have `netem`, [`netem`]
//! builds the two hosts of one pair on a veth pair shaped by it instead.

#![deny(missing_docs)]

pub mod damage;
mod delay;
pub mod forward;
pub mod hosts;
pub mod netem;
pub mod netns;
pub mod route;
pub mod testbed;
pub mod tun;

pub use delay::{DelayLine, Dropped, LinkConfig};
