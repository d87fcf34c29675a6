//! What a command-line operand names, parsed without touching anything:
//!
//! - [`location`]: a local path, `hetch://HOST[:PORT]/path` on a server, or an object
//!   store location ([`Location`]).
//! - [`url`]: `s3://`, `gs://` and `az://BUCKET/KEY` operands ([`ObjectUrl`]).
//!
//! A leaf crate: `hetch-session` and `hetch-object` re-export it, and what only needs
//! to read operands (the MCP server's policy) depends on it alone.

#![deny(missing_docs)]

pub mod location;
pub mod url;

pub use location::{Location, DEFAULT_PORT};
pub use url::{ObjectUrl, Scheme};
