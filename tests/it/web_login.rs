//! Logging in to the web page through the OIDC issuer, in headless Chromium through
//! chromedriver: the login page's button sends the browser to the test issuer's form,
//! the issuer sends it back to the service's callback, and the page that follows is
//! the user's, with only the user's jobs. The callback answers with a page of its
//! own that moves on to `/`, not a redirect: a SameSite=Strict cookie set while the
//! issuer's cross-site navigation is still going would not be sent on its redirect,
//! and this test is what shows the session survives that move.

use crate::util;

use hetch_testkit::oidc_issuer::{claims, ec_key, sign, TestIssuer, AUDIENCE};
use util::service::{args, free_port, launch, Service};
use util::webdriver::Browser;

/// Submits a job as the OIDC user `sub` through the API (a bearer token the issuer
/// signed): its id.
fn submit_as(svc: &Service, token: &str) -> String {
    // No worker runs: the jobs wait, listed, for the page to show.
    let all = args(&[
        "job",
        "--service",
        &svc.addr,
        "submit",
        "run1",
        "hetch://127.0.0.1:9/in",
    ]);
    let out = util::hetch(
        &all,
        &[("HETCH_TOKEN", token), ("HETCH_CONFIG_DIR", &svc.config)],
    );
    out.ok();
    out.stdout.trim().to_string()
}

#[test]
fn a_user_logs_in_through_the_issuer_in_a_browser_and_sees_only_their_jobs() {
    let Some(b) = Browser::start(1280, 900) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let key = ec_key("k1");
    let issuer = rt.block_on(TestIssuer::start(&[&key]));
    let port = free_port();
    let public = format!("https://127.0.0.1:{port}");
    issuer.enable_login(&key, "hetch-web", &format!("{public}/login/callback"), None);
    let dir = tempfile::tempdir().unwrap();
    let svc = launch(
        dir.path(),
        &format!("127.0.0.1:{port}"),
        &[
            "--oidc-issuer",
            &issuer.url,
            "--oidc-audience",
            AUDIENCE,
            "--oidc-client-id",
            "hetch-web",
            "--public-url",
            &public,
        ],
    );
    let token_of = |sub: &str| {
        let mut c = claims(&issuer.url);
        c["sub"] = serde_json::json!(sub);
        sign(&key, &c)
    };
    let alices = submit_as(&svc, &token_of("alice"));
    let bobs = submit_as(&svc, &token_of("bob"));

    b.goto(&format!("{public}/login"));
    b.click_on("#login-issuer");
    b.wait("the issuer's form", || !b.find_all("#username").is_empty());
    assert!(
        b.url().starts_with(&format!("{}/authorize?", issuer.url)),
        "{}",
        b.url()
    );
    b.type_into(&b.find("#username"), "alice");
    b.click_on("#issuer-login");
    b.wait("the jobs page as alice", || {
        b.url().starts_with(&public)
            && !b.find_all("#who").is_empty()
            && b.text_of("#who") == "oidc:alice"
    });
    b.wait("alice's job listed", || {
        b.text_of("#jobs tbody").contains(&alices)
    });
    let rows = b.text_of("#jobs tbody");
    assert!(!rows.contains(&bobs), "bob's job on alice's page: {rows}");
    // The session is the page's cookie: the page loaded again is still alice's.
    b.goto(&format!("{public}/"));
    b.wait("alice again after a reload", || {
        !b.find_all("#who").is_empty() && b.text_of("#who") == "oidc:alice"
    });
    let codes = issuer.login_state(|l| l.token_refusals.clone());
    assert!(codes.is_empty(), "the issuer refused: {codes:?}");
}
