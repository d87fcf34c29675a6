//! Serving the API: TLS 1.3 with the service's identity (clients pin its fingerprint
//! as they pin `hetch serve`'s), then HTTP/1.1, one task per connection.
//!
//! Nobody without a token may hold the service's connections, as nobody may hold
//! `hetch serve`'s ([`hetch_net::PreAuthGate`], the same limits and flags):
//! - a connection that has not authenticated yet holds a place among the
//!   unauthenticated ones, capped per address (IPv6: per /64); a connection over that
//!   cap is closed at once. When all places are taken, the oldest place of the address
//!   holding the most is taken back for the newcomer, so a client that authenticates
//!   in milliseconds gets in through an idle flood from many addresses. Refusals are
//!   logged one line per interval;
//! - it has [`PreAuthLimits::deadline`] from accept to its first authenticated request
//!   (TLS handshake, request head, token or session cookie); after that it is asked to
//!   close, and cut off a deadline later if it does not;
//! - every connection has [`ConnLimits::idle`] to send the head of its next request,
//!   on keep-alive connections too: an idle connection is closed.
//!
//! Once a request authenticates, its connection counts against its caller
//! ([`crate::fair`]): at most [`ConnLimits::max_connections`] at once, caps per user
//! and per address, a reserve for the service's token, the longest-idle connection
//! closed for a newcomer. Users' requests are also held to a rate ([`crate::rate`]).
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
use hetch_net::{PreAuthLimits, PreAuthPermit, RateLimitedLog, ServerIdentity};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tower::ServiceExt;

use crate::fair::{ConnState, FairLimits};
use crate::rate::RequestRate;
use crate::AppState;

/// At most one log line per this interval about refused connections.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The limits on the service's connections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnLimits {
    /// Authenticated connections at once; a newcomer past it takes the place of the
    /// longest-idle one.
    pub max_connections: usize,
    /// What one user and one address may hold of them, and the operator's reserve.
    pub fair: FairLimits,
    /// Each user's request rate.
    pub rate: RequestRate,
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
            fair: FairLimits::default(),
            rate: RequestRate::default(),
            pre_auth: PreAuthLimits::default(),
            idle: Duration::from_secs(60),
        }
    }
}

impl ConnLimits {
    /// These limits within `fds` open files (see [`hetch_net::raise_fd_limit`]): the
    /// unauthenticated and the authenticated connections together leave
    /// [`FDS_KEPT`] descriptors for the database, planning, webhooks and the rest.
    /// Returns what was lowered, in one line, if anything was.
    pub fn fit(&mut self, fds: u64) -> Option<String> {
        let room = usize::try_from(fds.saturating_sub(FDS_KEPT)).unwrap_or(usize::MAX);
        let want = self.max_connections + self.pre_auth.max_total;
        if want <= room {
            return None;
        }
        // Shared in the same proportion, each at least one.
        let scaled = |n: usize| (n as u128 * room as u128 / want as u128).max(1) as usize;
        let before = (self.max_connections, self.pre_auth.max_total);
        self.max_connections = scaled(self.max_connections);
        self.pre_auth.max_total = scaled(self.pre_auth.max_total);
        self.fair.operator_reserve = self.fair.operator_reserve.min(self.max_connections / 2);
        Some(format!(
            "the open-file limit is {fds}: --max-connections lowered from {} to {}, \
             --max-unauthenticated from {} to {}",
            before.0, self.max_connections, before.1, self.pre_auth.max_total
        ))
    }
}

/// Descriptors the service keeps for itself beyond its connections.
pub const FDS_KEPT: u64 = 256;

/// A connection's standing: whether it has authenticated, and what it holds; every
/// request carries it.
#[derive(Debug, Clone)]
pub struct ConnAuth(Arc<AuthState>);

#[derive(Debug)]
struct AuthState {
    done: AtomicBool,
    /// The connection's place among the unauthenticated, until it authenticates.
    permit: Mutex<Option<PreAuthPermit>>,
    /// Its share among the authenticated.
    conn: Arc<ConnState>,
}

impl ConnAuth {
    fn new(permit: PreAuthPermit, conn: Arc<ConnState>) -> ConnAuth {
        ConnAuth(Arc::new(AuthState {
            done: AtomicBool::new(false),
            permit: Mutex::new(Some(permit)),
            conn,
        }))
    }

    /// The connection's share among the authenticated.
    pub fn conn(&self) -> &Arc<ConnState> {
        &self.0.conn
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

    /// Resolves once the connection's unauthenticated place was taken back for a
    /// newcomer (never, once it has authenticated).
    async fn pre_auth_displaced(&self) {
        let permit = self
            .0
            .permit
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(PreAuthPermit::on_displaced);
        match permit {
            Some(wait) => wait.await,
            None => std::future::pending().await,
        }
    }
}

/// The identity's TLS configuration, speaking HTTP/1.1.
pub fn tls_config(identity: &ServerIdentity) -> Arc<rustls::ServerConfig> {
    let mut cfg = (*identity.server_config()).clone();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// Accepts connections on `listener` and serves `app` on each within `limits`, the
/// unauthenticated ones in `state`'s gate, the authenticated ones sharing its table,
/// until an accept error that is not about one connection.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    limits: ConnLimits,
    state: &AppState,
) -> std::io::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let (gate, conns) = (&state.gate, &state.conns);
    let refusals = Arc::new(RateLimitedLog::new(REFUSAL_LOG_INTERVAL));
    loop {
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
            Ok(admitted) => {
                if let Some(from) = admitted.displaced {
                    let what = format_args!(
                        "all unauthenticated places taken: closing the oldest of {from}'s \
                         for {peer}"
                    );
                    if let Some(line) = refusals.note(what) {
                        _ = writeln!(std::io::stderr(), "hetch service: {line}");
                    }
                }
                admitted.permit
            }
            Err(refusal) => {
                state
                    .metrics
                    .pre_auth_refused
                    .fetch_add(1, Ordering::Relaxed);
                if let Some(line) = refusals.note(format_args!("refused {peer}: {refusal}")) {
                    _ = writeln!(std::io::stderr(), "hetch service: {line}");
                }
                continue; // dropping the stream closes it
            }
        };
        let _ = tcp.set_nodelay(true);
        let state = conns.open(peer.ip());
        let (acceptor, app) = (acceptor.clone(), app.clone());
        let (auth, conns) = (ConnAuth::new(permit, state), conns.clone());
        tokio::spawn(async move {
            serve_connection(acceptor, tcp, peer, app, limits, &auth).await;
            conns.release(auth.conn());
        });
    }
}

/// Serves one connection until it closes, is displaced, or misses a deadline.
async fn serve_connection(
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: ConnLimits,
    auth: &ConnAuth,
) {
    let deadline = tokio::time::Instant::now() + limits.pre_auth.deadline;
    let handshake = tokio::time::timeout_at(deadline, acceptor.accept(tcp));
    let tls = tokio::select! {
        t = handshake => match t {
            Ok(Ok(tls)) => tls,
            _ => return,
        },
        () = auth.pre_auth_displaced() => return,
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
    // One that has not authenticated by the deadline, or whose place went to a
    // newcomer, is asked to close after the request it is in, and cut off a deadline
    // later.
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = tokio::time::sleep_until(deadline) => {}
        () = auth.pre_auth_displaced() => {}
        () = auth.conn().displaced() => {}
    }
    if auth.is_authenticated() && !auth.conn().is_displaced() {
        // Authenticated just as the deadline passed: served on.
        let displaced = auth.conn().clone();
        tokio::select! {
            _ = conn.as_mut() => return,
            () = displaced.displaced() => {}
        }
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(limits.pre_auth.deadline, conn).await;
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
