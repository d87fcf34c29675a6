//! A client of the transfer service's HTTPS API, for `hetch job` and `hetch worker`:
//! the token as for `cp`, and the service's key pinned on first use as for `cp`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail};
use hetch_net::{KnownHosts, TlsClient, Trust};
use hetch_service::api::JobView;
use serde_json::Value;

/// The service's API, as this client reaches it.
pub struct Client {
    http: reqwest::Client,
    tls: TlsClient,
    base: String,
    token: String,
    host: String,
}

impl Client {
    /// A client of the service at `service` (`HOST:PORT`), its key pinned by
    /// `fingerprint` or the known-hosts file, presenting `token`.
    pub async fn new(
        service: &str,
        fingerprint: Option<hetch_net::Fingerprint>,
        known_hosts: Option<PathBuf>,
        token: Vec<u8>,
    ) -> anyhow::Result<Client> {
        let token = String::from_utf8(token).map_err(|_| anyhow!("the token is not text"))?;
        let trust = match fingerprint {
            Some(fp) => Trust::Pinned(fp),
            None => Trust::KnownHosts(KnownHosts {
                path: known_hosts.unwrap_or_else(KnownHosts::default_path),
            }),
        };
        let tls = TlsClient::new(service, trust)?;
        if tls.pinned().is_none() {
            // First use: one handshake through hetch's own connect learns the key
            // (checking the server holds it); from then on the HTTPS client's
            // connections must present that same key.
            hetch_net::connect(service, &Default::default(), Some(&tls)).await?;
        }
        let config = tls
            .rustls_config()
            .expect("the key is known after a handshake");
        let http = reqwest::Client::builder()
            .use_preconfigured_tls((*config).clone())
            .connect_timeout(Duration::from_secs(30))
            .timeout(Duration::from_secs(120))
            // Well before the service closes an idle connection (its --idle-timeout,
            // 60 s by default), so that a call never goes out on one it is closing.
            .pool_idle_timeout(Duration::from_secs(20))
            .build()?;
        Ok(Client {
            http,
            tls,
            base: format!("https://{service}"),
            token,
            host: service.to_string(),
        })
    }

    /// Calls the API; a 4xx or 5xx becomes the service's one-line error.
    pub async fn call(&self, post: bool, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let req = match post {
            true => self
                .http
                .post(url)
                .json(&body.unwrap_or(Value::Object(Default::default()))),
            false => self.http.get(url),
        };
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| Unreachable(format!("{}: {}", self.host, root_cause(&e))))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| Unreachable(format!("{}: {}", self.host, root_cause(&e))))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|_| anyhow!("{}: not a hetch service (answered {status})", self.host))?;
        // It answered as the service does: its key can be trusted from now on.
        if let Some(fp) = self.tls.record_learned()? {
            eprintln!(
                "hetch: first connection to {}: trusting its key {fp} from now on",
                self.host
            );
        }
        if !status.is_success() {
            let e = v["error"].as_str().unwrap_or("(no error message)");
            let line = format!("{}: {e}", self.host);
            if status.as_u16() == 401 || status.as_u16() == 403 {
                return Err(NotAllowed(line).into());
            }
            bail!("{line}");
        }
        Ok(v)
    }

    /// The service, `HOST:PORT`.
    pub fn service(&self) -> &str {
        &self.host
    }

    /// The service's key, once pinned.
    pub fn pinned(&self) -> Option<hetch_net::Fingerprint> {
        self.tls.pinned()
    }

    /// The token this client presents (handed to a unit's own process only).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether `token` is the one this client presents to the service.
    pub fn is_token(&self, token: &[u8]) -> bool {
        hetch_net::tokens_equal(token, self.token.as_bytes())
    }

    /// Job `id`.
    pub async fn job(&self, id: &str) -> anyhow::Result<JobView> {
        let v = self
            .call(false, &format!("/api/jobs/{}", path_segment(id)?), None)
            .await?;
        Ok(serde_json::from_value(v)?)
    }
}

/// An error that is one line, of a kind callers tell apart with `anyhow`'s `is`.
macro_rules! line_error {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name(pub String);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::error::Error for $name {}
    };
}

line_error!(
    /// The service refused the caller (401 or 403): asking again will not help.
    NotAllowed
);
line_error!(
    /// The service could not be reached, or its answer was cut off: asking again
    /// later may succeed.
    Unreachable
);

/// The innermost error of a request: the one that says what went wrong.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// A job id as one path segment (ids are hex; anything else is refused here).
pub fn path_segment(id: &str) -> anyhow::Result<&str> {
    match !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        true => Ok(id),
        false => bail!("{id:?} is not a job id"),
    }
}
