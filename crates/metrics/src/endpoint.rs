//! `GET /metrics` over plain HTTP, on an address the operator chooses.
//!
//! No TLS and no token: the exposition holds counts only (never a path, a peer's
//! address, a token or anything else a client sent), so it gives a stranger no more
//! than the traffic's volume; an operator who minds that binds it to loopback or a
//! monitoring network. What a stranger can take is bounded: a few connections at once,
//! each given a few seconds to send its request and a minute in all.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::header;
use axum::routing::get;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::CONTENT_TYPE;

/// Connections served at once (Prometheus needs one per scrape); more wait in the
/// listen backlog.
const MAX_CONNECTIONS: usize = 8;
/// A client must have sent its request's headers within this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection is closed after this, kept alive or not (a scraper opens another).
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// A bound metrics listener, not serving yet.
#[derive(Debug)]
pub struct Endpoint {
    listener: TcpListener,
    /// The address bound (the port chosen when `:0` was asked for).
    pub addr: SocketAddr,
}

impl Endpoint {
    /// Binds `addr` (`HOST:PORT`); the error is one line naming it.
    pub async fn bind(addr: &str) -> std::io::Result<Endpoint> {
        let bound = async {
            let listener = TcpListener::bind(addr).await?;
            let local = listener.local_addr()?;
            Ok::<_, std::io::Error>(Endpoint {
                listener,
                addr: local,
            })
        };
        bound.await.map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot listen on {addr} for metrics: {e}"),
            )
        })
    }

    /// Serves `render`'s text at `GET /metrics` on a task of its own until the returned
    /// guard is dropped; every scrape calls it afresh.
    pub fn spawn(self, render: impl Fn() -> String + Send + Sync + 'static) -> Serving {
        Serving(tokio::spawn(self.serve(render)))
    }

    /// Serves `render`'s text at `GET /metrics`, forever.
    async fn serve(self, render: impl Fn() -> String + Send + Sync + 'static) {
        let render = Arc::new(render);
        let app = Router::new().route(
            "/metrics",
            get(move || {
                let render = render.clone();
                async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], render()) }
            }),
        );
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        loop {
            let permit = slots.clone().acquire_owned().await.expect("never closed");
            let tcp = match self.listener.accept().await {
                Ok((tcp, _)) => tcp,
                // Out of descriptors, or a connection gone before it was accepted: the
                // process's real work goes on, and so does this, a moment later.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let svc = TowerToHyperService::new(app.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(tcp), svc);
                let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
            });
        }
    }
}

/// An [`Endpoint`] being served; dropping it stops it.
#[derive(Debug)]
pub struct Serving(tokio::task::JoinHandle<()>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One HTTP/1.1 request, the connection closed after it: (status line, body).
    async fn request(addr: SocketAddr, head: &str) -> (String, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("{head}\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let (headers, body) = out.split_once("\r\n\r\n").unwrap();
        (headers.to_string(), body.to_string())
    }

    #[tokio::test]
    async fn metrics_is_served_fresh_and_nothing_else() {
        let ep = Endpoint::bind("127.0.0.1:0").await.unwrap();
        let addr = ep.addr;
        assert_ne!(addr.port(), 0);
        let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = n.clone();
        let serving = ep.spawn(move || {
            let v = seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            format!("# HELP x_total X.\n# TYPE x_total counter\nx_total {v}\n")
        });
        let (head, body) = request(addr, "GET /metrics HTTP/1.1").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.to_ascii_lowercase().contains(CONTENT_TYPE), "{head}");
        assert!(body.ends_with("x_total 0\n"), "{body}");
        let (_, body) = request(addr, "GET /metrics HTTP/1.1").await;
        assert!(body.ends_with("x_total 1\n"), "{body}");
        for other in [
            "GET / HTTP/1.1",
            "GET /metrics/x HTTP/1.1",
            "GET /debug HTTP/1.1",
        ] {
            let (head, _) = request(addr, other).await;
            assert!(head.starts_with("HTTP/1.1 404"), "{other}: {head}");
        }
        drop(serving);
        // The task ends (and closes its listener) once the runtime polls it again.
        let mut gone = false;
        for _ in 0..100 {
            tokio::task::yield_now().await;
            if tokio::net::TcpStream::connect(addr).await.is_err() {
                gone = true;
                break;
            }
        }
        assert!(gone, "still served once its guard is dropped");
    }

    #[tokio::test]
    async fn a_taken_address_is_one_line_naming_it() {
        let ep = Endpoint::bind("127.0.0.1:0").await.unwrap();
        let taken = ep.addr.to_string();
        let e = Endpoint::bind(&taken).await.unwrap_err().to_string();
        assert!(e.contains(&taken) && !e.contains('\n'), "{e}");
        let e = Endpoint::bind("not an address")
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an address"), "{e}");
    }

    /// A client that never finishes its request is cut off, and does not keep its slot:
    /// more such clients than there are slots still leave room for a scrape.
    #[tokio::test(start_paused = true)]
    async fn silent_clients_are_cut_off() {
        let ep = Endpoint::bind("127.0.0.1:0").await.unwrap();
        let addr = ep.addr;
        let _serving = ep.spawn(|| "x 1\n".to_string());
        let mut silent = Vec::new();
        for _ in 0..MAX_CONNECTIONS * 2 {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /metr").await.unwrap();
            silent.push(s);
        }
        // Virtual time: without the bounds, this would give up (and fail) instead.
        let scrape = request(addr, "GET /metrics HTTP/1.1");
        let (head, body) = tokio::time::timeout(Duration::from_secs(3600), scrape)
            .await
            .expect("a scrape got a slot");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, "x 1\n");
    }
}
