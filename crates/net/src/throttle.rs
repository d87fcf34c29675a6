//! Slowing down token guessing: after a few failed tokens of one kind from one
//! address, that address is refused tokens of that kind for a while, whatever it
//! presents, and the wait doubles with every further failure.
//!
//! Failures are counted per address *and* per [`TokenKind`]: a guess at one kind of
//! token tells nothing about the other, so bad OIDC tokens from an address (a user
//! behind the same NAT as the workers, with an expired login) never hold back the
//! service's own token from it, and wrong shared tokens never hold back OIDC users.
//! Each kind stays throttled on its own: a guesser gains at most one more round of
//! free failures by switching kinds.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::limits::address_key;

/// Failed tokens of one kind an address may present before it has to wait.
pub const FREE_FAILURES: u32 = 5;
/// The first wait; each further failure doubles it.
pub const FIRST_WAIT: Duration = Duration::from_secs(30);
/// The longest wait.
pub const MAX_WAIT: Duration = Duration::from_secs(15 * 60);
/// An address's failures are forgotten this long after its last one.
const FORGET_AFTER: Duration = Duration::from_secs(60 * 60);
/// (Address, kind) pairs tracked at most; beyond, stale ones are dropped first, then
/// new ones are not tracked (memory stays bounded whatever the number of attackers).
const MAX_TRACKED: usize = 65_536;

/// The kind of token that was presented, which failures are counted under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// A shared secret (`hetch serve`'s or the transfer service's own token):
    /// anything that does not look like a JWT. `hetch serve` knows no other kind.
    Shared,
    /// What looks like a JWT (an OpenID Connect token): three non-empty base64url
    /// segments separated by dots. A shared token of that shape is still compared
    /// as one, so guesses of that shape are throttled too, only under this kind.
    Jwt,
}

impl TokenKind {
    /// The kind of `token` as presented, judged by its shape alone (nothing is
    /// verified: the kind must be known before the token is checked).
    pub fn of(token: &[u8]) -> TokenKind {
        let base64url = |s: &[u8]| {
            !s.is_empty()
                && s.iter()
                    .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
        };
        let mut segments = 0;
        for s in token.split(|b| *b == b'.') {
            segments += 1;
            if segments > 3 || !base64url(s) {
                return TokenKind::Shared;
            }
        }
        if segments == 3 {
            TokenKind::Jwt
        } else {
            TokenKind::Shared
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
    until: Option<Instant>,
}

/// Failed authentications per source address and [`TokenKind`].
#[derive(Debug, Default)]
pub struct AuthThrottle {
    failures: Mutex<HashMap<(IpAddr, TokenKind), Failures>>,
}

impl AuthThrottle {
    /// `Err(wait)` when `ip` must not present a token of `kind` again before `wait`
    /// has passed.
    pub fn check(&self, ip: IpAddr, kind: TokenKind) -> Result<(), Duration> {
        let now = Instant::now();
        match self
            .lock()
            .get(&(address_key(ip), kind))
            .and_then(|f| f.until)
        {
            Some(until) if until > now => Err(until - now),
            _ => Ok(()),
        }
    }

    /// Records a failed token of `kind` from `ip`. Call it for guesses only: a
    /// request with no token, or a token that is genuine but no longer good (an
    /// expired OIDC token, signed by its issuer), guessed nothing.
    pub fn failed(&self, ip: IpAddr, kind: TokenKind) {
        let now = Instant::now();
        let mut map = self.lock();
        if map.len() >= MAX_TRACKED {
            map.retain(|_, f| now.duration_since(f.last) < FORGET_AFTER);
        }
        let key = (address_key(ip), kind);
        if map.len() >= MAX_TRACKED && !map.contains_key(&key) {
            return;
        }
        let f = map.entry(key).or_insert(Failures {
            count: 0,
            last: now,
            until: None,
        });
        if now.duration_since(f.last) >= FORGET_AFTER {
            f.count = 0;
        }
        f.count += 1;
        f.last = now;
        if f.count >= FREE_FAILURES {
            let doublings = (f.count - FREE_FAILURES).min(16);
            f.until = Some(now + FIRST_WAIT.saturating_mul(1 << doublings).min(MAX_WAIT));
        }
    }

    /// Forgets `ip`'s failures of `kind` after it authenticated with a token of that
    /// kind (the other kind's failures stand: a good JWT proves nothing about the
    /// guesses at the shared token).
    pub fn succeeded(&self, ip: IpAddr, kind: TokenKind) {
        self.lock().remove(&(address_key(ip), kind));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(IpAddr, TokenKind), Failures>> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARED: TokenKind = TokenKind::Shared;

    #[test]
    fn waits_after_free_failures_and_grows() {
        let t = AuthThrottle::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 1..FREE_FAILURES {
            t.failed(a, SHARED);
            assert_eq!(t.check(a, SHARED), Ok(()));
        }
        t.failed(a, SHARED);
        let first = t.check(a, SHARED).unwrap_err();
        assert!(first <= FIRST_WAIT, "{first:?}");
        assert_eq!(
            t.check(b, SHARED),
            Ok(()),
            "other addresses are not affected"
        );
        t.failed(a, SHARED);
        assert!(
            t.check(a, SHARED).unwrap_err() > FIRST_WAIT,
            "the wait doubles"
        );
        for _ in 0..40 {
            t.failed(a, SHARED);
        }
        assert!(t.check(a, SHARED).unwrap_err() <= MAX_WAIT);
        t.succeeded(a, SHARED);
        assert_eq!(t.check(a, SHARED), Ok(()));
    }

    /// Bad JWTs from an address (an expired login behind the workers' NAT) never
    /// keep the shared token out, nor wrong shared tokens a JWT; each kind is still
    /// throttled, and a success of one kind forgets that kind's failures only.
    #[test]
    fn each_kind_of_token_is_throttled_apart() {
        let t = AuthThrottle::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..3 * FREE_FAILURES {
            t.failed(a, TokenKind::Jwt);
        }
        assert!(t.check(a, TokenKind::Jwt).is_err());
        assert_eq!(
            t.check(a, SHARED),
            Ok(()),
            "JWT failures held back the token"
        );
        for _ in 0..FREE_FAILURES {
            t.failed(a, SHARED);
        }
        assert!(t.check(a, SHARED).is_err(), "shared guesses not throttled");
        t.succeeded(a, TokenKind::Jwt);
        assert_eq!(t.check(a, TokenKind::Jwt), Ok(()));
        assert!(
            t.check(a, SHARED).is_err(),
            "a good JWT forgave token guesses"
        );
        // An IPv6 host's /64 counts as one address, per kind as well.
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let same64: IpAddr = "2001:db8::2".parse().unwrap();
        for _ in 0..FREE_FAILURES {
            t.failed(v6, TokenKind::Jwt);
        }
        assert!(t.check(same64, TokenKind::Jwt).is_err());
        assert_eq!(t.check(same64, SHARED), Ok(()));
    }

    #[test]
    fn a_token_is_a_jwt_by_its_shape() {
        let jwt = b"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl-_";
        assert_eq!(TokenKind::of(jwt), TokenKind::Jwt);
        for shared in [
            &b"0123456789abcdef0123456789abcdef"[..],
            b"",
            b"a.b",
            b"a.b.c.d",
            b"a..c",
            b".b.c",
            b"a.b.",
            b"a.b.c=",
            b"a b.c.d",
            b"a.b+c.d",
        ] {
            assert_eq!(TokenKind::of(shared), SHARED, "{shared:?}");
        }
    }
}
