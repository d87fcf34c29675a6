//! What the verifier reads of a token before it trusts anything in it: its size, its
//! shape, and the header's `alg` and `kid`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::Algorithm;
use serde::Deserialize;

use crate::error::shorten;
use crate::{OidcError, MAX_TOKEN_BYTES};

/// The algorithms accepted: asymmetric only. HS* is absent on purpose: with a
/// verifier that holds public keys, an HMAC token would be checked against a key
/// everybody has.
const ACCEPTED: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The header fields that decide which key and algorithm verify the token.
pub(crate) struct Header {
    pub(crate) alg: Algorithm,
    pub(crate) kid: String,
}

#[derive(Deserialize)]
struct RawHeader {
    alg: Option<String>,
    kid: Option<String>,
    crit: Option<serde_json::Value>,
}

/// The token's header, once the token is of bounded size and JWS compact shape and its
/// `alg` is one of [`ACCEPTED`]. Runs before any key is looked up, so `none` and
/// HS* never reach a verification.
pub(crate) fn header(token: &str) -> Result<Header, OidcError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(OidcError::TokenTooLong {
            len: token.len(),
            max: MAX_TOKEN_BYTES,
        });
    }
    let malformed = |what: &str| OidcError::Malformed(what.to_owned());
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 {
        return Err(malformed(
            "not three dot-separated parts (a JWS in compact form)",
        ));
    }
    let header = URL_SAFE_NO_PAD
        .decode(parts[0])
        .map_err(|_| malformed("header is not base64url"))?;
    let header: RawHeader =
        serde_json::from_slice(&header).map_err(|_| malformed("header is not a JSON object"))?;
    // RFC 7515 4.1.11: extensions listed in `crit` must be understood; this verifier
    // understands none.
    if header.crit.is_some() {
        return Err(malformed("header has a \"crit\" parameter"));
    }
    let alg_name = header
        .alg
        .ok_or_else(|| malformed("header has no \"alg\""))?;
    let alg = alg_name
        .parse::<Algorithm>()
        .ok()
        .filter(|alg| ACCEPTED.contains(alg))
        .ok_or_else(|| OidcError::UnsupportedAlgorithm(shorten(&alg_name)))?;
    let kid = header.kid.ok_or(OidcError::MissingKeyId)?;
    Ok(Header { alg, kid })
}

#[cfg(test)]
mod tests {
    use super::header;
    use crate::OidcError;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;

    fn token(header_json: &str) -> String {
        format!("{}.e30.sig", URL_SAFE_NO_PAD.encode(header_json))
    }

    #[test]
    fn refuses_none_symmetric_and_unknown_algorithms() {
        for alg in [
            "none", "None", "HS256", "HS384", "HS512", "ES512", "RSA-OAEP", "",
        ] {
            let t = token(&format!(r#"{{"alg":"{alg}","kid":"k"}}"#));
            assert_eq!(
                header(&t).err(),
                Some(OidcError::UnsupportedAlgorithm(alg.into())),
                "{alg}"
            );
        }
        let ok = header(&token(r#"{"alg":"ES256","kid":"k"}"#)).unwrap();
        assert_eq!(
            (ok.alg, ok.kid.as_str()),
            (jsonwebtoken::Algorithm::ES256, "k")
        );
    }

    #[test]
    fn refuses_bad_shapes() {
        assert_eq!(
            header(&token(r#"{"alg":"RS256"}"#)).err(),
            Some(OidcError::MissingKeyId)
        );
        for bad in [
            String::new(),
            "a.b".into(),
            "a.b.c.d".into(),
            "!!!.e30.x".into(),
            token("[1]"),
            token(r#"{"kid":"k"}"#),
            token(r#"{"alg":"RS256","kid":"k","crit":["exp"]}"#),
        ] {
            assert!(
                matches!(header(&bad), Err(OidcError::Malformed(_))),
                "{bad}"
            );
        }
        let long = "a".repeat(crate::MAX_TOKEN_BYTES + 1);
        assert!(matches!(header(&long), Err(OidcError::TokenTooLong { .. })));
    }
}
