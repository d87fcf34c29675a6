//! Sockets, TLS and authentication for hetch (SPEC ONLY: bodies to be written).
//!
//! - [`SocketOptions`]: per-socket buffers and congestion control, applied to every
//!   data and control socket.
//! - TLS 1.3 (rustls, ring provider): [`ServerIdentity`] is the server's key and
//!   self-signed certificate, created on first start in its state directory; clients pin
//!   the certificate's SHA-256 [`Fingerprint`], either given explicitly or remembered on
//!   first use in a [`KnownHosts`] file. A changed key is refused loudly.
//! - [`accept`] serves TLS and plain TCP on the same port (the first byte tells them
//!   apart), because `--no-encrypt` data streams are plain TCP while the control
//!   connection is always TLS.
//! - Tokens: read from files, created on first server start, compared in constant time.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A byte stream (TLS or plain TCP) that the engine reads frames from and writes to.
pub trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}
/// A boxed [`Stream`].
pub type BoxStream = Box<dyn Stream>;

/// Errors of this crate; each names the host or file concerned.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Could not connect.
    #[error("cannot connect to {host}: {source}")]
    Connect {
        /// host:port
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
    #[error("HOST KEY CHANGED for {host}: expected {expected}, server presented {actual}; if the server was re-keyed on purpose, remove its line from {known_hosts} or pass --fingerprint")]
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

/// Per-socket tuning.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SocketOptions {
    /// TCP congestion control algorithm (e.g. "cubic", "bbr", "reno"); None = system default.
    pub congestion: Option<String>,
    /// SO_SNDBUF in bytes; 0 = leave to kernel autotuning.
    pub send_buffer: u32,
    /// SO_RCVBUF in bytes; 0 = leave to kernel autotuning.
    pub recv_buffer: u32,
}

impl SocketOptions {
    /// Applies the options (and TCP_NODELAY) to a connected or listening socket.
    pub fn apply(&self, _socket: &tokio::net::TcpStream, _host: &str) -> Result<(), NetError> {
        todo!()
    }
}

/// SHA-256 of a certificate's DER bytes. Displays and parses as `sha256:<64 hex digits>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

/// The server's TLS key and self-signed certificate.
#[derive(Debug)]
pub struct ServerIdentity {
    /// Fingerprint of the certificate, printed at start for clients to pin.
    pub fingerprint: Fingerprint,
}

impl ServerIdentity {
    /// Loads `key.pem`/`cert.pem` from `state_dir`, creating them (mode 0600) and the
    /// directory on first start. Returns whether they were created.
    pub fn load_or_create(_state_dir: &Path) -> Result<(Self, bool), NetError> {
        todo!()
    }

    /// A rustls server configuration (TLS 1.3 only) for this identity.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        todo!()
    }
}

/// A known-hosts file: lines `host:port sha256:<hex>`, `#` comments.
#[derive(Debug, Clone)]
pub struct KnownHosts {
    /// The file.
    pub path: PathBuf,
}

impl KnownHosts {
    /// The default file: `$HETCH_CONFIG_DIR/known_hosts`, else
    /// `$XDG_CONFIG_HOME/hetch/known_hosts`, else `$HOME/.config/hetch/known_hosts`.
    pub fn default_path() -> PathBuf {
        todo!()
    }
    /// The pinned fingerprint of `host` (as `host:port`), if any.
    pub fn lookup(&self, _host: &str) -> Result<Option<Fingerprint>, NetError> {
        todo!()
    }
    /// Records a fingerprint for `host` (creating the file and its directory).
    pub fn record(&self, _host: &str, _fp: Fingerprint) -> Result<(), NetError> {
        todo!()
    }
}

/// How a client decides to trust a server's certificate.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Exactly this fingerprint (`--fingerprint`).
    Pinned(Fingerprint),
    /// The fingerprint in this known-hosts file; on first use, accept and record it.
    KnownHosts(KnownHosts),
}

/// Client-side TLS: a connector that checks the server against a [`Trust`] policy.
pub struct TlsClient {
    _private: (),
}

impl TlsClient {
    /// Makes a client for `host` (`host:port`, as written in the known-hosts file).
    pub fn new(_host: &str, _trust: Trust) -> Result<Self, NetError> {
        todo!()
    }
}

/// Connects to `host` (`host:port`), applies `opts`, and wraps the socket in TLS when
/// `tls` is given. A first-use fingerprint is recorded after a successful handshake;
/// a mismatch is [`NetError::HostKeyChanged`].
pub async fn connect(
    _host: &str,
    _opts: &SocketOptions,
    _tls: Option<&TlsClient>,
) -> Result<BoxStream, NetError> {
    todo!()
}

/// Accepted connection: the stream, whether it is TLS, and the peer address.
pub struct Accepted {
    /// The stream.
    pub stream: BoxStream,
    /// True when the client started TLS.
    pub encrypted: bool,
    /// Peer address, for logs.
    pub peer: std::net::SocketAddr,
}

/// Finishes accepting `socket`: applies `opts`, peeks the first byte, and performs
/// the TLS handshake when it is a TLS record (0x16); otherwise returns the plain stream.
pub async fn accept(
    _socket: tokio::net::TcpStream,
    _opts: &SocketOptions,
    _tls: &Arc<rustls::ServerConfig>,
) -> Result<Accepted, NetError> {
    todo!()
}

/// Reads a token file (trailing whitespace trimmed); an empty file is an error.
pub fn read_token_file(_path: &Path) -> Result<Vec<u8>, NetError> {
    todo!()
}

/// Loads `state_dir/token`, creating a random 32-byte hex token (mode 0600) on first
/// start. Returns the token and its path.
pub fn load_or_create_token(_state_dir: &Path) -> Result<(Vec<u8>, PathBuf), NetError> {
    todo!()
}

/// Constant-time equality of two tokens.
pub fn tokens_equal(_a: &[u8], _b: &[u8]) -> bool {
    todo!()
}
