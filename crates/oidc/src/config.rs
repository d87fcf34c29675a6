//! What the operator configures, and the check of URLs the verifier will fetch.

use reqwest::Url;

use crate::OidcError;

/// Which issuer to trust and which audience its tokens must name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcConfig {
    /// The issuer identifier, exactly as the tokens' `iss` and the discovery document's
    /// `issuer` spell it (e.g. `https://login.example.org/realms/hetch`). Must be
    /// `https://`, or `http://` on `127.0.0.1`, `[::1]` or `localhost`.
    pub issuer: String,
    /// The audience the service answers to: a token's `aud` must be it or contain it.
    pub audience: String,
    /// Extra trusted CA certificates (PEM, one or more) for the HTTPS connections to
    /// the issuer, for a site with a private CA; the system's roots stay trusted.
    pub extra_ca_pem: Option<String>,
}

impl OidcConfig {
    /// A configuration with the system's CA roots only.
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>) -> Self {
        Self {
            issuer: issuer.into(),
            audience: audience.into(),
            extra_ca_pem: None,
        }
    }

    /// The issuer of `--oidc-issuer URL --oidc-audience AUD [--oidc-ca FILE]`, if
    /// both were given; an unreadable CA file is a one-line error naming it.
    pub fn from_flags(
        issuer: Option<&str>,
        audience: Option<&str>,
        ca: Option<&std::path::Path>,
    ) -> Result<Option<Self>, String> {
        let (Some(issuer), Some(audience)) = (issuer, audience) else {
            return Ok(None);
        };
        let cfg = OidcConfig::new(issuer, audience);
        Ok(Some(match ca {
            Some(ca) => {
                let pem = std::fs::read_to_string(ca)
                    .map_err(|e| format!("--oidc-ca {}: {e}", ca.display()))?;
                cfg.with_extra_ca_pem(pem)
            }
            None => cfg,
        }))
    }

    /// The same configuration, also trusting the CA certificate(s) in `pem`.
    pub fn with_extra_ca_pem(mut self, pem: impl Into<String>) -> Self {
        self.extra_ca_pem = Some(pem.into());
        self
    }
}

/// Whether `url` is one the verifier may fetch: `https://`, or plain `http://` on the
/// loopback names only (a local or test issuer), where nobody on the path can forge the
/// keys. `https_required` is set for documents named by an `https://` issuer, which must
/// not send the verifier to plain HTTP.
pub(crate) fn check_url(url: &str, https_required: bool) -> Result<Url, OidcError> {
    let refuse = |reason: &str| OidcError::InvalidUrl {
        url: crate::error::shorten(url),
        reason: reason.to_owned(),
    };
    let parsed = Url::parse(url).map_err(|e| refuse(&e.to_string()))?;
    match parsed.scheme() {
        "https" => {}
        "http" if !https_required && is_loopback(&parsed) => {}
        "http" if https_required => return Err(refuse("must be https:// as the issuer is")),
        "http" => {
            return Err(refuse(
                "must be https:// (plain http:// only on 127.0.0.1, [::1] or localhost)",
            ))
        }
        _ => return Err(refuse("must be https://")),
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(refuse("has no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(refuse("must not carry credentials"));
    }
    Ok(parsed)
}

fn is_loopback(url: &Url) -> bool {
    // `Url` has already normalised the host: lower case, IPv4 in dotted quads, IPv6
    // in brackets.
    matches!(url.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"))
}

#[cfg(test)]
mod tests {
    use super::check_url;

    #[test]
    fn https_anywhere_http_on_loopback_only() {
        for good in [
            "https://login.example.org/realms/x",
            "http://127.0.0.1:8080",
            "http://[::1]:9/x",
            "http://localhost/",
            "http://LOCALHOST:1",
        ] {
            assert!(check_url(good, false).is_ok(), "{good}");
        }
        for bad in [
            "http://login.example.org",
            "http://10.0.0.1",
            "http://127.0.0.1.example.org",
            "ftp://127.0.0.1",
            "https://user:pw@example.org",
            "not a url",
        ] {
            assert!(check_url(bad, false).is_err(), "{bad}");
        }
        assert!(check_url("http://127.0.0.1/jwks", true).is_err());
        assert!(check_url("https://example.org/jwks", true).is_ok());
    }
}
