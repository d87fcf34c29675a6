//! Exposing hetch's counters to Prometheus.
//!
//! - [`Exposition`]: the text exposition format (version 0.0.4), written in one place
//!   so that the service, the workers and `hetch serve` escape alike: HELP text and
//!   label values are escaped as the format says, names are checked.
//! - [`Endpoint`]: a plain-HTTP listener answering `GET /metrics` with a fresh
//!   exposition (404 for any other path), for the processes that have no HTTP API of
//!   their own (`hetch serve`, `hetch worker`). The service answers `/metrics` on its
//!   own HTTPS API instead.

#![deny(missing_docs)]

mod endpoint;
mod text;

pub use endpoint::{Endpoint, Serving};
pub use text::{Exposition, Family, Kind, CONTENT_TYPE};
