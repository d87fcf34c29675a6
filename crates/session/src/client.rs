//! Opening a session with a server: control connection, handshake, data streams.

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{anyhow, bail};
use futures_util::future::try_join_all;
use hetch_engine::wire::{read_frame_exact, read_preamble_exact, write_frame_exact};
use hetch_engine::{BoxStream, EngineError, Transport};
use hetch_net::SessionKey;
use hetch_net::{KnownHosts, SocketOptions, TlsClient, Trust};
use hetch_proto::{ErrorCode, FilterRequest, Frame, Hello, IntegrityRequest, Op, SessionRequest};

use crate::reuse::{Conns, Lent, Wanted};

/// How the client reaches and trusts a server.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The token to present.
    pub token: Vec<u8>,
    /// Expected fingerprint, if given on the command line.
    pub fingerprint: Option<hetch_net::Fingerprint>,
    /// Known-hosts file (default location when `None`).
    pub known_hosts: Option<PathBuf>,
    /// Socket tuning for every connection.
    pub socket: SocketOptions,
    /// How long the server may take to answer while the session is set up.
    pub timeout: std::time::Duration,
    /// Sessions opened with this configuration so far (shared by its clones), counted
    /// from the moment the server's TLS key was checked on the control connection: a
    /// run recovers from losing a server it has reached (a handshake a damaged link
    /// broke after that), not from one never reached (a wrong address, no server).
    pub opened: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Choose each session's data streams from the round trip measured while
    /// connecting (`None`: the request's streams, as given).
    pub autotune: Option<std::sync::Arc<Autotune>>,
    /// Keep each session's connections after its operation, for the next operation
    /// with the same server, token and settings (`None`: every session its own).
    pub reuse: Option<std::sync::Arc<crate::reuse::SessionPool>>,
}

/// Autotuning of a client's sessions: each session's data streams come from the round
/// trip its control connection's TCP handshake took and this host's socket-buffer
/// limits (see [`hetch_doctor::tune`]); the last choice is kept for the summary.
#[derive(Debug, Default)]
pub struct Autotune {
    floor: u16,
    last: std::sync::Mutex<Option<hetch_doctor::tune::Choice>>,
}

impl Autotune {
    /// Never fewer streams than `floor` (the default).
    pub fn new(floor: u16) -> Self {
        Autotune {
            floor,
            last: Default::default(),
        }
    }

    /// The fewest streams a session gets.
    pub(crate) fn floor(&self) -> u16 {
        self.floor
    }

    /// The choice for a session whose connection took `rtt` to set up.
    fn choose(&self, rtt: std::time::Duration) -> u16 {
        let c = hetch_doctor::tune::choose(rtt, &hetch_doctor::Host::default(), self.floor);
        let streams = c.streams;
        *self.last.lock().expect("autotune lock") = Some(c);
        streams
    }

    /// The choice for the last session opened, if any was.
    pub fn last(&self) -> Option<hetch_doctor::tune::Choice> {
        self.last.lock().expect("autotune lock").clone()
    }
}

/// Finds the client's token: `--token-file`, else `HETCH_TOKEN`. Short tokens are
/// refused here too, so a weak one is noticed before it is sent anywhere.
pub fn load_token(token_file: Option<&PathBuf>) -> anyhow::Result<Vec<u8>> {
    if let Some(p) = token_file {
        return Ok(hetch_net::read_token_file(p)?);
    }
    match std::env::var("HETCH_TOKEN") {
        Ok(t) if !t.trim().is_empty() => {
            let token = t.trim().as_bytes().to_vec();
            hetch_net::check_token_len(&token).map_err(|e| anyhow!("HETCH_TOKEN: {e}"))?;
            Ok(token)
        }
        _ => bail!("no token: set HETCH_TOKEN or pass --token-file (the server prints where its token file is)"),
    }
}

/// Finds the destination server's token of a copy between two servers (which the
/// source server presents there): `--dest-token-file`, else `HETCH_DEST_TOKEN`, else
/// none (the source server's token is used). Short tokens are refused, as by
/// [`load_token`].
pub fn load_dest_token(token_file: Option<&PathBuf>) -> anyhow::Result<Option<Vec<u8>>> {
    if let Some(p) = token_file {
        return Ok(Some(hetch_net::read_token_file(p)?));
    }
    match std::env::var("HETCH_DEST_TOKEN") {
        Ok(t) if !t.trim().is_empty() => {
            let token = t.trim().as_bytes().to_vec();
            hetch_net::check_token_len(&token).map_err(|e| anyhow!("HETCH_DEST_TOKEN: {e}"))?;
            Ok(Some(token))
        }
        _ => Ok(None),
    }
}

/// The session request for `op` with the engine options `opts`: what the server is to
/// apply on its side (block size, checks, tuning of its data sockets from `socket`,
/// filters, mirroring).
pub fn session_request(
    op: Op,
    opts: &hetch_engine::Options,
    streams: u16,
    encrypt_data: bool,
    socket: Option<&SocketOptions>,
    filter: FilterRequest,
) -> SessionRequest {
    SessionRequest {
        op,
        streams,
        encrypt_data,
        block_size: opts.block_size as u32,
        congestion: socket.and_then(|s| s.congestion.clone()),
        send_buffer: socket.map_or(0, |s| s.send_buffer),
        recv_buffer: socket.map_or(0, |s| s.recv_buffer),
        rate_limit: opts.rate_limit,
        no_clobber: opts.no_clobber,
        fsync: opts.fsync,
        integrity: IntegrityRequest {
            checksum: opts.checksum.name().to_string(),
            verify: opts.verify,
            schedule: opts.schedule,
            hash_threads: opts.hash_threads.min(u16::MAX as usize) as u16,
            file_digests: opts.file_digests,
            checksum_skip: opts.checksum_skip,
            compare_only: opts.compare_only,
            retry_changed: opts.retry_changed,
            trust_journal: opts.trust_journal,
        },
        preserve_special_modes: opts.preserve_special_modes,
        specials: opts.specials,
        devices: opts.devices,
        hard_links: opts.hard_links,
        xattrs: opts.xattrs,
        acls: opts.acls,
        filter,
        delete: opts.delete,
        compression: opts.compression,
        dry_run: opts.dry_run,
        reuse: false,
        chosen_entries: opts.chosen_entries,
    }
}

/// Connects to `host`, performs the handshake and opens all data streams, giving up
/// after `cfg.timeout` (a server that accepts and then says nothing must not hang us).
/// With [`ClientConfig::reuse`], a session kept from an earlier operation with the same
/// server serves this one if there is one, and this one's is kept in turn.
pub async fn open_session(
    host: &str,
    cfg: &ClientConfig,
    req: SessionRequest,
) -> anyhow::Result<Transport> {
    if let Some(pool) = &cfg.reuse {
        let want = Wanted {
            host,
            cfg,
            encrypt: req.encrypt_data,
            streams: cfg.autotune.as_ref().map_or(req.streams, |a| a.floor()),
        };
        while let Some((key, conns)) = pool.take(&want).await {
            let again = open_again(host, cfg, req.clone(), key.clone(), conns);
            match tokio::time::timeout(cfg.timeout, again).await {
                Ok(Ok((transport, lent))) => {
                    pool.keep(&want, key, lent);
                    pool.count_reused();
                    return Ok(transport);
                }
                // The server answered and refused: as it would a new session.
                Ok(Err(Again::Refused(e))) => return Err(e),
                // The kept connections went away while idle: another, or a new session.
                Ok(Err(Again::Gone)) | Err(_) => continue,
            }
        }
    }
    match tokio::time::timeout(cfg.timeout, open_session_now(host, cfg, req)).await {
        Ok(r) => r,
        Err(_) => Err(NoAnswer {
            host: host.to_string(),
            secs: cfg.timeout.as_secs(),
        }
        .into()),
    }
}

/// Why an operation did not start on kept connections.
pub(crate) enum Again {
    /// The server refused it, saying why.
    Refused(anyhow::Error),
    /// The connections are no longer there.
    Gone,
}

/// The next operation on kept connections: its hello on the control connection, with
/// the token again; the data streams are the ones the session joined.
pub(crate) async fn open_again(
    host: &str,
    cfg: &ClientConfig,
    mut req: SessionRequest,
    key: SessionKey,
    conns: Conns,
) -> Result<(Transport, Lent), Again> {
    req.reuse = true;
    req.streams = conns.data.len() as u16;
    let encrypt = req.encrypt_data;
    let (mut control, data, lent) = crate::reuse::lend(conns);
    let hello = Frame::Hello(Hello::Control {
        token: cfg.token.clone(),
        request: req,
    });
    write_frame_exact(&mut control, host, false, &hello)
        .await
        .map_err(|_| Again::Gone)?;
    let answer = read_frame_exact(&mut control, host)
        .await
        .map_err(|_| Again::Gone)?;
    let w = match refused(host, answer).map_err(Again::Refused)? {
        Frame::Welcome(w) => w,
        _ => {
            return Err(Again::Refused(anyhow!(
                "{host}: unexpected answer to hello"
            )))
        }
    };
    cfg.opened
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let transport = Transport {
        control,
        data,
        peer: host.to_string(),
        data_mac: (!encrypt).then(|| key.for_operation(&w.session).frame_mac_key()),
        lanes: Vec::new(),
        rejoin: None,
    };
    Ok((transport, lent))
}

/// A server that accepted the connection but did not finish setting up the session
/// in time (stopped, overloaded, or not a hetch server).
#[derive(Debug, thiserror::Error)]
#[error("{host}: no answer within {secs} s while setting up the session (is it a hetch server?)")]
pub struct NoAnswer {
    /// host:port
    pub host: String,
    /// The timeout.
    pub secs: u64,
}

/// Connects to `host` for a session on the control connection alone (a relay, a
/// range) and has it welcomed, all within the client's timeout.
pub(crate) async fn open_control(
    host: &str,
    cfg: &ClientConfig,
    req: SessionRequest,
) -> anyhow::Result<BoxStream> {
    let tls = tls_client(host, cfg)?;
    let hello = Frame::Hello(Hello::Control {
        token: cfg.token.clone(),
        request: req,
    });
    let set_up = async {
        let mut control = hetch_net::connect(host, &cfg.socket, Some(&tls)).await?;
        cfg.opened
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let welcome = handshake(&mut control, host, &hello, &tls).await?;
        Ok::<_, anyhow::Error>((control, welcome))
    };
    let (control, welcome) = tokio::time::timeout(cfg.timeout, set_up)
        .await
        .map_err(|_| NoAnswer {
            host: host.to_string(),
            secs: cfg.timeout.as_secs(),
        })??;
    let Frame::Welcome(_) = welcome else {
        bail!("{host}: unexpected answer to hello");
    };
    Ok(control)
}

async fn open_session_now(
    host: &str,
    cfg: &ClientConfig,
    mut req: SessionRequest,
) -> anyhow::Result<Transport> {
    let tls = std::sync::Arc::new(tls_client(host, cfg)?);
    let (mut control, key, rtt) = hetch_net::connect_keyed(host, &cfg.socket, Some(&tls)).await?;
    cfg.opened
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let key = key.ok_or_else(|| anyhow!("{host}: the control connection has no TLS key"))?;
    if let Some(tune) = &cfg.autotune {
        req.streams = tune.choose(rtt);
    }
    req.reuse = cfg.reuse.is_some();
    let streams = req.streams;
    let encrypt = req.encrypt_data;
    let hello = Frame::Hello(Hello::Control {
        token: cfg.token.clone(),
        request: req,
    });
    // Round trips dominate set-up on long links, so the data connections are made
    // (TCP and TLS) while the control hello is answered, and all of them at once: five
    // round trips in all, whatever the number of streams. They start only after the
    // control handshake, so a first-use key is learned once, from one connection.
    let (welcome, mut data) = tokio::try_join!(
        handshake(&mut control, host, &hello, &tls),
        try_join_all((0..streams).map(|_| connect(host, cfg, encrypt.then_some(&tls))))
    )?;
    let Frame::Welcome(w) = welcome else {
        bail!("{host}: unexpected answer to hello");
    };
    // No token on data streams (they may be plain TCP): a proof bound to this
    // control connection's TLS session, worthless for any other session.
    let key = &key;
    try_join_all(data.iter_mut().zip(0..streams).map(|(s, index)| {
        let hello = Frame::Hello(Hello::Data {
            session: w.session,
            index,
            generation: 0,
            proof: key.stream_proof(&w.session, index, 0),
        });
        async move { crate::rejoin::join_stream(s, host, (w.session, &hello), !encrypt).await }
    }))
    .await?;
    let data_mac = (!encrypt).then(|| key.frame_mac_key());
    // A stream lost while the session runs is joined again on a new connection; not
    // on kept connections, which the pool lends whole.
    let rejoin = cfg.reuse.is_none().then(|| {
        std::sync::Arc::new(crate::rejoin::ClientRejoin {
            host: host.to_string(),
            socket: cfg.socket.clone(),
            tls: encrypt.then(|| tls.clone()),
            session: w.session,
            key: key.clone(),
        }) as std::sync::Arc<dyn hetch_engine::Rejoin>
    });
    let (control, data) = match &cfg.reuse {
        Some(pool) => {
            let (control, data, lent) = crate::reuse::lend(Conns { control, data });
            let want = Wanted {
                host,
                cfg,
                encrypt,
                streams: 1,
            };
            pool.keep(&want, key.clone(), lent);
            (control, data)
        }
        None => (control, data),
    };
    Ok(Transport {
        control,
        data,
        peer: host.to_string(),
        data_mac,
        lanes: Vec::new(),
        rejoin,
    })
}

/// The TLS client for `host` under `cfg`'s trust: its `--fingerprint`, else the
/// known-hosts file.
pub(crate) fn tls_client(host: &str, cfg: &ClientConfig) -> anyhow::Result<TlsClient> {
    let trust = match cfg.fingerprint {
        Some(fp) => Trust::Pinned(fp),
        None => Trust::KnownHosts(KnownHosts {
            path: cfg
                .known_hosts
                .clone()
                .unwrap_or_else(KnownHosts::default_path),
        }),
    };
    Ok(TlsClient::new(host, trust)?)
}

async fn connect(
    host: &str,
    cfg: &ClientConfig,
    tls: Option<&TlsClient>,
) -> anyhow::Result<BoxStream> {
    Ok(hetch_net::connect(host, &cfg.socket, tls).await?)
}

/// Sends preamble and hello; returns the server's answer, turning an error frame into a
/// one-line error naming the host. A key learned on first use is recorded only once the
/// server has answered with a hetch preamble and frame: a TLS server that is something
/// else leaves no known-hosts entry.
pub(crate) async fn handshake(
    s: &mut BoxStream,
    host: &str,
    hello: &Frame,
    tls: &TlsClient,
) -> anyhow::Result<Frame> {
    write_frame_exact(s, host, true, hello).await?;
    read_preamble_exact(s, host)
        .await
        .map_err(|e| preamble_failed(host, e))?;
    let answer = read_frame_exact(s, host).await?;
    if let Some(fp) = tls.record_learned()? {
        _ = writeln!(
            std::io::stderr(),
            "hetch: first connection to {host}: trusting its key {fp} from now on"
        );
    }
    refused(host, answer)
}

/// Why the server's preamble did not come: bytes that are not hetch's (another
/// protocol or version) say so; a connection lost or damaged on the way (a TLS record
/// failing its check) is said as that, and another session may get past it.
pub(crate) fn preamble_failed(host: &str, e: EngineError) -> anyhow::Error {
    match e {
        EngineError::Proto { .. } => anyhow::Error::new(e).context(format!(
            "{host} is not a hetch server (or speaks another version)"
        )),
        other => anyhow::Error::new(other).context(format!("{host}: handshake failed")),
    }
}

/// Why a data stream's preamble did not come, from a server that welcomed the
/// session: on a plain stream, bytes that are not a preamble were altered on the way
/// (damage a new session gets past), as a connection closed instead is a loss.
pub(crate) fn data_preamble_failed(host: &str, e: EngineError) -> EngineError {
    match e {
        EngineError::Proto { source, .. } => EngineError::Tampered {
            peer: host.to_string(),
            what: format!("a data stream's preamble: {source}"),
        },
        other => other,
    }
}

/// A server's answer to a hello, an error frame made a one-line error naming the host.
fn refused(host: &str, answer: Frame) -> anyhow::Result<Frame> {
    match answer {
        Frame::Error(e) => {
            let what = match e.code {
                ErrorCode::Auth => "authentication failed (wrong token?)",
                ErrorCode::Version => "protocol version mismatch",
                _ => "refused",
            };
            bail!("{host}: {what}: {}", e.message)
        }
        other => Ok(other),
    }
}

/// Whether another session may get past `e`: the connection was lost, stalled,
/// damaged on the way, refused or unanswered while a server restarts, or the server
/// said it is shutting down.
pub fn is_transient(e: &anyhow::Error) -> bool {
    is_transient_error(e.as_ref())
}

/// [`is_transient`] for any error: whether `e` or one of its causes is a loss another
/// session may get past (the first cause this module knows decides).
pub fn is_transient_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(cause) = next {
        next = cause.source();
        if let Some(e) = cause.downcast_ref::<EngineError>() {
            return e.is_transient() || matches!(e, EngineError::ShuttingDown);
        }
        if let Some(e) = cause.downcast_ref::<hetch_net::NetError>() {
            return matches!(
                e,
                hetch_net::NetError::Connect { .. } | hetch_net::NetError::Tls { .. }
            );
        }
        if cause.downcast_ref::<NoAnswer>().is_some() {
            return true;
        }
    }
    false
}

/// Whether `e` (or a cause) is damage on the way: a TLS record or handshake that failed
/// its checks, a plain frame that failed its MAC. The server answered, so a new
/// session need not wait long for it (see `hetch_copy::retry`).
pub fn is_damage_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(cause) = next {
        next = cause.source();
        if let Some(e) = cause.downcast_ref::<EngineError>() {
            return match e {
                EngineError::Connection { cause, .. } => {
                    cause.kind() == std::io::ErrorKind::InvalidData
                }
                EngineError::Tampered { .. } => true,
                EngineError::Peer { code, .. } => *code == ErrorCode::Damaged,
                _ => false,
            };
        }
        // A handshake's record that failed its check, not a handshake that another
        // kind of server broke off (which says nothing of damage).
        if let Some(hetch_net::NetError::Tls { reason, .. }) = cause.downcast_ref() {
            let reason = reason.to_ascii_lowercase();
            return ["decrypt", "badrecordmac", "decodeerror", "misbehaved"]
                .iter()
                .any(|d| reason.contains(d));
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetch_net::NetError;

    fn lost() -> anyhow::Error {
        anyhow::Error::new(EngineError::Connection {
            peer: "h:1".into(),
            cause: std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        })
    }

    #[test]
    fn transient_errors_are_told_from_final_ones() {
        assert!(is_transient(&lost()));
        assert!(is_transient(&lost().context("pushing to h:1")));
        let stalled = EngineError::Stalled {
            peer: "h".into(),
            secs: 60,
        };
        assert!(is_transient(&anyhow::Error::new(stalled)));
        let leaving = EngineError::Peer {
            peer: "h".into(),
            code: hetch_proto::ErrorCode::Unavailable,
            message: "shutting down".into(),
        };
        assert!(is_transient(&anyhow::Error::new(leaving)));
        let refused = NetError::Connect {
            host: "h:1".into(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        };
        assert!(is_transient(&anyhow::Error::new(refused)));
        let full = EngineError::Peer {
            peer: "h".into(),
            code: hetch_proto::ErrorCode::NoSpace,
            message: "disk full".into(),
        };
        assert!(!is_transient(&anyhow::Error::new(full)));
        assert!(!is_transient(&anyhow::anyhow!("h: authentication failed")));
        let path = EngineError::Destination("not a directory".into());
        assert!(!is_transient(&anyhow::Error::new(path)));
        // Damage a plain data stream's MAC caught, as the server reports it.
        let damaged = EngineError::Tampered {
            peer: "client".into(),
            what: "a data frame has a wrong MAC".into(),
        }
        .to_frame();
        assert_eq!(damaged.code, hetch_proto::ErrorCode::Damaged);
        let reported = EngineError::from_peer("h", damaged);
        assert!(is_transient(&anyhow::Error::new(reported)));
        // A peer whose frames do not decode (over TLS: what it sent) is broken.
        let broken = EngineError::Proto {
            peer: "h".into(),
            source: hetch_proto::ProtoError::UnknownKind(200),
        };
        assert!(!is_transient(&anyhow::Error::new(broken)));
    }

    /// A handshake that a damaged TLS record (or a reset) ends is a lost connection
    /// that another session gets past, not a server of another kind or version.
    #[test]
    fn a_damaged_handshake_is_not_called_another_version() {
        let bad_record = EngineError::Connection {
            peer: "h:1".into(),
            cause: std::io::Error::new(std::io::ErrorKind::InvalidData, "received corrupt message"),
        };
        let e = preamble_failed("h:1", bad_record);
        let line = format!("{e:#}");
        assert!(!line.contains("version"), "{line}");
        assert!(line.starts_with("h:1: handshake failed"), "{line}");
        assert!(is_transient(&e));
        let other = EngineError::Proto {
            peer: "h:1".into(),
            source: hetch_proto::ProtoError::BadMagic,
        };
        let e = preamble_failed("h:1", other);
        assert!(format!("{e:#}").contains("is not a hetch server (or speaks another version)"));
        assert!(!is_transient(&e));
    }
}
