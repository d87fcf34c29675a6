//! A webhook receiver over HTTPS on 127.0.0.1 (a certificate of a private CA, from
//! [`crate::oidc_issuer::private_ca_for`]) that records what it is sent and answers
//! each request with the next of its script: a status, never (it hangs), or a body of
//! a GiB written until the other side goes away. It counts connections too, so that
//! a test can tell one refused before connecting from one refused after.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the receiver does with a request.
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    /// Answers with this status and a short body.
    Status(u16),
    /// Reads the request, then never answers.
    Hang,
    /// Answers 200 with a body of a GiB, written until the other side goes away.
    Huge,
}

/// A request as the receiver got it.
#[derive(Debug, Clone)]
pub struct Received {
    /// Its headers, names in lower case.
    pub headers: HashMap<String, String>,
    /// Its body.
    pub body: Vec<u8>,
}

/// An HTTPS webhook receiver answering each request with the next of its script
/// (200 once the script is used up).
pub struct Receiver {
    /// `https://127.0.0.1:PORT/hook`.
    pub url: String,
    /// The CA its certificate chains to, PEM.
    pub ca_pem: String,
    got: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<VecDeque<Answer>>>,
    /// Bytes of a huge answer written so far.
    pub huge_sent: Arc<AtomicU64>,
    /// Whether writing a huge answer stopped (the other side went away, or all of
    /// it was written).
    pub huge_ended: Arc<AtomicBool>,
    /// TCP connections accepted so far.
    pub connections: Arc<AtomicU64>,
}

/// The length of a huge answer.
pub const HUGE: u64 = 1 << 30;

impl Receiver {
    /// A receiver on a port of its own, on the current runtime.
    pub async fn start(script: &[Answer]) -> Receiver {
        Receiver::start_for(script, &[]).await
    }

    /// [`Receiver::start`], its certificate also valid for the host names `names`
    /// (which a test's resolver points at 127.0.0.1).
    pub async fn start_for(script: &[Answer], names: &[&str]) -> Receiver {
        let (ca_pem, acceptor) = crate::oidc_issuer::private_ca_for(names);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let r = Receiver {
            url: format!("https://{addr}/hook"),
            ca_pem,
            got: Arc::default(),
            script: Arc::new(Mutex::new(script.iter().copied().collect())),
            huge_sent: Arc::default(),
            huge_ended: Arc::default(),
            connections: Arc::default(),
        };
        let (got, script) = (r.got.clone(), r.script.clone());
        let (sent, ended) = (r.huge_sent.clone(), r.huge_ended.clone());
        let connections = r.connections.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                connections.fetch_add(1, Ordering::SeqCst);
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    continue;
                };
                let (got, script) = (got.clone(), script.clone());
                let (sent, ended) = (sent.clone(), ended.clone());
                tokio::spawn(async move {
                    let Some(req) = read_request(&mut tls).await else {
                        return;
                    };
                    got.lock().unwrap().push(req);
                    let answer = script
                        .lock()
                        .unwrap()
                        .pop_front()
                        .unwrap_or(Answer::Status(200));
                    match answer {
                        Answer::Status(code) => {
                            let head = format!(
                                "HTTP/1.1 {code} X\r\ncontent-length: 7\r\nconnection: close\r\n\r\nanswer\n"
                            );
                            let _ = tls.write_all(head.as_bytes()).await;
                            let _ = tls.shutdown().await;
                        }
                        Answer::Hang => std::future::pending::<()>().await,
                        Answer::Huge => {
                            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {HUGE}\r\n\r\n");
                            let _ = tls.write_all(head.as_bytes()).await;
                            let chunk = vec![b'z'; 64 << 10];
                            while sent.load(Ordering::SeqCst) < HUGE {
                                if tls.write_all(&chunk).await.is_err() {
                                    break;
                                }
                                sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                            }
                            ended.store(true, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        r
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

/// One HTTP/1.1 request: its head (at most 64 KiB) and its body (at most 1 MiB).
async fn read_request<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Option<Received> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() > 64 << 10 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let headers: HashMap<String, String> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers.get("content-length")?.parse().ok()?;
    if len > 1 << 20 {
        return None;
    }
    let mut body = buf[end..].to_vec();
    while body.len() < len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Received { headers, body })
}

/// Whether `header` (`X-Hetch-Signature`) is `sha256=` and the HMAC-SHA256 of `body`
/// with `secret`, as a receiver checks it (written apart from the service's signing,
/// so that the two check each other), compared in constant time.
pub fn signed_by(secret: &[u8], body: &[u8], header: &str) -> bool {
    use hmac::{Hmac, Mac};
    let Some(hex) = header.strip_prefix("sha256=") else {
        return false;
    };
    let Some(tag) = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()
    else {
        return false;
    };
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).expect("any key length");
    mac.update(body);
    mac.verify_slice(&tag).is_ok()
}
