//! `hetch cp`: decides between local copy, push and pull, and runs it.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use std::collections::HashMap;

use hetch_engine::{
    copy_between, run_sink_into, run_source_from, DestSpec, Destination, Manifest, Operand,
    Options, Progress, Report,
};
use hetch_object::{
    AzureConfig, Bucket, BucketStore, GcsConfig, ObjectDest, ObjectLocation, ObjectOrigin,
    ObjectUrl, S3Config, S3Options, Scheme,
};
use hetch_proto::{FilterRequest, Op, Summary};

use crate::client::{open_session, session_request, ClientConfig};
use crate::location::Location;
use crate::retry::{self, Recovery, RetryArgs};
use crate::ui::{print_comparison, print_summary, Display, ProgressView, RunShape};

/// Everything `cp` needs, after flag parsing.
pub struct CopyJob {
    /// Source operands.
    pub sources: Vec<Location>,
    /// Destination operand.
    pub dest: Location,
    /// Engine settings.
    pub opts: Options,
    /// Data streams (when `client` does not autotune them).
    pub streams: u16,
    /// Why the sessions do not autotune their streams, when the user said so.
    pub autotune_off: Option<&'static str>,
    /// The path's rate, when known, for a dry run's prediction.
    pub link_rate: Option<u64>,
    /// TLS on data streams.
    pub encrypt: bool,
    /// Connection settings (token, trust, sockets); only used for remote copies.
    pub client: Option<ClientConfig>,
    /// Print JSON at the end.
    pub json: bool,
    /// How progress is shown while the copy runs.
    pub progress: ProgressView,
    /// Write whole-file digests of the copied files here.
    pub manifest: Option<PathBuf>,
    /// Object store settings from the command line.
    pub s3: S3Options,
    /// How lost sessions are recovered.
    pub retry: RetryArgs,
    /// The `--include`/`--exclude` globs, for a server to apply (`opts.filter` is this
    /// side's compiled copy).
    pub filter: FilterRequest,
    /// The destination operand as typed, to name deleted entries below it.
    pub dest_shown: String,
    /// For each local source, only these entries of it (wire paths) instead of all
    /// of it: a worker's share of a job's listing.
    pub entries: Option<Vec<Vec<Vec<u8>>>>,
    /// A local destination must stay inside this directory (canonical), whatever
    /// symlinks its path holds: a worker's `--root`, as a server's root.
    pub confine_to: Option<PathBuf>,
    /// The destination server of a copy between two servers.
    pub dest_server: DestServer,
}

/// How the source server of a copy between two servers reaches the destination
/// server, which it pushes to directly.
#[derive(Clone, Default)]
pub struct DestServer {
    /// The destination server's token (default: the source server's).
    pub token: Option<Vec<u8>>,
    /// The key it must present (default: the known-hosts file's, learned on first use).
    pub fingerprint: Option<hetch_net::Fingerprint>,
}

/// Outcome of a copy, for the exit code.
pub enum Outcome {
    /// Everything copied.
    Complete,
    /// Some files failed (listed already).
    Partial,
}

impl Outcome {
    /// 0 when complete, 3 when some files failed (or, comparing, differ).
    pub fn exit_code(self) -> std::process::ExitCode {
        match self {
            Outcome::Complete => std::process::ExitCode::SUCCESS,
            Outcome::Partial => std::process::ExitCode::from(3),
        }
    }
}

/// Runs a copy job.
pub async fn run(mut job: CopyJob) -> anyhow::Result<Outcome> {
    let progress = Arc::new(Progress::default());
    let started = Instant::now();
    let manifest = match &job.manifest {
        Some(p) => Some(Arc::new(Manifest::create(p)?)),
        None => None,
    };
    if let Some(m) = &manifest {
        job.opts.file_digests = true;
        job.opts.manifest = Some(m.clone());
    }
    // Warnings (a followed file truncated, rewritten, still open) go out as they happen.
    // So do a mirror's changes, named below the destination operand (already escaped).
    let dest_shown = job.dest_shown.clone();
    progress.set_log(Box::new(move |line: &str| {
        if let Some(w) = line.strip_prefix("warning: ") {
            eprintln!("hetch: warning: {}", hetch_proto::escape_text(w));
        }
        for verb in ["deleted ", "would delete ", "would copy ", "would replace "] {
            if let Some(rel) = line.strip_prefix(verb) {
                eprintln!("{verb}{}", crate::sync::shown_below(&dest_shown, rel));
            }
        }
    }));
    // JSON at the end replaces the bar (not JSON progress lines, which a program asked for).
    let view = match job.progress {
        ProgressView::Bar if job.json => ProgressView::Hidden,
        v => v,
    };
    let display = Display::start(progress.clone(), view);
    let (result, recovered) = recover(&job, &progress, manifest.as_deref()).await;
    display.finish();
    let mut report = match (result, &manifest) {
        (Ok(r), Some(m)) => {
            m.commit()?;
            r
        }
        (Ok(r), None) => r,
        (Err(e), m) => {
            if let Some(m) = m {
                m.abandon();
            }
            return Err(e);
        }
    };
    if job.opts.compare_only {
        // Every session compares everything again: the last one has the whole answer.
        print_comparison(&report, started, job.json, recovered.reconnects);
    } else {
        recovered.merge_into(&mut report.summary);
        print_summary(
            &report,
            &progress,
            started,
            job.json,
            recovered.reconnects,
            &RunShape {
                mirror: job.opts.delete,
                dry_run: job.opts.dry_run,
                autotune: autotune_json(&job),
                predicted: job.opts.dry_run.then(|| predict_copy(&job, &report)),
            },
        );
    }
    Ok(if report.summary.failed > 0 || !report.errors.is_empty() {
        Outcome::Partial
    } else {
        Outcome::Complete
    })
}

/// What the sessions of a run that were lost had done, and how many there were.
#[derive(Default)]
pub(crate) struct Recovered {
    /// Counters of the lost sessions, summed.
    lost: Summary,
    /// Sessions opened again.
    reconnects: u64,
}

impl Recovered {
    /// Adds the lost sessions' work to the last session's summary: the files they
    /// finished count as copied, not as found in place by the last session.
    fn merge_into(&self, s: &mut Summary) {
        s.files += self.lost.files;
        s.skipped = s.skipped.saturating_sub(self.lost.files);
        s.bytes += self.lost.bytes;
        s.retried_blocks += self.lost.retried_blocks;
        s.reverified += self.lost.reverified;
    }
}

/// Runs sessions of `job` until one completes, opening a new one (which resumes from
/// what the destination verified) after each transient failure, as `job.retry` allows.
/// Copies that involve no server run once.
pub(crate) async fn recover(
    job: &CopyJob,
    progress: &Arc<Progress>,
    manifest: Option<&Manifest>,
) -> (anyhow::Result<Report>, Recovered) {
    let mut recovery = Recovery::new(job.retry.clone());
    let mut recovered = Recovered::default();
    loop {
        let e = match dispatch(job, progress.clone()).await {
            Ok(r) => return (Ok(r), recovered),
            Err(e) => e,
        };
        // A server never reached is a mistake to report at once (a wrong address, a
        // server not started), not a loss to recover from.
        let reached = job.client.as_ref().map_or(0, |c| c.opened.load(Relaxed));
        if reached == 0 {
            return (Err(e), recovered);
        }
        let attempt = progress.begin_attempt();
        let Some(wait) = recovery.next_attempt(&e, retry::moved(&attempt)) else {
            return (Err(e), recovered);
        };
        if let Some(m) = manifest {
            if let Err(me) = m.restart() {
                return (Err(me.into()), recovered);
            }
        }
        recovered.lost.files += attempt.files;
        recovered.lost.bytes += attempt.bytes;
        recovered.lost.retried_blocks += attempt.retried_blocks;
        recovered.lost.reverified += attempt.reverified;
        recovered.reconnects = recovery.reconnects;
        progress.warn(&format!(
            "{}; opening a new session in {} s (it resumes what is verified)",
            crate::one_line(&e),
            wait.as_secs()
        ));
        tokio::time::sleep(wait).await;
    }
}

/// The wire paths of a pull's operands (what its entries must lie under), `None` when
/// the sources are not on a server.
fn pull_paths(remote_sources: &[(String, String)]) -> Option<Vec<Vec<u8>>> {
    if remote_sources.is_empty() {
        return None;
    }
    Some(
        remote_sources
            .iter()
            .map(|(_, p)| p.as_bytes().to_vec())
            .collect(),
    )
}

/// Runs one session of `job` (local copy, push or pull; either end may be an object
/// store).
pub async fn dispatch(job: &CopyJob, progress: Arc<Progress>) -> anyhow::Result<Report> {
    let remote_sources: Vec<_> = job
        .sources
        .iter()
        .filter_map(|s| match s {
            Location::Remote { host, path } => Some((host.clone(), path.clone())),
            _ => None,
        })
        .collect();
    let here = job.sources.len() - remote_sources.len();
    if !remote_sources.is_empty() && here > 0 {
        bail!("sources must be all local (or in object stores) or all on one server");
    }
    // Refuse '..' before connecting, naming the operand (the server would refuse too).
    for loc in job.sources.iter().chain(std::iter::once(&job.dest)) {
        if let Location::Remote { host, path } = loc {
            if path.split('/').any(|c| c == "..") {
                bail!(
                    "hetch://{host}/{path}: path escapes the server's root ('..' is not allowed)"
                );
            }
        }
    }
    let mut buckets = Buckets::new(&job.s3);
    let mut operands = Vec::new();
    for (i, s) in job.sources.iter().enumerate() {
        match s {
            Location::Local(p) => {
                std::fs::symlink_metadata(p).with_context(|| format!("{}", p.display()))?;
                operands.push(match job.entries.as_ref().and_then(|e| e.get(i)) {
                    Some(entries) => Operand::Entries {
                        operand: p.clone(),
                        entries: entries.clone(),
                    },
                    None => Operand::Local(p.clone()),
                });
            }
            Location::Object(url) => {
                let loc = buckets.location(url)?;
                // Like a missing local operand: one clear error before anything starts
                // (this also finds bad credentials and missing buckets).
                if !loc.bucket.exists(&url.key).await? {
                    bail!("{url}: no such object (nor objects under it)");
                }
                operands.push(Operand::Origin(Arc::new(ObjectOrigin::new(loc))));
            }
            Location::Remote { .. } => {}
        }
    }
    let n = job.sources.len() as u32;
    let req = |op: Op| {
        let socket = job.client.as_ref().map(|c| &c.socket);
        let (streams, encrypt) = (job.streams, job.encrypt);
        session_request(op, &job.opts, streams, encrypt, socket, job.filter.clone())
    };
    let pull = |host: &String| -> anyhow::Result<Op> {
        if remote_sources.iter().any(|(h, _)| h != host) {
            bail!("all remote sources must be on the same server");
        }
        Ok(Op::Pull {
            sources: pull_paths(&remote_sources).unwrap_or_default(),
        })
    };
    let cfg = || {
        job.client
            .as_ref()
            .expect("client config for remote copies")
    };
    let streams = job.streams as usize;
    match &job.dest {
        Location::Local(dest) => {
            let mut opts = job.opts.clone();
            opts.pulled = pull_paths(&remote_sources);
            let spec = DestSpec {
                path: dest.clone(),
                sources: n,
                trailing_slash: dest.as_os_str().as_bytes().ends_with(b"/"),
                confine_to: job.confine_to.clone(),
                as_operand: job.opts.compare_only,
            };
            if let Some((host, _)) = remote_sources.first() {
                let transport = open_session(host, cfg(), req(pull(host)?)).await?;
                return Ok(hetch_engine::run_sink(opts, spec, transport, progress).await?);
            }
            let dest = Destination::Local(spec);
            Ok(copy_between(job.opts.clone(), operands, dest, streams, progress).await?)
        }
        Location::Object(url) => {
            let mut opts = job.opts.clone();
            opts.pulled = pull_paths(&remote_sources);
            let dest = ObjectDest {
                location: buckets.location(url)?,
                sources: n,
                as_operand: job.opts.compare_only,
                state_dir: hetch_object::journal::default_state_dir(),
            };
            let store = Arc::new(BucketStore::new(dest, opts.effective_buffer_memory()));
            if let Some((host, _)) = remote_sources.first() {
                let transport = open_session(host, cfg(), req(pull(host)?)).await?;
                return Ok(run_sink_into(opts, store, transport, progress).await?);
            }
            let dest = Destination::Store(store);
            Ok(copy_between(job.opts.clone(), operands, dest, streams, progress).await?)
        }
        Location::Remote { host, path } => {
            if let Some((source, _)) = remote_sources.first() {
                let op = relay_op(job, pull(source)?, host, path).await?;
                let relay = hetch_session::relay(source, cfg(), req(op), &progress);
                // Leaving ends the relay at the source server too.
                let stop = job.opts.stop.clone();
                let stopped = async move {
                    match stop {
                        Some(s) => s.raised().await,
                        None => std::future::pending().await,
                    }
                };
                return tokio::select! {
                    r = relay => r,
                    _ = stopped => bail!("{source}: relay stopped"),
                };
            }
            let op = Op::Push {
                dest: path.as_bytes().to_vec(),
                sources: n,
            };
            let transport = open_session(host, cfg(), req(op)).await?;
            Ok(run_source_from(job.opts.clone(), operands, transport, progress).await?)
        }
    }
}

/// The request to the source server of a copy between two servers (`pull` names its
/// sources) to push them to the server `host`, under `path` there.
async fn relay_op(job: &CopyJob, pull: Op, host: &str, path: &str) -> anyhow::Result<Op> {
    let Op::Pull { sources } = pull else {
        unreachable!("a pull of the remote sources")
    };
    if job.opts.manifest.is_some() {
        bail!("--manifest is not available for copies between two servers yet");
    }
    let client = job
        .client
        .as_ref()
        .expect("client config for remote copies");
    let fingerprint = hetch_session::server_key(
        host,
        job.dest_server.fingerprint,
        client.known_hosts.as_deref(),
        &client.socket,
    )
    .await?;
    Ok(Op::Relay {
        sources,
        to: Box::new(hetch_proto::RelayTarget {
            host: host.to_string(),
            fingerprint: fingerprint.0,
            token: job
                .dest_server
                .token
                .clone()
                .unwrap_or_else(|| client.token.clone()),
            dest: path.as_bytes().to_vec(),
        }),
    })
}

/// Bucket clients, one per bucket, from one resolved configuration per provider.
pub struct Buckets<'a> {
    opts: &'a S3Options,
    s3: Option<S3Config>,
    open: HashMap<(Scheme, String), Arc<Bucket>>,
}

impl<'a> Buckets<'a> {
    /// No configuration is resolved until an operand of its provider needs it.
    pub fn new(opts: &'a S3Options) -> Self {
        Buckets {
            opts,
            s3: None,
            open: HashMap::new(),
        }
    }

    /// The client and location of `url`.
    pub fn location(&mut self, url: &ObjectUrl) -> anyhow::Result<ObjectLocation> {
        let at = (url.scheme, url.bucket.clone());
        let bucket = match self.open.get(&at) {
            Some(b) => b.clone(),
            None => {
                let b = Arc::new(match url.scheme {
                    Scheme::S3 => {
                        if self.s3.is_none() {
                            self.s3 = Some(S3Config::resolve(self.opts)?);
                        }
                        let cfg = self.s3.as_ref().expect("resolved above");
                        Bucket::open(cfg, &url.bucket)?
                    }
                    Scheme::Gcs => Bucket::open_gcs(&GcsConfig::resolve(), &url.bucket)?,
                    Scheme::Azure => Bucket::open_azure(&AzureConfig::resolve()?, &url.bucket)?,
                });
                self.open.insert(at, b.clone());
                b
            }
        };
        Ok(ObjectLocation {
            bucket,
            url: url.clone(),
        })
    }
}

/// How the job's sessions chose their data streams, for `--json`: the last session's
/// autotuning choice, or the fixed count and why.
pub fn autotune_json(job: &CopyJob) -> serde_json::Value {
    let tune = job.client.as_ref().and_then(|c| c.autotune.as_ref());
    match (tune.and_then(|t| t.last()), job.autotune_off) {
        (Some(choice), _) => {
            let mut v = serde_json::to_value(choice).expect("a plain struct");
            v["enabled"] = true.into();
            v
        }
        (None, why) => serde_json::json!({
            "enabled": false,
            "streams": job.streams,
            "why": why.unwrap_or(match (&job.client, tune) {
                (None, _) => "no server: nothing to tune",
                (Some(_), Some(_)) => "no session was opened",
                (Some(_), None) => "not autotuned",
            }),
        }),
    }
}

/// A dry run's prediction of the copy it stands for: what would be copied or replaced,
/// at this machine's fitted costs, over the round trip and windows autotuning measured
/// (a path of unknown rate).
fn predict_copy(job: &CopyJob, report: &Report) -> hetch_doctor::predict::Prediction {
    use hetch_doctor::predict::{predict, Rates, Shape};
    let w = &report.would;
    // Sizes a server reported: a hostile one may send any.
    let shape = Shape {
        files: w.copy.saturating_add(w.replace),
        bytes: w.copy_bytes.saturating_add(w.replace_bytes),
    };
    let tuned = job
        .client
        .as_ref()
        .and_then(|c| c.autotune.as_ref())
        .and_then(|t| t.last());
    let (rtt, window) = match tuned {
        Some(c) => (
            std::time::Duration::from_secs_f64(c.rtt_ms / 1e3),
            c.window_rate,
        ),
        None => (std::time::Duration::ZERO, None),
    };
    predict(shape, &Rates::fitted(job.link_rate, rtt, window))
}
