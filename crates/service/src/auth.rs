//! Who may call the API: a bearer token equal to the service's own (the same kind of
//! token as `hetch serve`'s, in the state directory), compared in constant time, with
//! failures throttled per address as `hetch serve` throttles them.

use std::net::IpAddr;

use crate::AppState;

/// Why a request was not let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No `Authorization: Bearer` header, or the wrong token.
    Unauthenticated,
    /// Too many failures from this address: try again after this many seconds.
    Throttled(u64),
}

/// Checks the `Authorization` header value of a request from `ip`; the caller's name
/// for the job records when it is let in.
pub fn check(state: &AppState, ip: IpAddr, header: Option<&[u8]>) -> Result<String, Denied> {
    if let Err(wait) = state.throttle.check(ip) {
        return Err(Denied::Throttled(wait.as_secs().max(1)));
    }
    let presented = header.and_then(|h| h.strip_prefix(b"Bearer "));
    match presented {
        Some(t) if hetch_net::tokens_equal(t.trim_ascii(), &state.token) => {
            state.throttle.succeeded(ip);
            Ok("token".to_string())
        }
        _ => {
            state.throttle.failed(ip);
            Err(Denied::Unauthenticated)
        }
    }
}
