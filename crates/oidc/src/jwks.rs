//! The issuer's JWKS turned into verification keys, each with the algorithms it may
//! verify.

use std::collections::HashMap;
use std::sync::Arc;

use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;

use crate::{OidcError, MAX_KEYS};

/// One usable key of the issuer.
pub(crate) struct Key {
    /// The algorithms this key may verify: its type and curve decide, narrowed to its
    /// own `alg` when it states one.
    pub(crate) algorithms: Vec<Algorithm>,
    pub(crate) decoding: DecodingKey,
}

/// The issuer's keys by `kid`.
pub(crate) type Keys = HashMap<String, Arc<Key>>;

#[derive(Deserialize)]
struct JwkSet {
    // Each key is parsed on its own below, so one key of a kind this verifier does not
    // know (an encryption key, a new curve) does not make the whole set unusable.
    keys: Vec<serde_json::Value>,
}

/// The fields of a JWK (RFC 7517, 7518, 8037) the verifier reads.
#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    use_: Option<String>,
    crv: Option<String>,
    n: Option<String>,
    e: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

/// The signing keys of a JWKS document. Keys without a `kid`, for encryption, of an
/// unknown or symmetric type, or malformed are skipped: tokens can only name keys by
/// `kid`, and a symmetric (`oct`) key must never verify anything.
pub(crate) fn parse(body: &[u8], url: &str) -> Result<Keys, OidcError> {
    let bad = |reason: String| OidcError::BadDocument {
        url: url.to_owned(),
        reason,
    };
    let set: JwkSet = serde_json::from_slice(body).map_err(|e| bad(format!("not a JWKS: {e}")))?;
    if set.keys.len() > MAX_KEYS {
        return Err(bad(format!(
            "{} keys, more than {MAX_KEYS}",
            set.keys.len()
        )));
    }
    let mut keys = Keys::new();
    let mut ambiguous = std::collections::HashSet::new();
    for value in set.keys {
        let Ok(jwk) = serde_json::from_value::<Jwk>(value) else {
            continue;
        };
        let Some(kid) = jwk.kid.clone() else {
            continue;
        };
        if jwk.use_.as_deref().is_some_and(|u| u != "sig") {
            continue;
        }
        if let Some(key) = usable(&jwk) {
            // Two keys with one kid: which one a token means is unknowable, so
            // none is kept.
            if ambiguous.contains(&kid) || keys.insert(kid.clone(), Arc::new(key)).is_some() {
                keys.remove(&kid);
                ambiguous.insert(kid);
            }
        }
    }
    Ok(keys)
}

/// The key and its algorithms, if the JWK is a well-formed asymmetric public key.
fn usable(jwk: &Jwk) -> Option<Key> {
    use Algorithm::*;
    let (family, decoding): (&[Algorithm], _) = match (jwk.kty.as_str(), jwk.crv.as_deref()) {
        ("RSA", _) => (
            &[RS256, RS384, RS512, PS256, PS384, PS512],
            DecodingKey::from_rsa_components(jwk.n.as_deref()?, jwk.e.as_deref()?).ok()?,
        ),
        ("EC", Some(crv @ ("P-256" | "P-384"))) => (
            if crv == "P-256" { &[ES256] } else { &[ES384] },
            DecodingKey::from_ec_components(jwk.x.as_deref()?, jwk.y.as_deref()?).ok()?,
        ),
        ("OKP", Some("Ed25519")) => (
            &[EdDSA],
            DecodingKey::from_ed_components(jwk.x.as_deref()?).ok()?,
        ),
        _ => return None,
    };
    let algorithms = match &jwk.alg {
        None => family.to_vec(),
        Some(alg) => {
            let alg: Algorithm = alg.parse().ok()?;
            // A key stating an algorithm of another family (an RSA key saying
            // "ES256", or any key saying "HS256") is inconsistent: skip it.
            if !family.contains(&alg) {
                return None;
            }
            vec![alg]
        }
    };
    Some(Key {
        algorithms,
        decoding,
    })
}

#[cfg(test)]
mod tests {
    use super::parse;
    use jsonwebtoken::Algorithm;

    #[test]
    fn keeps_signing_keys_and_skips_the_rest() {
        let body = br#"{"keys":[
            {"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"},
            {"kty":"RSA","kid":"r-ps","alg":"PS256","n":"AQAB","e":"AQAB"},
            {"kty":"RSA","kid":"r-enc","use":"enc","n":"AQAB","e":"AQAB"},
            {"kty":"RSA","kid":"r-hs","alg":"HS256","n":"AQAB","e":"AQAB"},
            {"kty":"RSA","n":"AQAB","e":"AQAB"},
            {"kty":"oct","kid":"o","k":"c2VjcmV0"},
            {"kty":"EC","kid":"e","crv":"P-256","x":"AQ","y":"AQ"},
            {"kty":"EC","kid":"e521","crv":"P-521","x":"AQ","y":"AQ"},
            {"kty":"OKP","kid":"d","crv":"Ed25519","x":"AQ"},
            {"kty":"RSA","kid":"thrice","n":"AQAB","e":"AQAB"},
            {"kty":"RSA","kid":"thrice","n":"AQAB","e":"AQAB"},
            {"kty":"RSA","kid":"thrice","n":"AQAB","e":"AQAB"},
            {"kty":"new-kind","kid":"n"},
            "not an object"
        ]}"#;
        let keys = parse(body, "u").unwrap();
        let mut kids: Vec<_> = keys.keys().cloned().collect();
        kids.sort();
        assert_eq!(kids, ["d", "e", "r", "r-ps"]);
        assert_eq!(keys["r-ps"].algorithms, [Algorithm::PS256]);
        assert_eq!(keys["e"].algorithms, [Algorithm::ES256]);
        assert_eq!(keys["r"].algorithms.len(), 6);
    }

    #[test]
    fn too_many_keys_or_not_json_is_refused() {
        let many = format!(
            r#"{{"keys":[{}]}}"#,
            vec![r#"{"kty":"oct"}"#; crate::MAX_KEYS + 1].join(",")
        );
        assert!(parse(many.as_bytes(), "u").is_err());
        assert!(parse(b"<html>", "u").is_err());
        assert!(parse(b"{}", "u").is_err());
    }
}
