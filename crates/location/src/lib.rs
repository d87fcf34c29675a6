//! What a command-line operand names, parsed without touching anything (but
//! [`overlap`]):
//!
//! - [`location`]: a local path, `hetch://HOST[:PORT]/path` on a server, or an object
//!   store location ([`Location`]).
//! - [`url`]: `s3://`, `gs://` and `az://BUCKET/KEY` operands ([`ObjectUrl`]).
//! - [`host`]: `HOST[:PORT]` of a server or service ([`host_port`]).
//! - [`overlap`]: whether a local copy would write onto or into its own source (the
//!   one module that looks at files: it compares device and inode).
//!
//! A leaf crate: `hetch-session` and `hetch-object` re-export it, and what only needs
//! to read operands (the MCP server's policy) depends on it alone.

#![deny(missing_docs)]

pub mod host;
pub mod location;
pub mod overlap;
pub mod url;

pub use host::host_port;
pub use location::{Location, DEFAULT_PORT};
pub use url::{ObjectUrl, S3Options, Scheme};
