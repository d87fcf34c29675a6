//! Fetching the issuer's discovery document and JWKS: bounded in time and size, and
//! only from URLs [`check_url`] allows.

use reqwest::{header, redirect, Certificate, Client, Url};
use serde::Deserialize;

use crate::config::check_url;
use crate::error::shorten;
use crate::{OidcConfig, OidcError, HTTP_TIMEOUT, MAX_DOCUMENT_BYTES};

/// The HTTP client for one issuer.
pub(crate) fn client(config: &OidcConfig, https_only: bool) -> Result<Client, OidcError> {
    let mut builder = Client::builder()
        .timeout(HTTP_TIMEOUT)
        .connect_timeout(HTTP_TIMEOUT)
        // A redirect would lead the fetch past the URL checks; issuers serve their
        // discovery document and JWKS where they say they do.
        .redirect(redirect::Policy::none())
        .https_only(https_only);
    if let Some(pem) = &config.extra_ca_pem {
        let certs = Certificate::from_pem_bundle(pem.as_bytes())
            .map_err(|e| OidcError::InvalidCaCertificate(error_chain(&e)))?;
        if certs.is_empty() {
            return Err(OidcError::InvalidCaCertificate(
                "no CERTIFICATE block in the PEM".into(),
            ));
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder
        .build()
        .map_err(|e| OidcError::HttpClient(error_chain(&e)))
}

/// The part of the discovery document the verifier and the login use.
#[derive(Deserialize)]
pub(crate) struct Discovery {
    issuer: String,
    jwks_uri: String,
    /// Where a browser logs in (the login only).
    pub(crate) authorization_endpoint: Option<String>,
    /// Where a login's code is exchanged (the login only).
    pub(crate) token_endpoint: Option<String>,
}

/// Where the issuer publishes its keys: the discovery document's `jwks_uri`, after
/// checking that the document speaks for the configured issuer.
pub(crate) async fn discover(client: &Client, issuer: &str) -> Result<Url, OidcError> {
    let doc = discover_document(client, issuer).await?;
    check_url(&doc.jwks_uri, issuer.starts_with("https:"))
}

/// The issuer's discovery document, once it is checked to speak for `issuer`.
pub(crate) async fn discover_document(
    client: &Client,
    issuer: &str,
) -> Result<Discovery, OidcError> {
    // OpenID Connect Discovery 1.0, section 4: the issuer without its trailing slash,
    // then the well-known path.
    let url = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let url = check_url(&url, issuer.starts_with("https:"))?;
    let body = get_bounded(client, &url).await?;
    let doc: Discovery = serde_json::from_slice(&body).map_err(|e| OidcError::BadDocument {
        url: url.to_string(),
        reason: format!("not a discovery document: {e}"),
    })?;
    // Section 4.3: the issuer in the document must be identical to the one asked
    // about, or a document could vouch for another issuer's keys.
    if doc.issuer != issuer {
        return Err(OidcError::IssuerMismatch {
            expected: issuer.to_owned(),
            found: shorten(&doc.issuer),
        });
    }
    Ok(doc)
}

/// The body of a successful GET of `url`, refused once it passes
/// [`MAX_DOCUMENT_BYTES`] (announced or actually sent).
pub(crate) async fn get_bounded(client: &Client, url: &Url) -> Result<Vec<u8>, OidcError> {
    let request = client
        .get(url.clone())
        .header(header::ACCEPT, "application/json");
    let (status, body) = send_bounded(request, url, MAX_DOCUMENT_BYTES).await?;
    if !status.is_success() {
        return Err(OidcError::IssuerUnreachable {
            url: url.to_string(),
            reason: format!("HTTP status {status}"),
        });
    }
    Ok(body)
}

/// Sends `request` (to `url`) and reads its answer's status and body, refused once
/// the body passes `max` bytes (announced or actually sent). Within the client's
/// timeout, whatever the status: a token endpoint's 400 carries its reason.
pub(crate) async fn send_bounded(
    request: reqwest::RequestBuilder,
    url: &Url,
    max: usize,
) -> Result<(reqwest::StatusCode, Vec<u8>), OidcError> {
    let unreachable = |reason: String| OidcError::IssuerUnreachable {
        url: url.to_string(),
        reason,
    };
    let too_large = || OidcError::BadDocument {
        url: url.to_string(),
        reason: format!("larger than {max} bytes"),
    };
    let mut response = request
        .header(header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| unreachable(error_chain(&e.without_url())))?;
    let status = response.status();
    if response
        .content_length()
        .is_some_and(|len| len > max as u64)
    {
        return Err(too_large());
    }
    // Read chunk by chunk rather than `bytes()`: a body sent without a length must
    // not grow past the bound either.
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| unreachable(error_chain(&e.without_url())))?
    {
        if body.len() + chunk.len() > max {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok((status, body))
}

/// An error and its sources on one line: reqwest's own Display ("error sending
/// request") hides the cause (refused, timed out, certificate unknown).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}
