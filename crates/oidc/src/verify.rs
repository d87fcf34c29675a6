//! [`OidcVerifier`]: the key cache, its rate-limited refresh, and the checks of one
//! token.

use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::Validation;
use reqwest::{Client, Url};
use serde::{Deserialize, Deserializer};

use crate::config::check_url;
use crate::error::shorten;
use crate::jwks::{self, Keys};
use crate::{
    fetch, token, Clock, Identity, OidcConfig, OidcError, SystemClock, LEEWAY_SECS,
    REFRESH_INTERVAL,
};

/// Verifies bearer tokens of one issuer for one audience. Share one per issuer (it is
/// `Send + Sync`; wrap it in an `Arc`): the key cache and the refresh rate limit live
/// in it.
pub struct OidcVerifier {
    config: OidcConfig,
    client: Client,
    clock: Arc<dyn Clock>,
    /// The keys of the last successful JWKS fetch; read by every verification.
    keys: RwLock<Arc<Keys>>,
    /// Held across a refresh, so that concurrent verifications of unknown kids wait
    /// for the one fetch in flight instead of starting their own.
    refresh: tokio::sync::Mutex<RefreshState>,
}

#[derive(Default)]
struct RefreshState {
    /// When the last fetch started, successful or not.
    last_attempt: Option<Instant>,
    /// The discovered `jwks_uri`, kept once found.
    jwks_uri: Option<Url>,
    /// Why the last fetch failed, if it did: returned again while the rate limit
    /// holds, so that an unreachable issuer is reported as such, not as "unknown key".
    last_error: Option<OidcError>,
}

impl fmt::Debug for OidcVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OidcVerifier")
            .field("issuer", &self.config.issuer)
            .field("audience", &self.config.audience)
            .finish_non_exhaustive()
    }
}

impl OidcVerifier {
    /// A verifier for `config`, with the system clock. Checks the configuration (issuer
    /// URL scheme and host, audience, CA certificate) but makes no request: the issuer
    /// is first asked on the first token, or by [`OidcVerifier::refresh`].
    pub fn new(config: OidcConfig) -> Result<Self, OidcError> {
        Self::with_clock(config, Arc::new(SystemClock))
    }

    /// As [`OidcVerifier::new`], with `clock` timing the refresh rate limit.
    pub fn with_clock(config: OidcConfig, clock: Arc<dyn Clock>) -> Result<Self, OidcError> {
        check_url(&config.issuer, false)?;
        if config.audience.is_empty() {
            return Err(OidcError::EmptyAudience);
        }
        let client = fetch::client(&config, config.issuer.starts_with("https:"))?;
        Ok(Self {
            config,
            client,
            clock,
            keys: RwLock::new(Arc::new(Keys::new())),
            refresh: tokio::sync::Mutex::new(RefreshState::default()),
        })
    }

    /// The configuration this verifier enforces.
    pub fn config(&self) -> &OidcConfig {
        &self.config
    }

    /// Fetches the discovery document (first time only) and the JWKS now, whatever the
    /// rate limit, and returns how many usable keys the issuer publishes. For the
    /// service to check its configuration at start-up; verification refreshes by
    /// itself.
    pub async fn refresh(&self) -> Result<usize, OidcError> {
        let mut state = self.refresh.lock().await;
        self.fetch_keys(&mut state).await
    }

    /// Verifies `bearer` (the token alone, without the `Bearer ` scheme) and returns
    /// whom it names.
    pub async fn verify(&self, bearer: &str) -> Result<Identity, OidcError> {
        // Size, shape and algorithm first: nothing below runs for `none` or HS*.
        let header = token::header(bearer)?;
        let key = match self.key(&header.kid) {
            Some(key) => key,
            None => {
                self.refresh_if_due().await?;
                self.key(&header.kid).ok_or_else(|| OidcError::UnknownKey {
                    kid: shorten(&header.kid),
                })?
            }
        };
        if !key.algorithms.contains(&header.alg) {
            return Err(OidcError::KeyAlgorithmMismatch {
                kid: shorten(&header.kid),
                alg: format!("{:?}", header.alg),
            });
        }

        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_SECS;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.validate_aud = true;
        validation.set_audience(&[&self.config.audience]);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);

        let data = jsonwebtoken::decode::<Claims>(bearer, &key.decoding, &validation)
            .map_err(|e| self.refusal(e.into_kind(), &header.kid))?;
        let claims = data.claims;
        // Required above, so present here; checked again rather than unwrapped.
        let (Some(subject), Some(issuer), Some(expires)) = (claims.sub, claims.iss, claims.exp)
        else {
            return Err(OidcError::MissingClaim("sub".into()));
        };
        if subject.is_empty() {
            return Err(OidcError::EmptySubject);
        }
        Ok(Identity {
            subject,
            expires,
            issuer,
            claims: claims.other,
        })
    }

    fn key(&self, kid: &str) -> Option<Arc<jwks::Key>> {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        keys.get(kid).cloned()
    }

    /// Fetches the keys unless a fetch started less than [`REFRESH_INTERVAL`] ago.
    /// Within the interval, returns the error of that fetch if it failed.
    async fn refresh_if_due(&self) -> Result<(), OidcError> {
        let mut state = self.refresh.lock().await;
        if let Some(last) = state.last_attempt {
            if self.clock.now().saturating_duration_since(last) < REFRESH_INTERVAL {
                return state.last_error.clone().map_or(Ok(()), Err);
            }
        }
        self.fetch_keys(&mut state).await.map(drop)
    }

    async fn fetch_keys(&self, state: &mut RefreshState) -> Result<usize, OidcError> {
        state.last_attempt = Some(self.clock.now());
        let result = self.fetch_keys_now(state).await;
        state.last_error = result.as_ref().err().cloned();
        result
    }

    async fn fetch_keys_now(&self, state: &mut RefreshState) -> Result<usize, OidcError> {
        let jwks_uri = match &state.jwks_uri {
            Some(uri) => uri.clone(),
            None => fetch::discover(&self.client, &self.config.issuer).await?,
        };
        state.jwks_uri = Some(jwks_uri.clone());
        let body = fetch::get_bounded(&self.client, &jwks_uri).await?;
        let keys = jwks::parse(&body, jwks_uri.as_str())?;
        let count = keys.len();
        // Replaced whole: a key the issuer has withdrawn stops verifying.
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
        Ok(count)
    }

    /// The refusal for a `jsonwebtoken` error.
    fn refusal(&self, kind: ErrorKind, kid: &str) -> OidcError {
        match kind {
            ErrorKind::InvalidSignature => OidcError::BadSignature,
            ErrorKind::ExpiredSignature => OidcError::Expired,
            ErrorKind::ImmatureSignature => OidcError::NotYetValid,
            ErrorKind::InvalidAudience => OidcError::WrongAudience {
                expected: self.config.audience.clone(),
            },
            ErrorKind::InvalidIssuer => OidcError::WrongIssuer {
                expected: self.config.issuer.clone(),
            },
            ErrorKind::MissingRequiredClaim(claim) => OidcError::MissingClaim(claim),
            ErrorKind::InvalidClaimFormat(claim) => OidcError::InvalidClaim(claim),
            // The claims failed to parse as `Claims`: a claim of the wrong type, or a
            // payload that is no JSON object at all.
            ErrorKind::Json(_) => OidcError::InvalidClaim("set (sub, iss, exp or nbf)".into()),
            ErrorKind::InvalidEcdsaKey
            | ErrorKind::InvalidEddsaKey
            | ErrorKind::InvalidKeyFormat => OidcError::BadKey {
                kid: shorten(kid),
                reason: "not a valid public key".into(),
            },
            ErrorKind::InvalidRsaKey(reason) => OidcError::BadKey {
                kid: shorten(kid),
                reason: shorten(&reason),
            },
            ErrorKind::InvalidAlgorithm => OidcError::KeyAlgorithmMismatch {
                kid: shorten(kid),
                alg: "in the header".into(),
            },
            ErrorKind::Base64(_) | ErrorKind::Utf8(_) | ErrorKind::InvalidToken => {
                OidcError::Malformed("payload or signature is not valid base64url JSON".into())
            }
            other => OidcError::Malformed(shorten(&format!("{other:?}"))),
        }
    }
}

/// The claims the verifier reads. Options, so that an absent claim is reported by the
/// validation as missing; a claim of the wrong type fails deserialisation instead of
/// being taken as absent (the mistake of GHSA-h395-gr6q-cpjc).
#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    iss: Option<String>,
    #[serde(default, deserialize_with = "numeric_date")]
    exp: Option<u64>,
    #[serde(default, deserialize_with = "numeric_date")]
    #[allow(dead_code)] // Read for its type check; jsonwebtoken compares it to now.
    nbf: Option<u64>,
    /// The rest, for identity maps (a token is bounded in size by the request's).
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

/// A NumericDate (RFC 7519 2): seconds since the epoch, which may have a fraction.
fn numeric_date<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let seconds = f64::deserialize(d)?;
    if seconds.is_finite() && (0.0..u64::MAX as f64).contains(&seconds) {
        Ok(Some(seconds as u64))
    } else {
        Err(serde::de::Error::custom("NumericDate out of range"))
    }
}
