//! [`LoginClient`]: the relying party's half of the OpenID Connect authorization-code
//! flow with PKCE (RFC 7636, S256), for a browser sent to the issuer's login page and
//! back: the authorization URL, and the exchange of the code at the token endpoint.
//! The ID token it returns is verified by an [`OidcVerifier`] whose audience is the
//! client id, then its `nonce` by [`check_nonce`].

use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::{Client, Url};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

use crate::config::check_url;
use crate::{fetch, Identity, OidcConfig, OidcError, OidcVerifier, MAX_TOKEN_RESPONSE_BYTES};

/// The client the service is at the issuer.
#[derive(Clone)]
pub struct LoginConfig {
    /// The issuer, its CA: as for verifying tokens.
    pub issuer: OidcConfig,
    /// The client id registered at the issuer; also the ID token's audience.
    pub client_id: String,
    /// The client secret, for a confidential client (sent with HTTP Basic).
    pub client_secret: Option<String>,
    /// Where the issuer sends the browser back: the service's own
    /// `https://HOST:PORT/login/callback`, as registered at the issuer.
    pub redirect_uri: String,
    /// The scopes asked for besides `openid`.
    pub extra_scopes: Vec<String>,
}

impl LoginConfig {
    /// The web login of `hetch service --oidc-client-id ID --public-url URL
    /// [--oidc-client-secret-file FILE]` at `issuer`: the browser comes back to
    /// `URL/login/callback`, so `URL` must be `https://HOST[:PORT]` and nothing after;
    /// the secret is the file's text, trimmed. A one-line error names the flag.
    pub fn from_flags(
        issuer: &OidcConfig,
        client_id: &str,
        public_url: &str,
        secret_file: Option<&std::path::Path>,
    ) -> Result<LoginConfig, String> {
        let base = public_url.trim_end_matches('/');
        let host = base.strip_prefix("https://").unwrap_or_default();
        if host.is_empty() || host.contains(['/', '?', '#', '@']) {
            return Err(format!(
                "--public-url {public_url:?}: must be https://HOST[:PORT], nothing after"
            ));
        }
        if client_id.is_empty() {
            return Err("--oidc-client-id must not be empty".into());
        }
        let client_secret = match secret_file {
            Some(p) => {
                let flag = format!("--oidc-client-secret-file {}", p.display());
                let secret = std::fs::read_to_string(p).map_err(|e| format!("{flag}: {e}"))?;
                match secret.trim() {
                    "" => return Err(format!("{flag}: empty")),
                    s => Some(s.to_string()),
                }
            }
            None => None,
        };
        Ok(LoginConfig {
            issuer: issuer.clone(),
            client_id: client_id.into(),
            client_secret,
            redirect_uri: format!("{base}/login/callback"),
            extra_scopes: Vec::new(),
        })
    }
}

impl std::fmt::Debug for LoginConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginConfig")
            .field("issuer", &self.issuer.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("redirect_uri", &self.redirect_uri)
            .finish_non_exhaustive()
    }
}

/// One login's secrets, kept by the service until the browser comes back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingLogin {
    /// The `state` sent to the issuer, which the callback must bring back.
    pub state: String,
    /// The `nonce` the ID token must carry.
    pub nonce: String,
    /// The PKCE `code_verifier` (its S256 hash went to the issuer as the challenge).
    pub verifier: String,
}

impl PendingLogin {
    /// New random state, nonce and verifier (32 random bytes each, base64url: the
    /// verifier's 43 characters are RFC 7636's minimum length).
    pub fn new() -> Self {
        let random = || URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>());
        Self {
            state: random(),
            nonce: random(),
            verifier: random(),
        }
    }

    /// The PKCE S256 `code_challenge` of the verifier.
    pub fn challenge(&self) -> String {
        pkce_challenge(&self.verifier)
    }
}

impl Default for PendingLogin {
    fn default() -> Self {
        Self::new()
    }
}

/// The S256 code challenge of `verifier`: base64url(SHA-256(verifier)).
pub fn pkce_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// The endpoints of the discovery document the login uses.
#[derive(Debug, Clone)]
struct Endpoints {
    authorization: Url,
    token: Url,
}

/// The authorization-code flow against one issuer, for one client.
pub struct LoginClient {
    config: LoginConfig,
    client: Client,
    /// Verifies ID tokens: the issuer's keys, the client id as audience.
    verifier: Arc<OidcVerifier>,
    /// Found on first use and kept (a failed discovery is tried again next time).
    endpoints: OnceCell<Endpoints>,
}

impl std::fmt::Debug for LoginClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginClient")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct TokenAnswer {
    id_token: Option<String>,
}

#[derive(Deserialize)]
struct TokenError {
    error: Option<String>,
    error_description: Option<String>,
}

impl LoginClient {
    /// A login client for `config`: checks the redirect URI and the client id, makes
    /// no request (the discovery document is read at the first login).
    pub fn new(config: LoginConfig) -> Result<Self, OidcError> {
        if config.client_id.is_empty() {
            return Err(OidcError::EmptyAudience);
        }
        check_url(&config.redirect_uri, false)?;
        let https = config.issuer.issuer.starts_with("https:");
        let client = fetch::client(&config.issuer, https)?;
        let mut id_config = config.issuer.clone();
        id_config.audience = config.client_id.clone();
        let verifier = Arc::new(OidcVerifier::new(id_config)?);
        Ok(Self {
            config,
            client,
            verifier,
            endpoints: OnceCell::new(),
        })
    }

    /// This client's configuration.
    pub fn config(&self) -> &LoginConfig {
        &self.config
    }

    async fn endpoints(&self) -> Result<&Endpoints, OidcError> {
        self.endpoints
            .get_or_try_init(|| async {
                let doc =
                    fetch::discover_document(&self.client, &self.config.issuer.issuer).await?;
                let need = |field: &str, v: Option<String>| {
                    let v = v.ok_or_else(|| OidcError::BadDocument {
                        url: format!(
                            "{}/.well-known/openid-configuration",
                            self.config.issuer.issuer
                        ),
                        reason: format!("no {field}"),
                    })?;
                    check_url(&v, self.config.issuer.issuer.starts_with("https:"))
                };
                Ok(Endpoints {
                    authorization: need("authorization_endpoint", doc.authorization_endpoint)?,
                    token: need("token_endpoint", doc.token_endpoint)?,
                })
            })
            .await
    }

    /// Where to send the browser to log in for `pending`.
    pub async fn authorization_url(&self, pending: &PendingLogin) -> Result<Url, OidcError> {
        let mut url = self.endpoints().await?.authorization.clone();
        let mut scope = String::from("openid");
        for s in &self.config.extra_scopes {
            scope.push(' ');
            scope.push_str(s);
        }
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.config.client_id)
            .append_pair("redirect_uri", &self.config.redirect_uri)
            .append_pair("scope", &scope)
            .append_pair("state", &pending.state)
            .append_pair("nonce", &pending.nonce)
            .append_pair("code_challenge", &pending.challenge())
            .append_pair("code_challenge_method", "S256");
        Ok(url)
    }

    /// Exchanges `code` (from the callback of `pending`) at the token endpoint, and
    /// verifies the ID token it answers as a pasted token is verified (issuer,
    /// audience = client id, expiry, signature) and its nonce.
    pub async fn finish(&self, pending: &PendingLogin, code: &str) -> Result<Identity, OidcError> {
        let url = self.endpoints().await?.token.clone();
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &self.config.redirect_uri),
            ("client_id", &self.config.client_id),
            ("code_verifier", &pending.verifier),
        ];
        let mut request = self.client.post(url.clone()).form(&form);
        if let Some(secret) = &self.config.client_secret {
            // RFC 6749 2.3.1: both parts form-encoded before Basic.
            let enc =
                |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            request = request.basic_auth(enc(&self.config.client_id), Some(enc(secret)));
        }
        let (status, body) = fetch::send_bounded(request, &url, MAX_TOKEN_RESPONSE_BYTES).await?;
        if !status.is_success() {
            let why = serde_json::from_slice::<TokenError>(&body)
                .ok()
                .and_then(|e| {
                    let error = e.error?;
                    Some(match e.error_description {
                        Some(d) => format!("{error}: {d}"),
                        None => error,
                    })
                })
                .unwrap_or_else(|| format!("HTTP status {status}"));
            return Err(OidcError::TokenEndpoint(one_line(&why, 200)));
        }
        let answer: TokenAnswer =
            serde_json::from_slice(&body).map_err(|e| OidcError::BadDocument {
                url: url.to_string(),
                reason: format!("not a token response: {e}"),
            })?;
        let id_token = answer.id_token.ok_or_else(|| OidcError::BadDocument {
            url: url.to_string(),
            reason: "no id_token".into(),
        })?;
        let identity = self.verifier.verify(&id_token).await?;
        check_nonce(&identity, &pending.nonce)?;
        Ok(identity)
    }
}

/// Refuses an ID token whose `nonce` is not `expected` (OIDC Core 3.1.3.7, 11): a
/// token from another login replayed into this one.
pub fn check_nonce(identity: &Identity, expected: &str) -> Result<(), OidcError> {
    match identity.claims.get("nonce").and_then(|n| n.as_str()) {
        Some(n) if n == expected => Ok(()),
        _ => Err(OidcError::WrongNonce),
    }
}

/// `s` as one line of at most `max` characters (control characters as spaces, "..."
/// after a cut): what an issuer or a browser said, shown as text. Only the first
/// `max + 1` characters are looked at, however long `s` is.
pub fn one_line(s: &str, max: usize) -> String {
    let mut chars = s.chars();
    let mut line: String = chars
        .by_ref()
        .take(max)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if chars.next().is_some() {
        line.push_str("...");
    }
    line
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_make_the_redirect_uri_and_bad_ones_are_one_line_naming_the_flag() {
        let issuer = OidcConfig::new("https://login.example.org", "a");
        let c = LoginConfig::from_flags(&issuer, "web", "https://h.example:7879/", None).unwrap();
        assert_eq!(c.redirect_uri, "https://h.example:7879/login/callback");
        assert!(c.client_secret.is_none());
        for bad in [
            "http://h",
            "https://",
            "https://h/x",
            "https://u@h",
            "https://h?x",
        ] {
            let e = LoginConfig::from_flags(&issuer, "web", bad, None).unwrap_err();
            assert!(e.starts_with("--public-url"), "{bad}: {e}");
        }
        let e = LoginConfig::from_flags(&issuer, "", "https://h", None).unwrap_err();
        assert!(e.starts_with("--oidc-client-id"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, " s3cret\n").unwrap();
        let c = LoginConfig::from_flags(&issuer, "web", "https://h", Some(&file)).unwrap();
        assert_eq!(c.client_secret.as_deref(), Some("s3cret"));
        std::fs::write(&file, "\n").unwrap();
        let e = LoginConfig::from_flags(&issuer, "web", "https://h", Some(&file)).unwrap_err();
        assert!(e.ends_with(": empty") && !e.contains('\n'), "{e}");
        let gone = dir.path().join("gone");
        let e = LoginConfig::from_flags(&issuer, "web", "https://h", Some(&gone)).unwrap_err();
        assert!(
            e.starts_with("--oidc-client-secret-file") && e.contains("gone"),
            "{e}"
        );
    }

    use super::*;

    #[test]
    fn the_challenge_is_rfc_7636s_s256() {
        // RFC 7636, appendix B.
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        let p = PendingLogin::new();
        assert_eq!(p.verifier.len(), 43);
        assert_ne!(p.state, PendingLogin::new().state);
    }

    #[test]
    fn a_missing_or_other_nonce_is_refused() {
        let id = |claims: serde_json::Value| Identity {
            subject: "s".into(),
            expires: 1,
            issuer: "i".into(),
            claims: claims.as_object().unwrap().clone(),
        };
        assert!(check_nonce(&id(serde_json::json!({"nonce": "n"})), "n").is_ok());
        assert_eq!(
            check_nonce(&id(serde_json::json!({"nonce": "m"})), "n"),
            Err(OidcError::WrongNonce)
        );
        assert_eq!(
            check_nonce(&id(serde_json::json!({})), "n"),
            Err(OidcError::WrongNonce)
        );
        assert_eq!(
            check_nonce(&id(serde_json::json!({"nonce": 1})), "1"),
            Err(OidcError::WrongNonce)
        );
        assert_eq!(one_line("a\nb", 200), "a b");
    }
}
