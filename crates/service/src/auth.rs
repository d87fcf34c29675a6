//! Who may call the API, and as whom.
//!
//! - The service's own token (the same kind as `hetch serve`'s, in the state
//!   directory), compared in constant time: the operator. It sees every job and may
//!   use the worker routes too (workers set up before they had a token of their own).
//! - The workers' token (`worker-token` in the state directory), likewise compared:
//!   a worker. It may use the worker routes and read a job's listing, which its units
//!   need, and nothing else: a worker's host, or a unit's child process running as a
//!   user's account, holds no power over jobs, schedules or the web interface.
//! - With `--oidc-issuer`, a JWT from that OpenID Connect issuer for the service's
//!   audience (checked by `hetch-oidc`): a user, named `oidc:SUBJECT`. A user sees and
//!   acts on the jobs they submitted only, and may not use the worker routes.
//!
//! Failures are throttled per address as `hetch serve` throttles them, and per kind
//! of token ([`hetch_net::TokenKind`]): bad OIDC tokens from an address never hold
//! back the service's token from it (its workers behind the same NAT keep their
//! leases), nor the reverse. Only guesses count: a request with no token, or an OIDC
//! token its issuer signed that has merely expired, guessed nothing.

use std::net::IpAddr;
use std::sync::Arc;

use hetch_net::TokenKind;
use hetch_oidc::OidcError;

use crate::identity::Access;
use crate::AppState;

/// The prefix of a user's name: nothing else can produce it (the token's caller is
/// `token`).
pub const USER_PREFIX: &str = "oidc:";

/// Who is calling, once let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The service token's holder: the operator (or a worker given its token).
    Operator,
    /// The workers' token's holder.
    Worker,
    /// A user named by an OIDC token (`oidc:SUBJECT`).
    User(String),
}

impl Caller {
    /// The name jobs record as their submitter.
    pub fn name(&self) -> &str {
        match self {
            Caller::Operator => "token",
            Caller::Worker => "worker",
            Caller::User(name) => name,
        }
    }

    /// Whether this caller may see job a submitted by `submitted_by` (a worker only
    /// reaches a job's listing: see [`Caller::may_call`]).
    pub fn may_see(&self, submitted_by: &str) -> bool {
        match self {
            Caller::Operator | Caller::Worker => true,
            Caller::User(name) => name == submitted_by,
        }
    }
}

/// The routes the workers' token opens: the work routes, and a job's listing.
pub const WORKER_LISTING_ROUTE: &str = "/api/jobs/{id}/files";

impl Caller {
    /// Whether this caller may call route `route` (as the router names it, e.g.
    /// `/api/jobs/{id}`) with `method`: a worker the work routes and a job's listing
    /// only; the operator everything; a user everything but the work routes.
    pub fn may_call(&self, method: &axum::http::Method, route: &str) -> bool {
        let work = route.starts_with("/api/work/");
        match self {
            Caller::Operator => true,
            Caller::Worker => {
                work || (route == WORKER_LISTING_ROUTE && method == axum::http::Method::GET)
            }
            Caller::User(_) => !work,
        }
    }
}

/// What a caller's jobs may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Everything the workers reach: the operator's (the service's token), or any
    /// user's where the service has no identity map.
    All,
    /// What the caller's entry in the identity map says.
    Only(Arc<Access>),
}

impl Grant {
    /// The map entry's key (`CLAIM=VALUE`) a browser session keeps, if any.
    pub fn entry(&self) -> Option<&str> {
        match self {
            Grant::All => None,
            Grant::Only(a) => Some(&a.entry),
        }
    }

    /// The grant of a user whose login matched map entry `entry` (`None`: matched
    /// none, or logged in before the service had a map), as the map says now.
    pub fn of_entry(state: &AppState, entry: Option<&str>) -> Result<Grant, Stale> {
        match (&state.identities, entry) {
            (None, _) => Ok(Grant::All),
            (Some(map), Some(key)) => match map.entry(key) {
                Some(a) => Ok(Grant::Only(Arc::new(a.clone()))),
                None => Err(Stale::Gone(key.to_string())),
            },
            (Some(_), None) => Err(Stale::BeforeMap),
        }
    }

    /// The grant, by today's map, of what `owner` (a job's submitter, a schedule's
    /// owner) made with access `recorded` (`None`: everything): the operator's is
    /// everything; a user's is their entry's as the map has it now, found by the key
    /// recorded. A schedule's runs and a job's retry take their reach from this, never
    /// from what was recorded: the operator may have narrowed the entry, or removed it.
    pub fn of_owner(
        state: &AppState,
        owner: &str,
        recorded: Option<&Access>,
    ) -> Result<Grant, Stale> {
        match owner.starts_with(USER_PREFIX) {
            false => Ok(Grant::All),
            true => Self::of_entry(state, recorded.map(|a| a.entry.as_str())),
        }
    }
}

/// Why a grant recorded earlier (a browser session's, a schedule's, a job's) gives
/// nothing by today's identity map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    /// The map no longer has the entry (`CLAIM=VALUE`) it was made under.
    Gone(String),
    /// It was made while the service had no map, and now it has one.
    BeforeMap,
}

impl Stale {
    /// One line saying why, of `what` (`this session`, `the schedule`, `job ID`).
    pub fn says(&self, what: &str) -> String {
        match self {
            Stale::Gone(key) => format!("identity map entry {key} is gone"),
            Stale::BeforeMap => format!("{what} was made before the service had an identity map"),
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
    /// A good token of an identity the identity map does not let in: why, in one line.
    NotMapped(String),
}

/// Checks the `Authorization` header value of a request from `ip`: who, and until
/// when.
pub async fn check(
    state: &AppState,
    ip: IpAddr,
    header: Option<&[u8]>,
) -> Result<(Caller, Ends, Grant), Denied> {
    let presented = header
        .and_then(|h| h.strip_prefix(b"Bearer "))
        .map(<[u8]>::trim_ascii);
    check_token(state, ip, presented)
        .await
        .map(|(c, ends, grant)| (c, Ends(ends), grant))
}

/// Checks a token presented by `ip` (the service's, or an OIDC token): who it is,
/// until when the token itself is good (an OIDC token's expiry, milliseconds since
/// the epoch; `None` for the service's token), and what its jobs may touch (with an
/// identity map, a user it does not name is refused).
pub async fn check_token(
    state: &AppState,
    ip: IpAddr,
    presented: Option<&[u8]>,
) -> Result<(Caller, Option<u64>, Grant), Denied> {
    let Some(token) = presented else {
        // Nothing was guessed: not a failure to throttle.
        state.metrics.auth_failed();
        let why = "missing token (Authorization: Bearer TOKEN)";
        return Err(Denied::Unauthenticated(why.into()));
    };
    let kind = TokenKind::of(token);
    if let Err(wait) = state.throttle.check(ip, kind) {
        return Err(Denied::Throttled(wait.as_secs().max(1)));
    }
    // Both compared every time, so that the time taken does not tell which matched.
    let operator = hetch_net::tokens_equal(token, &state.token);
    let worker = hetch_net::tokens_equal(token, &state.worker_token);
    let verdict = if operator || worker {
        Ok(None)
    } else {
        match (&state.oidc, std::str::from_utf8(token)) {
            (Some(oidc), Ok(jwt)) => oidc
                .verify(jwt)
                .await
                .map(Some)
                .map_err(|e| (is_guess(&e), e.to_string())),
            _ => Err((true, "wrong token".to_string())),
        }
    };
    match verdict {
        Ok(id) => {
            state.throttle.succeeded(ip, kind);
            match id {
                Some(id) => admit(state, &id),
                None if operator => Ok((Caller::Operator, None, Grant::All)),
                None => Ok((Caller::Worker, None, Grant::All)),
            }
        }
        Err((guess, why)) => {
            if guess {
                state.throttle.failed(ip, kind);
            }
            state.metrics.auth_failed();
            Err(Denied::Unauthenticated(why))
        }
    }
}

/// The user a verified OIDC identity is (`oidc:SUBJECT`), until when (its token's
/// expiry, milliseconds since the epoch), and what their jobs may touch: the same
/// rules for a pasted token and a browser's login through the issuer.
pub fn admit(
    state: &AppState,
    id: &hetch_oidc::Identity,
) -> Result<(Caller, Option<u64>, Grant), Denied> {
    let caller = Caller::User(format!("{USER_PREFIX}{}", id.subject));
    // With an identity map, its entry (an identity it does not name is refused).
    let grant = match &state.identities {
        Some(map) => match map.lookup(&id.subject, &id.claims) {
            Some(access) => Grant::Only(Arc::new(access.clone())),
            None => {
                let who = caller.name();
                let why = format!("{who} is not in the service's identity map");
                return Err(Denied::NotMapped(why));
            }
        },
        None => Grant::All,
    };
    Ok((caller, Some(id.expires.saturating_mul(1000)), grant))
}

/// Whether an OIDC token refused with `e` may be a guess, and counts as a failure
/// against its address. An expired token was checked after its signature
/// (`jsonwebtoken` verifies the signature first), so its issuer made it: a user
/// whose login ran out, who must not lock out everyone else of that kind from the
/// same address by retrying.
fn is_guess(e: &OidcError) -> bool {
    !matches!(e, OidcError::Expired)
}
