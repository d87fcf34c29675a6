//! Browser sessions: after logging in with the service's token or an OIDC token, a
//! browser holds a cookie naming its caller and expiry, sealed with a MAC keyed from
//! the service's token. Nothing is kept on the server (memory does not grow with
//! logins, and instances sharing a token share sessions); changing the token ends
//! every session.
//!
//! The same sealing, under a purpose of its own, carries a login under way through
//! the issuer ([`super::login`]): [`Sessions::seal_value`] and [`Sessions::open_value`].
//!
//! The cookie is `HttpOnly; Secure; SameSite=Strict`, so script cannot read it and
//! other sites' requests do not carry it. A request that changes anything must also
//! carry the session's CSRF token (a second MAC over the cookie, which the page asks
//! for at `/api/session`) in `X-CSRF-Token`, and come from this origin if it says
//! where it comes from.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use crate::auth::{Caller, USER_PREFIX};

/// The cookie's name. The `__Host-` prefix makes browsers take it only when it is
/// `Secure`, for `Path=/`, and set by this host itself (no sibling domain can plant
/// one).
pub const COOKIE: &str = "__Host-hetch_session";
/// The header carrying the CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Longest a session lasts, milliseconds (an OIDC token's own expiry may end it
/// sooner).
pub const MAX_SESSION_MS: u64 = 12 * 3600 * 1000;
/// Longest cookie value accepted: a long OIDC subject fits, a flood does not.
const MAX_COOKIE: usize = 4096;
/// The MAC's purpose for a session cookie (the CSRF token's is `csrf.`).
const SESSION: &[u8] = b"cookie.";

/// Seals and opens session cookies.
pub struct Sessions {
    key: [u8; 32],
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sessions { key: <redacted> }")
    }
}

/// A session, opened from its cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Who logged in.
    pub caller: Caller,
    /// When it ends, milliseconds since the epoch.
    pub expires: u64,
    /// Its CSRF token.
    pub csrf: String,
    /// The identity map entry (`CLAIM=VALUE`) a user's login matched, if any: what
    /// the session may touch is that entry's, as the map says now.
    pub entry: Option<String>,
}

impl Sessions {
    /// Sessions sealed with a key derived from the service's `token`.
    pub fn new(token: &[u8]) -> Sessions {
        Sessions {
            key: blake3::derive_key("hetch 2026 web session cookie v1", token),
        }
    }

    fn mac(&self, purpose: &[u8], payload: &str) -> String {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(purpose);
        h.update(payload.as_bytes());
        h.finalize().to_hex().to_string()
    }

    /// A cookie value for `caller` until `expires`.
    pub fn seal(&self, caller: &Caller, expires: u64) -> String {
        self.seal_entry(caller, None, expires)
    }

    /// A cookie value for `caller`, whose login matched identity map entry `entry`,
    /// until `expires`.
    pub fn seal_entry(&self, caller: &Caller, entry: Option<&str>, expires: u64) -> String {
        let nonce = hex::encode(rand::random::<[u8; 16]>());
        self.seal_value(SESSION, &(caller.name(), expires, nonce, entry))
    }

    /// `value` sealed for `purpose` (one per kind of cookie, so that one kind never
    /// opens as another): its JSON, base64url, and a MAC only this key makes. What
    /// it holds can be read by whoever holds it, not changed.
    pub fn seal_value(&self, purpose: &[u8], value: &impl serde::Serialize) -> String {
        let body = serde_json::to_vec(value).expect("plain values");
        let payload = URL_SAFE_NO_PAD.encode(body);
        let mac = self.mac(purpose, &payload);
        format!("{payload}.{mac}")
    }

    /// What [`Sessions::seal_value`] sealed for `purpose` in `sealed` (and its
    /// payload), if this key sealed it for that purpose.
    pub fn open_value<T: serde::de::DeserializeOwned>(
        &self,
        purpose: &[u8],
        sealed: &str,
    ) -> Option<(T, String)> {
        if sealed.len() > MAX_COOKIE {
            return None;
        }
        let (payload, mac) = sealed.split_once('.')?;
        let expected = self.mac(purpose, payload);
        if !hetch_net::tokens_equal(mac.as_bytes(), expected.as_bytes()) {
            return None;
        }
        let body = URL_SAFE_NO_PAD.decode(payload).ok()?;
        Some((serde_json::from_slice(&body).ok()?, payload.to_string()))
    }

    /// The session in cookie value `value`, if it is one of ours and has not ended
    /// by `now`.
    pub fn open(&self, value: &str, now: u64) -> Option<Session> {
        type Body = (String, u64, String, Option<String>);
        let ((name, expires, _nonce, entry), payload) = self.open_value::<Body>(SESSION, value)?;
        if expires <= now {
            return None;
        }
        let caller = match name.strip_prefix(USER_PREFIX) {
            Some(_) => Caller::User(name),
            None if name == Caller::Operator.name() => Caller::Operator,
            None => return None,
        };
        Some(Session {
            caller,
            expires,
            csrf: self.mac(b"csrf.", &payload),
            entry,
        })
    }
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

/// A `Set-Cookie` value holding `value` for `max_age_s` seconds (0 clears it).
pub fn set_cookie(value: &str, max_age_s: u64) -> String {
    format!("{COOKIE}={value}; Path=/; Max-Age={max_age_s}; HttpOnly; Secure; SameSite=Strict")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_session_opens_until_it_ends_and_a_changed_one_never_does() {
        let s = Sessions::new(b"the service token");
        let user = Caller::User("oidc:alice".into());
        let v = s.seal(&user, 1000);
        let got = s.open(&v, 999).unwrap();
        assert_eq!(got.caller, user);
        assert_eq!(got.expires, 1000);
        assert!(s.open(&v, 1000).is_none(), "ended");
        // Another token's sessions, a changed payload, a changed MAC: refused.
        assert!(Sessions::new(b"another token").open(&v, 0).is_none());
        let (payload, mac) = v.split_once('.').unwrap();
        let forged = URL_SAFE_NO_PAD.encode(r#"["token",1000,"x",null]"#);
        assert!(s.open(&format!("{forged}.{mac}"), 0).is_none());
        let mut bad_mac = mac.to_string();
        bad_mac.replace_range(0..1, if mac.starts_with('0') { "1" } else { "0" });
        assert!(s.open(&format!("{payload}.{bad_mac}"), 0).is_none());
        assert!(s.open("garbage", 0).is_none());
        assert!(s.open(&"a.".repeat(5000), 0).is_none());
        // The operator's session; each login's CSRF token differs.
        let op = s.seal(&Caller::Operator, 5);
        let a = s.open(&op, 0).unwrap();
        assert_eq!(a.caller, Caller::Operator);
        assert_ne!(a.csrf, got.csrf);
        assert_ne!(
            s.open(&s.seal(&Caller::Operator, 5), 0).unwrap().csrf,
            a.csrf
        );
    }

    #[test]
    fn a_name_neither_the_operators_nor_a_users_is_refused() {
        let s = Sessions::new(b"t");
        let payload = URL_SAFE_NO_PAD.encode(r#"["root",9,"n",null]"#);
        let v = format!("{payload}.{}", s.mac(b"cookie.", &payload));
        assert!(s.open(&v, 0).is_none());
    }

    #[test]
    fn cookies_are_found_by_name() {
        let h = "a=1; __Host-hetch_session=xyz.abc; b=2";
        assert_eq!(cookie(h, COOKIE), Some("xyz.abc"));
        assert_eq!(cookie("__Host-hetch_sessionx=1", COOKIE), None);
        assert_eq!(cookie("hetch_session=1", COOKIE), None);
        assert!(set_cookie("v", 60).contains("HttpOnly; Secure; SameSite=Strict"));
    }
}
