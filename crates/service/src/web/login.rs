//! Logging in through the OIDC issuer: the authorization-code flow with PKCE (S256).
//!
//! `GET /login/oidc` makes a login (random `state`, `nonce` and PKCE verifier),
//! seals it into a short-lived cookie of this browser with the service's key (as
//! session cookies are sealed, under a purpose of its own: [`super::session`]), and
//! sends the browser to the issuer's `authorization_endpoint`. The issuer sends it
//! back to `GET /login/callback` (at the configured public URL: the redirect URI
//! never comes from the request), which opens the cookie, requires the callback's
//! `state` to be the cookie's, exchanges the code at the `token_endpoint` with the
//! verifier, verifies the ID token as a pasted token is verified (audience: the
//! client id) and its nonce, and makes the same session cookie a pasted token makes,
//! by the same identity-map rules.
//!
//! The server keeps nothing for a login under way: a stranger starting logins by the
//! thousand (from one address or many) fills no table, and every other browser's
//! login goes through. A callback works once: the cookie is cleared by its answer,
//! and a state whose login completed is remembered as spent until its cookie would
//! have expired ([`super::spent`]: bounded, and never refusing a login started
//! since). The cookie's contents (the verifier among them) can be read by the
//! browser holding it, which is the one they are for; they cannot be changed or
//! made up. Instances sharing the service's token finish each other's logins; each
//! remembers its own spent states (the issuer's single-use codes stop a replay
//! across them).

use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use hetch_oidc::{LoginClient, PendingLogin};
use serde::Deserialize;

use super::pages::{log_in, login_page};
use super::session::Sessions;
use super::spent::Spent;
use crate::{auth, now_ms, AppState};

/// How long a browser has at the issuer's login page, milliseconds.
pub const PENDING_MS: u64 = 10 * 60 * 1000;
/// The cookie carrying a login under way in the browser that started it.
/// `SameSite=Lax`, not `Strict`: the browser must send it on the issuer's redirect
/// back, a top-level navigation from another site.
pub const LOGIN_COOKIE: &str = "__Host-hetch_login";
/// The sealing's purpose for a login cookie: never opens as a session, nor a session
/// as a login.
const PURPOSE: &[u8] = b"login.";
/// Longest `code` taken from a callback.
const MAX_PARAM: usize = 4096;
/// What a callback without a login of this browser to finish is told.
const UNKNOWN: &str = "this login is unknown, used or expired, or was started in another \
                       browser: log in again";

/// The login through the issuer: its client, and the states already used.
#[derive(Debug)]
pub struct WebLogin {
    client: LoginClient,
    spent: Mutex<Spent>,
}

/// A login under way, as its cookie carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Started {
    login: PendingLogin,
    /// When the cookie stops opening, milliseconds since the epoch.
    expires: u64,
}

/// The exchange of a callback's code under way, for its state: let go of unless
/// [`Claim::spend`] says the login completed (a made-up code spends nothing).
struct Claim<'a> {
    login: &'a WebLogin,
    started: &'a Started,
    spent: bool,
}

impl Claim<'_> {
    /// The login completed: its state is spent.
    fn spend(mut self) {
        self.spent = true;
        self.login
            .spent()
            .spend(&self.started.login.state, self.started.expires, now_ms());
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.spent {
            self.login.spent().release(&self.started.login.state);
        }
    }
}

impl WebLogin {
    /// The login for `client`, with no state spent.
    pub fn new(client: LoginClient) -> Self {
        Self {
            client,
            spent: Mutex::new(Spent::default()),
        }
    }

    fn spent(&self) -> std::sync::MutexGuard<'_, Spent> {
        self.spent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cookie value carrying `started`.
    fn seal(sessions: &Sessions, started: &Started) -> String {
        let l = &started.login;
        sessions.seal_value(PURPOSE, &(&l.state, &l.nonce, &l.verifier, started.expires))
    }

    /// The login cookie value `value` carries, if this service sealed it and it has
    /// not expired by `now`.
    fn open(sessions: &Sessions, value: &str, now: u64) -> Option<Started> {
        let ((state, nonce, verifier, expires), _) =
            sessions.open_value::<(String, String, String, u64)>(PURPOSE, value)?;
        (expires > now).then_some(Started {
            login: PendingLogin {
                state,
                nonce,
                verifier,
            },
            expires,
        })
    }

    /// Claims `started`'s state for the exchange of its code, unless it was used.
    fn claim<'a>(&'a self, started: &'a Started) -> Option<Claim<'a>> {
        // The lock is let go of first: a claim refused is never made (its drop would
        // release the claim of the callback that holds it, and lock again).
        let claimed = self.spent().claim(&started.login.state, started.expires);
        claimed.then(|| Claim {
            login: self,
            started,
            spent: false,
        })
    }

    /// How many used states are remembered.
    pub fn spent_states(&self) -> usize {
        self.spent().len()
    }
}

/// The scopes to ask for besides `openid`, for the claims an identity map matches on
/// (the standard scopes that carry them; `groups` as most issuers name it).
pub fn scopes_for(claims: &[&str]) -> Vec<String> {
    let mut scopes: Vec<String> = Vec::new();
    for claim in claims {
        let scope = match *claim {
            "email" | "email_verified" => "email",
            "preferred_username" | "name" | "given_name" | "family_name" | "nickname" => "profile",
            "groups" => "groups",
            _ => continue,
        };
        if !scopes.iter().any(|s| s == scope) {
            scopes.push(scope.to_string());
        }
    }
    scopes
}

/// The login page's button: "Log in with" the issuer's host.
pub fn button(login: &WebLogin) -> String {
    let issuer = &login.client.config().issuer.issuer;
    let host = issuer
        .split_once("://")
        .map_or(issuer.as_str(), |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default();
    format!(
        r#"<p><a class="button" id="login-issuer" href="/login/oidc">Log in with {}</a></p>"#,
        super::escape_html(host)
    )
}

/// `GET /login/oidc`: to the issuer's login page.
pub async fn start(State(state): State<Arc<AppState>>) -> Response {
    let Some(login) = &state.login else {
        return login_page(
            &state,
            StatusCode::NOT_FOUND,
            Some("no OIDC login configured"),
        );
    };
    let started = Started {
        login: PendingLogin::new(),
        expires: now_ms() + PENDING_MS,
    };
    let url = match login.client.authorization_url(&started.login).await {
        Ok(url) => url,
        Err(e) => return login_page(&state, StatusCode::BAD_GATEWAY, Some(&e.to_string())),
    };
    let mut r = Redirect::to(url.as_str()).into_response();
    let cookie = format!(
        "{LOGIN_COOKIE}={}; Path=/; Max-Age={}; HttpOnly; Secure; SameSite=Lax",
        WebLogin::seal(&state.sessions, &started),
        PENDING_MS / 1000
    );
    if let Ok(v) = cookie.parse() {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// What the issuer's redirect back carries (RFC 6749 4.1.2, 4.1.2.1). Anything else
/// in it (a `next`, a `redirect_uri`) is ignored: a login always lands on `/`.
#[derive(Deserialize)]
pub struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `GET /login/callback`: the issuer's answer.
pub async fn callback(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    query: Result<Query<Callback>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let refuse =
        |status, why: &str| with_login_cookie_cleared(login_page(&state, status, Some(why)));
    let Some(login) = &state.login else {
        return refuse(StatusCode::NOT_FOUND, "no OIDC login configured");
    };
    let Ok(Query(cb)) = query else {
        return refuse(StatusCode::BAD_REQUEST, "the issuer's answer is malformed");
    };
    // The state first: what the issuer says is shown only for a login this browser
    // started here, so that a crafted link cannot put words on this page.
    let now = now_ms();
    let started = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .find_map(|h| super::session::cookie(h, LOGIN_COOKIE))
        .and_then(|c| WebLogin::open(&state.sessions, c, now))
        .filter(|s| {
            cb.state.as_deref().is_some_and(|cb_state| {
                hetch_net::tokens_equal(cb_state.as_bytes(), s.login.state.as_bytes())
            })
        });
    let Some(started) = started else {
        return refuse(StatusCode::BAD_REQUEST, UNKNOWN);
    };
    let Some(claim) = login.claim(&started) else {
        return refuse(StatusCode::BAD_REQUEST, UNKNOWN);
    };
    if let Some(error) = cb.error {
        let mut why = format!("the issuer refused the login: {error}");
        if let Some(d) = cb.error_description {
            why.push_str(": ");
            why.push_str(&d);
        }
        return refuse(StatusCode::UNAUTHORIZED, &one_line(&why));
    }
    let Some(code) = cb.code.filter(|c| !c.is_empty() && c.len() <= MAX_PARAM) else {
        return refuse(StatusCode::BAD_REQUEST, "the issuer's answer has no code");
    };
    let verdict = match login.client.finish(&started.login, &code).await {
        Ok(id) => {
            // The issuer took the code: whoever is let in, the state is used.
            claim.spend();
            auth::admit(&state, &id)
        }
        Err(e) => {
            state.metrics.auth_failed();
            Err(auth::Denied::Unauthenticated(e.to_string()))
        }
    };
    // Not a redirect: after a chain of redirects that began at the issuer, a browser
    // would not send the new `SameSite=Strict` cookie to `/`. A page of this origin
    // that moves on by itself makes the next request same-site.
    with_login_cookie_cleared(log_in(&state, verdict, Html(CONTINUE).into_response()))
}

/// The page a successful login lands on, moving on to `/`.
const CONTINUE: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="0;url=/">
<title>hetch: logged in</title><link rel="stylesheet" href="/ui/style.css"></head>
<body class="login"><main><h1>hetch</h1><p id="logged-in">Logged in. <a href="/">Continue</a></p></main></body></html>
"#;

/// `r` with the login cookie cleared: it served its one login.
fn with_login_cookie_cleared(mut r: Response) -> Response {
    let clear = format!("{LOGIN_COOKIE}=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Lax");
    if let Ok(v) = clear.parse() {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// `s` on one line of bounded length: what the issuer's redirect carries is shown
/// as text, but a line it is.
fn one_line(s: &str) -> String {
    hetch_oidc::one_line(s, 300)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_follow_the_claims_the_map_uses() {
        assert!(scopes_for(&["sub"]).is_empty());
        assert_eq!(
            scopes_for(&["email", "groups", "preferred_username", "email_verified"]),
            ["email", "groups", "profile"]
        );
    }

    #[test]
    fn a_callback_under_way_holds_its_state_and_a_second_one_takes_nothing_from_it() {
        let config = hetch_oidc::LoginConfig {
            issuer: hetch_oidc::OidcConfig::new("http://127.0.0.1:9", "a"),
            client_id: "c".into(),
            client_secret: None,
            redirect_uri: "https://127.0.0.1:1/login/callback".into(),
            extra_scopes: vec![],
        };
        let login = WebLogin::new(LoginClient::new(config).unwrap());
        let started = Started {
            login: PendingLogin::new(),
            expires: now_ms() + PENDING_MS,
        };
        let first = login.claim(&started).expect("claimed");
        assert!(login.claim(&started).is_none(), "under way");
        assert!(login.claim(&started).is_none(), "still under way");
        drop(first);
        let again = login
            .claim(&started)
            .expect("the exchange failed: claimed again");
        again.spend();
        assert!(login.claim(&started).is_none(), "spent");
        assert_eq!(login.spent_states(), 1);
    }

    #[test]
    fn a_login_cookie_opens_only_here_unchanged_unexpired_and_as_a_login() {
        let sessions = Sessions::new(b"the service token");
        let started = Started {
            login: PendingLogin::new(),
            expires: 1000,
        };
        let sealed = WebLogin::seal(&sessions, &started);
        assert_eq!(
            WebLogin::open(&sessions, &sealed, 999),
            Some(started.clone())
        );
        assert_eq!(WebLogin::open(&sessions, &sealed, 1000), None, "expired");
        let other = Sessions::new(b"another token");
        assert_eq!(WebLogin::open(&other, &sealed, 0), None);
        // A session cookie is no login, and a login cookie no session.
        let session = sessions.seal(&crate::auth::Caller::Operator, 1000);
        assert_eq!(WebLogin::open(&sessions, &session, 0), None);
        assert_eq!(sessions.open(&sealed, 0), None);
        // Another verifier or a later expiry, put in by the browser: refused.
        use base64::Engine as _;
        let mac = sealed.split_once('.').unwrap().1;
        let l = &started.login;
        for changed in [
            serde_json::json!([l.state, l.nonce, "another verifier", 1000]),
            serde_json::json!([l.state, l.nonce, l.verifier, 10_000]),
        ] {
            let payload =
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(changed.to_string());
            assert_eq!(
                WebLogin::open(&sessions, &format!("{payload}.{mac}"), 0),
                None
            );
        }
        assert!(one_line(&"x\n".repeat(500)).ends_with("..."));
    }
}
