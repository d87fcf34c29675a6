//! Third-party copies ([`Op::Relay`]): a client asks server A to push some of its files
//! to server B, so that the data goes from A to B directly and never through the
//! client (GridFTP's third-party transfer, with A as the active side).
//!
//! - A relays only to destinations its operator allowed ([`RelayPolicy`],
//!   `hetch serve --relay-to`): a token holder must not be able to make A open
//!   connections anywhere it likes.
//! - A pins the key the client names for B and never learns one on first use: the
//!   client, which knows B (its known-hosts file), vouches for it.
//! - B's token travels inside the client's TLS connection to A, is held in memory for
//!   the session only and is never logged.
//! - The client hears [`Frame::Progress`] about once a second, then the push's
//!   per-file errors and its summary, or one error frame; a lost onward session is
//!   reported as [`ErrorCode::Unavailable`] so that the client's retry opens a new
//!   relay, which resumes from what B verified like any push. A client that goes away
//!   ends the relay.

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::io::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use hetch_engine::wire::{read_frame_limited, write_frame_exact};
use hetch_engine::{BoxStream, EngineError, Operand, Options, Progress, Report};
use hetch_net::{Fingerprint, KnownHosts, SocketOptions, TlsClient, Trust};
use hetch_proto::{ErrorCode, ErrorFrame, Frame, Op, RelayProgress, SessionRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client::{is_transient, open_control, open_session, ClientConfig};

/// How often the relaying server tells its client how far the push has got.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How long a client waits for any frame from a relaying server before it takes the
/// relay for stalled (progress comes every second while it runs).
const RELAY_SILENCE: Duration = Duration::from_secs(60);

/// How long the relaying server gives the destination to set up the onward session.
const ONWARD_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest control frame a client takes from a relaying server (errors and
/// summaries are small; a hostile server must not make the client allocate more).
const MAX_RELAY_FRAME: usize = 1 << 20;

/// Which destinations a server pushes to when a client asks it to relay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RelayPolicy {
    /// None: relays are refused (the default).
    #[default]
    Off,
    /// Only these `host:port` (lower-case host).
    To(Vec<String>),
    /// Any destination (for a server whose network reaches only other data movers).
    Any,
}

impl RelayPolicy {
    /// The policy of `hetch serve --relay-to` values: `any`, or `HOST[:PORT]` each
    /// (port 7878 when left out). No values: relays are refused.
    pub fn parse(values: &[String], default_port: u16) -> Result<RelayPolicy, String> {
        if values.is_empty() {
            return Ok(RelayPolicy::Off);
        }
        if values.iter().any(|v| v == "any") {
            return match values.len() {
                1 => Ok(RelayPolicy::Any),
                _ => Err("--relay-to any cannot be combined with hosts".into()),
            };
        }
        let mut hosts = Vec::new();
        for v in values {
            if v.is_empty() || v.len() > hetch_proto::MAX_RELAY_HOST || v.contains('/') {
                return Err(format!("--relay-to {v:?}: expected HOST[:PORT] or 'any'"));
            }
            hosts.push(normalise(v, default_port));
        }
        Ok(RelayPolicy::To(hosts))
    }

    /// Whether a relay to `host` (`host:port`, as the client sent it) is allowed.
    pub fn allows(&self, host: &str) -> bool {
        match self {
            RelayPolicy::Off => false,
            RelayPolicy::Any => true,
            RelayPolicy::To(hosts) => hosts.iter().any(|h| *h == host.to_ascii_lowercase()),
        }
    }
}

/// `host:port` with a lower-case host, adding `default_port` when there is none.
fn normalise(v: &str, default_port: u16) -> String {
    let has_port = match v.strip_prefix('[') {
        Some(rest) => rest.contains("]:"),
        None => v.contains(':'),
    };
    let v = v.to_ascii_lowercase();
    match has_port {
        true => v,
        false => format!("{v}:{default_port}"),
    }
}

/// What the relaying server needs to run one relay session.
pub(crate) struct RelayRun {
    /// The client's control connection.
    pub control: BoxStream,
    /// The client, for messages.
    pub peer: String,
    /// The client's request; its op is the relay.
    pub req: SessionRequest,
    /// The session's engine settings, as for a pull from this server.
    pub opts: Options,
    /// What to send, resolved under this server's root.
    pub operands: Vec<Operand>,
    /// Socket tuning of the onward connections.
    pub socket: SocketOptions,
    /// The welcome to send once the relay starts.
    pub welcome: Frame,
    /// What the push moves, as it goes (read by the server's metrics too).
    pub progress: Arc<Progress>,
}

/// Serves one relay session: welcomes the client, pushes `operands` to the target as a
/// client of it, and reports to the client until the push ends or the client leaves.
pub(crate) async fn serve(run: RelayRun) -> Result<Report, EngineError> {
    let RelayRun {
        mut control,
        peer,
        req,
        opts,
        operands,
        socket,
        welcome,
        progress,
    } = run;
    let Op::Relay { to, .. } = &req.op else {
        unreachable!("serve is called for relay sessions only");
    };
    let target = to.host.clone();
    let cfg = ClientConfig {
        token: to.token.clone(),
        fingerprint: Some(Fingerprint(to.fingerprint)),
        known_hosts: None,
        socket,
        timeout: ONWARD_TIMEOUT,
        opened: Default::default(),
        autotune: None,
        reuse: None,
    };
    let onward = SessionRequest {
        op: Op::Push {
            dest: to.dest.clone(),
            sources: operands.len() as u32,
        },
        ..req.clone()
    };
    write_frame_exact(&mut control, &peer, false, &welcome).await?;
    let push = async {
        let target = target.as_str();
        let transport = open_session(target, &cfg, onward)
            .await
            .map_err(|e| relay_error(target, &e))?;
        hetch_engine::run_source_from(opts, operands, transport, progress.clone())
            .await
            .map_err(|e| relay_error(target, &anyhow::Error::from(e)))
    };
    let (mut from_client, mut to_client) = tokio::io::split(control);
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    tick.tick().await;
    let mut byte = [0u8; 1];
    tokio::pin!(push);
    let result = loop {
        tokio::select! {
            r = &mut push => break r,
            _ = tick.tick() => {
                let frame = Frame::Progress(marker(&progress));
                write_frame_exact(&mut to_client, &peer, false, &frame).await?;
            }
            // The client sends nothing after its hello: anything, or the end of the
            // connection, means it has gone (or broken the protocol). The push stops;
            // what B verified stays for a later relay to resume.
            _ = from_client.read(&mut byte) => {
                return Err(EngineError::Connection {
                    peer: peer.clone(),
                    cause: std::io::Error::other("the client left; relay stopped"),
                });
            }
        }
    };
    let mut control = from_client.unsplit(to_client);
    match result {
        Ok(report) => {
            for (i, message) in report.errors.iter().enumerate() {
                let frame = Frame::FileError {
                    file: i as u64,
                    message: message.clone(),
                };
                write_frame_exact(&mut control, &peer, false, &frame).await?;
            }
            let done = Frame::Finished(report.summary);
            write_frame_exact(&mut control, &peer, false, &done).await?;
            let _ = control.shutdown().await;
            Ok(report)
        }
        Err(e) => {
            let frame = Frame::Error(e.clone());
            let _ = write_frame_exact(&mut control, &peer, false, &frame).await;
            let _ = control.shutdown().await;
            Err(EngineError::Peer {
                peer: to.host.clone(),
                code: e.code,
                message: e.message,
            })
        }
    }
}

/// The error frame for a failed onward push: [`ErrorCode::Unavailable`] when another
/// session may get past it (the client's retry then opens a new relay), the failure's
/// own code otherwise; the message names the destination.
fn relay_error(target: &str, e: &anyhow::Error) -> ErrorFrame {
    let code = match is_transient(e) {
        true => ErrorCode::Unavailable,
        false => e
            .chain()
            .find_map(|c| c.downcast_ref::<EngineError>())
            .map_or(ErrorCode::Other, |e| e.to_frame().code),
    };
    let changed = e.chain().find_map(|c| match c.downcast_ref() {
        Some(hetch_net::NetError::HostKeyChanged { actual, .. }) => Some(*actual),
        _ => None,
    });
    let message = match changed {
        // The pin came from the client, not from this server's flags.
        Some(actual) => format!(
            "relay to {target}: it presented key {actual}, not the one the client named \
             (--dest-fingerprint or its known-hosts file); refusing to connect"
        ),
        None => format!("relay to {target}: {e:#}"),
    };
    let message = hetch_proto::escape_text(&message);
    ErrorFrame { code, message }
}

/// The relay's counters as a progress frame.
fn marker(p: &Progress) -> RelayProgress {
    RelayProgress {
        files: p.files.load(Relaxed),
        total_files: p.total_files.load(Relaxed),
        bytes: p.bytes.load(Relaxed),
        total_bytes: p.total_bytes.load(Relaxed),
        skipped: p.skipped.load(Relaxed),
        skipped_bytes: p.skipped_bytes.load(Relaxed),
        failed: p.failed.load(Relaxed),
        retried_blocks: p.retried_blocks.load(Relaxed),
    }
}

/// Client side: asks the server at `host` to relay (`req.op` is an [`Op::Relay`]),
/// shows its progress in `progress`, and returns the onward push's report. An error
/// the server reports as [`ErrorCode::Unavailable`] is transient for
/// [`is_transient`].
pub async fn relay(
    host: &str,
    cfg: &ClientConfig,
    req: SessionRequest,
    progress: &Progress,
) -> anyhow::Result<Report> {
    let mut control = open_control(host, cfg, req).await?;
    let mut errors = Vec::new();
    loop {
        let frame = tokio::time::timeout(
            RELAY_SILENCE,
            read_frame_limited(&mut control, host, MAX_RELAY_FRAME),
        )
        .await
        .map_err(|_| EngineError::Stalled {
            peer: host.to_string(),
            secs: RELAY_SILENCE.as_secs(),
        })??;
        match frame {
            Frame::Progress(p) => show(progress, &p),
            Frame::KeepAlive => {}
            Frame::FileError { message, .. } if errors.len() < MAX_ERRORS => {
                errors.push(hetch_proto::escape_text(&message));
            }
            Frame::FileError { .. } => {}
            Frame::Finished(summary) => {
                return Ok(Report {
                    summary,
                    errors,
                    ..Report::default()
                })
            }
            Frame::Error(e) => {
                return Err(EngineError::Peer {
                    peer: host.to_string(),
                    code: e.code,
                    message: hetch_proto::escape_text(&e.message),
                }
                .into())
            }
            other => {
                return Err(anyhow!(
                    "{host}: unexpected {} frame during a relay",
                    other.kind().name()
                ))
            }
        }
    }
}

/// Most per-file error lines a client keeps from a relay (the count is in the summary).
const MAX_ERRORS: usize = 1000;

/// Shows a relay's counters as this run's own.
fn show(progress: &Progress, p: &RelayProgress) {
    let set = |c: &std::sync::atomic::AtomicU64, v: u64| c.store(v, Relaxed);
    set(&progress.files, p.files);
    set(&progress.total_files, p.total_files);
    set(&progress.bytes, p.bytes);
    set(&progress.total_bytes, p.total_bytes);
    set(&progress.skipped, p.skipped);
    set(&progress.skipped_bytes, p.skipped_bytes);
    set(&progress.retried_blocks, p.retried_blocks);
}

/// The key `host` must present, for a relaying server to pin: `fingerprint` when
/// given, else the known-hosts entry, else learned now on first use (a TLS handshake
/// and the server's hetch preamble, then recorded) as for any first connection.
pub async fn server_key(
    host: &str,
    fingerprint: Option<Fingerprint>,
    known_hosts: Option<&std::path::Path>,
    socket: &SocketOptions,
) -> anyhow::Result<Fingerprint> {
    if let Some(fp) = fingerprint {
        return Ok(fp);
    }
    let kh = KnownHosts {
        path: known_hosts.map_or_else(KnownHosts::default_path, |p| p.to_path_buf()),
    };
    let tls = TlsClient::new(host, Trust::KnownHosts(kh))?;
    if let Some(fp) = tls.pinned() {
        return Ok(fp);
    }
    let mut s = hetch_net::connect(host, socket, Some(&tls)).await?;
    hetch_engine::wire::read_preamble_exact(&mut s, host)
        .await
        .map_err(|e| crate::client::preamble_failed(host, e))?;
    if let Some(fp) = tls.record_learned()? {
        _ = writeln!(
            std::io::stderr(),
            "hetch: first connection to {host}: trusting its key {fp} from now on"
        );
    }
    tls.pinned()
        .ok_or_else(|| anyhow!("{host}: no key learned from the handshake"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_match_hosts_exactly() {
        assert_eq!(RelayPolicy::parse(&[], 7878), Ok(RelayPolicy::Off));
        assert!(!RelayPolicy::Off.allows("b:7878"));
        let any = RelayPolicy::parse(&["any".into()], 7878).unwrap();
        assert!(any.allows("anything:1"));
        assert!(RelayPolicy::parse(&["any".into(), "b".into()], 7878).is_err());
        assert!(RelayPolicy::parse(&["b/x".into()], 7878).is_err());
        assert!(RelayPolicy::parse(&["".into()], 7878).is_err());
        let p = RelayPolicy::parse(&["DTN2.example".into(), "[::1]:9000".into()], 7878).unwrap();
        assert!(p.allows("dtn2.example:7878"));
        assert!(p.allows("Dtn2.Example:7878"));
        assert!(p.allows("[::1]:9000"));
        assert!(!p.allows("dtn2.example:7879"));
        assert!(!p.allows("dtn2.example.evil:7878"));
        assert!(!p.allows("[::1]:7878"));
    }
}
