//! Serving the API: TLS 1.3 with the service's identity (clients pin its fingerprint
//! as they pin `hetch serve`'s), then HTTP/1.1, one task per connection.
//!
//! Nobody without a token may hold the service's connections, as nobody may hold
//! `hetch serve`'s ([`hetch_net::PreAuthGate`], the same limits and flags):
//! - a connection that has not authenticated yet holds a place among the
//!   unauthenticated ones, capped in all and per address (IPv6: per /64); a connection
//!   over either cap is closed at once, and refusals are logged one line per interval;
//! - it has [`PreAuthLimits::deadline`] from accept to its first authenticated request
//!   (TLS handshake, request head, token or session cookie); after that it is asked to
//!   close, and cut off a deadline later if it does not;
//! - every connection has [`ConnLimits::idle`] to send the head of its next request,
//!   on keep-alive connections too: an idle connection is closed;
//! - and the service serves at most [`ConnLimits::max_connections`] connections at
//!   once, authenticated or not (more wait in the listen backlog).
//!
//! A request authenticates in the routes' `authenticate` middleware, which calls
//! [`ConnAuth::authenticated`] (given to every request as an extension): the
//! connection's place among the unauthenticated is freed and its deadline lifted.

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::connect_info::ConnectInfo;
use axum::Router;
use hetch_net::{PreAuthGate, PreAuthLimits, PreAuthPermit, RateLimitedLog, ServerIdentity};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// At most one log line per this interval about refused connections.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The limits on the service's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections served at once, authenticated or not; more wait in the backlog.
    pub max_connections: usize,
    /// Connections that have not authenticated yet: in all, per address, and the
    /// time from accept to the first authenticated request.
    pub pre_auth: PreAuthLimits,
    /// Time a connection may take to send the head of its next request (the first
    /// one, or the next on a keep-alive connection) before it is closed.
    pub idle: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 512,
            pre_auth: PreAuthLimits::default(),
            idle: Duration::from_secs(60),
        }
    }
}

/// Whether a connection has authenticated; every request carries it.
#[derive(Debug, Clone)]
pub struct ConnAuth(Arc<AuthState>);

#[derive(Debug)]
struct AuthState {
    done: AtomicBool,
    /// The connection's place among the unauthenticated, until it authenticates.
    permit: Mutex<Option<PreAuthPermit>>,
}

impl ConnAuth {
    fn new(permit: PreAuthPermit) -> ConnAuth {
        ConnAuth(Arc::new(AuthState {
            done: AtomicBool::new(false),
            permit: Mutex::new(Some(permit)),
        }))
    }

    /// A request of this connection was let in: it is no longer counted among the
    /// unauthenticated, and has no deadline any more.
    pub fn authenticated(&self) {
        self.0.done.store(true, Ordering::Release);
        self.0
            .permit
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    fn is_authenticated(&self) -> bool {
        self.0.done.load(Ordering::Acquire)
    }
}

/// The identity's TLS configuration, speaking HTTP/1.1.
pub fn tls_config(identity: &ServerIdentity) -> Arc<rustls::ServerConfig> {
    let mut cfg = (*identity.server_config()).clone();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// Accepts connections on `listener` and serves `app` on each within `limits`, until
/// an accept error that is not about one connection.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    limits: ConnLimits,
) -> std::io::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let gate = PreAuthGate::new(limits.pre_auth);
    let refusals = Arc::new(RateLimitedLog::new(REFUSAL_LOG_INTERVAL));
    loop {
        let slot = slots.clone().acquire_owned().await.expect("never closed");
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            // Out of descriptors or a connection reset before accept: not fatal.
            Err(e) if is_transient(&e) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let permit = match gate.admit(peer.ip()) {
            Ok(p) => p,
            Err(refusal) => {
                if let Some(line) = refusals.note(format_args!("refused {peer}: {refusal}")) {
                    _ = writeln!(std::io::stderr(), "hetch service: {line}");
                }
                continue; // dropping the stream closes it
            }
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, app, auth) = (acceptor.clone(), app.clone(), ConnAuth::new(permit));
        tokio::spawn(async move {
            let _slot = slot;
            let deadline = tokio::time::Instant::now() + limits.pre_auth.deadline;
            let Ok(Ok(tls)) = tokio::time::timeout_at(deadline, acceptor.accept(tcp)).await else {
                return;
            };
            let for_requests = auth.clone();
            let svc = app.map_request(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                req.extensions_mut().insert(for_requests.clone());
                req
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                // Between keep-alive requests (the first is bounded by the deadline).
                .header_read_timeout(limits.idle)
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(svc));
            // One that has not authenticated by the deadline is asked to close after
            // the request it is in, and cut off a deadline later.
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = tokio::time::sleep_until(deadline) => {}
            }
            if !auth.is_authenticated() {
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(limits.pre_auth.deadline, conn).await;
                return;
            }
            let _ = conn.await;
        });
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || e.raw_os_error() == Some(libc_emfile())
}

/// EMFILE: too many open files (the limit may rise again as connections close).
fn libc_emfile() -> i32 {
    24
}
