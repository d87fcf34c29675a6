//! Verifying OIDC bearer tokens for the transfer service (`hetch service`, see
//! `docs/design/service.md`, "Identity").
//!
//! A client of the service may present, instead of one of hetch's own shared-secret
//! tokens, a JWT issued by an OpenID Connect provider. [`OidcVerifier`] decides whether
//! such a token is good and, if it is, who it names:
//!
//! - it discovers the issuer (`{issuer}/.well-known/openid-configuration`), fetches the
//!   issuer's JWKS and caches its keys by `kid`; an unknown `kid` refreshes the JWKS, at
//!   most once per [`REFRESH_INTERVAL`], so a flood of tokens with made-up key ids cannot
//!   become a flood of requests to the issuer;
//! - it accepts asymmetric signatures only (RS*, PS*, ES256, ES384, EdDSA) and refuses
//!   `alg: none` and HS* before trying any key: an HS token "signed" with the issuer's
//!   public key as HMAC secret is the classic forgery;
//! - it enforces the signature, `exp` (required), `nbf` (if present), `iss`, `aud` and a
//!   non-empty `sub`, with [`LEEWAY_SECS`] of clock skew;
//! - it bounds all an adversary (a client, or whoever answers in the issuer's place)
//!   controls before sizing anything: [`MAX_TOKEN_BYTES`], [`MAX_DOCUMENT_BYTES`],
//!   [`MAX_KEYS`], [`HTTP_TIMEOUT`].
//!
//! For the web interface's login, [`LoginClient`] runs the authorization-code flow
//! with PKCE: the authorization URL, and the code's exchange at the token endpoint
//! (bounded by [`MAX_TOKEN_RESPONSE_BYTES`] and [`HTTP_TIMEOUT`]) for an ID token it
//! verifies as above, with the client id as audience, and its `nonce`.
//!
//! The JWT and signature work is `jsonwebtoken`'s (pure-Rust backend); this crate only
//! chooses what to allow and where keys come from.

#![deny(missing_docs)]

mod config;
mod error;
mod fetch;
mod jwks;
mod login;
mod token;
mod verify;

use std::time::{Duration, Instant};

pub use config::OidcConfig;
pub use error::OidcError;
pub use login::{check_nonce, one_line, pkce_challenge, LoginClient, LoginConfig, PendingLogin};
pub use verify::OidcVerifier;

/// Longest bearer token accepted, in bytes. Real ID and access tokens are 1-4 KiB;
/// the bound is checked before the token is decoded at all.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Largest discovery document or JWKS read from the issuer, in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

/// Largest token endpoint answer read, in bytes: an ID token is bounded by
/// [`MAX_TOKEN_BYTES`], and an access and a refresh token come with it.
pub const MAX_TOKEN_RESPONSE_BYTES: usize = 256 * 1024;

/// Most keys a JWKS may hold; a larger set is refused whole.
pub const MAX_KEYS: usize = 100;

/// Time limit of one HTTP request to the issuer, connection and body included.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Clock skew allowed on `exp` and `nbf`, in seconds.
pub const LEEWAY_SECS: u64 = 60;

/// Shortest time between two fetches of the issuer's documents: an unknown `kid`
/// within this time of the last fetch is refused without asking the issuer again.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(30);

/// Who a verified token names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The token's `sub`: the issuer's stable id of the user or client (never empty).
    pub subject: String,
    /// The token's `exp`, in seconds since the Unix epoch.
    pub expires: u64,
    /// The token's `iss`, equal to the configured issuer.
    pub issuer: String,
    /// The token's other claims (`preferred_username`, `groups`, ...), as signed by
    /// the issuer: what an identity map matches on.
    pub claims: serde_json::Map<String, serde_json::Value>,
}

/// A monotonic time source for the refresh rate limit. Injectable so that a test can
/// move time past [`REFRESH_INTERVAL`] instead of waiting for it.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The real monotonic clock, [`Instant::now`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}
