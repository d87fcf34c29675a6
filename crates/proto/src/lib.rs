//! hetch's wire protocol, without I/O.
//!
//! This crate turns [`Frame`]s into bytes and bytes back into frames. It owns no socket
//! and no clock, so it can be tested with property tests and fuzzed. The engine reads a
//! frame in two steps so that block payloads land straight in pooled buffers: first the
//! [`HEADER_LEN`]-byte header ([`decode_header`]), then either the body of a control
//! frame ([`decode_body`]) or, for [`FrameKind::Data`], the fixed data fields
//! ([`decode_data_fixed`], then [`check_data_payload`]) followed by the payload bytes.
//! [`Decoder`] does the same on an in-memory buffer, for tests and fuzzing.

mod body;
mod codec;
mod escape;
mod frame;
mod path;
mod wire;
mod xattr;

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(test)]
mod tests;

pub use body::{MAX_PIECE, MAX_RANGE_BLOCKS, MAX_REWRITTEN, MAX_TAIL_BLOCKS};
pub use codec::*;
pub use escape::{escape_bytes, escape_text};
pub use frame::*;
pub use path::{validate_operand_path, validate_rel_path};
pub use xattr::{
    xattr_class, xattrs_size, KeptXattrs, Xattr, XattrClass, ACL_ACCESS, ACL_DEFAULT,
    MAX_ENTRY_XATTRS, MAX_XATTR_NAME, MAX_XATTR_VALUE,
};

/// A byte stream frames travel on: TLS or plain TCP between hosts, an in-memory pipe
/// within one. Defined once here, below both the network crate that makes such streams
/// and the engine that reads and writes frames on them.
pub trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// A boxed [`Stream`].
pub type BoxStream = Box<dyn Stream>;
