//! `hetch serve`: accepts sessions and runs the engine's source or sink for each.

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::collections::HashMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use hetch_engine::wire::{
    read_frame_limited, read_preamble_exact, write_frame_exact, write_preamble_exact,
};
use hetch_engine::{BoxStream, DestSpec, EngineError, Operand, Options, Progress, Transport};
use hetch_net::{
    AuthThrottle, Fingerprint, PreAuthGate, PreAuthLimits, PreAuthPermit, RateLimitedLog,
    ServerIdentity, SessionKey, SocketOptions,
};
use hetch_proto::{
    ErrorCode, ErrorFrame, Frame, Hello, Op, SessionId, SessionRequest, StreamProof, Welcome,
};
use rand::RngCore;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::metrics::{ServeMetrics, Side};

mod admission;
mod fair;
mod kept;
mod limits;

pub use limits::{memory_limit, Caps, ServeLimits, CONNECTION_MEMORY, FDS_KEPT, FILES_PER_SESSION};

/// How long a client has to open all data streams of a session once welcomed.
const JOIN_TIMEOUT: Duration = Duration::from_secs(30);

/// At most one log line per this interval about connections refused or failing before
/// authentication: strangers must not be able to flood the log.
const PRE_AUTH_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// What a server serves.
#[derive(Debug, Clone)]
pub enum ServeRoot {
    /// A local directory.
    Local(PathBuf),
    /// A bucket, or a prefix in one: the server is an agent next to the store, so
    /// that clients far away reach it over hetch's streams rather than S3's requests.
    #[cfg(feature = "cloud")]
    Object(hetch_object::ObjectLocation),
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Directory (or object store prefix) served.
    pub root: ServeRoot,
    /// Where to listen.
    pub listen: String,
    /// Where the key, certificate and default token live.
    pub state_dir: PathBuf,
    /// Token file (default: `state_dir/token`, created on first start).
    pub token_file: Option<PathBuf>,
    /// Socket tuning for every accepted connection.
    pub socket: SocketOptions,
    /// Engine settings the server does not take from clients.
    pub engine: Options,
    /// Limits on connections that have not authenticated yet (lowered at start when
    /// the open-file limit cannot hold them).
    pub limits: PreAuthLimits,
    /// Caps on what authenticated sessions hold, per address and in all.
    pub fair: ServeLimits,
    /// Where to serve metrics (plain HTTP, `GET /metrics`), if anywhere.
    pub metrics: Option<String>,
    /// Which servers this one pushes to when a client asks it to relay.
    pub relay: crate::RelayPolicy,
}

/// A running server.
pub struct Server {
    /// The address actually bound.
    pub addr: SocketAddr,
    /// The certificate fingerprint clients pin.
    pub fingerprint: Fingerprint,
    /// Where the token is, when the server made it.
    pub token_path: PathBuf,
    /// Whether the identity was created on this start.
    pub new_identity: bool,
    /// The metrics endpoint's address, when one was asked for.
    pub metrics_addr: Option<SocketAddr>,
    /// The open-file limit, raised at start to the hard limit.
    pub open_files: u64,
    /// The caps on sessions in force, sized from the open-file limit and memory.
    pub caps: Caps,
    /// The limits given that the open-file limit could not hold, each lowered, in a
    /// line for the log.
    pub lowered: Vec<String>,
    metrics: Option<hetch_metrics::Endpoint>,
    listener: TcpListener,
    state: Arc<State>,
    /// Ends every session (see [`Server::run_until`]).
    stop: hetch_engine::StopSender,
}

/// A session waiting for its data streams.
struct Joining {
    /// Whether the data streams must be TLS.
    encrypt: bool,
    /// The client's socket tuning for this side's data sockets.
    tuning: SocketOptions,
    /// The control connection's key, which data streams prove they hold.
    key: SessionKey,
    /// Each stream's last connection joined (its generation), `None` before its
    /// first: a stream joins first with generation 0 and then only with the next one
    /// (a proof is for one connection, so one seen on a plain stream cannot be used
    /// again).
    joined: Vec<Option<u32>>,
    /// Where each stream's first connection goes, with its index.
    tx: mpsc::Sender<(u16, BoxStream)>,
    /// Where a stream joined again goes, once the session runs (`None` before, and for
    /// sessions that do not join streams again).
    again: Option<mpsc::Sender<crate::rejoin::Rejoined>>,
}

/// Where [`join`] hands a stream.
enum JoinedTo {
    First(mpsc::Sender<(u16, BoxStream)>),
    Again(mpsc::Sender<crate::rejoin::Rejoined>),
}

/// Takes a session's entry out of the joining table when the session ends.
struct Unjoin<'a>(&'a State, SessionId);

impl Drop for Unjoin<'_> {
    fn drop(&mut self) {
        self.0.joining.lock().expect("joining lock").remove(&self.1);
    }
}

struct State {
    root: ServeRoot,
    /// Where journals of multipart uploads in progress live (object store roots).
    #[cfg(feature = "cloud")]
    state_dir: PathBuf,
    token: Vec<u8>,
    tls: Arc<rustls::ServerConfig>,
    socket: SocketOptions,
    engine: Options,
    /// Sessions waiting for their data streams.
    joining: Mutex<HashMap<SessionId, Joining>>,
    /// Unauthenticated connections.
    gate: Arc<PreAuthGate>,
    /// Failed tokens per address.
    throttle: AuthThrottle,
    /// Connections refused or failed before authentication.
    pre_auth_log: RateLimitedLog,
    /// What authenticated sessions hold, per address and in all.
    held: Arc<fair::Sessions>,
    /// Sessions refused or closed to make room, and failed accepts.
    fair_log: RateLimitedLog,
    /// Sessions running.
    sessions: std::sync::atomic::AtomicUsize,
    /// Counters for `--metrics`.
    metrics: ServeMetrics,
    /// Which servers this one relays to.
    relay: crate::RelayPolicy,
}

impl Server {
    /// Loads (or creates) identity and token and binds the listener.
    pub async fn bind(cfg: ServeConfig) -> anyhow::Result<Server> {
        let root = match &cfg.root {
            ServeRoot::Local(dir) => ServeRoot::Local(
                hetch_storage::paths::canonical_root(dir)
                    .with_context(|| format!("cannot serve {}", dir.display()))?,
            ),
            #[cfg(feature = "cloud")]
            ServeRoot::Object(loc) => {
                // Bad credentials or a missing bucket stop the server at once.
                loc.bucket.probe(loc.url.trimmed()).await?;
                cfg.root.clone()
            }
        };
        let (identity, new_identity) = ServerIdentity::load_or_create(&cfg.state_dir)?;
        let (token, token_path) = match &cfg.token_file {
            Some(p) => (hetch_net::read_token_file(p)?, p.clone()),
            None => hetch_net::load_or_create_token(&cfg.state_dir)?,
        };
        // Before anything is sized: what the server may hold depends on it.
        let open_files = hetch_net::raise_fd_limit();
        let mut pre_auth = cfg.limits;
        let (caps, lowered) = cfg.fair.size(open_files, memory_limit(), &mut pre_auth);
        let listener = TcpListener::bind(&cfg.listen)
            .await
            .with_context(|| format!("cannot listen on {}", cfg.listen))?;
        cfg.socket.apply_to_listener(&listener)?;
        let metrics = match &cfg.metrics {
            Some(addr) => Some(hetch_metrics::Endpoint::bind(addr).await?),
            None => None,
        };
        let (stop, stop_signal) = hetch_engine::StopSignal::new();
        let mut engine = cfg.engine;
        engine.stop = Some(stop_signal);
        Ok(Server {
            stop,
            addr: listener.local_addr()?,
            fingerprint: identity.fingerprint,
            token_path,
            new_identity,
            metrics_addr: metrics.as_ref().map(|m| m.addr),
            open_files,
            caps,
            lowered,
            metrics,
            listener,
            state: Arc::new(State {
                root,
                #[cfg(feature = "cloud")]
                state_dir: cfg.state_dir.clone(),
                token,
                tls: identity.server_config(),
                socket: cfg.socket,
                engine,
                joining: Mutex::default(),
                gate: PreAuthGate::new(pre_auth),
                throttle: AuthThrottle::default(),
                pre_auth_log: RateLimitedLog::new(PRE_AUTH_LOG_INTERVAL),
                held: fair::Sessions::new(caps),
                fair_log: RateLimitedLog::new(PRE_AUTH_LOG_INTERVAL),
                sessions: Default::default(),
                metrics: ServeMetrics::default(),
                relay: cfg.relay,
            }),
        })
    }

    /// Serves until the process ends.
    pub async fn run(self) -> anyhow::Result<()> {
        self.run_until(std::future::pending()).await
    }

    /// Serves until `shutdown` resolves; then stops accepting, tells every session's
    /// client that the server is going away (their part files and journals stay, so a
    /// new session resumes them), and waits a moment for them to end.
    pub async fn run_until(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<()> {
        tokio::pin!(shutdown);
        let _metrics = self.metrics.take().map(|endpoint| {
            let state = self.state.clone();
            endpoint.spawn(move || {
                let running = state.sessions.load(Relaxed);
                state
                    .metrics
                    .render(running as u64, &admission::holding(&state))
            })
        });
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let accepted = tokio::select! {
                a = self.listener.accept() => a,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                _ = &mut shutdown => break,
            };
            let (socket, peer) = match accepted {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors despite the caps (something else holds them):
                    // once per interval in the log, not a line per client.
                    self.state.metrics.accept_failed.fetch_add(1, Relaxed);
                    self.state.log_fair(format_args!("accept failed: {e}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // Over the limits: closed at once, before anything is read or allocated.
            let permit = match self.state.gate.admit(peer.ip()) {
                Ok(admitted) => {
                    if let Some(from) = admitted.displaced {
                        self.state.metrics.displaced.fetch_add(1, Relaxed);
                        self.state.log_pre_auth(format_args!(
                            "all unauthenticated places taken: closing the oldest of \
                             {from}'s for {peer}"
                        ));
                    }
                    admitted.permit
                }
                Err(refusal) => {
                    drop(socket);
                    self.state.metrics.refused.fetch_add(1, Relaxed);
                    self.state
                        .log_pre_auth(format_args!("refused {peer}: {refusal}"));
                    continue;
                }
            };
            let state = self.state.clone();
            connections.spawn(async move {
                if let Err(e) = handle(state.clone(), socket, peer, permit).await {
                    let e = hetch_proto::escape_text(&e.to_string());
                    _ = writeln!(std::io::stderr(), "hetch serve: {peer}: {e}");
                }
            });
        }
        drop(self.listener);
        let sessions = self
            .state
            .sessions
            .load(std::sync::atomic::Ordering::Relaxed);
        _ = writeln!(
            std::io::stderr(),
            "hetch serve: shutting down: telling {sessions} sessions' clients to resume later"
        );
        self.stop.stop();
        let drained = async { while connections.join_next().await.is_some() {} };
        if tokio::time::timeout(SHUTDOWN_GRACE, drained).await.is_err() {
            _ = writeln!(
                std::io::stderr(),
                "hetch serve: connections still open after {} s: closing them",
                SHUTDOWN_GRACE.as_secs()
            );
        }
        Ok(())
    }
}

/// How long a shutting-down server waits for its sessions to tell their clients.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

impl State {
    fn log_pre_auth(&self, what: impl std::fmt::Display) {
        if let Some(line) = self.pre_auth_log.note(what) {
            _ = writeln!(std::io::stderr(), "hetch serve: {line}");
        }
    }

    fn log_fair(&self, what: impl std::fmt::Display) {
        if let Some(line) = self.fair_log.note(what) {
            _ = writeln!(std::io::stderr(), "hetch serve: {line}");
        }
    }
}

/// What an authenticated connection is.
enum Authenticated {
    /// The control connection of a new session.
    Control(BoxStream, Box<SessionRequest>, SessionKey),
    /// A data stream, already handed to its session.
    Joined,
}

/// Serves one connection: authentication under the pre-auth deadline (its permit is
/// held until then), then the session for a control connection.
async fn handle(
    state: Arc<State>,
    socket: tokio::net::TcpStream,
    peer: SocketAddr,
    permit: PreAuthPermit,
) -> Result<(), EngineError> {
    let name = peer.to_string();
    let deadline = state.gate.limits().deadline;
    // A place taken back for a newcomer ends the attempt as the deadline would.
    let authenticated = tokio::select! {
        a = tokio::time::timeout(deadline, authenticate(&state, socket, peer)) => a,
        () = permit.displaced() => {
            state.metrics.unauthenticated.fetch_add(1, Relaxed);
            return Ok(());
        }
    };
    drop(permit);
    let authenticated = match authenticated {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => {
            state.metrics.unauthenticated.fetch_add(1, Relaxed);
            state.log_pre_auth(format_args!("{name}: {e}"));
            return Ok(());
        }
        Err(_) => {
            state.metrics.unauthenticated.fetch_add(1, Relaxed);
            let secs = deadline.as_secs();
            state.log_pre_auth(format_args!("{name}: not authenticated within {secs} s"));
            return Ok(());
        }
    };
    match authenticated {
        Authenticated::Control(stream, req, key) => {
            session(state.clone(), stream, (name, peer.ip()), *req, key).await
        }
        Authenticated::Joined => Ok(()),
    }
}

/// Everything up to authentication: TLS handshake, preambles, hello, and the token
/// check (control connections) or the session proof (data streams).
async fn authenticate(
    state: &State,
    socket: tokio::net::TcpStream,
    peer: SocketAddr,
) -> Result<Authenticated, EngineError> {
    let name = peer.to_string();
    let accepted = hetch_net::accept(socket, &state.socket, &state.tls)
        .await
        .map_err(|e| conn_err(&name, &e.to_string()))?;
    let mut stream: BoxStream = accepted.stream;
    write_preamble_exact(&mut stream, &name).await?;
    if let Err(e) = read_preamble_exact(&mut stream, &name).await {
        if let EngineError::Proto {
            source: hetch_proto::ProtoError::Version { .. },
            ..
        } = &e
        {
            let _ = reply_error(&mut stream, &name, ErrorCode::Version, &e.to_string()).await;
        }
        return Err(e);
    }
    let max_frame = state.gate.limits().max_frame;
    let hello = match read_frame_limited(&mut stream, &name, max_frame).await {
        Ok(Frame::Hello(h)) => h,
        Ok(_) => return refuse(&mut stream, &name, ErrorCode::Protocol, "expected a hello").await,
        Err(e @ EngineError::Proto { .. }) => {
            // Say why before hanging up, so the client sees more than a reset.
            let _ = reply_error(&mut stream, &name, ErrorCode::Protocol, &e.to_string()).await;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    let accepted = AcceptedRest {
        encrypted: accepted.encrypted,
        key: accepted.key,
        read_buffer: accepted.read_buffer,
        socket: accepted.socket,
    };
    match hello {
        Hello::Control { token, request } => {
            // A plain connection is refused before its token is looked at: the token
            // must never be checked (or be useful) outside TLS, and the answer is the
            // same whether it was right or wrong.
            let Some(key) = accepted.key else {
                return refuse(
                    &mut stream,
                    &name,
                    ErrorCode::Protocol,
                    "control connections must use TLS",
                )
                .await;
            };
            if let Err((code, msg)) = check_token(state, peer.ip(), &token) {
                return refuse(&mut stream, &name, code, &msg).await;
            }
            accepted.read_buffer.grow();
            Ok(Authenticated::Control(stream, Box::new(request), key))
        }
        Hello::Data {
            session,
            index,
            generation,
            proof,
        } => {
            let which = (session, (index, generation), proof);
            join(state, stream, &name, accepted, which).await
        }
    }
}

/// Checks a control hello's `token`, from address `ip`, against the server's, counting
/// failures against the address; `Err` is the answer.
fn check_token(
    state: &State,
    ip: std::net::IpAddr,
    token: &[u8],
) -> Result<(), (ErrorCode, String)> {
    // A server has one token, its own: every guess counts against it, whatever its
    // shape.
    let kind = hetch_net::TokenKind::Shared;
    if let Err(wait) = state.throttle.check(ip, kind) {
        state.metrics.throttled.fetch_add(1, Relaxed);
        let msg = format!(
            "too many failed attempts from {}, retry in {} s",
            ip.to_canonical(),
            wait.as_secs() + 1
        );
        return Err((ErrorCode::Auth, msg));
    }
    if !hetch_net::tokens_equal(token, &state.token) {
        state.throttle.failed(ip, kind);
        state.metrics.wrong_tokens.fetch_add(1, Relaxed);
        return Err((ErrorCode::Auth, "authentication failed: wrong token".into()));
    }
    state.throttle.succeeded(ip, kind);
    Ok(())
}

/// The parts of an [`hetch_net::Accepted`] still needed once its stream is taken.
struct AcceptedRest {
    encrypted: bool,
    key: Option<SessionKey>,
    read_buffer: hetch_net::ReadBuffer,
    socket: socket2::Socket,
}

/// Hands a data stream to its session, once its proof checks and its slot is free.
async fn join(
    state: &State,
    mut stream: BoxStream,
    name: &str,
    accepted: AcceptedRest,
    (session, (index, generation), proof): (SessionId, (u16, u32), StreamProof),
) -> Result<Authenticated, EngineError> {
    let claimed = {
        let mut joining = state.joining.lock().expect("joining lock");
        match joining.get_mut(&session) {
            // One answer for both: which session ids exist is nobody else's business.
            Some(j) if j.key.proof_matches(&session, (index, generation), &proof) => {
                if j.encrypt != accepted.encrypted {
                    Err("data stream encryption does not match the session".into())
                } else {
                    let (again, first) = (j.again.clone(), j.tx.clone());
                    match (j.joined.get_mut(usize::from(index)), generation) {
                        (None, _) => Err("bad stream index".into()),
                        (Some(slot @ None), 0) => {
                            *slot = Some(0);
                            Ok((j.tuning.clone(), JoinedTo::First(first)))
                        }
                        (Some(Some(_)), 0) => Err("stream index already joined".into()),
                        // The generation after the last, or a few more: the client's
                        // attempts that failed skip theirs.
                        (Some(Some(last)), g)
                            if g > *last && g - *last <= hetch_engine::MAX_SKIPPED + 1 =>
                        {
                            match again {
                                Some(again) => {
                                    *last = g;
                                    Ok((j.tuning.clone(), JoinedTo::Again(again)))
                                }
                                None => Err("this session does not join streams again".into()),
                            }
                        }
                        (Some(last), g) => {
                            let last = last.map_or("none".into(), |l| l.to_string());
                            Err(format!(
                                "data stream {index} joined again out of turn (generation {g}, \
                                 the last {last})"
                            ))
                        }
                    }
                }
            }
            _ => Err("data stream refused: no such session, or a wrong proof".into()),
        }
    };
    let (tuning, tx) = match claimed {
        Ok(c) => c,
        Err(msg) => return refuse(&mut stream, name, ErrorCode::Protocol, &msg).await,
    };
    // The client's --cc/--sndbuf/--rcvbuf apply to this side's data sockets too, so
    // that the sender of a pull is tuned as asked.
    if tuning != SocketOptions::default() {
        if let Err(e) = tuning.apply_fd(&accepted.socket, name) {
            let msg = e.to_string();
            return refuse(&mut stream, name, ErrorCode::Other, &msg).await;
        }
    }
    accepted.read_buffer.grow();
    // Joined: the client waits for this before it uses the stream.
    write_frame_exact(&mut stream, name, false, &welcome_to(session)).await?;
    match tx {
        JoinedTo::First(tx) => _ = tx.send((index, stream)).await,
        JoinedTo::Again(tx) => _ = tx.send((index, generation, stream)).await,
    }
    Ok(Authenticated::Joined)
}

/// [`reply_error`] for a connection that is being refused.
async fn refuse(
    stream: &mut BoxStream,
    peer: &str,
    code: ErrorCode,
    message: &str,
) -> Result<Authenticated, EngineError> {
    Err(reply_error(stream, peer, code, message)
        .await
        .expect_err("reply_error always fails"))
}

/// Checks a session's request and resolves what it does; `Err` is the answer.
async fn prepare(
    state: &State,
    req: &SessionRequest,
) -> Result<(Role, Options), (ErrorCode, String)> {
    if req.streams == 0 || req.streams > 256 {
        return Err((ErrorCode::Protocol, "streams must be 1..=256".into()));
    }
    if let Err(e) = hetch_integrity::check_block_size(req.block_size as u64) {
        return Err((ErrorCode::Protocol, e.to_string()));
    }
    // Resolve paths before welcoming, so that a bad path is one clear error.
    let role = resolve_role(state, req)
        .await
        .map_err(|m| (ErrorCode::Path, m))?;
    let opts = session_options(&state.engine, req).map_err(|m| (ErrorCode::Other, m))?;
    Ok((role, opts))
}

/// A new welcome, with a new session id.
fn welcome() -> (SessionId, Frame) {
    let mut id = [0u8; 16];
    rand::rng().fill_bytes(&mut id);
    (id, welcome_to(id))
}

/// The welcome into session `session` (of its control connection, or of a data stream
/// that joined it).
fn welcome_to(session: SessionId) -> Frame {
    Frame::Welcome(Welcome {
        session,
        server: format!("hetch {}", env!("CARGO_PKG_VERSION")),
    })
}

/// Serves a session whose control connection came from `peer` (its name and address),
/// welcomed with `req`, counting how it ended (a kept session counts each operation, a
/// refused one counts among the refused).
async fn session(
    state: Arc<State>,
    control: BoxStream,
    peer: (String, std::net::IpAddr),
    req: SessionRequest,
    key: SessionKey,
) -> Result<(), EngineError> {
    let side = Side::of(&req.op);
    let mut counted = false;
    let ended = operations(&state, control, peer, req, key, &mut counted).await;
    if !counted {
        state.metrics.session_ended(side, ended.is_ok());
    }
    ended
}

/// [`session`]'s work; `counted` is set once how it ends is counted otherwise (its
/// connections kept for more operations, or the session refused its share).
async fn operations(
    state: &Arc<State>,
    mut control: BoxStream,
    (peer, ip): (String, std::net::IpAddr),
    req: SessionRequest,
    key: SessionKey,
    counted: &mut bool,
) -> Result<(), EngineError> {
    let side = Side::of(&req.op);
    let (role, opts) = match prepare(state, &req).await {
        Ok(r) => r,
        Err((code, msg)) => return reply_error(&mut control, &peer, code, &msg).await,
    };
    // Its share of the server before it is welcomed: refused, it has cost nothing.
    let Some(held) = admission::admit(state, &mut control, (&peer, ip), &req, &role).await else {
        *counted = true;
        return Ok(());
    };
    let (id, welcome) = welcome();
    let role = match role {
        Role::Relay(operands) => {
            let run = crate::relay::RelayRun {
                control,
                peer: peer.clone(),
                socket: match requested_tuning(&req) {
                    t if t == SocketOptions::default() => state.socket.clone(),
                    t => t,
                },
                req,
                opts,
                operands,
                welcome,
                progress: Arc::new(Progress::default()),
            };
            held.busy();
            let _running = Running::new(&state.sessions);
            let _tracked = state.metrics.track(side, run.progress.clone());
            let started = std::time::Instant::now();
            let report = crate::relay::serve(run).await?;
            log_done(&peer, "relay", &report, started);
            return Ok(());
        }
        Role::Range { dest, root } => {
            let Op::Range(range) = &req.op else {
                unreachable!("a range role comes from a range op")
            };
            let run = crate::range::RangeRun {
                control,
                peer: peer.clone(),
                req: (**range).clone(),
                block_size: u64::from(req.block_size),
                opts,
                dest,
                root,
                welcome,
                progress: Arc::new(Progress::default()),
            };
            held.busy();
            let _running = Running::new(&state.sessions);
            let _tracked = state.metrics.track(side, run.progress.clone());
            let started = std::time::Instant::now();
            let report = crate::range::serve(run).await?;
            log_done(&peer, "range", &report, started);
            return Ok(());
        }
        other => other,
    };
    let (tx, mut rx) = mpsc::channel(req.streams as usize);
    let data_mac = (!req.encrypt_data).then(|| key.frame_mac_key());
    state.joining.lock().expect("joining lock").insert(
        id,
        Joining {
            encrypt: req.encrypt_data,
            tuning: requested_tuning(&req),
            key: key.clone(),
            joined: vec![None; usize::from(req.streams)],
            tx,
            again: None,
        },
    );
    let unjoin = Unjoin(state, id);
    let joined = async {
        write_frame_exact(&mut control, &peer, false, &welcome).await?;
        let mut slots: Vec<Option<BoxStream>> = (0..req.streams).map(|_| None).collect();
        let mut have = 0;
        // Until its streams have joined, the session is idle: closed for a newcomer if it
        // is the longest idle (one that never joins holds its share for nothing).
        let closing = held.closing();
        tokio::pin!(closing);
        while have < slots.len() {
            let next = tokio::select! {
                n = tokio::time::timeout(JOIN_TIMEOUT, rx.recv()) => n,
                () = &mut closing => return Err(conn_err(&peer, "closed for another client")),
            };
            let (i, s) = next
                .map_err(|_| conn_err(&peer, "data streams did not arrive in time"))?
                .ok_or_else(|| conn_err(&peer, "session closed"))?;
            let slot = slots
                .get_mut(i as usize)
                .ok_or_else(|| conn_err(&peer, "bad stream index"))?;
            if slot.replace(s).is_none() {
                have += 1;
            }
        }
        Ok::<_, EngineError>(
            slots
                .into_iter()
                .map(|s| s.expect("all joined"))
                .collect::<Vec<_>>(),
        )
    }
    .await;
    let data = joined?;
    if !held.busy() {
        return Err(conn_err(&peer, "closed for another client"));
    }
    if req.reuse && kept::can_keep(&role) {
        drop(unjoin);
        let conns = crate::reuse::Conns { control, data };
        let first = kept::Operation {
            side,
            role,
            opts,
            data_mac,
        };
        *counted = true;
        return kept::serve(state, (&peer, ip), &key, conns, first, &held).await;
    }
    // From here a lost data stream may join again, until the session ends (`unjoin`).
    let (again, rejoined) = mpsc::channel(usize::from(req.streams));
    if let Some(j) = state.joining.lock().expect("joining lock").get_mut(&id) {
        j.again = Some(again);
    }
    let transport = Transport {
        control,
        data,
        peer: peer.clone(),
        data_mac,
        lanes: Vec::new(),
        rejoin: Some(Arc::new(crate::rejoin::ServerRejoin::new(&peer, rejoined))),
    };
    let ran = run_role(state, &peer, side, role, opts, transport).await;
    drop(unjoin);
    ran
}

/// Runs a push's sink or a pull's source on `transport`, as the server's side of one
/// operation, counted in the metrics while it runs and logged when it ends.
async fn run_role(
    state: &State,
    peer: &str,
    side: Side,
    role: Role,
    opts: Options,
    transport: Transport,
) -> Result<(), EngineError> {
    let progress = Arc::new(Progress::default());
    // The session's warnings (a device this server may not make, not being root, ...)
    // go to the server's log: no frame tells them to the client yet.
    let warned = peer.to_string();
    progress.set_log(Box::new(move |line: &str| {
        if let Some(w) = line.strip_prefix("warning: ") {
            let w = hetch_proto::escape_text(w);
            _ = writeln!(std::io::stderr(), "hetch serve: {warned}: warning: {w}");
        }
    }));
    let started = std::time::Instant::now();
    let _running = Running::new(&state.sessions);
    // Bytes and files count in the metrics as they move, not only at the end.
    let _tracked = state.metrics.track(side, progress.clone());
    let (what, result) = match role {
        Role::Sink(dest) => (
            "push",
            hetch_engine::run_sink(opts, dest, transport, progress).await,
        ),
        #[cfg(feature = "cloud")]
        Role::ObjectSink(dest) => ("push", {
            let store = Arc::new(hetch_object::BucketStore::new(
                dest,
                opts.effective_buffer_memory(),
            ));
            hetch_engine::run_sink_into(opts, store, transport, progress).await
        }),
        Role::Relay(_) | Role::Range { .. } => unreachable!("served above"),
        Role::Source(operands) => (
            "pull",
            hetch_engine::run_source_from(opts, operands, transport, progress).await,
        ),
    };
    log_done(peer, what, &result?, started);
    Ok(())
}

/// The server's line about a finished session.
fn log_done(peer: &str, what: &str, report: &hetch_engine::Report, started: std::time::Instant) {
    let s = &report.summary;
    _ = writeln!(
        std::io::stderr(),
        "hetch serve: {peer}: {what} done: {} files, {} bytes, {} skipped, {} failed, {} blocks re-sent, {:.2} s",
        s.files,
        s.bytes,
        s.skipped,
        s.failed,
        s.retried_blocks,
        started.elapsed().as_secs_f64()
    );
}

/// The engine settings of a session: the server's own, with what the client may
/// choose for its session taken from `req`; `Err` is the message for the client.
fn session_options(engine: &Options, req: &SessionRequest) -> Result<Options, String> {
    let mut opts = engine.clone();
    opts.block_size = req.block_size as u64;
    opts.rate_limit = match (opts.rate_limit, req.rate_limit) {
        (0, r) | (r, 0) => r,
        (a, b) => a.min(b),
    };
    opts.no_clobber = req.no_clobber;
    // Only when both ask: the server's own flag is the ceiling.
    opts.preserve_special_modes &= req.preserve_special_modes;
    opts.specials = req.specials;
    // Devices too: a device node a token holder chose, in the served tree, would let
    // later pulls read the raw device.
    opts.devices &= req.devices;
    opts.hard_links = req.hard_links;
    opts.xattrs = req.xattrs;
    opts.acls = req.acls;
    opts.fsync = req.fsync || opts.fsync;
    let i = &req.integrity;
    opts.checksum = i.checksum.parse()?;
    opts.verify = i.verify;
    opts.schedule = i.schedule;
    if i.hash_threads > 0 {
        // A session's own setting, within reason: each thread is a blocking thread
        // with a block-sized buffer.
        opts.hash_threads = (i.hash_threads as usize).min(MAX_HASH_THREADS);
    }
    opts.file_digests = i.file_digests;
    opts.checksum_skip = i.checksum_skip;
    opts.compare_only = i.compare_only;
    // The client's globs: a pull's source sends only what they let through, a push's
    // sink keeps what they leave out when it mirrors. A token holder can only narrow
    // what it sends or protect entries from its own deletion; the patterns are bounded
    // by the decoder.
    opts.filter = hetch_engine::glob_filter(&req.filter.include, &req.filter.exclude)?;
    // Deletions happen only below the destination the client writes to, through the
    // sink's confined handle: nothing it could not overwrite anyway.
    opts.delete = req.delete;
    // A dry run only reads (stats and link targets below the destination), but for a
    // missing `DIR/` destination, created as the copy would create it.
    opts.dry_run = req.dry_run;
    // Only keeps the sink from removing leftovers: nothing the client could misuse.
    opts.chosen_entries = req.chosen_entries;
    // Each is the client's call for its own data: a retry costs the server only reads
    // it would do anyway, and trusting a journal risks only the client's copy.
    opts.retry_changed = i.retry_changed;
    opts.trust_journal = i.trust_journal;
    // The client's call: compression costs the server CPU only at levels the decoder
    // allows (1..=19), and only as the source of a pull or relay.
    opts.compression = req.compression;
    Ok(opts)
}

/// Counts a session as running while it lives.
struct Running<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Running<'a> {
    fn new(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Running(count)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Socket tuning a client asked for its session's data sockets.
/// Most hashing threads a client may ask a server for.
const MAX_HASH_THREADS: usize = 64;

fn requested_tuning(req: &SessionRequest) -> SocketOptions {
    SocketOptions {
        congestion: req.congestion.clone(),
        send_buffer: req.send_buffer,
        recv_buffer: req.recv_buffer,
    }
}

enum Role {
    Sink(DestSpec),
    #[cfg(feature = "cloud")]
    ObjectSink(hetch_object::ObjectDest),
    Source(Vec<Operand>),
    /// The source of a push to another server ([`Op::Relay`]).
    Relay(Vec<Operand>),
    /// A block range of a file, or its commit ([`Op::Range`]), into `dest` below `root`.
    Range {
        dest: PathBuf,
        root: PathBuf,
    },
}

/// What a session does, with its paths resolved under the root; `Err` is the message
/// for the client (a path outside the root, a source that does not exist).
async fn resolve_role(state: &State, req: &SessionRequest) -> Result<Role, String> {
    match &req.op {
        Op::Pull { sources } => return source_operands(state, sources).map(Role::Source),
        Op::Relay { sources, to } => {
            // Before anything is resolved or connected: a server relays only where its
            // operator allowed, whatever a token holder asks.
            if !state.relay.allows(&to.host) {
                return Err(format!(
                    "relaying to {} is not allowed by this server (hetch serve --relay-to)",
                    hetch_proto::escape_text(&to.host)
                ));
            }
            if req.delete.is_some() || req.integrity.compare_only || req.dry_run {
                return Err("a relay copies only (no mirroring, comparing or dry run yet)".into());
            }
            return source_operands(state, sources).map(Role::Relay);
        }
        Op::Push { .. } | Op::Range(_) => {}
    }
    match (&state.root, &req.op) {
        (ServeRoot::Local(root), Op::Push { dest, sources }) => {
            let path =
                hetch_storage::paths::confine(root, dest, true).map_err(|e| e.to_string())?;
            Ok(Role::Sink(DestSpec {
                path,
                sources: *sources,
                trailing_slash: dest.ends_with(b"/"),
                confine_to: Some(root.clone()),
                as_operand: req.integrity.compare_only,
            }))
        }
        #[cfg(feature = "cloud")]
        (ServeRoot::Object(root), Op::Push { dest, sources }) => {
            Ok(Role::ObjectSink(hetch_object::ObjectDest {
                location: object_under(root, dest)?,
                sources: *sources,
                as_operand: req.integrity.compare_only,
                state_dir: state.state_dir.clone(),
            }))
        }
        (ServeRoot::Local(root), Op::Range(r)) => {
            if req.delete.is_some() || req.integrity.compare_only || req.dry_run {
                return Err("a range is written only (no mirroring, comparing or dry run)".into());
            }
            let dest =
                hetch_storage::paths::confine(root, &r.dest, true).map_err(|e| e.to_string())?;
            Ok(Role::Range {
                dest,
                root: root.clone(),
            })
        }
        #[cfg(feature = "cloud")]
        (ServeRoot::Object(_), Op::Range(_)) => Err(
            "ranges of one file from several nodes need a directory tree; this server \
             serves an object store"
                .into(),
        ),
        (_, Op::Pull { .. } | Op::Relay { .. }) => unreachable!("resolved above"),
    }
}

/// The operands a pull or relay sends, resolved under the root; `Err` is the message
/// for the client (a path outside the root, a source that does not exist).
fn source_operands(state: &State, sources: &[Vec<u8>]) -> Result<Vec<Operand>, String> {
    let mut operands = Vec::new();
    for s in sources {
        operands.push(match &state.root {
            ServeRoot::Local(root) => {
                let p = hetch_storage::paths::confine(root, s, false).map_err(|e| e.to_string())?;
                if std::fs::symlink_metadata(&p).is_err() {
                    return Err(format!(
                        "{}: no such file or directory on the server",
                        String::from_utf8_lossy(s)
                    ));
                }
                Operand::Local(p)
            }
            #[cfg(feature = "cloud")]
            ServeRoot::Object(root) => Operand::Origin(Arc::new(hetch_object::ObjectOrigin::new(
                object_under(root, s)?,
            ))),
        });
    }
    Ok(operands)
}

/// The object store location of wire path `wire` under an object store root (the
/// root itself for an empty path, taken as a prefix to copy into).
#[cfg(feature = "cloud")]
fn object_under(
    root: &hetch_object::ObjectLocation,
    wire: &[u8],
) -> Result<hetch_object::ObjectLocation, String> {
    let rel = hetch_storage::paths::rel_from_wire(wire).map_err(|e| e.to_string())?;
    let rel = rel
        .to_str()
        .ok_or_else(|| format!("{}: not UTF-8, which S3 keys must be", rel.display()))?;
    let mut key = hetch_object::url::join_key(root.url.trimmed(), rel);
    if (rel.is_empty() || wire.ends_with(b"/")) && !key.is_empty() {
        key.push('/');
    }
    Ok(hetch_object::ObjectLocation {
        bucket: root.bucket.clone(),
        url: root.url.with_key(&key),
    })
}

async fn reply_error(
    stream: &mut BoxStream,
    peer: &str,
    code: ErrorCode,
    message: &str,
) -> Result<(), EngineError> {
    let frame = Frame::Error(ErrorFrame {
        code,
        message: message.to_string(),
    });
    let _ = write_frame_exact(stream, peer, false, &frame).await;
    use tokio::io::AsyncWriteExt;
    let _ = stream.shutdown().await;
    Err(EngineError::Peer {
        peer: peer.to_string(),
        code,
        message: format!("refused: {message}"),
    })
}

fn conn_err(peer: &str, what: &str) -> EngineError {
    EngineError::Connection {
        peer: peer.to_string(),
        cause: std::io::Error::other(what.to_string()),
    }
}

/// The default state directory of a server: `$HETCH_CONFIG_DIR/server`, else
/// `$XDG_CONFIG_HOME/hetch/server`, else `~/.config/hetch/server`.
pub fn default_state_dir() -> PathBuf {
    hetch_net::KnownHosts::default_path()
        .parent()
        .unwrap_or(Path::new("."))
        .join("server")
}
