//! The pages: the app shell at `/` (for a browser with a session; others are sent to
//! the login form), the login form and its answer (and the routes of the login
//! through the issuer, in [`super::login`]), logging out, and the embedded
//! stylesheet and script.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;

use super::session::{set_cookie, MAX_SESSION_MS};
use crate::auth::{self, Denied};
use crate::{now_ms, AppState};

const INDEX: &str = include_str!("../../web/index.html");
const LOGIN: &str = include_str!("../../web/login.html");
const APP_JS: &str = include_str!("../../web/app.js");
const STYLE: &str = include_str!("../../web/style.css");

/// The pages' routes (none needs a session but the shell, which sends a browser
/// without one to the login form).
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(index))
        .route("/login", get(login_form).post(login))
        .route("/login/oidc", get(super::login::start))
        .route("/login/callback", get(super::login::callback))
        .route("/logout", post(logout))
        .route("/ui/{file}", get(asset))
}

async fn index(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    match super::session_of(&state, &headers) {
        Some(Ok(_)) => Html(INDEX).into_response(),
        _ => Redirect::to("/login").into_response(),
    }
}

/// The login form, with `error` (escaped) above it when there is one, and the
/// button to log in through the issuer when the service has a client id.
pub(super) fn login_page(state: &AppState, status: StatusCode, error: Option<&str>) -> Response {
    let error = match error {
        Some(e) => format!(
            r#"<p class="error" role="alert" id="login-error">{}</p>"#,
            super::escape_html(e)
        ),
        None => String::new(),
    };
    let button = state
        .login
        .as_ref()
        .map_or(String::new(), super::login::button);
    let page = LOGIN
        .replace("<!--error-->", &error)
        .replace("<!--issuer-->", &button);
    (status, Html(page)).into_response()
}

async fn login_form(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    match super::session_of(&state, &headers) {
        Some(Ok(_)) => Redirect::to("/").into_response(),
        _ => login_page(&state, StatusCode::OK, None),
    }
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    // Another site must not log a browser in as someone else.
    if !super::same_origin(&headers) {
        return login_page(
            &state,
            StatusCode::FORBIDDEN,
            Some("cross-site login refused"),
        );
    }
    let Ok(Form(form)) = form else {
        return login_page(
            &state,
            StatusCode::BAD_REQUEST,
            Some("the form needs a token"),
        );
    };
    let token = form.token.trim().as_bytes();
    let verdict = auth::check_token(&state, peer.ip(), Some(token)).await;
    log_in(&state, verdict, Redirect::to("/").into_response())
}

/// The answer to a login: `then` with the session cookie for who `verdict` lets in
/// (the session ends with the token, and within [`MAX_SESSION_MS`]), or the login
/// form with why not.
pub(super) fn log_in(
    state: &AppState,
    verdict: Result<(auth::Caller, Option<u64>, auth::Grant), Denied>,
    mut then: Response,
) -> Response {
    match verdict {
        // The workers' token opens no web interface (nor any route of people's).
        Ok((auth::Caller::Worker, _, _)) => login_page(
            state,
            StatusCode::FORBIDDEN,
            Some("the workers' token is for workers only"),
        ),
        Ok((caller, token_expires, grant)) => {
            let now = now_ms();
            let expires =
                token_expires.map_or(now + MAX_SESSION_MS, |e| e.min(now + MAX_SESSION_MS));
            // A token within its issuer's leeway past `exp` would make a session over
            // before it starts.
            if expires <= now + 1000 {
                return login_page(state, StatusCode::UNAUTHORIZED, Some("token expired"));
            }
            let cookie = set_cookie(
                &state.sessions.seal_entry(&caller, grant.entry(), expires),
                (expires - now) / 1000,
            );
            if let Ok(v) = cookie.parse() {
                then.headers_mut().append(header::SET_COOKIE, v);
            }
            then
        }
        Err(Denied::Unauthenticated(why)) => {
            login_page(state, StatusCode::UNAUTHORIZED, Some(&why))
        }
        Err(Denied::NotMapped(why)) => login_page(state, StatusCode::FORBIDDEN, Some(&why)),
        Err(Denied::Throttled(secs)) => login_page(
            state,
            StatusCode::TOO_MANY_REQUESTS,
            Some(&format!("too many wrong tokens; retry in {secs} s")),
        ),
    }
}

async fn logout(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if !super::same_origin(&headers) {
        return login_page(
            &state,
            StatusCode::FORBIDDEN,
            Some("cross-site logout refused"),
        );
    }
    let mut r = Redirect::to("/login").into_response();
    if let Ok(v) = set_cookie("", 0).parse() {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

async fn asset(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "style.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such file").into_response(),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}
