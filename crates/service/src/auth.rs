//! Who may call the API, and as whom.
//!
//! - The service's own token (the same kind as `hetch serve`'s, in the state
//!   directory), compared in constant time: the operator, and the workers. It sees
//!   every job and may use the worker routes.
//! - With `--oidc-issuer`, a JWT from that OpenID Connect issuer for the service's
//!   audience (checked by `hetch-oidc`): a user, named `oidc:SUBJECT`. A user sees and
//!   acts on the jobs they submitted only, and may not use the worker routes.
//!
//! Failures of either kind are throttled per address as `hetch serve` throttles them.

use std::net::IpAddr;

use crate::AppState;

/// The prefix of a user's name: nothing else can produce it (the token's caller is
/// `token`).
pub const USER_PREFIX: &str = "oidc:";

/// Who is calling, once let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The service token's holder: the operator or a worker.
    Operator,
    /// A user named by an OIDC token (`oidc:SUBJECT`).
    User(String),
}

impl Caller {
    /// The name jobs record as their submitter.
    pub fn name(&self) -> &str {
        match self {
            Caller::Operator => "token",
            Caller::User(name) => name,
        }
    }

    /// Whether this caller may see job a submitted by `submitted_by`.
    pub fn may_see(&self, submitted_by: &str) -> bool {
        match self {
            Caller::Operator => true,
            Caller::User(name) => name == submitted_by,
        }
    }
}

/// When a caller's proof of identity ends (ms since the epoch): a browser session's
/// expiry, or an OIDC token's; `None` for the service's token. Long-lived answers
/// (the event stream) end then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ends(pub Option<u64>);

/// Why a request was not let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No `Authorization: Bearer` header, or a token that is neither the service's
    /// nor a good OIDC token: why, in one line.
    Unauthenticated(String),
    /// Too many failures from this address: try again after this many seconds.
    Throttled(u64),
}

/// Checks the `Authorization` header value of a request from `ip`: who, and until
/// when.
pub async fn check(
    state: &AppState,
    ip: IpAddr,
    header: Option<&[u8]>,
) -> Result<(Caller, Ends), Denied> {
    let presented = header
        .and_then(|h| h.strip_prefix(b"Bearer "))
        .map(<[u8]>::trim_ascii);
    check_token(state, ip, presented)
        .await
        .map(|(c, ends)| (c, Ends(ends)))
}

/// Checks a token presented by `ip` (the service's, or an OIDC token): who it is,
/// and until when the token itself is good (an OIDC token's expiry, milliseconds
/// since the epoch; `None` for the service's token).
pub async fn check_token(
    state: &AppState,
    ip: IpAddr,
    presented: Option<&[u8]>,
) -> Result<(Caller, Option<u64>), Denied> {
    if let Err(wait) = state.throttle.check(ip) {
        return Err(Denied::Throttled(wait.as_secs().max(1)));
    }
    let verdict = match presented {
        None => Err("missing token (Authorization: Bearer TOKEN)".to_string()),
        Some(t) if hetch_net::tokens_equal(t, &state.token) => Ok((Caller::Operator, None)),
        Some(t) => match (&state.oidc, std::str::from_utf8(t)) {
            (Some(oidc), Ok(jwt)) => oidc
                .verify(jwt)
                .await
                .map(|id| {
                    let user = Caller::User(format!("{USER_PREFIX}{}", id.subject));
                    (user, Some(id.expires.saturating_mul(1000)))
                })
                .map_err(|e| e.to_string()),
            _ => Err("wrong token".to_string()),
        },
    };
    match verdict {
        Ok(who) => {
            state.throttle.succeeded(ip);
            Ok(who)
        }
        Err(why) => {
            state.throttle.failed(ip);
            state.metrics.auth_failed();
            Err(Denied::Unauthenticated(why))
        }
    }
}
