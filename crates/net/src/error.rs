//! The crate's error type.

use std::path::PathBuf;

use crate::Fingerprint;

/// Errors of this crate; each names the host or file concerned.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Could not connect (resolution, TCP connect, or an I/O error on a fresh socket).
    #[error("cannot connect to {host}: {source}")]
    Connect {
        /// host:port (or the peer address on the accepting side)
        host: String,
        /// Cause.
        source: std::io::Error,
    },
    /// TLS handshake failed for a reason other than the pinned key.
    #[error("TLS handshake with {host} failed: {reason}")]
    Tls {
        /// host:port
        host: String,
        /// Cause.
        reason: String,
    },
    /// The server presented another certificate than the pinned one.
    #[error("{}", host_key_message(host, expected, actual, known_hosts))]
    HostKeyChanged {
        /// host:port
        host: String,
        /// Pinned fingerprint.
        expected: Fingerprint,
        /// Presented fingerprint.
        actual: Fingerprint,
        /// Where the pin came from (known-hosts file path or "--fingerprint").
        known_hosts: String,
    },
    /// A socket option could not be applied.
    #[error("cannot set {option} on socket to {host}: {reason}")]
    SocketOption {
        /// host:port or "listener"
        host: String,
        /// Which option.
        option: &'static str,
        /// Cause (e.g. the congestion control algorithms the kernel offers).
        reason: String,
    },
    /// A file (key, certificate, token, known hosts) could not be read or written.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Cause.
        reason: String,
    },
}

impl NetError {
    /// Shorthand for [`NetError::File`].
    pub(crate) fn file(path: impl Into<PathBuf>, reason: impl std::fmt::Display) -> Self {
        NetError::File {
            path: path.into(),
            reason: reason.to_string(),
        }
    }
}

/// The message for a key mismatch: what to do depends on where the pin came from.
fn host_key_message(
    host: &str,
    expected: &Fingerprint,
    actual: &Fingerprint,
    source: &str,
) -> String {
    if source == "--fingerprint" {
        format!("{host} presented key {actual}, not the {expected} given with --fingerprint; refusing to connect")
    } else {
        format!(
            "HOST KEY CHANGED for {host}: expected {expected}, server presented {actual}; if the server was re-keyed on purpose, remove its line from {source}"
        )
    }
}
