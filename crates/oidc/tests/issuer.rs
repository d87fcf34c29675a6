//! `OidcVerifier` against a test issuer of its own on 127.0.0.1: good tokens of each
//! key type, each way a token can be wrong, key rotation, the refresh rate limit, and
//! the ways the issuer itself can be wrong or away.

use std::sync::Arc;
use std::time::Duration;

use hetch_oidc::{OidcConfig, OidcError, OidcVerifier, REFRESH_INTERVAL};
use hetch_testkit::oidc_issuer::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

fn verifier(issuer: &TestIssuer) -> OidcVerifier {
    OidcVerifier::new(OidcConfig::new(&issuer.url, AUDIENCE)).unwrap()
}

/// The refusal of `token`, checking on the way that its Display does not echo the
/// token.
async fn refusal(verifier: &OidcVerifier, token: &str) -> OidcError {
    let err = verifier.verify(token).await.expect_err("token accepted");
    let shown = err.to_string();
    // (Too short a token could occur in any message by chance.)
    assert!(token.len() < 8 || !shown.contains(token), "{shown}");
    if let Some(signature) = token.rsplit('.').next().filter(|s| s.len() > 8) {
        assert!(!shown.contains(signature), "{shown}");
    }
    err
}

#[tokio::test]
async fn good_tokens_of_each_key_type_are_accepted() {
    let (rsa, ec, ed) = (rsa_key(0, "rsa-1"), ec_key("ec-1"), ed_key("ed-1"));
    let issuer = TestIssuer::start(&[&rsa, &ec, &ed]).await;
    let verifier = verifier(&issuer);
    let mut claims = claims(&issuer.url);
    for (key, alg) in [
        (&rsa, Algorithm::RS256),
        (&rsa, Algorithm::RS512),
        (&rsa, Algorithm::PS256),
        (&ec, Algorithm::ES256),
        (&ed, Algorithm::EdDSA),
    ] {
        claims["sub"] = json!(format!("user-{alg:?}"));
        let token = sign_as(key, alg, &key.kid, &claims);
        let identity = verifier.verify(&token).await.unwrap();
        assert_eq!(identity.subject, format!("user-{alg:?}"));
        assert_eq!(identity.issuer, issuer.url);
        assert_eq!(identity.expires, claims["exp"].as_u64().unwrap());
    }
    // Discovered once, keys fetched once, for all five.
    assert_eq!((issuer.discovery_hits(), issuer.jwks_hits()), (1, 1));
}

#[tokio::test]
async fn time_audience_issuer_and_subject_are_enforced() {
    let key = rsa_key(0, "rsa-1");
    let issuer = TestIssuer::start(&[&key]).await;
    let verifier = verifier(&issuer);
    let good = claims(&issuer.url);
    let with = |field: &str, value: Value| {
        let mut c = good.clone();
        c[field] = value;
        c
    };
    let without = |field: &str| {
        let mut c = good.clone();
        c.as_object_mut().unwrap().remove(field);
        c
    };
    let expected_aud = OidcError::WrongAudience {
        expected: AUDIENCE.into(),
    };
    let cases: Vec<(&str, Value, OidcError)> = vec![
        (
            "expired",
            with("exp", json!(now() - 3600)),
            OidcError::Expired,
        ),
        (
            "nbf in the future",
            with("nbf", json!(now() + 3600)),
            OidcError::NotYetValid,
        ),
        (
            "wrong audience",
            with("aud", json!("someone-else")),
            expected_aud.clone(),
        ),
        (
            "audience array without ours",
            with("aud", json!(["a", "b"])),
            expected_aud.clone(),
        ),
        ("empty audience array", with("aud", json!([])), expected_aud),
        (
            "wrong issuer",
            with("iss", json!("https://evil.example.org")),
            OidcError::WrongIssuer {
                expected: issuer.url.clone(),
            },
        ),
        (
            "no exp",
            without("exp"),
            OidcError::MissingClaim("exp".into()),
        ),
        (
            "no sub",
            without("sub"),
            OidcError::MissingClaim("sub".into()),
        ),
        (
            "no aud",
            without("aud"),
            OidcError::MissingClaim("aud".into()),
        ),
        (
            "no iss",
            without("iss"),
            OidcError::MissingClaim("iss".into()),
        ),
        ("empty sub", with("sub", json!("")), OidcError::EmptySubject),
    ];
    for (name, claims, expected) in cases {
        let err = refusal(&verifier, &sign(&key, &claims)).await;
        assert_eq!(err, expected, "{name}");
    }
    // A claim of the wrong type is refused, not taken as absent (GHSA-h395-gr6q-cpjc).
    for (field, value) in [
        ("nbf", json!("99999999999")),
        ("exp", json!("never")),
        ("sub", json!(7)),
    ] {
        let err = refusal(&verifier, &sign(&key, &with(field, value))).await;
        assert!(matches!(err, OidcError::InvalidClaim(_)), "{field}: {err}");
    }
    // Within the leeway both ways, and an audience array holding ours, is good.
    let lenient = with("exp", json!(now() - 30));
    let lenient = {
        let mut c = lenient;
        c["nbf"] = json!(now() + 30);
        c["aud"] = json!(["other", AUDIENCE]);
        c
    };
    assert_eq!(
        verifier
            .verify(&sign(&key, &lenient))
            .await
            .unwrap()
            .subject,
        "alice"
    );
}

#[tokio::test]
async fn unsigned_and_hmac_tokens_are_refused_before_any_key_is_used() {
    let key = rsa_key(0, "rsa-1");
    let issuer = TestIssuer::start(&[&key]).await;
    let verifier = verifier(&issuer);
    let claims = claims(&issuer.url);

    // alg "none": a header and the claims, and an empty signature.
    let header = b64(json!({"alg": "none", "kid": key.kid})
        .to_string()
        .as_bytes());
    let payload = b64(claims.to_string().as_bytes());
    let unsigned = format!("{header}.{payload}.");
    assert_eq!(
        refusal(&verifier, &unsigned).await,
        OidcError::UnsupportedAlgorithm("none".into())
    );

    // The classic forgery: HS256 keyed with the issuer's public key, which a verifier
    // that let the header choose the algorithm would check against the same bytes.
    for secret in [key.public_pem.as_bytes(), &key.public_der[..]] {
        for alg in [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512] {
            let mut header = Header::new(alg);
            header.kid = Some(key.kid.clone());
            let forged =
                jsonwebtoken::encode(&header, &claims, &EncodingKey::from_secret(secret)).unwrap();
            assert_eq!(
                refusal(&verifier, &forged).await,
                OidcError::UnsupportedAlgorithm(format!("{alg:?}"))
            );
        }
    }
    // Refused from the header alone: the issuer was never even asked for its keys.
    assert_eq!((issuer.discovery_hits(), issuer.jwks_hits()), (0, 0));
}

#[tokio::test]
async fn wrong_keys_are_refused() {
    let (key, other) = (rsa_key(0, "rsa-1"), rsa_key(1, "rsa-other"));
    let ec = ec_key("ec-1");
    let issuer = TestIssuer::start(&[&key, &ec]).await;
    let verifier = verifier(&issuer);
    let claims = claims(&issuer.url);

    // A key the issuer does not publish.
    assert_eq!(
        refusal(&verifier, &sign(&other, &claims)).await,
        OidcError::UnknownKey {
            kid: "rsa-other".into()
        }
    );
    // A published kid, but signed by another key.
    let forged = sign_as(&other, Algorithm::RS256, &key.kid, &claims);
    assert_eq!(refusal(&verifier, &forged).await, OidcError::BadSignature);
    // A good signature with one byte of the claims changed.
    let good = sign(&key, &claims);
    let mut parts: Vec<String> = good.split('.').map(String::from).collect();
    parts[1] = b64(claims.to_string().replace("alice", "alicf").as_bytes());
    assert_eq!(
        refusal(&verifier, &parts.join(".")).await,
        OidcError::BadSignature
    );
    // An EC token naming the RSA key, and the EC key (stated ES256) used as ES384.
    let crossed = sign_as(&ec, Algorithm::ES256, &key.kid, &claims);
    assert!(matches!(
        refusal(&verifier, &crossed).await,
        OidcError::KeyAlgorithmMismatch { .. }
    ));
    let header = b64(json!({"alg": "ES384", "kid": ec.kid})
        .to_string()
        .as_bytes());
    let es384 = format!("{header}.{}.AAAA", b64(claims.to_string().as_bytes()));
    assert!(matches!(
        refusal(&verifier, &es384).await,
        OidcError::KeyAlgorithmMismatch { .. }
    ));
    assert_eq!(verifier.verify(&good).await.unwrap().subject, "alice");
}

#[tokio::test]
async fn garbage_and_oversized_tokens_are_refused() {
    let key = rsa_key(0, "rsa-1");
    let issuer = TestIssuer::start(&[&key]).await;
    let verifier = verifier(&issuer);
    for garbage in [
        "",
        "garbage",
        "a.b.c",
        "Bearer x.y.z",
        "...",
        "\u{0}.\u{1}.\u{2}",
    ] {
        assert!(
            matches!(refusal(&verifier, garbage).await, OidcError::Malformed(_)),
            "{garbage:?}"
        );
    }
    // Signed and otherwise good, but with 20 KiB of padding claims.
    let mut big = claims(&issuer.url);
    big["pad"] = json!("x".repeat(20 * 1024));
    assert!(matches!(
        refusal(&verifier, &sign(&key, &big)).await,
        OidcError::TokenTooLong { .. }
    ));
    assert_eq!(issuer.jwks_hits(), 0);
}

#[tokio::test]
async fn a_rotated_key_is_fetched_once_and_a_withdrawn_one_stops_verifying() {
    let (old, new) = (rsa_key(0, "2024"), rsa_key(1, "2025"));
    let issuer = TestIssuer::start(&[&old]).await;
    let clock = ManualClock::new();
    let verifier =
        OidcVerifier::with_clock(OidcConfig::new(&issuer.url, AUDIENCE), clock.clone()).unwrap();
    let claims = claims(&issuer.url);
    verifier.verify(&sign(&old, &claims)).await.unwrap();
    assert_eq!(issuer.jwks_hits(), 1);

    issuer.set_keys(&[&new]);
    clock.advance(REFRESH_INTERVAL + Duration::from_secs(1));
    assert_eq!(
        verifier.verify(&sign(&new, &claims)).await.unwrap().subject,
        "alice"
    );
    assert_eq!(
        verifier.verify(&sign(&new, &claims)).await.unwrap().subject,
        "alice"
    );
    // One refresh for the new kid, and the discovery document was not asked again.
    assert_eq!((issuer.discovery_hits(), issuer.jwks_hits()), (1, 2));
    // The old key left the set with the refresh.
    assert_eq!(
        refusal(&verifier, &sign(&old, &claims)).await,
        OidcError::UnknownKey { kid: "2024".into() }
    );
}

#[tokio::test]
async fn unknown_kids_refresh_at_most_once_per_interval() {
    let key = rsa_key(0, "rsa-1");
    let issuer = TestIssuer::start(&[&key]).await;
    let clock = ManualClock::new();
    let verifier = Arc::new(
        OidcVerifier::with_clock(OidcConfig::new(&issuer.url, AUDIENCE), clock.clone()).unwrap(),
    );
    let claims = claims(&issuer.url);
    verifier.verify(&sign(&key, &claims)).await.unwrap();
    assert_eq!(issuer.jwks_hits(), 1);

    let flood = |round: usize| {
        let tasks: Vec<_> = (0..100)
            .map(|i| {
                let token = sign_as(
                    &key,
                    Algorithm::RS256,
                    &format!("random-{round}-{i}"),
                    &claims,
                );
                let verifier = verifier.clone();
                tokio::spawn(async move { verifier.verify(&token).await })
            })
            .collect();
        async move {
            for task in tasks {
                let err = task.await.unwrap().unwrap_err();
                assert!(matches!(err, OidcError::UnknownKey { .. }), "{err}");
            }
        }
    };
    // Within the interval of the first fetch: nobody asks the issuer again.
    flood(0).await;
    assert_eq!(issuer.jwks_hits(), 1);
    // Past it: a hundred concurrent unknown kids make one fetch between them.
    clock.advance(REFRESH_INTERVAL);
    flood(1).await;
    assert_eq!(issuer.jwks_hits(), 2);
    clock.advance(REFRESH_INTERVAL - Duration::from_secs(1));
    flood(2).await;
    assert_eq!(issuer.jwks_hits(), 2);
    clock.advance(Duration::from_secs(1));
    flood(3).await;
    assert_eq!(issuer.jwks_hits(), 3);
    // The known key verified throughout without a fetch.
    verifier.verify(&sign(&key, &claims)).await.unwrap();
    assert_eq!((issuer.discovery_hits(), issuer.jwks_hits()), (1, 3));
}

#[tokio::test]
async fn an_unreachable_issuer_is_named() {
    // A port nobody listens on any more.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let clock = ManualClock::new();
    let verifier =
        OidcVerifier::with_clock(OidcConfig::new(&url, AUDIENCE), clock.clone()).unwrap();
    let key = rsa_key(0, "rsa-1");
    let token = sign(&key, &claims(&url));
    for _ in 0..3 {
        let err = refusal(&verifier, &token).await;
        assert!(matches!(err, OidcError::IssuerUnreachable { .. }), "{err}");
        let shown = err.to_string();
        assert!(
            shown.contains(&format!("{url}/.well-known/openid-configuration")),
            "{shown}"
        );
    }
    let err = verifier.refresh().await.unwrap_err();
    assert!(err.to_string().contains(&url), "{err}");
}

#[tokio::test]
async fn a_failing_issuer_is_asked_once_per_interval() {
    let key = rsa_key(0, "rsa-1");
    let issuer = TestIssuer::start(&[&key]).await;
    issuer.set_jwks_body(b"<html>oops</html>".to_vec());
    let clock = ManualClock::new();
    let verifier =
        OidcVerifier::with_clock(OidcConfig::new(&issuer.url, AUDIENCE), clock.clone()).unwrap();
    let token = sign(&key, &claims(&issuer.url));
    for _ in 0..10 {
        let err = refusal(&verifier, &token).await;
        assert!(matches!(err, OidcError::BadDocument { .. }), "{err}");
    }
    assert_eq!(issuer.jwks_hits(), 1);
    // The issuer mends; the next fetch after the interval finds the key.
    issuer.set_keys(&[&key]);
    clock.advance(REFRESH_INTERVAL);
    assert_eq!(verifier.verify(&token).await.unwrap().subject, "alice");
    assert_eq!(issuer.jwks_hits(), 2);
}

#[tokio::test]
async fn a_bad_issuer_document_is_refused() {
    let key = rsa_key(0, "rsa-1");
    let issuer = TestIssuer::start(&[&key]).await;

    // A discovery document speaking for another issuer.
    issuer.set_discovery(json!({
        "issuer": "https://login.example.org",
        "jwks_uri": format!("{}/jwks", issuer.url),
    }));
    let err = verifier(&issuer).refresh().await.unwrap_err();
    assert!(matches!(err, OidcError::IssuerMismatch { .. }), "{err}");

    // A jwks_uri on plain HTTP elsewhere than loopback.
    issuer.set_discovery(json!({"issuer": issuer.url, "jwks_uri": "http://keys.example.org/"}));
    let err = verifier(&issuer).refresh().await.unwrap_err();
    assert!(matches!(err, OidcError::InvalidUrl { .. }), "{err}");

    // A JWKS larger than the bound, with too many keys, or not JSON.
    issuer.set_discovery(json!({"issuer": issuer.url, "jwks_uri": format!("{}/jwks", issuer.url)}));
    let many: Vec<Value> = (0..hetch_oidc::MAX_KEYS + 1)
        .map(|i| {
            let mut jwk = key.jwk.clone();
            jwk["kid"] = json!(i.to_string());
            jwk
        })
        .collect();
    for body in [
        vec![b' '; hetch_oidc::MAX_DOCUMENT_BYTES + 1],
        serde_json::to_vec(&json!({ "keys": many })).unwrap(),
        b"<html>".to_vec(),
    ] {
        issuer.set_jwks_body(body);
        let err = verifier(&issuer).refresh().await.unwrap_err();
        assert!(matches!(err, OidcError::BadDocument { .. }), "{err}");
        assert!(
            err.to_string().contains(&format!("{}/jwks", issuer.url)),
            "{err}"
        );
    }
    issuer.set_keys(&[&key]);
    assert_eq!(verifier(&issuer).refresh().await.unwrap(), 1);
}

#[test]
fn configurations_that_cannot_be_safe_are_refused() {
    for issuer in [
        "http://login.example.org",
        "http://192.168.1.10:8080",
        "ftp://127.0.0.1",
        "login.example.org",
    ] {
        let err = OidcVerifier::new(OidcConfig::new(issuer, AUDIENCE)).unwrap_err();
        assert!(
            matches!(err, OidcError::InvalidUrl { .. }),
            "{issuer}: {err}"
        );
    }
    let err = OidcVerifier::new(OidcConfig::new("https://login.example.org", "")).unwrap_err();
    assert_eq!(err, OidcError::EmptyAudience);
    let bad_ca = OidcConfig::new("https://login.example.org", AUDIENCE).with_extra_ca_pem("no pem");
    assert!(matches!(
        OidcVerifier::new(bad_ca).unwrap_err(),
        OidcError::InvalidCaCertificate(_)
    ));
    for issuer in [
        "https://login.example.org",
        "http://127.0.0.1:1",
        "http://[::1]:1",
        "http://localhost:1",
    ] {
        OidcVerifier::new(OidcConfig::new(issuer, AUDIENCE)).unwrap();
    }
}

#[tokio::test]
async fn an_https_issuer_with_a_private_ca_is_trusted_only_with_that_ca() {
    let (ca_pem, acceptor) = private_ca();
    let key = ec_key("ec-1");
    let issuer = TestIssuer::start_with(&[&key], Some(acceptor)).await;
    assert!(issuer.url.starts_with("https://127.0.0.1:"));
    let token = sign(&key, &claims(&issuer.url));

    let without_ca = verifier(&issuer);
    let err = refusal(&without_ca, &token).await;
    assert!(matches!(err, OidcError::IssuerUnreachable { .. }), "{err}");
    assert_eq!(issuer.discovery_hits(), 0);

    let with_ca =
        OidcVerifier::new(OidcConfig::new(&issuer.url, AUDIENCE).with_extra_ca_pem(ca_pem))
            .unwrap();
    assert_eq!(with_ca.verify(&token).await.unwrap().subject, "alice");
    assert_eq!((issuer.discovery_hits(), issuer.jwks_hits()), (1, 1));
}
