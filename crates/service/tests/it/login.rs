//! Logging in through the OIDC issuer (authorization code with PKCE) over real HTTPS,
//! against the test issuer's login endpoints, with a plain HTTP client in the
//! browser's place: the flow, and each way a peer can try to subvert it (a reused or
//! unknown state, a replayed code, a code of another login, an ID token for another
//! nonce or audience, the issuer's refusal, a redirect pointing elsewhere, a callback
//! in another browser), and a flood of logins started by a stranger. The browser
//! itself is the binary's tests/it/web_login.rs.

use crate::common;

use std::collections::HashMap;

use common::{planner, start_configured, Api};
use futures_util::StreamExt as _;
use hetch_oidc::{LoginConfig, OidcConfig};
use hetch_testkit::oidc_issuer::{claims, ec_key, sign, TestIssuer, TestKey, AUDIENCE};
use hetch_testkit::oidc_login::form;
use serde_json::{json, Value};

/// Where the service says browsers reach it: not its listening address, so that a
/// redirect URI built from the request would show.
const PUBLIC: &str = "https://hetch.example.org:7879";
const CLIENT: &str = "hetch-web";

struct Setup {
    api: Api,
    issuer: TestIssuer,
    key: TestKey,
    plain: reqwest::Client,
    _task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

async fn setup(secret: Option<&str>, map: Option<&str>) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let key = ec_key("k1");
    let issuer = TestIssuer::start(&[&key]).await;
    let redirect = format!("{PUBLIC}/login/callback");
    issuer.enable_login(&key, CLIENT, &redirect, secret);
    let oidc = OidcConfig::new(&issuer.url, AUDIENCE);
    let login = LoginConfig {
        issuer: oidc.clone(),
        client_id: CLIENT.into(),
        client_secret: secret.map(Into::into),
        redirect_uri: redirect,
        extra_scopes: vec![],
    };
    let identities = map.map(|m| hetch_service::identity::IdentityMap::parse(m).unwrap());
    std::fs::create_dir_all(dir.path().join("root")).unwrap();
    let url = format!("sqlite://{}", dir.path().join("jobs.db").display());
    let (api, task) = start_configured(dir.path(), &url, planner(), |cfg| {
        cfg.oidc = Some(oidc);
        cfg.login = Some(login);
        cfg.identities = identities;
    })
    .await;
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    Setup {
        api,
        issuer,
        key,
        plain,
        _task: task,
        _dir: dir,
    }
}

/// A login started at the service: the browser's login cookie and the issuer URL it
/// was sent to.
struct Started {
    cookie: String,
    authorize: reqwest::Url,
}

impl Setup {
    async fn start_login(&self, query: &str) -> Started {
        let resp = self
            .api
            .http
            .get(format!("{}/login/oidc{query}", self.api.base))
            .header("host", "evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 303, "{:?}", resp.text().await);
        let authorize = resp.headers()["location"].to_str().unwrap().to_string();
        let set = resp.headers()["set-cookie"].to_str().unwrap().to_string();
        assert!(set.contains("HttpOnly; Secure; SameSite=Lax"), "{set}");
        let cookie = set.split(';').next().unwrap().to_string();
        assert!(cookie.starts_with("__Host-hetch_login="), "{cookie}");
        Started {
            cookie,
            authorize: reqwest::Url::parse(&authorize).unwrap(),
        }
    }

    /// Fills the issuer's form as `user` (or denies): the callback's query string.
    async fn at_issuer(&self, started: &Started, user: &str, deny: bool) -> String {
        let resp = self
            .plain
            .get(started.authorize.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let q: HashMap<String, String> = started.authorize.query_pairs().into_owned().collect();
        let mut fields: Vec<(String, String)> = hetch_testkit::oidc_login::AUTHORIZE_FIELDS
            .iter()
            .map(|k| (k.to_string(), q[*k].clone()))
            .collect();
        fields.push(("username".into(), user.into()));
        if deny {
            fields.push(("deny".into(), "1".into()));
        }
        let resp = self
            .plain
            .post(format!("{}/authorize", self.issuer.url))
            .form(&fields)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 302);
        let back = resp.headers()["location"].to_str().unwrap();
        let back = reqwest::Url::parse(back).unwrap();
        assert_eq!(
            format!("{}://{}", back.scheme(), back.authority()),
            PUBLIC,
            "the issuer sends the browser to the registered URI"
        );
        back.query().unwrap_or_default().to_string()
    }

    /// The service's callback with `query`, from a browser holding `cookie`: the
    /// status, the body and the `Set-Cookie` headers.
    async fn callback(&self, query: &str, cookie: Option<&str>) -> (u16, String, Vec<String>) {
        let mut r = self
            .api
            .http
            .get(format!("{}/login/callback?{query}", self.api.base));
        if let Some(c) = cookie {
            r = r.header("cookie", c);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let cookies = resp
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect();
        (status, resp.text().await.unwrap(), cookies)
    }

    /// Who the session cookie `set` (a `Set-Cookie` value) logs in as.
    async fn who(&self, set: &str) -> Value {
        let cookie = set.split(';').next().unwrap();
        let resp = self
            .api
            .http
            .get(format!("{}/api/session", self.api.base))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.json().await.unwrap()
    }
}

fn session_cookie(cookies: &[String]) -> Option<&String> {
    cookies
        .iter()
        .find(|c| c.starts_with("__Host-hetch_session=") && !c.contains("Max-Age=0"))
}

/// The error line of a login page.
/// The page's error line, as the browser shows it (the page escapes it as HTML).
fn error_line(body: &str) -> String {
    let start = body.find("id=\"login-error\">").expect("an error line") + 17;
    let end = body[start..].find("</p>").unwrap() + start;
    body[start..end]
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[tokio::test]
async fn a_user_logs_in_through_the_issuer_and_holds_the_session_a_pasted_token_gives() {
    let s = setup(Some("s3cret:with/odd chars"), None).await;
    // The login page offers the issuer's button.
    let page = s
        .api
        .http
        .get(format!("{}/login", s.api.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(r#"href="/login/oidc">Log in with 127.0.0.1:"#),
        "{page}"
    );

    let started = s.start_login("").await;
    let q: HashMap<String, String> = started.authorize.query_pairs().into_owned().collect();
    assert_eq!(q["response_type"], "code");
    assert_eq!(q["client_id"], CLIENT);
    assert_eq!(q["redirect_uri"], format!("{PUBLIC}/login/callback"));
    assert_eq!(q["scope"], "openid");
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["code_challenge"].len(), 43);
    assert!(q["state"].len() >= 43 && q["nonce"].len() >= 43);

    let back = s.at_issuer(&started, "alice", false).await;
    let (status, body, cookies) = s.callback(&back, Some(&started.cookie)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#"content="0;url=/""#), "{body}");
    let set = session_cookie(&cookies).expect("a session cookie");
    assert!(set.contains("HttpOnly; Secure; SameSite=Strict"), "{set}");
    // Its lifetime is the ID token's (5 minutes at the test issuer), as a pasted
    // token's session is its token's.
    let max_age: u64 = set
        .split("Max-Age=")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((200..=300).contains(&max_age), "{set}");
    assert!(
        cookies
            .iter()
            .any(|c| c.starts_with("__Host-hetch_login=;") && c.contains("Max-Age=0")),
        "the login cookie is cleared: {cookies:?}"
    );
    let who = s.who(set).await;
    assert_eq!(who["caller"], "oidc:alice");
    assert_eq!(who["operator"], false);

    // The same user's pasted token names the same caller: one user, two ways in.
    let token = sign(&s.key, &claims(&s.issuer.url));
    let resp = s
        .api
        .http
        .post(format!("{}/login", s.api.base))
        .header("sec-fetch-site", "same-origin")
        .form(&[("token", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    let pasted = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    assert_eq!(s.who(&pasted).await["caller"], who["caller"]);

    // The state was spent: the same answer again is refused, and so is a state the
    // service never gave out; no session comes of either.
    for query in [back.clone(), back.replace("state=", "state=x")] {
        let (status, body, cookies) = s.callback(&query, Some(&started.cookie)).await;
        assert_eq!(status, 400, "{body}");
        assert!(
            error_line(&body).contains("unknown, used or expired"),
            "{body}"
        );
        assert!(session_cookie(&cookies).is_none());
    }
}

#[tokio::test]
async fn a_replayed_code_or_another_logins_code_is_refused_by_the_issuer_and_shown() {
    let s = setup(None, None).await;
    let (a, b, c) = (
        s.start_login("").await,
        s.start_login("").await,
        s.start_login("").await,
    );
    let back_a = s.at_issuer(&a, "alice", false).await;
    let back_b = s.at_issuer(&b, "bob", false).await;
    let code = |q: &str| form(q)["code"].clone();
    let state = |q: &str| form(q)["state"].clone();

    // B's code presented in C's callback: the service sends C's own verifier, which
    // is not the one B's challenge was made from.
    let crossed = format!(
        "code={}&state={}",
        code(&back_b),
        state(c.authorize.query().unwrap())
    );
    let (status, body, cookies) = s.callback(&crossed, Some(&c.cookie)).await;
    assert_eq!(status, 401, "{body}");
    let line = error_line(&body);
    assert!(line.contains("PKCE verifier does not match"), "{line}");
    assert!(session_cookie(&cookies).is_none());

    // A logs in; A's code replayed in B's callback is refused as used.
    let (status, body, _) = s.callback(&back_a, Some(&a.cookie)).await;
    assert_eq!(status, 200, "{body}");
    let replay = format!("code={}&state={}", code(&back_a), state(&back_b));
    let (status, body, cookies) = s.callback(&replay, Some(&b.cookie)).await;
    assert_eq!(status, 401, "{body}");
    assert!(error_line(&body).contains("code already used"), "{body}");
    assert!(session_cookie(&cookies).is_none());
    assert_eq!(s.issuer.login_state(|l| l.tokens_issued), 1);

    // The issuer refuses a wrong verifier on its own, too.
    let d = s.start_login("").await;
    let back_d = s.at_issuer(&d, "dave", false).await;
    let resp = s
        .plain
        .post(format!("{}/token", s.issuer.url))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", &code(&back_d)),
            ("client_id", CLIENT),
            ("redirect_uri", &format!("{PUBLIC}/login/callback")),
            ("code_verifier", &"x".repeat(43)),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"], "invalid_grant");
}

#[tokio::test]
async fn an_id_token_for_another_nonce_or_audience_is_refused() {
    let s = setup(None, None).await;
    for (bad, why) in [
        (json!({"nonce": "another-login"}), "nonce"),
        (json!({"nonce": null}), "nonce"),
        (json!({"aud": AUDIENCE}), "audience is not \"hetch-web\""),
        (json!({"iss": "http://127.0.0.1:1"}), "issuer"),
        (json!({"exp": 1000}), "expired"),
    ] {
        s.issuer.login_setup(|l| l.override_claims = bad.clone());
        let started = s.start_login("").await;
        let back = s.at_issuer(&started, "alice", false).await;
        let (status, body, cookies) = s.callback(&back, Some(&started.cookie)).await;
        assert_eq!(status, 401, "{bad}: {body}");
        let line = error_line(&body);
        assert!(line.contains(why), "{bad}: {line}");
        assert!(session_cookie(&cookies).is_none(), "{bad}");
    }
}

#[tokio::test]
async fn the_issuers_refusal_is_one_line_and_a_crafted_one_is_not_shown() {
    let s = setup(None, None).await;
    let started = s.start_login("").await;
    let back = s.at_issuer(&started, "alice", true).await;
    let (status, body, cookies) = s.callback(&back, Some(&started.cookie)).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        error_line(&body),
        "the issuer refused the login: access_denied: the user said no"
    );
    assert!(session_cookie(&cookies).is_none());
    // A link another site made up, with no login of this browser behind it: its
    // words are not put on the page.
    let crafted = "error=access_denied&error_description=call%20%3Cb%3E555%3C%2Fb%3E&state=zz";
    let (status, body, _) = s.callback(crafted, None).await;
    assert_eq!(status, 400);
    assert!(!body.contains("555"), "{body}");
}

#[tokio::test]
async fn a_redirect_elsewhere_cannot_be_injected_nor_a_login_finished_in_another_browser() {
    let s = setup(None, None).await;
    // What the request says (its Host, a redirect_uri, a next) changes nothing.
    let started = s
        .start_login(
            "?redirect_uri=https%3A%2F%2Fevil.example%2Fcb&next=https%3A%2F%2Fevil.example",
        )
        .await;
    let q: HashMap<String, String> = started.authorize.query_pairs().into_owned().collect();
    assert_eq!(q["redirect_uri"], format!("{PUBLIC}/login/callback"));
    assert_eq!(
        started
            .authorize
            .query_pairs()
            .filter(|(k, _)| k == "redirect_uri")
            .count(),
        1
    );
    assert!(
        !started.authorize.as_str().contains("evil"),
        "{}",
        started.authorize
    );

    // The callback of this login in a browser without its login cookie (another
    // person's, sent a link): refused.
    let back = s.at_issuer(&started, "mallory", false).await;
    let (status, body, cookies) = s.callback(&back, None).await;
    assert_eq!(status, 400, "{body}");
    assert!(error_line(&body).contains("another browser"), "{body}");
    assert!(session_cookie(&cookies).is_none());

    // A callback carrying a next or a redirect_uri lands on / all the same.
    let started = s.start_login("").await;
    let back = s.at_issuer(&started, "alice", false).await;
    let query =
        format!("{back}&next=https%3A%2F%2Fevil.example&redirect_uri=https%3A%2F%2Fevil.example");
    let (status, body, cookies) = s.callback(&query, Some(&started.cookie)).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("evil"), "{body}");
    assert!(session_cookie(&cookies).is_some());
}

#[tokio::test]
async fn the_identity_map_decides_as_for_a_pasted_token_and_its_claims_are_asked_for() {
    let map =
        "[[identity]]\nclaim = \"groups\"\nvalue = \"bio\"\nread = [\"/\"]\nwrite = [\"/\"]\n";
    let s = setup(None, Some(map)).await;
    s.issuer
        .login_setup(|l| l.extra_claims = json!({"groups": ["bio"]}));
    let started = s.start_login("").await;
    let q: HashMap<String, String> = started.authorize.query_pairs().into_owned().collect();
    assert_eq!(q["scope"], "openid groups");
    let back = s.at_issuer(&started, "alice", false).await;
    let (status, body, cookies) = s.callback(&back, Some(&started.cookie)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        s.who(session_cookie(&cookies).unwrap()).await["caller"],
        "oidc:alice"
    );

    s.issuer
        .login_setup(|l| l.extra_claims = json!({"groups": ["astro"]}));
    let started = s.start_login("").await;
    let back = s.at_issuer(&started, "bob", false).await;
    let (status, body, cookies) = s.callback(&back, Some(&started.cookie)).await;
    assert_eq!(status, 403, "{body}");
    assert!(error_line(&body).contains("oidc:bob is not in the service's identity map"));
    assert!(session_cookie(&cookies).is_none());
}

/// The finding of issue 55: 10,000 unauthenticated `GET /login/oidc` in 1.5 s filled
/// the one table of pending logins, and every other browser's "Log in" answered 503
/// for 10 minutes. A login lives in its browser's cookie now: 10,000 started from
/// one address keep nothing, and logins from another address, one started before the
/// flood and one after it, go through; a replay of a finished login's callback is
/// refused.
#[tokio::test]
async fn logins_started_by_the_ten_thousand_from_one_address_stop_no_other_login() {
    let s = setup(None, None).await;
    let before = s.start_login("").await;
    let stranger = reqwest::Client::builder()
        .use_preconfigured_tls((*s.api.tls).clone())
        .redirect(reqwest::redirect::Policy::none())
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let url = format!("{}/login/oidc", s.api.base);
    let answers: Vec<u16> = futures_util::stream::iter(0..10_000)
        .map(|_| {
            let (stranger, url) = (stranger.clone(), url.clone());
            async move { stranger.get(url).send().await.unwrap().status().as_u16() }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let after = s.start_login("").await;
    for (started, user) in [(&before, "alice"), (&after, "bob")] {
        let back = s.at_issuer(started, user, false).await;
        let (status, body, cookies) = s.callback(&back, Some(&started.cookie)).await;
        assert_eq!(status, 200, "{user}: {body}");
        let set = session_cookie(&cookies).expect("a session cookie");
        assert_eq!(s.who(set).await["caller"], format!("oidc:{user}"));
        // The same callback again, cookie and all (a browser's history, a stolen
        // pair): refused, and no session comes of it.
        let (status, body, cookies) = s.callback(&back, Some(&started.cookie)).await;
        assert_eq!(status, 400, "{body}");
        assert!(error_line(&body).contains("used"), "{body}");
        assert!(session_cookie(&cookies).is_none());
    }
    // Nothing was refused for want of room, the stranger's logins included.
    assert_eq!(answers.len(), 10_000);
    let refused = answers.iter().filter(|&&a| a != 303).count();
    assert_eq!(refused, 0, "of the stranger's logins");
}
