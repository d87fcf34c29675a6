//! The test issuer's login: an authorization endpoint (a small form a browser fills
//! with a user name, answered with a single-use code bound to the client id, the
//! redirect URI and the PKCE challenge) and a token endpoint (checks the code once,
//! the redirect URI, the client id, the client secret if one is registered, and the
//! PKCE verifier against the challenge; answers an ID token carrying the nonce).
//! Tests make it answer badly on purpose with [`LoginSetup::override_claims`].

use std::collections::HashMap;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The client registered at the test issuer, and how its ID tokens are made.
#[derive(Clone)]
pub struct LoginSetup {
    /// The signing key (one the issuer publishes) and its algorithm and kid.
    pub key: EncodingKey,
    /// Its algorithm.
    pub alg: Algorithm,
    /// Its key id.
    pub kid: String,
    /// The registered client id.
    pub client_id: String,
    /// The one registered redirect URI.
    pub redirect_uri: String,
    /// The client secret, if the client is confidential.
    pub secret: Option<String>,
    /// Claims added to every ID token (`groups`, `email`...).
    pub extra_claims: Value,
    /// Claims set last, over the right ones: a hostile issuer (another `nonce`,
    /// another `aud`).
    pub override_claims: Value,
}

/// A code the authorization endpoint gave out.
#[derive(Clone, Debug)]
pub struct IssuedCode {
    /// The client it was given to.
    pub client_id: String,
    /// The redirect URI it was sent to.
    pub redirect_uri: String,
    /// The PKCE S256 challenge of the request.
    pub challenge: String,
    /// The request's nonce.
    pub nonce: String,
    /// Who logged in.
    pub user: String,
    /// Whether the token endpoint has seen it.
    pub used: bool,
}

/// What the login endpoints remember.
#[derive(Default)]
pub struct LoginState {
    /// The registered client, once the test enabled logins.
    pub setup: Option<LoginSetup>,
    /// The codes given out, by code.
    pub codes: HashMap<String, IssuedCode>,
    /// The authorization requests' query strings, as received.
    pub authorize_requests: Vec<String>,
    /// The token endpoint's refusals, as sent (`error: description`).
    pub token_refusals: Vec<String>,
    /// How often the token endpoint issued an ID token.
    pub tokens_issued: usize,
}

/// An HTTP answer: status line, content type, body, and a `Location`.
pub(crate) struct Answer {
    pub status: &'static str,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    pub location: Option<String>,
}

fn page(status: &'static str, text: String) -> Answer {
    Answer {
        status,
        content_type: "text/html; charset=utf-8",
        body: text.into_bytes(),
        location: None,
    }
}

fn oauth_error(error: &str, description: &str) -> Answer {
    Answer {
        status: "400 Bad Request",
        content_type: "application/json",
        body: json!({"error": error, "error_description": description})
            .to_string()
            .into_bytes(),
        location: None,
    }
}

/// The name/value pairs of a query string or form body.
pub fn form(s: &str) -> HashMap<String, String> {
    url::form_urlencoded::parse(s.as_bytes())
        .into_owned()
        .collect()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Answers `method path?query` with `body` if it is a login endpoint.
pub(crate) fn handle(
    login: &mut LoginState,
    issuer: &str,
    method: &str,
    target: &str,
    authorization: Option<&str>,
    body: &[u8],
) -> Option<Answer> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    match (method, path) {
        ("GET", "/authorize") => {
            login.authorize_requests.push(query.to_string());
            Some(authorize_form(login, &form(query)))
        }
        ("POST", "/authorize") => Some(authorize(login, &form(&String::from_utf8_lossy(body)))),
        ("POST", "/token") => Some(token(
            login,
            issuer,
            authorization,
            &form(&String::from_utf8_lossy(body)),
        )),
        _ => None,
    }
}

/// Whether the request names the registered client and its redirect URI: an
/// issuer never sends a browser to a redirect URI it does not know.
fn check_client(login: &LoginState, q: &HashMap<String, String>) -> Result<(), String> {
    let Some(setup) = &login.setup else {
        return Err("no client registered".into());
    };
    if q.get("client_id") != Some(&setup.client_id) {
        return Err("unknown client_id".into());
    }
    if q.get("redirect_uri") != Some(&setup.redirect_uri) {
        return Err("redirect_uri not registered".into());
    }
    Ok(())
}

/// The authorization request's parameters the login form carries back to the issuer
/// (hidden fields beside the user name).
pub const AUTHORIZE_FIELDS: [&str; 5] = [
    "client_id",
    "redirect_uri",
    "state",
    "nonce",
    "code_challenge",
];

fn authorize_form(login: &LoginState, q: &HashMap<String, String>) -> Answer {
    if let Err(why) = check_client(login, q) {
        return page(
            "400 Bad Request",
            format!("<p id=\"issuer-error\">{why}</p>"),
        );
    }
    if q.get("response_type").map(String::as_str) != Some("code")
        || q.get("code_challenge_method").map(String::as_str) != Some("S256")
        || q.get("code_challenge").is_none_or(|c| c.len() != 43)
    {
        return page(
            "400 Bad Request",
            "<p id=\"issuer-error\">response_type=code with an S256 code_challenge needed</p>"
                .into(),
        );
    }
    let hidden: String = AUTHORIZE_FIELDS
        .iter()
        .map(|k| {
            let v = q.get(*k).map_or(String::new(), |v| escape(v));
            format!("<input type=\"hidden\" name=\"{k}\" value=\"{v}\">")
        })
        .collect();
    page(
        "200 OK",
        format!(
            "<!doctype html><html><head><title>test issuer: log in</title></head><body>\
             <form method=\"post\" action=\"/authorize\">{hidden}\
             <label>User <input id=\"username\" name=\"username\"></label>\
             <button id=\"issuer-login\" type=\"submit\">Sign in</button>\
             <button id=\"issuer-deny\" type=\"submit\" name=\"deny\" value=\"1\">Deny</button>\
             </form></body></html>"
        ),
    )
}

fn authorize(login: &mut LoginState, f: &HashMap<String, String>) -> Answer {
    if let Err(why) = check_client(login, f) {
        return page(
            "400 Bad Request",
            format!("<p id=\"issuer-error\">{why}</p>"),
        );
    }
    let redirect_uri = f["redirect_uri"].clone();
    let state = f.get("state").cloned().unwrap_or_default();
    let mut back = url::Url::parse(&redirect_uri).expect("registered redirect URI");
    if f.contains_key("deny") {
        back.query_pairs_mut()
            .append_pair("error", "access_denied")
            .append_pair("error_description", "the user said no")
            .append_pair("state", &state);
    } else {
        let code = URL_SAFE_NO_PAD.encode(rand_bytes());
        login.codes.insert(
            code.clone(),
            IssuedCode {
                client_id: f["client_id"].clone(),
                redirect_uri,
                challenge: f.get("code_challenge").cloned().unwrap_or_default(),
                nonce: f.get("nonce").cloned().unwrap_or_default(),
                user: f.get("username").cloned().unwrap_or_default(),
                used: false,
            },
        );
        back.query_pairs_mut()
            .append_pair("code", &code)
            .append_pair("state", &state);
    }
    Answer {
        status: "302 Found",
        content_type: "text/plain",
        body: Vec::new(),
        location: Some(back.to_string()),
    }
}

fn rand_bytes() -> [u8; 24] {
    // No rand dependency here: BLAKE3 of a counter and the time is unpredictable
    // enough for a test issuer's codes, and unique.
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = blake3::Hasher::new();
    h.update(&N.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    h.update(&format!("{:?}", std::time::SystemTime::now()).into_bytes());
    h.update(&std::process::id().to_le_bytes());
    let mut out = [0u8; 24];
    out.copy_from_slice(&h.finalize().as_bytes()[..24]);
    out
}

fn token(
    login: &mut LoginState,
    issuer: &str,
    authorization: Option<&str>,
    f: &HashMap<String, String>,
) -> Answer {
    let refuse = |login: &mut LoginState, error: &str, why: &str| {
        login.token_refusals.push(format!("{error}: {why}"));
        oauth_error(error, why)
    };
    let Some(setup) = login.setup.clone() else {
        return refuse(login, "invalid_client", "no client registered");
    };
    if let Some(secret) = &setup.secret {
        let given = authorization.and_then(basic_credentials);
        if given != Some((setup.client_id.clone(), secret.clone())) {
            return refuse(login, "invalid_client", "client authentication failed");
        }
    }
    if f.get("grant_type").map(String::as_str) != Some("authorization_code") {
        return refuse(login, "unsupported_grant_type", "authorization_code only");
    }
    let code = f.get("code").cloned().unwrap_or_default();
    let Some(issued) = login.codes.get_mut(&code) else {
        return refuse(login, "invalid_grant", "unknown code");
    };
    // Spent by this attempt, whatever comes of it (RFC 6749 4.1.2).
    if std::mem::replace(&mut issued.used, true) {
        return refuse(login, "invalid_grant", "code already used");
    }
    let issued = issued.clone();
    if f.get("client_id") != Some(&issued.client_id) {
        return refuse(login, "invalid_grant", "code issued to another client");
    }
    if f.get("redirect_uri") != Some(&issued.redirect_uri) {
        return refuse(login, "invalid_grant", "redirect_uri differs");
    }
    let verifier = f.get("code_verifier").cloned().unwrap_or_default();
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    if challenge != issued.challenge {
        return refuse(
            login,
            "invalid_grant",
            "PKCE verifier does not match the challenge",
        );
    }
    let now = crate::oidc_issuer::now();
    let mut claims = json!({
        "iss": issuer, "aud": setup.client_id, "sub": issued.user,
        "nonce": issued.nonce, "iat": now, "exp": now + 300,
    });
    for extra in [&setup.extra_claims, &setup.override_claims] {
        if let Some(o) = extra.as_object() {
            for (k, v) in o {
                claims[k] = v.clone();
            }
        }
    }
    let mut header = Header::new(setup.alg);
    header.kid = Some(setup.kid.clone());
    let id_token = jsonwebtoken::encode(&header, &claims, &setup.key).unwrap();
    login.tokens_issued += 1;
    Answer {
        status: "200 OK",
        content_type: "application/json",
        body: json!({"access_token": "opaque", "token_type": "Bearer", "expires_in": 300,
                     "id_token": id_token})
        .to_string()
        .into_bytes(),
        location: None,
    }
}

/// The client id and secret of an HTTP Basic `Authorization` header, each
/// form-urlencoded before Basic as RFC 6749 2.3.1 has a client send them.
fn basic_credentials(header: &str) -> Option<(String, String)> {
    let raw = STANDARD.decode(header.strip_prefix("Basic ")?).ok()?;
    let raw = String::from_utf8(raw).ok()?;
    let (id, secret) = raw.split_once(':')?;
    let decode = |s: &str| {
        url::form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
    };
    Some((decode(id)?, decode(secret)?))
}
