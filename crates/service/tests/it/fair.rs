//! Fair shares of the service: a user holding many authenticated connections, a user
//! sending requests in a loop, and an idle flood from many addresses each leave the
//! operator, other users, browsers and workers working (issue 55).

use std::time::Duration;

use crate::common::{self, idle_flood, planner, Api};
use hetch_service::fair::FairLimits;
use hetch_service::listen::ConnLimits;
use hetch_service::rate::RequestRate;
use hetch_testkit::oidc_issuer::{claims, ec_key, sign, TestIssuer, AUDIENCE};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A new connection to the service from `from`, TLS done (within 10 s, else `None`).
async fn connect_from(api: &Api, from: &str) -> Option<Tls> {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let tls = tokio_rustls::TlsConnector::from(api.tls.clone());
    let name = rustls::pki_types::ServerName::try_from("hetch").unwrap();
    let shake = async {
        tls.connect(name, sock.connect(api.addr.parse().ok()?).await.ok()?)
            .await
            .ok()
    };
    tokio::time::timeout(Duration::from_secs(10), shake)
        .await
        .ok()
        .flatten()
}

/// Sends `GET path` with `token` on `conn`, keeping it alive, and reads the answer's
/// status and body (within 10 s, else `None`).
async fn request(conn: &mut Tls, path: &str, token: &str) -> Option<(u16, String)> {
    let exchange = async {
        let head =
            format!("GET {path} HTTP/1.1\r\nhost: hetch\r\nauthorization: Bearer {token}\r\n\r\n");
        conn.write_all(head.as_bytes()).await.ok()?;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = conn.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).to_string();
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                continue;
            };
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_string)
                })
                .and_then(|v| v.trim().parse::<usize>().ok())?;
            if body.len() >= length {
                let status = head.split(' ').nth(1)?.parse().ok()?;
                return Some((status, body.to_string()));
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
}

/// The value of the metric sample `line_start` (name and labels) in `/metrics`.
async fn metric(api: &Api, line_start: &str) -> u64 {
    let resp = api
        .http
        .get(format!("{}/metrics", api.base))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    let text = resp.text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line_start} in\n{text}"))
}

/// A client of its own (a new connection pool), with a bound on each request so that
/// a service that lets it wait fails the test rather than hanging it.
fn fresh(api: &Api) -> Api {
    let http = reqwest::Client::builder()
        .use_preconfigured_tls((*api.tls).clone())
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    api.with_client(http)
}

/// A service letting in the users of a test issuer, with `limits`; the tokens of two
/// users, mallory and alice.
async fn with_users(
    dir: &std::path::Path,
    limits: ConnLimits,
) -> (Api, tokio::task::JoinHandle<()>, TestIssuer, String, String) {
    let key = ec_key("k1");
    let issuer = TestIssuer::start(&[&key]).await;
    let oidc = hetch_oidc::OidcConfig::new(&issuer.url, AUDIENCE);
    let url = format!("sqlite://{}", dir.join("jobs.db").display());
    std::fs::create_dir_all(dir.join("root")).unwrap();
    common::tree(&dir.join("root"));
    let (api, task) = common::start_configured(dir, &url, planner(), |c| {
        c.oidc = Some(oidc);
        c.limits = limits;
    })
    .await;
    let user = |sub: &str| {
        let mut c = claims(&issuer.url);
        c["sub"] = json!(sub);
        sign(&key, &c)
    };
    let (mallory, alice) = (user("mallory"), user("alice"));
    (api, task, issuer, mallory, alice)
}

/// One user opens many more authenticated keep-alive connections than the whole
/// service has, and keeps them: each newcomer of theirs takes the place of their own
/// connection idle the longest, so they never hold more than their cap, while the
/// operator, another user, a browser and a worker with new connections all get in.
/// (Before: the first `max_connections` held everything and the rest waited.)
#[test]
fn a_users_flood_of_authenticated_connections_leaves_everyone_else_working() {
    let dir = tempfile::tempdir().unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let limits = ConnLimits {
            max_connections: 24,
            fair: FairLimits {
                per_user: 4,
                per_address: 16,
                operator_reserve: 6,
            },
            ..ConnLimits::default()
        };
        let (api, _task, _issuer, mallory, alice) = with_users(dir.path(), limits).await;

        let flood = 40;
        let mut held = Vec::new();
        for i in 0..flood {
            let mut conn = connect_from(&api, "127.0.0.2")
                .await
                .unwrap_or_else(|| panic!("connection {i} of the flood not served"));
            let answer = request(&mut conn, "/api/jobs", &mallory).await;
            let (status, body) = answer.unwrap_or_else(|| panic!("request {i} not answered"));
            assert_eq!(status, 200, "request {i}: {body}");
            held.push(conn);
        }

        // Everyone else, each on a new connection.
        let (s, jobs) = fresh(&api).get("/api/jobs").await;
        assert_eq!(s, 200, "the operator: {jobs}");
        let (s, jobs) = fresh(&api)
            .call("GET", "/api/jobs", None, Some(&alice))
            .await;
        assert_eq!(s, 200, "another user: {jobs}");
        let browser = fresh(&api);
        let cookie = crate::web::log_in(&browser, &browser.token).await;
        let snap = crate::web::snapshot_where(&browser, &cookie, |v| v["jobs"].is_array()).await;
        assert!(snap["jobs"].is_array(), "{snap}");
        let worker = fresh(&api);
        let (s, claimed) = worker
            .post("/api/work/claim", json!({"worker": "w1", "max": 1}))
            .await;
        assert_eq!(s, 200, "a worker: {claimed}");

        // Each of mallory's connections past her cap took her oldest's place, which
        // the service closed.
        let user = "hetch_service_connections_displaced_total{cap=\"user\"}";
        assert_eq!(metric(&api, user).await, flood - 4);
        for (i, conn) in held.into_iter().take(flood as usize - 4).enumerate() {
            let mut c = common::IdleConn::Tls(Box::new(conn));
            assert!(
                c.closed_by_service().await,
                "mallory's connection {i} stayed open"
            );
        }
    });
}

/// A user's requests past their rate are answered 429 with Retry-After, and only
/// theirs: another user and the service's token are not held back.
#[test]
fn a_users_requests_past_their_rate_are_refused_and_nobody_elses() {
    let dir = tempfile::tempdir().unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let limits = ConnLimits {
            // One request back per 100 s: no refill within the test.
            rate: RequestRate {
                per_second: 0.01,
                burst: 5.0,
            },
            ..ConnLimits::default()
        };
        let (api, _task, _issuer, mallory, alice) = with_users(dir.path(), limits).await;
        let mut statuses = Vec::new();
        for _ in 0..8 {
            let resp = api
                .http
                .get(format!("{}/api/jobs", api.base))
                .bearer_auth(&mallory)
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            if status == 429 {
                let after: u64 = resp.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(after >= 1, "Retry-After {after}");
                let body: Value = resp.json().await.unwrap();
                assert!(
                    body["error"]
                        .as_str()
                        .unwrap()
                        .contains("too many requests"),
                    "{body}"
                );
            }
            statuses.push(status);
        }
        assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
        for _ in 0..5 {
            let (s, v) = api.call("GET", "/api/jobs", None, Some(&alice)).await;
            assert_eq!(s, 200, "{v}");
        }
        for _ in 0..50 {
            let (s, v) = api.get("/api/jobs").await;
            assert_eq!(s, 200, "{v}");
        }
        let refused = "hetch_service_requests_refused_total{limit=\"rate\"}";
        assert_eq!(metric(&api, refused).await, 3);
    });
}

/// Idle connections from twenty addresses fill every unauthenticated place (each
/// address within its own cap); a client from another address still gets in, since
/// its newcomer takes back the oldest place of an address holding the most.
/// (Before: refused at once while the flood held the places.)
#[test]
fn an_idle_flood_from_twenty_addresses_leaves_a_client_working() {
    let dir = tempfile::tempdir().unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let limits = ConnLimits {
            pre_auth: hetch_net::PreAuthLimits {
                max_total: 64,
                max_per_address: 8,
                // Longer than the flood takes to open: its places stay taken.
                deadline: Duration::from_secs(120),
                ..Default::default()
            },
            ..ConnLimits::default()
        };
        let (api, _task, _issuer, _, _) = with_users(dir.path(), limits).await;
        let mut flood = Vec::new();
        for a in 2..=21 {
            flood.extend(idle_flood(&api, &format!("127.0.0.{a}"), 8).await);
        }
        assert_eq!(flood.len(), 160, "each address within its cap is let in");
        let client = fresh(&api);
        let (s, jobs) = client.get("/api/jobs").await;
        assert_eq!(s, 200, "{jobs}");
        let taken = "hetch_service_connections_displaced_total{cap=\"unauthenticated\"}";
        assert_eq!(metric(&client, taken).await, 160 - 64 + 1);
    });
}
