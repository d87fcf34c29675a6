//! The engine's error type.

use hetch_proto::{ErrorCode, ErrorFrame, ProtoError};
use hetch_storage::StorageError;

/// Why a session failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A file system error that ends the session (e.g. the disk is full).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The connection to the peer broke.
    #[error("connection to {peer} lost ({})", lost_because(cause))]
    Connection {
        /// The peer.
        peer: String,
        /// The I/O error. Not a `source`: its text is summed up in the message, and
        /// printing the chain would add the TLS library's wording and URL again.
        cause: std::io::Error,
    },
    /// The peer sent bytes that are not valid hetch frames.
    #[error("{peer} broke the protocol: {source}")]
    Proto {
        /// The peer.
        peer: String,
        /// What was wrong.
        source: ProtoError,
    },
    /// The peer sent a valid frame at the wrong time.
    #[error("{peer} broke the protocol: {what}")]
    Unexpected {
        /// The peer.
        peer: String,
        /// What was unexpected.
        what: String,
    },
    /// A frame on a plain data stream failed its MAC: the bytes were changed (or
    /// dropped, repeated, reordered) between the peer and us.
    #[error("data stream from {peer} failed its integrity check ({what}): the bytes were altered on the way; ending the session")]
    Tampered {
        /// The peer.
        peer: String,
        /// Which frame.
        what: String,
    },
    /// The peer closed the control connection before the session's end: it gave up on
    /// the session (a data stream of its own broke, it was stopped) without saying
    /// why. For us the connection is lost; unlike [`EngineError::Connection`] no
    /// reason can follow on the control stream, so none is waited for.
    #[error("connection to {peer} lost (the peer closed the session before its end)")]
    ClosedEarly {
        /// The peer.
        peer: String,
    },
    /// Nothing arrived from the peer for the whole stall timeout (its process stopped,
    /// its host gone, the path cut): treated like a lost connection.
    #[error("{peer} stopped answering: nothing received for {secs} s (see --stall-timeout)")]
    Stalled {
        /// The peer.
        peer: String,
        /// Seconds since anything arrived.
        secs: u64,
    },
    /// This side was asked to stop (a server shutting down); the peer is told.
    #[error("the server is shutting down; a new session resumes what this one verified")]
    ShuttingDown,
    /// The peer reported a fatal error.
    #[error("{peer}: {message}")]
    Peer {
        /// The peer.
        peer: String,
        /// Its error class.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// The destination as a whole refuses writes (read-only, full, over quota, or the
    /// destination directory not writable): the receiver stopped the session at once
    /// rather than failing every remaining file with the same cause.
    #[error("{}: {cause}; stopped ({not_copied} listed {} not copied)", path.display(), if *not_copied == 1 { "file" } else { "files" })]
    Stopped {
        /// Where it happened (the entry being created or written).
        path: std::path::PathBuf,
        /// The cause, e.g. "read-only file system".
        cause: String,
        /// Whether it is "no space" (for the error class sent to the peer).
        no_space: bool,
        /// Files announced so far that were neither copied nor already there.
        not_copied: u64,
    },
    /// The destination cannot take the operands (cp semantics).
    #[error("{0}")]
    Destination(String),
    /// A storage service (an object store) refused the whole transfer (credentials, a
    /// missing bucket), as its one line.
    #[error("{0}")]
    Service(String),
}

impl From<hetch_store::StoreError> for EngineError {
    fn from(e: hetch_store::StoreError) -> Self {
        use hetch_store::StoreError as E;
        match e {
            E::Storage(e) => EngineError::Storage(e),
            E::Destination(line) => EngineError::Destination(line),
            E::Service(line) => EngineError::Service(line),
        }
    }
}

impl EngineError {
    /// A valid frame at the wrong time from `peer`.
    pub fn unexpected(peer: &str, what: impl Into<String>) -> Self {
        EngineError::Unexpected {
            peer: peer.to_string(),
            what: what.into(),
        }
    }

    /// `peer` closed the control connection before the session's end.
    pub fn closed_early(peer: &str) -> Self {
        EngineError::ClosedEarly {
            peer: peer.to_string(),
        }
    }

    /// The fatal error `peer` reported.
    pub fn from_peer(peer: &str, e: hetch_proto::ErrorFrame) -> Self {
        EngineError::Peer {
            peer: peer.to_string(),
            code: e.code,
            message: e.message,
        }
    }

    /// Whether a new session may get past this error: the connection broke, stalled or
    /// was tampered with on the way, or the peer is going away. Errors about what is
    /// being copied (paths, space, permissions, protocol) are not.
    pub fn is_transient(&self) -> bool {
        match self {
            EngineError::Connection { .. }
            | EngineError::ClosedEarly { .. }
            | EngineError::Stalled { .. }
            | EngineError::Tampered { .. } => true,
            EngineError::Peer { code, .. } => {
                matches!(code, ErrorCode::Unavailable | ErrorCode::Damaged)
            }
            _ => false,
        }
    }

    /// The frame that tells the peer about this error.
    pub fn to_frame(&self) -> ErrorFrame {
        let code = match self {
            EngineError::Storage(e) if e.is_no_space() => ErrorCode::NoSpace,
            EngineError::Storage(StorageError::Refused { .. }) => ErrorCode::Path,
            // Try again later, as from a server going away.
            EngineError::Storage(StorageError::Busy { .. }) => ErrorCode::Unavailable,
            EngineError::Storage(StorageError::WrongType { .. }) => ErrorCode::Path,
            EngineError::Destination(_) => ErrorCode::Path,
            EngineError::Stopped { no_space: true, .. } => ErrorCode::NoSpace,
            EngineError::Stopped { .. } => ErrorCode::Io,
            EngineError::Storage(_) => ErrorCode::Io,
            EngineError::Proto { .. } | EngineError::Unexpected { .. } => ErrorCode::Protocol,
            // The link, not the peer: the peer's next session gets past it.
            EngineError::Tampered { .. } => ErrorCode::Damaged,
            EngineError::Peer { code, .. } => *code,
            EngineError::Connection { .. }
            | EngineError::ClosedEarly { .. }
            | EngineError::Stalled { .. } => ErrorCode::Other,
            EngineError::ShuttingDown => ErrorCode::Unavailable,
            EngineError::Service(_) => ErrorCode::Io,
        };
        ErrorFrame {
            code,
            message: self.to_string(),
        }
    }
}

/// Why a connection ended, in a few words for a one-line message: the TLS library's
/// texts carry documentation URLs and the OS's carry "(os error N)", neither of which
/// helps someone whose server went away.
fn lost_because(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    let text = e.to_string();
    match e.kind() {
        ErrorKind::UnexpectedEof if text.contains("close_notify") => {
            "closed without TLS close_notify".into()
        }
        ErrorKind::UnexpectedEof => "closed before the end".into(),
        ErrorKind::ConnectionReset => "reset by the peer".into(),
        ErrorKind::BrokenPipe => "closed by the peer".into(),
        ErrorKind::ConnectionAborted => "aborted".into(),
        ErrorKind::TimedOut => "timed out".into(),
        _ => {
            // Whatever else: the words before any URL, without the error number.
            let words = text.split(": http").next().unwrap_or_default();
            match words.find(" (os error") {
                Some(i) => words[..i].to_string(),
                None => words.to_string(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};

    #[test]
    fn lost_connections_read_as_one_plain_line() {
        let tls = Error::new(
            ErrorKind::UnexpectedEof,
            "peer closed connection without sending TLS close_notify: https://docs.rs/rustls/latest/rustls/manual/_03_howto/index.html#unexpected-eof",
        );
        let e = EngineError::Connection {
            peer: "host:7878".into(),
            cause: tls,
        };
        assert_eq!(
            e.to_string(),
            "connection to host:7878 lost (closed without TLS close_notify)"
        );
        let reset = Error::from_raw_os_error(libc::ECONNRESET);
        assert_eq!(lost_because(&reset), "reset by the peer");
        let other = Error::from_raw_os_error(libc::EHOSTUNREACH);
        assert_eq!(lost_because(&other), "No route to host");
        let url = Error::other("bad record: https://example.org/x");
        assert_eq!(lost_because(&url), "bad record");
    }
}
