//! Why a token or an issuer was refused.

/// Why the verifier refused a token, a configuration or the issuer's documents. The
/// Display is one line for a log or a 401 body; it quotes at most a shortened,
/// escaped piece of what a client sent (a `kid`, an `alg`), never the token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OidcError {
    /// A configured or discovered URL the verifier will not fetch.
    #[error("OIDC URL {url:?} refused: {reason}")]
    InvalidUrl {
        /// The URL, shortened.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The configured audience is empty.
    #[error("OIDC audience must not be empty")]
    EmptyAudience,
    /// The extra CA certificate could not be used.
    #[error("OIDC extra CA certificate unusable: {0}")]
    InvalidCaCertificate(String),
    /// The HTTP client could not be built.
    #[error("OIDC HTTP client could not be built: {0}")]
    HttpClient(String),
    /// The issuer could not be reached, or did not answer with success.
    #[error("OIDC issuer unreachable: {url}: {reason}")]
    IssuerUnreachable {
        /// The URL fetched.
        url: String,
        /// What went wrong (connection, TLS, timeout, HTTP status).
        reason: String,
    },
    /// The discovery document or JWKS is unusable (too large, not JSON, no keys...).
    #[error("OIDC document at {url} unusable: {reason}")]
    BadDocument {
        /// The URL fetched.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The discovery document names another issuer than the configured one.
    #[error("OIDC discovery document names issuer {found:?}, configured is {expected:?}")]
    IssuerMismatch {
        /// The configured issuer.
        expected: String,
        /// The `issuer` of the document, shortened.
        found: String,
    },
    /// The token is longer than [`crate::MAX_TOKEN_BYTES`].
    #[error("bearer token too long: {len} bytes, at most {max}")]
    TokenTooLong {
        /// Its length in bytes.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The token is not a well-formed JWS compact serialisation.
    #[error("bearer token malformed: {0}")]
    Malformed(String),
    /// The token's `alg` is not one this verifier accepts (`none`, HS*, unknown).
    #[error("bearer token algorithm {0:?} not accepted (only RS*, PS*, ES256, ES384, EdDSA)")]
    UnsupportedAlgorithm(String),
    /// The token's header names no key.
    #[error("bearer token header has no key id (kid)")]
    MissingKeyId,
    /// The token's `kid` is not among the issuer's keys, even after a refresh.
    #[error("bearer token signed with unknown key {kid:?}")]
    UnknownKey {
        /// The `kid`, shortened.
        kid: String,
    },
    /// The key named by `kid` is of another type, curve or algorithm than the token's
    /// `alg`.
    #[error("bearer token algorithm {alg} does not match key {kid:?}")]
    KeyAlgorithmMismatch {
        /// The `kid`, shortened.
        kid: String,
        /// The token's `alg`.
        alg: String,
    },
    /// The issuer's key could not be used to verify (bad modulus, point off curve...).
    #[error("issuer key {kid:?} unusable: {reason}")]
    BadKey {
        /// The `kid`, shortened.
        kid: String,
        /// Why.
        reason: String,
    },
    /// The signature does not verify under the named key.
    #[error("bearer token signature invalid")]
    BadSignature,
    /// `exp` is past (beyond the leeway). Only ever reported once the signature
    /// verified (claims are checked after it), so the issuer made this token: the
    /// service does not count it as a guess.
    #[error("bearer token expired")]
    Expired,
    /// `nbf` is in the future (beyond the leeway).
    #[error("bearer token not yet valid (nbf in the future)")]
    NotYetValid,
    /// `aud` neither is nor contains the configured audience.
    #[error("bearer token audience is not {expected:?}")]
    WrongAudience {
        /// The configured audience.
        expected: String,
    },
    /// `iss` is not the configured issuer.
    #[error("bearer token issuer is not {expected:?}")]
    WrongIssuer {
        /// The configured issuer.
        expected: String,
    },
    /// A required claim (`exp`, `iss`, `aud`, `sub`) is absent.
    #[error("bearer token lacks the {0:?} claim")]
    MissingClaim(String),
    /// A claim has the wrong JSON type (e.g. `nbf` as a string) or the claims are not
    /// a JSON object.
    #[error("bearer token claim {0} has the wrong type")]
    InvalidClaim(String),
    /// The token endpoint refused the code (its `error` and `error_description`, one
    /// line, shortened).
    #[error("the issuer refused the login: {0}")]
    TokenEndpoint(String),
    /// An ID token's `nonce` is absent or not the one of this login.
    #[error("ID token nonce is not this login's")]
    WrongNonce,
    /// `sub` is present but empty.
    #[error("bearer token has an empty subject")]
    EmptySubject,
}

/// `s` cut to a length fit for one log line, on a character boundary. What a client
/// sends goes through this (and `{:?}`, which escapes control characters) before any
/// Display quotes it.
pub(crate) fn shorten(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        None => s.to_owned(),
        Some((at, _)) => format!("{}...", &s[..at]),
    }
}
