//! The few requests `object_store` cannot make with what hetch needs on them, made
//! here and signed with `object_store`'s own signers: S3's multipart creation with
//! metadata, S3's object tagging (where a multipart object's BLAKE3 goes), and Azure's
//! Put Block List with metadata. Retried with backoff on throttling, server errors and
//! lost connections, as `object_store` retries its own.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::aws::AmazonS3;
use object_store::azure::MicrosoftAzure;
use sha2::Digest as _;

use crate::error::ObjectError;

/// Tries of one request before it fails.
const TRIES: u32 = 8;

/// How a request is signed, and where the bucket is.
#[derive(Clone)]
pub(crate) struct Direct {
    pub(crate) signer: Signer,
    /// Path-style URL of the bucket or container (`ENDPOINT/BUCKET`).
    pub(crate) base_url: String,
    pub(crate) http: reqwest::Client,
}

/// The store's own credentials and signer.
#[derive(Clone)]
pub(crate) enum Signer {
    /// SigV4 with the store's credentials (none: unsigned requests).
    S3 {
        store: Arc<AmazonS3>,
        region: String,
        signed: bool,
    },
    /// Shared key, SAS or bearer token, as the store has it.
    Azure {
        store: Arc<MicrosoftAzure>,
        account: String,
    },
}

/// A request's answer: its status and body.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: String,
}

impl Direct {
    /// The URL of `key` (encoded as object_store encodes it) with `query`.
    pub(crate) fn url(&self, key: &str, query: &str) -> String {
        format!(
            "{}/{}?{query}",
            self.base_url,
            crate::bucket::encode_key(key)
        )
    }

    /// Sends `method url` with `headers` and `body`, signed; a success's answer, or
    /// the error the store's answer makes (`failed`: what to call an answer that is
    /// neither). Throttling, server errors and lost connections are tried again.
    pub(crate) async fn send(
        &self,
        method: http::Method,
        url: &str,
        headers: &[(String, String)],
        body: Bytes,
        failed: impl Fn(Option<Answer>, String) -> ObjectError,
    ) -> Result<Answer, ObjectError> {
        let mut backoff = Duration::from_millis(200);
        let mut tries = 0;
        loop {
            tries += 1;
            let req = self
                .signed(method.clone(), url, headers, body.clone())
                .await;
            let req = match req {
                Ok(r) => r,
                Err(e) => return Err(failed(None, e)),
            };
            // (A SAS signs by adding to the query: the URL is the signed request's.)
            let rb = self
                .http
                .request(method.clone(), req.uri().to_string())
                .headers(req.headers().clone())
                .body(body.clone());
            let (status, text) = match rb.send().await {
                Ok(r) => (Some(r.status()), r.text().await.unwrap_or_default()),
                Err(e) => (None, e.to_string()),
            };
            match status {
                Some(st) if st.is_success() => {
                    return Ok(Answer {
                        status: st.as_u16(),
                        body: text,
                    })
                }
                Some(st) if !(st.is_server_error() || st.as_u16() == 429) => {
                    let a = Answer {
                        status: st.as_u16(),
                        body: text.clone(),
                    };
                    return Err(failed(Some(a), text));
                }
                _ if tries >= TRIES => return Err(failed(None, text)),
                _ => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(15));
                }
            }
        }
    }

    /// The request, signed.
    async fn signed(
        &self,
        method: http::Method,
        url: &str,
        headers: &[(String, String)],
        body: Bytes,
    ) -> Result<object_store::client::HttpRequest, String> {
        let mut b = http::Request::builder().method(method).uri(url);
        for (k, v) in headers {
            b = b.header(k.as_str(), v.as_str());
        }
        let b = b.header("content-length", body.len().to_string());
        let mut req = b
            .body(object_store::client::HttpRequestBody::from(body.clone()))
            .map_err(|e| e.to_string())?;
        match &self.signer {
            Signer::S3 { signed: false, .. } => {}
            Signer::S3 { store, region, .. } => {
                let cred = store
                    .credentials()
                    .get_credential()
                    .await
                    .map_err(|e| e.to_string())?;
                // An empty body is sent unsigned (as the upload's creation always was);
                // a body is covered by its SHA-256, which S3 asks of some requests.
                let sha = (!body.is_empty()).then(|| sha2::Sha256::digest(&body).to_vec());
                object_store::aws::AwsAuthorizer::new(&cred, "s3", region)
                    .authorize(&mut req, sha.as_deref());
            }
            Signer::Azure { store, account } => {
                let cred = store
                    .credentials()
                    .get_credential()
                    .await
                    .map_err(|e| e.to_string())?;
                object_store::azure::AzureAuthorizer::new(&cred, account).authorize(&mut req);
            }
        }
        Ok(req)
    }
}
