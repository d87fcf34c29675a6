//! What the service's API tests share: a service on a temporary directory and
//! database (SQLite, and PostgreSQL where it can be started), called over real HTTPS
//! with its key pinned.

#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use hetch_jobs::Planner;
use hetch_net::{TlsClient, Trust};
use hetch_oidc::OidcConfig;
use hetch_service::{Service, ServiceConfig};
use hetch_testkit::emulators::Emulator;
use serde_json::Value;

pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
    pub token: String,
    /// The workers' token.
    pub worker_token: String,
    /// `HOST:PORT` of the service.
    pub addr: String,
    /// TLS to the service, its key pinned (for raw connections).
    pub tls: std::sync::Arc<rustls::ClientConfig>,
}

impl Api {
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        let mut req = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url),
        };
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let v =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
        (status, v)
    }

    /// The same service through another HTTP client (new connections).
    pub fn with_client(&self, http: reqwest::Client) -> Api {
        Api {
            http,
            base: self.base.clone(),
            token: self.token.clone(),
            worker_token: self.worker_token.clone(),
            addr: self.addr.clone(),
            tls: self.tls.clone(),
        }
    }

    /// `GET path` with `token`, its answer as it came (not JSON: metrics, listings).
    pub async fn get_raw(&self, path: &str, token: &str) -> reqwest::Response {
        let url = format!("{}{path}", self.base);
        self.http.get(url).bearer_auth(token).send().await.unwrap()
    }

    /// Job `body` submitted with the service's token, once planned: its id.
    pub async fn submitted(&self, body: Value) -> String {
        let (s, job) = self.post("/api/jobs", body).await;
        assert_eq!(s, 201, "{job}");
        let id = job["id"].as_str().unwrap().to_string();
        self.planned(&id).await;
        id
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, None, Some(&self.token.clone()))
            .await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call("POST", path, Some(body), Some(&self.token.clone()))
            .await
    }

    /// Job `id` once it has left `planning`.
    pub async fn planned(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (status, job) = self.get(&format!("/api/jobs/{id}")).await;
            assert_eq!(status, 200, "{job}");
            if job["state"] != "planning" {
                return job;
            }
            assert!(Instant::now() < deadline, "job {id} still planning");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

pub async fn start(
    dir: &Path,
    db_url: &str,
    planner: Planner,
) -> (Api, tokio::task::JoinHandle<()>) {
    start_with(dir, db_url, planner, None).await
}

pub async fn start_with(
    dir: &Path,
    db_url: &str,
    planner: Planner,
    oidc: Option<OidcConfig>,
) -> (Api, tokio::task::JoinHandle<()>) {
    start_configured(dir, db_url, planner, |cfg| cfg.oidc = oidc).await
}

/// A service as [`start`] makes it, with `tweak` applied to its configuration.
pub async fn start_configured(
    dir: &Path,
    db_url: &str,
    planner: Planner,
    tweak: impl FnOnce(&mut ServiceConfig),
) -> (Api, tokio::task::JoinHandle<()>) {
    let mut cfg = ServiceConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        root: dir.join("root"),
        state_dir: dir.join("state"),
        db_url: db_url.to_string(),
        lease_ttl: Duration::from_secs(30),
        planner,
        // Attempts go again at once unless a test asks for waits (tests of them do).
        retries: hetch_service::Retries {
            attempts: 3,
            patience: hetch_service::Patience {
                first_ms: 0,
                most_ms: 0,
            },
        },
        oidc: None,
        limits: Default::default(),
        identities: None,
        webhooks: Default::default(),
        max_schedules: hetch_service::DEFAULT_MAX_SCHEDULES,
        // The schedules' tests run every second.
        min_schedule_interval: Duration::from_secs(1),
        retention: Default::default(),
        login: None,
    };
    tweak(&mut cfg);
    let svc = Service::bind(cfg).await.expect("service starts");
    let host = svc.addr.to_string();
    let tls = TlsClient::new(&host, Trust::Pinned(svc.fingerprint)).unwrap();
    let rustls = tls.rustls_config().expect("pinned");
    let http = reqwest::Client::builder()
        .use_preconfigured_tls((*rustls).clone())
        // The API never redirects; the web pages' redirects are what the tests check.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap().trim().to_string();
    let (token, worker_token) = (read(&svc.token_path), read(&svc.worker_token_path));
    let task = tokio::spawn(async move {
        svc.run().await.unwrap();
    });
    (
        Api {
            http,
            base: format!("https://{host}"),
            token,
            worker_token,
            addr: host,
            tls: rustls,
        },
        task,
    )
}

pub fn tree(root: &Path) {
    let run = root.join("run1");
    std::fs::create_dir_all(run.join("sub/deeper")).unwrap();
    for i in 0..25 {
        std::fs::write(run.join(format!("sub/f{i:02}")), vec![b'x'; i]).unwrap();
    }
    std::fs::write(run.join("sub/deeper/empty"), b"").unwrap();
    std::fs::write(run.join("big"), vec![7u8; 40]).unwrap();
    std::os::unix::fs::symlink("sub/f01", run.join("link")).unwrap();
}

pub fn planner() -> Planner {
    Planner {
        batch_files: 10,
        batch_bytes: u64::MAX,
        split_size: 32,
        range_size: 16,
        block_size: 8,
        ..Planner::default()
    }
}

pub fn on_each<F, Fut>(f: F)
where
    F: Fn(std::path::PathBuf, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    // PostgreSQL is a server: an integration test, where `bash test.sh` names it.
    let want = std::env::var("HETCH_DB").unwrap_or_else(|_| "sqlite".into());
    for backend in ["sqlite", "postgres"] {
        if !want.contains(backend) {
            continue;
        }
        eprintln!("--- on {backend}");
        let dir = tempfile::tempdir().unwrap();
        let url = match backend {
            "sqlite" => format!("sqlite://{}", dir.path().join("jobs.db").display()),
            _ => Emulator::shared_postgres()
                .create_database(&hetch_testkit::shared::unique_name("service-"))
                .expect("create database"),
        };
        std::fs::create_dir_all(dir.path().join("root")).unwrap();
        tree(&dir.path().join("root"));
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(f(dir.path().to_path_buf(), url));
    }
}

/// Opens `n` connections to the service from `from` that say nothing: the first half
/// complete their TLS handshake first, the rest stay half-open (TCP only). Those the
/// service closed at once (over its caps) are left out.
pub async fn idle_flood(api: &Api, from: &str, n: usize) -> Vec<IdleConn> {
    let addr: std::net::SocketAddr = api.addr.parse().unwrap();
    let tls = tokio_rustls::TlsConnector::from(api.tls.clone());
    let name = rustls::pki_types::ServerName::try_from("hetch").unwrap();
    let mut held = Vec::new();
    for i in 0..n {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let Ok(tcp) = sock.connect(addr).await else {
            continue;
        };
        if i % 2 == 1 {
            held.push(IdleConn::Tcp(tcp));
            continue;
        }
        let shake = tokio::time::timeout(Duration::from_secs(5), tls.connect(name.clone(), tcp));
        if let Ok(Ok(t)) = shake.await {
            held.push(IdleConn::Tls(Box::new(t)));
        }
    }
    held
}

pub enum IdleConn {
    Tcp(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>),
}

impl IdleConn {
    /// Waits until the service closes the connection (reads end or fail); false if it
    /// is still open after a minute (a liveness guard, not a measure of time).
    pub async fn closed_by_service(&mut self) -> bool {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 256];
        let read = async {
            loop {
                let n = match self {
                    IdleConn::Tcp(t) => t.read(&mut buf).await,
                    IdleConn::Tls(t) => t.read(&mut buf).await,
                };
                if !matches!(n, Ok(n) if n > 0) {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .is_ok()
    }
}
