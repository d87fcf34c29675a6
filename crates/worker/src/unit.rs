//! Running one unit the service handed this worker: the context every kind of unit
//! needs (the service, the root, the servers' tokens and keys), the checks made before
//! anything is opened, and the dispatch on the unit's kind to its [`Runner`]: a batch
//! of files (`files.rs`), a block range of a large file or its commit (`split.rs`), a
//! source of a copy between two servers (`relay.rs`), a source of a streaming job
//! followed while it is written (`stream.rs`); here, or as the unit's user's
//! local account (`account.rs`).

use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail};
use hetch_copy::CopyJob;
use hetch_engine::{Options, Progress, RateLimiter, StopSignal, Verify};
use hetch_jobs::UnitSpec;
use hetch_service_api::client::Client;
use hetch_service_api::{ClaimedUnit, FileRow, FilesQuery, FinishRequest, JobSpec, RangeReport};
use hetch_session::location::Location;

use crate::claim_loop::Execute;
use crate::log::Log;
use crate::servers::Preloaded;

/// What a unit of one kind did: the files and bytes it moved, and what a range into
/// an object store put in the file's upload (which its finish reports).
#[derive(Debug, Default)]
pub(crate) struct Done {
    pub files: u64,
    pub bytes: u64,
    pub range: Option<RangeReport>,
}

impl Done {
    /// `files` and `bytes` moved, nothing uploaded in parts.
    pub(crate) fn moved(files: u64, bytes: u64) -> Done {
        Done {
            files,
            bytes,
            range: None,
        }
    }
}

/// A future a [`Runner`] returns.
pub(crate) type Running<'a> = Pin<Box<dyn Future<Output = anyhow::Result<Done>> + Send + 'a>>;

/// How a unit runs: stopping when `stop` is raised, at its share `rate` of its job's
/// rate, counting what it moves into `progress`.
pub struct Pace {
    /// Raised when the unit must stop (its lease lost or not kept).
    pub stop: StopSignal,
    /// Its share of its job's rate limit, as the service last said.
    pub rate: Arc<RateLimiter>,
    /// What it moved so far.
    pub progress: Arc<Progress>,
}

/// A unit this worker stopped, as its log and its report say.
pub(crate) const STOPPED_HERE: &str = "stopped by this worker: the service no longer holds \
     the unit for it (its lease ran out or could not be kept, or its job was cancelled)";

/// How one kind of unit runs ([`UnitSpec`]'s: files, range, commit, relay), once its
/// job's access was checked, paced by a [`Pace`].
pub(crate) trait Runner: Sync {
    /// Runs unit `u` with what `ctx` gives.
    fn run<'a>(&'a self, ctx: &'a UnitContext, u: &'a ClaimedUnit, p: Pace) -> Running<'a>;
}

/// The runner of units of kind `unit`.
fn runner_of(unit: &UnitSpec) -> &'static dyn Runner {
    match unit {
        UnitSpec::Files { .. } => &crate::files::FilesUnit,
        UnitSpec::Range { .. } | UnitSpec::Commit { .. } => &crate::split::SplitUnit,
        UnitSpec::Relay { .. } => &crate::relay::RelayUnit,
        UnitSpec::Stream { .. } => &crate::stream::StreamUnit,
        UnitSpec::Delete {} => &crate::mirror::DeleteUnit,
    }
}

/// What a unit needs besides itself.
#[derive(Clone)]
pub struct UnitContext {
    pub(crate) api: Arc<Client>,
    pub(crate) root: PathBuf,
    pub(crate) dest_token: Option<PathBuf>,
    pub(crate) source_token: Option<PathBuf>,
    pub(crate) known_hosts: Option<PathBuf>,
    /// The tokens and pinned keys a unit run as a user's account needs, read before
    /// it became the account (`account.rs`); `None`: read from their files.
    pub(crate) preloaded: Option<Arc<Preloaded>>,
    /// The arguments with which this executable runs one unit as a local account
    /// (`hetch worker-unit`).
    pub(crate) account_child: Arc<[OsString]>,
    /// This worker's name (as it claims units), which the calls a unit makes about
    /// itself give (`POST /api/work/upload`, `/api/work/ranges`).
    pub(crate) worker: String,
    /// Where a unit's failure is said whole (the service is told it as the job's
    /// user sees it).
    pub(crate) log: Log,
    /// Sessions with servers kept from one unit to the next: a worker's units of a job
    /// run one after another over the same TLS connections to their destination.
    pub(crate) sessions: Arc<hetch_session::SessionPool>,
    /// The fewest data streams a small unit's session autotunes to (see
    /// [`stream_floor`]).
    pub(crate) stream_floor: u16,
}

/// The fewest data streams each small unit's session opens when this worker runs
/// `units` at once: `hetch cp`'s 4 shared among them, so that a worker's units together
/// open about as many connections as one `hetch cp` (more connections of the same host
/// share its link and its CPUs no better, and each costs wake-ups and packets at both
/// ends). Autotuning still opens more where the round trip needs them, and a large
/// unit ([`SMALL_UNIT`] or more) gets all 4.
pub(crate) fn stream_floor(units: u32) -> u16 {
    (hetch_copy::DEFAULT_STREAMS / units.clamp(1, 4) as u16).max(1)
}

/// Units of files smaller than this share the default streams with the units running
/// beside them ([`stream_floor`]): they end before more streams would help.
pub(crate) const SMALL_UNIT: u64 = 256 << 20;

impl UnitContext {
    /// A context for units of the service `api`, with sources below `root`, the
    /// destination servers' token in `dest_token`, the source servers' in
    /// `source_token` (else `dest_token`'s), their keys in `known_hosts`.
    pub fn new(
        api: Arc<Client>,
        root: PathBuf,
        dest_token: Option<PathBuf>,
        source_token: Option<PathBuf>,
        known_hosts: Option<PathBuf>,
    ) -> UnitContext {
        UnitContext {
            api,
            root,
            dest_token,
            source_token,
            known_hosts,
            preloaded: None,
            account_child: Arc::new([]),
            worker: String::new(),
            log: Log::stderr("hetch worker: ".into()),
            sessions: Arc::default(),
            stream_floor: hetch_copy::DEFAULT_STREAMS,
        }
    }

    /// Runs unit `u` in this process, as [`Execute::execute`] says.
    pub(crate) async fn run_here(&self, u: ClaimedUnit, p: Pace) -> FinishRequest {
        // What the engine wrote at the destination: a file found in place writes
        // nothing (the service bounds it by the unit's size).
        let counted = p.progress.clone();
        let stop = p.stop.clone();
        let done = match self.check_access(&u.spec) {
            Err(e) => Err(e),
            Ok(()) => {
                let runner = runner_of(&u.unit);
                runner.run(self, &u, p).await
            }
        };
        match done {
            Ok(d) => FinishRequest {
                written: Some(counted.bytes.load(std::sync::atomic::Ordering::Relaxed)),
                range: d.range,
                ..FinishRequest::done(&u.job, u.seq, d.files, d.bytes)
            },
            Err(e) => {
                // Stopped from here, the session ends as a server's shutting down
                // would: said as what it is.
                let line = match stop.is_raised() {
                    true => STOPPED_HERE.to_string(),
                    false => hetch_copy::one_line(e.as_ref()),
                };
                self.log
                    .say(&format!("unit {} of job {}: {line}", u.seq, u.job));
                FinishRequest::failed(&u.job, u.seq, self.as_users_see(&line))
            }
        }
    }

    /// An error line as the job's user sees it: paths relative to the job's root,
    /// never this worker's own root or home directory (the worker's log has it whole).
    fn as_users_see(&self, line: &str) -> String {
        let mut out = line.replace(&format!("{}/", self.root.display()), "");
        out = out.replace(&self.root.display().to_string(), ".");
        if let Some(home) = std::env::var_os("HOME").filter(|h| h.len() > 1) {
            let home = home.to_string_lossy().trim_end_matches('/').to_string();
            out = out.replace(&format!("{home}/"), "~/");
        }
        out
    }

    /// Rows `from..to` of job `job`'s listing. Asked again while the service cannot
    /// be reached: a unit is not failed by a moment's outage, and one cut off for
    /// good is stopped by its lease (`stop`) like a unit that is copying.
    pub(crate) async fn listing(
        &self,
        job: &str,
        from: u64,
        to: u64,
        stop: &StopSignal,
    ) -> anyhow::Result<Vec<FileRow>> {
        let mut wait = Duration::from_millis(100);
        loop {
            match self.api.files(job, FilesQuery { from, to }).await {
                Err(e) if e.is_transient() && !stop.is_raised() => {
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = stop.clone().raised() => {}
                    }
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
                Err(e) if stop.is_raised() => bail!("stopped: {e}"),
                other => return Ok(other?),
            }
        }
    }

    /// What the service recorded the job may touch (its submitter's identity map
    /// entry), checked here again before anything is opened: its sources and
    /// destination by name, and where they lead on this worker's view of the root.
    fn check_access(&self, spec: &JobSpec) -> anyhow::Result<()> {
        if let Some(access) = &spec.access {
            access.check_spec(spec).map_err(anyhow::Error::msg)?;
            hetch_service_api::access::check_paths(&self.root, spec).map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }

    /// The directory a unit of `spec` writes within, through handles that no symlink
    /// leads out of: the root, or, for a job with an access, the write path its local
    /// destination is under (resolved now).
    pub(crate) fn write_confinement(&self, spec: &JobSpec) -> anyhow::Result<PathBuf> {
        let Some(access) = &spec.access else {
            return Ok(self.root.clone());
        };
        if hetch_service_api::is_url(&spec.dest) {
            return Ok(self.root.clone());
        }
        let allowed = access
            .write_root(&spec.dest)
            .ok_or_else(|| anyhow!("dest {:?} is not the job's to write", spec.dest))?;
        hetch_service_api::Access::resolve(&self.root, allowed, &spec.dest)
            .map_err(anyhow::Error::msg)
    }

    /// Source operand `s` of job `spec` below the root, checked to lead nowhere
    /// outside it (or outside the read path of the job's access that covers it), with
    /// the directory its reads are confined to: the root, or that read path (see
    /// `Options::read_within`). The check gives the error a user can act on; the
    /// confinement holds whatever is swapped onto the way after it.
    pub(crate) fn source_within(
        &self,
        spec: &JobSpec,
        s: &str,
    ) -> anyhow::Result<(PathBuf, PathBuf)> {
        if let Some(access) = &spec.access {
            return access
                .source_within(&self.root, s)
                .map_err(anyhow::Error::msg);
        }
        let path = self.root.join(s);
        match std::fs::canonicalize(&path) {
            Ok(real) if real.starts_with(&self.root) => Ok((self.root.clone(), path)),
            Ok(_) => bail!("source {s} leads outside the root"),
            Err(e) => bail!("source {s}: {e}"),
        }
    }
    /// The `hetch cp` of a unit of job `spec`: `sources` into `dest`, its sessions with
    /// a server `client`'s, autotuned to no fewer than `floor` streams.
    pub(crate) fn unit_copy(
        &self,
        spec: &JobSpec,
        sources: Vec<Location>,
        dest: Location,
        opts: Options,
        (client, floor): (Option<hetch_session::client::ClientConfig>, u16),
    ) -> anyhow::Result<CopyJob> {
        let (client, autotune_off) = with_autotune(client, spec.options.streams, floor);
        Ok(CopyJob {
            opts,
            streams: spec.options.streams.unwrap_or(hetch_copy::DEFAULT_STREAMS),
            autotune_off,
            client,
            // With several destination nodes, a unit that loses its node fails at
            // once: the service gives it again, to the next node, rather than this
            // run waiting for the lost one to come back.
            // With one, a few sessions in a row without progress: the service runs a
            // failed unit again itself, with its own pauses, rather than one worker
            // holding it for the whole of --retry-for.
            retry: match spec.dest_nodes.is_empty() {
                true => hetch_copy::RetryPolicy {
                    retries: 5,
                    ..Default::default()
                },
                false => hetch_copy::RetryPolicy::NEVER,
            },
            confine_to: Some(self.write_confinement(spec)?),
            ..CopyJob::new(sources, dest)
        })
    }

    /// Unit `u`'s destination (its node of the job's destination nodes), to copy
    /// *into* always: every unit must agree on where entries go, whichever of them
    /// creates the destination directory.
    pub(crate) fn dest_of(&self, u: &ClaimedUnit) -> anyhow::Result<Location> {
        let named = u.spec.dest_for(u.seq, u.attempts);
        let mut dest = Location::parse(&named).map_err(|e| anyhow!("{e}"))?;
        match &mut dest {
            Location::Local(p) => *p = hetch_service_api::dest::local_dest(&self.root, &named),
            Location::Remote { path, .. } if !path.ends_with('/') => path.push('/'),
            _ => {}
        }
        Ok(dest)
    }
}

impl Execute for UnitContext {
    /// Runs the unit here, or as its user's local account (`account.rs`).
    async fn execute(self, u: ClaimedUnit, p: Pace) -> FinishRequest {
        match crate::account::account_of(&u).map(str::to_string) {
            Some(account) => self.run_as(u, &account, p).await,
            None => self.run_here(u, p).await,
        }
    }
}

/// Runs a unit's copy `job` to its end, counting into `progress`: its report, or the
/// first failed entry's line (the engine's own, a mirror's `deletions skipped: ...`
/// included), or how many failed.
pub(crate) async fn copy_through(
    job: &CopyJob,
    progress: &Arc<Progress>,
) -> anyhow::Result<hetch_engine::Report> {
    let (result, _) = hetch_copy::recover(job, progress, None).await;
    let report = result?;
    if let Some(e) = report.errors.first() {
        bail!("{e}");
    }
    if report.summary.failed > 0 {
        bail!("{} files failed", report.summary.failed);
    }
    Ok(report)
}

/// The engine settings of a job's unit: its copy options, stopped by `stop`, at its
/// share `rate` of the job's rate limit.
pub(crate) fn unit_options(
    spec: &JobSpec,
    stop: StopSignal,
    rate: Arc<RateLimiter>,
) -> anyhow::Result<Options> {
    let o = &spec.options;
    let mut opts = Options {
        stop: Some(stop),
        no_clobber: o.no_clobber,
        shared_rate: Some(rate),
        ..Options::default()
    };
    if let Some(c) = &o.checksum {
        opts.checksum = c.parse().map_err(|e: String| anyhow!(e))?;
    }
    if let Some(v) = &o.verify {
        opts.verify = match v.as_str() {
            "none" => Verify::None,
            "received" => Verify::Received,
            _ => Verify::Written,
        };
    }
    if let Some(bs) = o.block_size {
        opts.block_size = bs;
    }
    if let Some(c) = &o.compress {
        opts.compression = c.parse().map_err(|e: String| anyhow!(e))?;
    }
    Ok(opts)
}

/// A unit's sessions choose their streams as `hetch cp`'s do (never fewer than
/// `floor`), unless the job gave a number; then why not.
fn with_autotune(
    mut client: Option<hetch_session::client::ClientConfig>,
    streams: Option<u16>,
    floor: u16,
) -> (
    Option<hetch_session::client::ClientConfig>,
    Option<&'static str>,
) {
    if streams.is_some() {
        return (client, Some("--streams given"));
    }
    if let Some(c) = client.as_mut() {
        c.autotune = Some(Arc::new(hetch_session::Autotune::new(floor)));
    }
    (client, None)
}

#[cfg(test)]
mod tests {
    #[test]
    fn units_autotune_unless_the_job_gives_streams() {
        let client = hetch_session::client::ClientConfig {
            token: b"0123456789abcdef0123".to_vec(),
            fingerprint: None,
            known_hosts: None,
            socket: Default::default(),
            timeout: std::time::Duration::from_secs(1),
            opened: Default::default(),
            autotune: None,
            reuse: None,
        };
        let (c, off) = super::with_autotune(Some(client.clone()), None, 4);
        assert!(c.unwrap().autotune.is_some() && off.is_none());
        let (c, off) = super::with_autotune(Some(client), Some(2), 4);
        assert!(c.unwrap().autotune.is_none());
        assert_eq!(off, Some("--streams given"));
        assert!(super::with_autotune(None, None, 4).0.is_none());
    }

    /// A unit this worker stopped (its lease lost) ends as a session stopped from
    /// outside ends, which the engine words as a server shutting down: the log and
    /// the report say this worker stopped it.
    #[tokio::test]
    async fn a_unit_stopped_here_says_so() {
        use std::sync::{Arc, Mutex};
        let pin = Some(hetch_net::Fingerprint([7; 32]));
        // Never called: the unit fails its access check first.
        let api = super::Client::new("127.0.0.1:9", pin, None, b"t".to_vec());
        let api = Arc::new(api.await.unwrap());
        let mut ctx = super::UnitContext::new(api, "/".into(), None, None, None);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let kept = lines.clone();
        ctx.log = crate::log::Log::new(move |l| kept.lock().unwrap().push(l.to_string()));
        let unit = hetch_service_api::ClaimedUnit {
            job: "j".into(),
            seq: 3,
            unit: hetch_jobs::UnitSpec::Files {
                first: 0,
                end: 1,
                bytes: 1,
            },
            spec: hetch_service_api::JobSpec {
                sources: vec!["a".into()],
                dest: "b".into(),
                // Reaching nothing: the unit fails at once.
                access: Some(hetch_service_api::Access {
                    entry: "sub=nobody".into(),
                    read: Vec::new(),
                    write: Vec::new(),
                    account: None,
                }),
                ..Default::default()
            },
            until: 0,
            lease: "l".into(),
            attempts: 0,
            lease_ms: 30_000,
            rate_limit: 0,
        };
        let pace = |raised: bool| {
            let (tx, stop) = super::StopSignal::new();
            if raised {
                tx.stop();
            }
            // The signal's sender gone would read as raised: kept for the call.
            (
                tx,
                super::Pace {
                    stop,
                    rate: Arc::new(super::RateLimiter::adjustable(0)),
                    progress: Arc::new(super::Progress::default()),
                },
            )
        };
        let (_tx, running) = pace(false);
        let failed = ctx.run_here(unit.clone(), running).await;
        let error = failed.error.unwrap();
        assert!(!error.contains("stopped by this worker"), "{error}");
        let (_tx, stopped) = pace(true);
        let report = ctx.run_here(unit, stopped).await;
        assert_eq!(report.error.as_deref(), Some(super::STOPPED_HERE));
        let lines = lines.lock().unwrap();
        assert_eq!(
            lines.last().unwrap(),
            &format!("unit 3 of job j: {}", super::STOPPED_HERE)
        );
    }

    #[test]
    fn units_at_once_share_the_default_streams() {
        let floors: Vec<u16> = [0, 1, 2, 3, 4, 64].map(super::stream_floor).into();
        assert_eq!(floors, [4, 4, 2, 1, 1, 1]);
    }
}
