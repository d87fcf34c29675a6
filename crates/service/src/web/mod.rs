//! The web interface: pages served by the service itself at `/`, behind the same
//! authentication as the API (a browser logs in once with a token and then holds a
//! session cookie; see [`session`]).
//!
//! The pages are static files embedded in the binary (`crates/service/web/`): an HTML
//! shell, one stylesheet and one script with no dependencies and no build step. The
//! script reads the API and the event stream and builds the page with DOM calls that
//! set text, never markup, so a file name is always shown as text; the
//! Content-Security-Policy allows no inline script and no other origin besides.
//!
//! - [`pages`]: the shell, the login form, logging out, the embedded files.
//! - [`login`]: logging in through the OIDC issuer (authorization code with PKCE).
//! - [`live`]: the API routes the pages use beyond the job routes (the session, the
//!   event stream, nodes, a job's activity and file list).
//! - [`events`]: the once-a-second snapshot pushed to browsers.
//! - [`session`]: sealed session cookies and their CSRF tokens.
//! - [`spent`]: the login states already used, bounded.

pub mod events;
pub mod live;
pub mod login;
pub mod pages;
pub mod session;
pub mod spent;

use axum::http::{header, HeaderMap, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;

use crate::{now_ms, AppState};
use session::{Session, COOKIE, CSRF_HEADER};

/// The session a request's cookie holds: `None` without a session cookie, an error
/// line for one that is not (or no longer) good.
pub fn session_of(state: &AppState, headers: &HeaderMap) -> Option<Result<Session, String>> {
    let value = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .find_map(|h| session::cookie(h, COOKIE))?;
    Some(
        state
            .sessions
            .open(value, now_ms())
            .ok_or_else(|| "session ended or not valid; log in again at /login".to_string()),
    )
}

/// Whether a request says it comes from this origin, or says nothing of where it
/// comes from (a program, not a browser). Browsers send `Sec-Fetch-Site` with every
/// request (no page can set it); older ones send only `Origin` with a POST.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let sites = headers.get_all("sec-fetch-site");
    if sites.iter().next().is_some() {
        // Every value (a browser sends one) must say so.
        return sites
            .iter()
            .all(|v| matches!(v.as_bytes(), b"same-origin" | b"none"));
    }
    if headers.get_all("origin").iter().count() > 1 {
        return false;
    }
    match (text("origin"), text("host")) {
        (None, _) => true,
        (Some(origin), Some(host)) => origin == format!("https://{host}"),
        (Some(_), None) => false,
    }
}

/// Whether a request on `session` may go ahead: anything but reading needs the
/// session's CSRF token and this origin.
pub fn may_act(method: &Method, headers: &HeaderMap, session: &Session) -> Result<(), String> {
    if matches!(*method, Method::GET | Method::HEAD) {
        return Ok(());
    }
    if !same_origin(headers) {
        return Err("cross-site request refused".into());
    }
    let presented = headers.get(CSRF_HEADER).map(HeaderValue::as_bytes);
    match presented {
        Some(t) if hetch_net::tokens_equal(t, session.csrf.as_bytes()) => Ok(()),
        _ => Err(format!("missing or wrong {CSRF_HEADER} header")),
    }
}

/// The Content-Security-Policy of every answer: scripts, styles and requests from
/// this origin only, nothing inline, no framing.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
    base-uri 'none'";

/// Adds the security headers to every answer.
pub async fn security_headers(req: axum::extract::Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    for (name, value) in [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        // Not no-referrer: with it, browsers send `Origin: null` on form posts.
        ("referrer-policy", "same-origin"),
        ("x-frame-options", "DENY"),
        ("cache-control", "no-store"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    r
}

/// `s` with the characters that mean something in HTML replaced by entities.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            escape_html(r#"<script>alert("x")</script> & 'y' ü"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39; ü"
        );
    }

    #[test]
    fn only_this_origin_or_no_origin_is_same_origin() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, HeaderValue::from_static(v));
            }
            m
        };
        assert!(same_origin(&h(&[])));
        assert!(same_origin(&h(&[
            ("host", "a:1"),
            ("origin", "https://a:1")
        ])));
        assert!(!same_origin(&h(&[
            ("host", "a:1"),
            ("origin", "https://evil")
        ])));
        assert!(!same_origin(&h(&[
            ("host", "a:1"),
            ("origin", "http://a:1")
        ])));
        assert!(!same_origin(&h(&[("sec-fetch-site", "cross-site")])));
        assert!(!same_origin(&h(&[("sec-fetch-site", "same-site")])));
        assert!(same_origin(&h(&[("sec-fetch-site", "same-origin")])));
        assert!(same_origin(&h(&[
            ("sec-fetch-site", "same-origin"),
            ("origin", "null")
        ])));
        assert!(!same_origin(&h(&[("host", "a:1"), ("origin", "null")])));
    }

    #[test]
    fn acting_needs_the_csrf_token_and_reading_does_not() {
        let s = Session {
            caller: crate::auth::Caller::Operator,
            expires: 1,
            csrf: "abc".into(),
            entry: None,
        };
        let mut h = HeaderMap::new();
        assert!(may_act(&Method::GET, &h, &s).is_ok());
        assert!(may_act(&Method::POST, &h, &s)
            .unwrap_err()
            .contains("x-csrf-token"));
        h.insert(CSRF_HEADER, HeaderValue::from_static("abd"));
        assert!(may_act(&Method::POST, &h, &s).is_err());
        h.insert(CSRF_HEADER, HeaderValue::from_static("abc"));
        assert!(may_act(&Method::POST, &h, &s).is_ok());
        h.insert("origin", HeaderValue::from_static("https://evil.example"));
        assert!(may_act(&Method::POST, &h, &s)
            .unwrap_err()
            .contains("cross-site"));
    }
}
