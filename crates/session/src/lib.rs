//! Opening and serving hetch sessions: everything between a TCP connection and the
//! engine's [`hetch_engine::Transport`].
//!
//! - [`client`]: connect, TLS with the server's pinned key, the preamble, `Hello`, the
//!   token, the `Welcome`, and the data streams joined with a proof bound to the
//!   control connection's TLS session.
//! - [`location`]: what a command-line operand names (a local path, a `hetch://`
//!   server's path or an object store location).
//! - [`relay`]: third-party copies, a server pushing its files to another server at
//!   a client's request (the client only watches).
//! - [`range`]: one node's block range of a large file that several nodes move
//!   (a transfer service's workers), written into the destination server's shared
//!   part file, and the commit once every range is there.
//! - [`server`]: the listener, limits on connections before authentication, token
//!   checks with per-address back-off, fair shares of sessions and connections per
//!   address and in all (the longest-idle session closed for a newcomer), data streams joining their session, and each
//!   session run by the engine as a sink (push) or a source (pull), into a directory or
//!   an object store prefix; with `metrics`, its counters in Prometheus' text format.
//!
//! A test (or any program) opens a session in-process with these; the `hetch` binary
//! adds flags, output and exit codes.

#![deny(missing_docs)]

pub mod client;
/// What an operand names, parsed in the leaf crate `hetch-location` (re-exported so
/// that `hetch_session::location::Location` keeps working).
pub use hetch_location::location;
mod metrics;
pub mod range;
mod rejoin;
pub mod relay;
mod reuse;
#[cfg(test)]
mod reuse_hostile;
pub mod server;

pub use client::{
    is_damage_error, is_transient, is_transient_error, load_token, open_session, session_request,
    Autotune, ClientConfig, NoAnswer,
};
pub use relay::{relay, server_key, RelayPolicy};
pub use reuse::SessionPool;
pub use server::{default_state_dir, ServeConfig, ServeLimits, ServeRoot, Server};
