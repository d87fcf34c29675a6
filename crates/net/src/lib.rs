//! Sockets, TLS and authentication for hetch.
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
//! - Tokens: read from files, created on first server start, compared in constant time;
//!   only ever sent inside TLS. Data streams prove membership in a session with a
//!   [`SessionKey`] exported from the control connection's TLS session instead.
//! - Before authentication: [`PreAuthGate`] caps unauthenticated connections,
//!   [`AuthThrottle`] slows token guessing per address; after it, [`Shares`] caps what
//!   one caller or address holds.

// One probe (ktls.rs) makes a system call std has no wrapper for.
#![deny(unsafe_code)]

mod conn;
mod error;
mod fd_limit;
mod fingerprint;
mod fsutil;
mod growbuf;
mod identity;
mod ktls;
mod limits;
mod probe;
mod session_key;
mod shares;
mod socket;
mod throttle;
mod token;
mod trust;

pub use conn::{accept, connect, connect_keyed, Accepted, ReadBuffer, CONNECT_TIMEOUT};
pub use error::NetError;
pub use fd_limit::raise_fd_limit;
pub use fingerprint::{Fingerprint, ParseFingerprintError};
pub use fsutil::private_state_dir;
pub use identity::ServerIdentity;
pub use ktls::{ktls, Ktls};
pub use limits::{
    address_key, Admitted, PreAuthGate, PreAuthLimits, PreAuthPermit, RateLimitedLog, Refusal,
};
pub use probe::{probe, PathProbe, PROBES};
pub use session_key::{SessionKey, EXPORTER_LABEL};
pub use shares::{Full, Share, Shares};
#[cfg(target_os = "linux")]
pub use socket::congestion;
pub use socket::SocketOptions;
pub use throttle::{AuthThrottle, TokenKind, FIRST_WAIT, FREE_FAILURES, MAX_WAIT};
pub use token::{
    check_token_len, load_or_create_named_token, load_or_create_token, read_token_file,
    tokens_equal, MIN_TOKEN_LEN,
};
pub use trust::{KnownHosts, TlsClient, Trust};

pub use hetch_proto::{BoxStream, Stream};
