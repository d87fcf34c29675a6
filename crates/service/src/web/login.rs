//! Logging in through the OIDC issuer: the authorization-code flow with PKCE (S256).
//!
//! `GET /login/oidc` makes a pending login (random `state`, `nonce` and PKCE
//! verifier), ties it to this browser with a short-lived cookie, and sends the
//! browser to the issuer's `authorization_endpoint`. The issuer sends it back to
//! `GET /login/callback` (at the configured public URL: the redirect URI never comes
//! from the request), which takes the pending login out (so a `state` works once),
//! exchanges the code at the `token_endpoint` with the verifier, verifies the ID token
//! as a pasted token is verified (audience: the client id) and its nonce, and makes
//! the same session cookie a pasted token makes, by the same identity-map rules.
//!
//! Pending logins are kept in memory, not in a cookie: a `state` is single-use by
//! being taken out of the map, which a cookie cannot do without a server-side list of
//! spent ones anyway; the map is bounded ([`MAX_PENDING`]) and each entry expires
//! ([`PENDING_MS`]). The cost: with several instances behind one name, the browser
//! must come back to the instance it started at (the callback says so otherwise).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use hetch_oidc::{LoginClient, PendingLogin};
use serde::Deserialize;

use super::pages::{log_in, login_page};
use crate::{auth, now_ms, AppState};

/// Most logins pending at once: a flood of `GET /login/oidc` is refused past it
/// rather than growing memory.
pub const MAX_PENDING: usize = 10_000;
/// How long a browser has at the issuer's login page, milliseconds.
pub const PENDING_MS: u64 = 10 * 60 * 1000;
/// The cookie tying a pending login to the browser that started it. `SameSite=Lax`,
/// not `Strict`: the browser must send it on the issuer's redirect back, a top-level
/// navigation from another site.
pub const LOGIN_COOKIE: &str = "__Host-hetch_login";
/// Longest `code` or `state` taken from a callback.
const MAX_PARAM: usize = 4096;

/// The login through the issuer: its client, and the logins under way.
#[derive(Debug)]
pub struct WebLogin {
    client: LoginClient,
    pending: Mutex<HashMap<String, Pending>>,
}

#[derive(Debug)]
struct Pending {
    login: PendingLogin,
    /// The value of [`LOGIN_COOKIE`] the browser that started it holds.
    browser: String,
    expires: u64,
}

impl WebLogin {
    /// The login for `client`, with nothing pending.
    pub fn new(client: LoginClient) -> Self {
        Self {
            client,
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps `login` for `browser` until it expires; `false` if [`MAX_PENDING`] are
    /// already waiting.
    fn keep(&self, login: PendingLogin, browser: String, now: u64) -> bool {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() >= MAX_PENDING {
            pending.retain(|_, p| p.expires > now);
            if pending.len() >= MAX_PENDING {
                return false;
            }
        }
        let state = login.state.clone();
        let expires = now + PENDING_MS;
        pending.insert(
            state,
            Pending {
                login,
                browser,
                expires,
            },
        );
        true
    }

    /// Takes the pending login of `state` out (whatever comes of it, a state is
    /// used once), if there is one that has not expired.
    fn take(&self, state: &str, now: u64) -> Option<Pending> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.remove(state).filter(|p| p.expires > now)
    }

    /// How many logins are pending (expired ones included until swept).
    pub fn pending(&self) -> usize {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).len()
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
    let pending = PendingLogin::new();
    let url = match login.client.authorization_url(&pending).await {
        Ok(url) => url,
        Err(e) => return login_page(&state, StatusCode::BAD_GATEWAY, Some(&e.to_string())),
    };
    let browser = hex::encode(rand::random::<[u8; 32]>());
    if !login.keep(pending, browser.clone(), now_ms()) {
        let why = "too many logins under way; try again in a few minutes";
        return login_page(&state, StatusCode::SERVICE_UNAVAILABLE, Some(why));
    }
    let mut r = Redirect::to(url.as_str()).into_response();
    let cookie = format!(
        "{LOGIN_COOKIE}={browser}; Path=/; Max-Age={}; HttpOnly; Secure; SameSite=Lax",
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
    let pending = cb
        .state
        .as_deref()
        .filter(|s| s.len() <= MAX_PARAM)
        .and_then(|s| login.take(s, now_ms()));
    let Some(pending) = pending else {
        let why = "this login is unknown, used or expired (or began at another instance): \
                   log in again";
        return refuse(StatusCode::BAD_REQUEST, why);
    };
    let browser = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .find_map(|h| super::session::cookie(h, LOGIN_COOKIE));
    if !browser.is_some_and(|b| hetch_net::tokens_equal(b.as_bytes(), pending.browser.as_bytes())) {
        return refuse(
            StatusCode::BAD_REQUEST,
            "this login was started by another browser",
        );
    }
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
    let verdict = match login.client.finish(&pending.login, &code).await {
        Ok(id) => auth::admit(&state, &id),
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

/// `r` with the pending login's cookie cleared: it served its one login.
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
    fn the_pending_map_is_bounded_and_a_state_works_once() {
        let config = hetch_oidc::LoginConfig {
            issuer: hetch_oidc::OidcConfig::new("http://127.0.0.1:9", "a"),
            client_id: "c".into(),
            client_secret: None,
            redirect_uri: "https://127.0.0.1:1/login/callback".into(),
            extra_scopes: vec![],
        };
        let login = WebLogin::new(LoginClient::new(config).unwrap());
        let first = PendingLogin::new();
        assert!(login.keep(first.clone(), "b".into(), 0));
        for _ in 1..MAX_PENDING {
            assert!(login.keep(PendingLogin::new(), "b".into(), 0));
        }
        assert!(!login.keep(PendingLogin::new(), "b".into(), 1), "full");
        assert_eq!(login.pending(), MAX_PENDING);
        assert_eq!(login.take(&first.state, 1).unwrap().login, first);
        assert!(login.take(&first.state, 1).is_none(), "used");
        // Full again; once they expire, new logins take their places.
        assert!(login.take(&PendingLogin::new().state, 1).is_none());
        assert!(login.keep(PendingLogin::new(), "b".into(), 1));
        assert!(
            !login.keep(PendingLogin::new(), "b".into(), PENDING_MS - 1),
            "full"
        );
        assert!(login.keep(PendingLogin::new(), "b".into(), PENDING_MS + 1));
        assert_eq!(login.pending(), 1);
        assert!(one_line(&"x\n".repeat(500)).ends_with("..."));
    }
}
