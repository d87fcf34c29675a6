//! `hetch worker`: claims work units from the transfer service and runs them, each
//! as a `hetch cp` of its share of the job's listing, extending its leases while they
//! run and stopping a unit whose lease it lost (expired, or its job cancelled).
//!
//! A unit is a batch of files, or a block range of a large file split over several
//! workers, or the commit of such a file once its ranges are done (`worker_split.rs`),
//! or a source of a copy between two servers, which the worker has the source server
//! push (`worker_relay.rs`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use clap::Args;
use hetch_engine::{Options, Progress, RateLimiter, StopSender, StopSignal, Verify};
use hetch_jobs::UnitSpec;
use hetch_service::api::{
    ClaimRequest, ClaimedUnit, FileRow, FilesQuery, FinishRequest, HeartbeatRequest, JobSpec,
    UnitKey, WorkerAbout,
};
use hetch_service_api::client::{Client, ClientError};
use tokio::task::JoinSet;

use crate::location::Location;
use crate::worker_metrics::{Call, WorkerMetrics};
use hetch_copy::CopyJob;
use hetch_worker::lease::{Leases, Millis};

/// `hetch worker`.
#[derive(Args)]
pub struct WorkerArgs {
    /// The service, HOST:PORT.
    #[arg(long, env = "HETCH_SERVICE")]
    service: String,
    /// Job sources are below this directory here (the service's --root, as this node
    /// sees the shared file system).
    #[arg(long)]
    root: PathBuf,
    /// This worker's name, unique among the service's workers (default: host and
    /// process id).
    #[arg(long)]
    name: Option<String>,
    /// Units run at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    units: u32,
    /// Expected service key fingerprint (sha256:...), instead of the known-hosts file.
    #[arg(long)]
    fingerprint: Option<hetch_net::Fingerprint>,
    /// Known-hosts file for the service and the destinations.
    #[arg(long)]
    known_hosts: Option<PathBuf>,
    /// The service's token file (default: the HETCH_SERVICE_TOKEN environment
    /// variable, then HETCH_TOKEN).
    #[arg(long)]
    service_token_file: Option<PathBuf>,
    /// Token file for hetch:// destinations (default: HETCH_TOKEN).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Token file for the source servers of copies between two servers, which this
    /// worker asks to push to the destination (default: the --token-file token).
    #[arg(long)]
    source_token_file: Option<PathBuf>,
    /// Leave after this many seconds with nothing to do (default: never).
    #[arg(long)]
    idle_exit: Option<u64>,
    /// Serve metrics in Prometheus' text format at http://ADDR/metrics (HOST:PORT; off
    /// by default). Plain HTTP without a token: they are counts, and the ids of the
    /// jobs with a unit running here, never a path or a token; bind it to loopback or
    /// a monitoring network if that is not for everyone to see.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
}

/// A unit being run (under one claim of it: a unit stopped here and claimed again
/// may briefly run twice, the old run ending).
struct Running {
    /// Its job and number.
    key: (String, u64),
    stop: StopSender,
    /// Its share of its job's rate limit, as the service last said.
    rate: Arc<RateLimiter>,
}

/// The units running here, by claim (a number of this worker's own for each unit it
/// was given), and their leases: when to beat, what to stop (see
/// `hetch_worker::lease`, which decides; this performs).
struct Units {
    running: HashMap<u64, Running>,
    leases: Leases<u64>,
    /// The origin of the leases' clock.
    clock: Instant,
}

impl Units {
    /// Milliseconds of the leases' clock at `t`.
    fn at(&self, t: Instant) -> Millis {
        t.saturating_duration_since(self.clock).as_millis() as Millis
    }

    /// How long a call to the service may take before the loop must look at the
    /// leases again.
    fn until_fence(&self) -> Duration {
        Duration::from_millis(self.leases.until_fence(self.at(Instant::now())))
    }

    /// Stops the units whose leases this worker could not keep (the service
    /// unreachable) and will soon run out.
    fn fence(&mut self, name: &str) {
        for claim in self.leases.fence(self.at(Instant::now())) {
            let r = &self.running[&claim];
            r.stop.stop();
            let (job, seq) = &r.key;
            eprintln!(
                "hetch worker {name}: stopping unit {seq} of job {job}: its lease could not \
                 be extended and is about to run out"
            );
        }
    }
}

/// What the worker says of itself with each claim and heartbeat (shown by the
/// service's web interface; bounded as the service bounds it).
fn about(a: &WorkerArgs, metrics: &WorkerMetrics, checks: &[String]) -> WorkerAbout {
    let checks: Vec<String> = checks
        .iter()
        .take(hetch_service::api::MAX_CHECKS)
        .map(|c| cut(c, hetch_service::api::MAX_CHECK))
        .collect();
    WorkerAbout {
        host: Some(cut(&hostname(), 253)),
        capacity: Some(a.units.clamp(1, 64)),
        moved: Some(metrics.moved()),
        checks: Some(checks),
    }
}

/// How often an idle worker's claims say what it is (the service shows a worker not
/// heard of for 30 s as silent; heartbeats always say).
const ABOUT_EVERY: Duration = Duration::from_secs(5);

/// A claim for `room` units, saying what the worker is when it last did so
/// [`ABOUT_EVERY`] ago or more.
fn claim_body(
    name: &str,
    room: u32,
    last: &mut Option<Instant>,
    about: impl FnOnce() -> WorkerAbout,
) -> ClaimRequest {
    let mut body = ClaimRequest {
        worker: name.to_string(),
        max: room,
        about: None,
    };
    if last.is_none_or(|t| t.elapsed() >= ABOUT_EVERY) {
        *last = Some(Instant::now());
        body.about = Some(about());
    }
    body
}

/// `s` cut to at most `max` bytes, on a character boundary, without control characters.
fn cut(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

/// Runs the worker until it is stopped (or idle for `--idle-exit`).
pub async fn run(a: WorkerArgs) -> anyhow::Result<ExitCode> {
    let name = a.name.clone().unwrap_or_else(default_name);
    let token = match (&a.service_token_file, std::env::var("HETCH_SERVICE_TOKEN")) {
        (Some(f), _) => hetch_net::read_token_file(f)?,
        (None, Ok(t)) if !t.trim().is_empty() => t.trim().as_bytes().to_vec(),
        _ => hetch_session::client::load_token(None)?,
    };
    let metrics = Arc::new(WorkerMetrics::default());
    // Bound before anything else, so that a wrong address is the first thing said.
    let _serving = match &a.metrics {
        Some(addr) => {
            let endpoint = hetch_metrics::Endpoint::bind(addr).await?;
            eprintln!(
                "hetch worker {name}: metrics on http://{}/metrics",
                endpoint.addr
            );
            let m = metrics.clone();
            Some(endpoint.spawn(move || m.render()))
        }
        None => None,
    };
    let api = Client::new(&a.service, a.fingerprint, a.known_hosts.clone(), token).await?;
    let api = Arc::new(api);
    let root = std::fs::canonicalize(&a.root).map_err(|e| anyhow!("{}: {e}", a.root.display()))?;
    eprintln!("hetch worker {name}: working for {}", a.service);
    // This host's checks, found once: the service shows them on its nodes page.
    let checks = hetch_doctor::host_findings(&hetch_doctor::Host::default());
    // When a claim last said what this worker is (an idle worker asks four times a
    // second; the service records a worker only when it says).
    let mut last_about: Option<Instant> = None;
    let mut units = Units {
        running: HashMap::new(),
        leases: Leases::default(),
        clock: Instant::now(),
    };
    let mut claims = 0u64;
    let mut tasks: JoinSet<(u64, FinishRequest)> = JoinSet::new();
    let mut idle_since = Instant::now();
    // Claims in a row that did not reach the service: the next look waits longer.
    let mut unreachable = 0u32;
    // A unit that ended while the loop waited.
    let mut woken_by = None;
    loop {
        // Report what ended.
        let mut ended: Vec<_> = Option::take(&mut woken_by).into_iter().collect();
        while let Some(done) = tasks.try_join_next() {
            ended.push(done);
        }
        for done in ended {
            let (claim, mut report) = done.map_err(|e| anyhow!("unit task: {e}"))?;
            let lost = units.leases.stopped(&claim).is_some();
            metrics.ended(claim, &report, lost);
            units.leases.ended(&claim);
            let Some(ended) = units.running.remove(&claim) else {
                continue;
            };
            if units.running.values().any(|r| r.key == ended.key) {
                // A run stopped here whose unit this worker was given again: the
                // report is the newer run's to make.
                continue;
            }
            let (job, seq) = ended.key;
            report.worker = name.clone();
            let call = api.finish(&report);
            if let Err(e) = bounded(units.until_fence(), call).await {
                metrics.call_failed(Call::Finish);
                // Refused (the lease moved on) or unreachable: the unit is the
                // service's to hand out again; nothing here to undo.
                eprintln!("hetch worker {name}: reporting unit {seq} of job {job}: {e}");
            }
            units.fence(&name);
        }
        // Keep the leases; stop what is no longer ours.
        let sent = Instant::now();
        if units.leases.beat_due(units.at(sent)) {
            units.leases.beat_sent(units.at(sent));
            // Only the units running here (not being stopped) are kept, each with
            // what it moved so far (a unit claimed again here counts its newest run;
            // `running` is in claim order).
            let kept: std::collections::BTreeMap<&(String, u64), u64> = units
                .leases
                .running()
                .map(|claim| (&units.running[claim].key, metrics.unit_bytes(*claim)))
                .collect();
            let kept: Vec<UnitKey> = kept
                .into_iter()
                .map(|((job, seq), bytes)| UnitKey {
                    job: job.clone(),
                    seq: *seq,
                    bytes: Some(bytes),
                })
                .collect();
            let body = HeartbeatRequest {
                worker: name.clone(),
                units: Some(kept),
                about: Some(about(&a, &metrics, &checks)),
            };
            let call = api.heartbeat(&body);
            match bounded(units.until_fence(), call).await {
                Ok(reply) => {
                    let held: HashMap<(String, u64), u64> = reply
                        .held
                        .into_iter()
                        .map(|h| ((h.job, h.seq), h.rate_limit))
                        .collect();
                    let sent = units.at(sent);
                    let Units {
                        running, leases, ..
                    } = &mut units;
                    let released = leases.answered(sent, |c| held.contains_key(&running[c].key));
                    for claim in released {
                        running[&claim].stop.stop();
                    }
                    for r in running.values() {
                        if let Some(&rate) = held.get(&r.key) {
                            r.rate.set_rate(rate);
                        }
                    }
                }
                Err(e) => {
                    metrics.call_failed(Call::Heartbeat);
                    eprintln!("hetch worker {name}: heartbeat: {e}");
                }
            }
        }
        units.fence(&name);
        // Take more when there is room.
        let room = a.units.saturating_sub(units.running.len() as u32);
        let mut claimed = 0;
        if room > 0 {
            let sent = Instant::now();
            let body = claim_body(&name, room, &mut last_about, || {
                about(&a, &metrics, &checks)
            });
            match bounded(units.until_fence(), api.claim(&body)).await {
                Ok(given) => {
                    unreachable = 0;
                    metrics.reachable(true);
                    claimed = given.len();
                    for u in given {
                        let (tx, rx) = StopSignal::new();
                        let rate = Arc::new(RateLimiter::adjustable(u.rate_limit));
                        claims += 1;
                        let r = Running {
                            key: (u.job.clone(), u.seq),
                            stop: tx,
                            rate: rate.clone(),
                        };
                        units.running.insert(claims, r);
                        units.leases.claimed(claims, units.at(sent), u.lease_ms);
                        let ctx = UnitContext::new(
                            api.clone(),
                            root.clone(),
                            a.token_file.clone(),
                            a.source_token_file.clone(),
                            a.known_hosts.clone(),
                        );
                        let claim = claims;
                        let progress = metrics.started(claim, &u);
                        tasks.spawn(async move { (claim, ctx.run(u, rx, rate, progress).await) });
                    }
                }
                // A token the service does not take (or not for workers) will not
                // become good by asking again.
                Err(e)
                    if e.downcast_ref::<ClientError>()
                        .is_some_and(ClientError::is_not_allowed) =>
                {
                    bail!("{e}")
                }
                Err(e) => {
                    unreachable += 1;
                    metrics.call_failed(Call::Claim);
                    metrics.reachable(false);
                    eprintln!("hetch worker {name}: claiming work: {e}");
                }
            }
            // A claim answered late may be due for stopping already.
            units.fence(&name);
        }
        if claimed > 0 || !units.running.is_empty() {
            idle_since = Instant::now();
        } else if a
            .idle_exit
            .is_some_and(|s| idle_since.elapsed() >= Duration::from_secs(s))
        {
            return Ok(ExitCode::SUCCESS);
        }
        if claimed == 0 {
            // Until a unit ends (to report it and take the next at once), or the next
            // look for work.
            // A quarter of a second; doubling while the service cannot be reached, up
            // to four seconds, so that an outage is not a flood of log lines.
            let next = Duration::from_millis(250 << unreachable.min(4)).min(units.until_fence());
            match tasks.is_empty() {
                true => tokio::time::sleep(next).await,
                false => {
                    woken_by = tokio::time::timeout(next, tasks.join_next())
                        .await
                        .ok()
                        .flatten()
                }
            }
        }
    }
}

/// `call`, given up after `limit`.
async fn bounded<T>(
    limit: Duration,
    call: impl std::future::Future<Output = Result<T, ClientError>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => Ok(r?),
        Err(_) => bail!("no answer within {} ms", limit.as_millis()),
    }
}

fn default_name() -> String {
    format!("{}-{}", hostname(), std::process::id())
}

/// This host's name.
fn hostname() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    host.trim().to_string()
}

/// What a unit needs besides itself.
#[derive(Clone)]
pub(crate) struct UnitContext {
    pub(crate) api: Arc<Client>,
    pub(crate) root: PathBuf,
    pub(crate) dest_token: Option<PathBuf>,
    pub(crate) source_token: Option<PathBuf>,
    pub(crate) known_hosts: Option<PathBuf>,
    /// The tokens and pinned keys a unit run as a user's account needs, read before
    /// it became the account (`worker_as.rs`); `None`: read from their files.
    pub(crate) preloaded: Option<Arc<Preloaded>>,
}

/// Tokens and pinned keys read ahead, by the token file and the host they are for
/// (what reading them said, when it failed).
pub(crate) struct Preloaded {
    tokens: Vec<(Option<PathBuf>, ReadAhead<Vec<u8>>)>,
    pins: Vec<(String, ReadAhead<Option<hetch_net::Fingerprint>>)>,
}

/// What reading a file ahead gave.
type ReadAhead<T> = Result<T, String>;

impl Preloaded {
    /// What unit `u` may need of `ctx`'s files: the destination's and the source
    /// server's tokens, and the keys of the servers it names.
    pub(crate) fn for_unit(ctx: &UnitContext, u: &ClaimedUnit) -> Preloaded {
        let files = [
            ctx.dest_token.clone(),
            ctx.source_token.clone().or(ctx.dest_token.clone()),
        ];
        let tokens = files
            .into_iter()
            .map(|f| {
                let t = hetch_session::client::load_token(f.as_ref()).map_err(|e| e.to_string());
                (f, t)
            })
            .collect();
        let mut urls = vec![u.spec.dest_for(u.seq, u.attempts)];
        if u.spec.is_relay() {
            urls.extend(u.spec.sources.iter().cloned());
        }
        let pins = urls
            .iter()
            .filter_map(|url| hetch_service::api::hetch_url(url))
            .map(|(host, _)| {
                let pin = ctx
                    .known_hosts_file()
                    .lookup(host)
                    .map_err(|e| e.to_string());
                (host.to_string(), pin)
            })
            .collect();
        Preloaded { tokens, pins }
    }
}

impl UnitContext {
    /// A context for units of the service `api`, with sources below `root`.
    pub(crate) fn new(
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
        }
    }

    /// Runs unit `u` (stopping when `stop` is raised, counting what it moves into
    /// `progress` as it goes) and returns its report for `/api/work/finish` (without
    /// the worker's name): here, or as its user's local account (`worker_as.rs`).
    async fn run(
        &self,
        u: ClaimedUnit,
        stop: StopSignal,
        rate: Arc<RateLimiter>,
        progress: Arc<Progress>,
    ) -> FinishRequest {
        match crate::worker_as::account_of(&u).map(str::to_string) {
            Some(account) => self.run_as(u, &account, stop, rate, progress).await,
            None => self.run_here(u, stop, rate, progress).await,
        }
    }

    /// Runs unit `u` in this process, as [`UnitContext::run`] says.
    pub(crate) async fn run_here(
        &self,
        u: ClaimedUnit,
        stop: StopSignal,
        rate: Arc<RateLimiter>,
        progress: Arc<Progress>,
    ) -> FinishRequest {
        let done = match self.check_access(&u.spec) {
            Err(e) => Err(e),
            Ok(()) => match u.unit {
                UnitSpec::Files { .. } => self.files_unit(&u, stop, rate, progress).await,
                UnitSpec::Range { .. } | UnitSpec::Commit { .. } => {
                    self.split_unit(&u, stop, rate, progress).await
                }
                UnitSpec::Relay { operand } => {
                    self.relay_unit(&u, operand, stop, rate, progress).await
                }
            },
        };
        match done {
            Ok((files, bytes)) => FinishRequest::done(&u.job, u.seq, files, bytes),
            Err(e) => {
                let line = crate::one_line(&e);
                eprintln!("hetch worker: unit {} of job {}: {line}", u.seq, u.job);
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

    /// Copies a batch of files: its rows of the listing, each source's share as listed
    /// entries (with their parent directories, which may be in another unit), into
    /// the destination.
    async fn files_unit(
        &self,
        u: &ClaimedUnit,
        stop: StopSignal,
        rate: Arc<RateLimiter>,
        progress: Arc<Progress>,
    ) -> anyhow::Result<(u64, u64)> {
        let (first, end, bytes) = match u.unit {
            UnitSpec::Files { first, end, bytes } => (first, end, bytes),
            _ => bail!("not a unit of files"),
        };
        // What the service sent is bounded before it sizes or names anything.
        let count = end
            .checked_sub(first)
            .filter(|&n| n <= hetch_service::routes::MAX_FILES)
            .ok_or_else(|| anyhow!("the service sent a unit of files {first}..{end}"))?;
        let rows = self.listing(&u.job, first, end, &stop).await?;
        if rows.len() as u64 != count {
            bail!("the service sent {} listing rows of {count}", rows.len());
        }
        let spec = &u.spec;
        let mut per_source: Vec<Vec<Vec<u8>>> = vec![Vec::new(); spec.sources.len()];
        for r in &rows {
            let list = usize::try_from(r.operand)
                .ok()
                .and_then(|op| per_source.get_mut(op))
                .ok_or_else(|| {
                    anyhow!(
                        "listing row names source {} of {}",
                        r.operand,
                        spec.sources.len()
                    )
                })?;
            with_parents(list, &r.path);
        }
        let job = self.copy_job(u, per_source, stop, rate)?;
        let (result, _) = hetch_copy::recover(&job, &progress, None).await;
        let report = result?;
        if let Some(e) = report.errors.first() {
            bail!("{e}");
        }
        if report.summary.failed > 0 {
            bail!("{} files failed", report.summary.failed);
        }
        Ok((end - first, bytes))
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
            hetch_service::planning::check_paths(&self.root, spec).map_err(anyhow::Error::msg)?;
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
        if hetch_service::api::is_url(&spec.dest) {
            return Ok(self.root.clone());
        }
        let allowed = access
            .write_root(&spec.dest)
            .ok_or_else(|| anyhow!("dest {:?} is not the job's to write", spec.dest))?;
        hetch_service::identity::Access::resolve(&self.root, allowed, &spec.dest)
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

    /// The `hetch cp` of a job's spec for these listed entries.
    fn copy_job(
        &self,
        u: &ClaimedUnit,
        entries: Vec<Vec<Vec<u8>>>,
        stop: StopSignal,
        rate: Arc<RateLimiter>,
    ) -> anyhow::Result<CopyJob> {
        let spec = &u.spec;
        // Checked when the job was submitted, and again here: a symlink put in the
        // path since must not make a job read from outside the root.
        let mut sources = Vec::with_capacity(spec.sources.len());
        let mut within = Vec::new();
        for s in &spec.sources {
            let (dir, path) = self.source_within(spec, s)?;
            sources.push(Location::Local(path));
            if !within.contains(&dir) {
                within.push(dir);
            }
        }
        let dest = self.dest_of(u)?;
        let mut opts = unit_options(spec, stop, rate)?;
        opts.read_within = within;
        let client = match &dest {
            Location::Remote { host, .. } => {
                Some(self.client_config(host, self.dest_token.as_ref())?)
            }
            _ => None,
        };
        let mut job = self.unit_copy(spec, sources, dest, opts, client)?;
        job.entries = Some(entries);
        Ok(job)
    }

    /// The `hetch cp` of a unit of job `spec`: `sources` into `dest`.
    pub(crate) fn unit_copy(
        &self,
        spec: &JobSpec,
        sources: Vec<Location>,
        dest: Location,
        opts: Options,
        client: Option<hetch_session::client::ClientConfig>,
    ) -> anyhow::Result<CopyJob> {
        let (client, autotune_off) = with_autotune(client, spec.options.streams);
        Ok(CopyJob {
            opts,
            streams: spec.options.streams.unwrap_or(hetch_copy::DEFAULT_STREAMS),
            autotune_off,
            client,
            // With several destination nodes, a unit that loses its node fails at
            // once: the service gives it again, to the next node, rather than this
            // run waiting for the lost one to come back.
            retry: match spec.dest_nodes.is_empty() {
                true => Default::default(),
                false => hetch_copy::RetryPolicy::NEVER,
            },
            confine_to: Some(self.write_confinement(spec)?),
            ..CopyJob::new(sources, dest)
        })
    }
}

impl UnitContext {
    /// The key server `host` must present: its entry in this worker's known-hosts
    /// file. A worker learns no key on first use: the servers a job names are a job
    /// submitter's choice (any user's), and a worker presents its token only to
    /// servers its operator pinned.
    pub(crate) fn pinned(&self, host: &str) -> anyhow::Result<hetch_net::Fingerprint> {
        let kh = self.known_hosts_file();
        let pin = match &self.preloaded {
            Some(p) => match p.pins.iter().find(|(h, _)| h == host) {
                Some((_, pin)) => pin.clone().map_err(anyhow::Error::msg)?,
                None => bail!("{host}: not a server this unit names"),
            },
            None => kh.lookup(host)?,
        };
        pin.ok_or_else(|| {
            anyhow!(
                "{host}: not in this worker's known-hosts file ({}): a worker connects \
                 only to servers pinned there (HOST:PORT sha256:...)",
                kh.path.display()
            )
        })
    }

    /// The token for a server, from `token_file` (else `HETCH_TOKEN`), which must not
    /// be the service's own: that one never goes to a data server.
    pub(crate) fn server_token(&self, token_file: Option<&PathBuf>) -> anyhow::Result<Vec<u8>> {
        let token = match &self.preloaded {
            Some(p) => match p.tokens.iter().find(|(f, _)| f.as_ref() == token_file) {
                Some((_, t)) => t.clone().map_err(anyhow::Error::msg)?,
                None => bail!("no token read for this unit"),
            },
            None => hetch_session::client::load_token(token_file)?,
        };
        if self.api.is_token(&token) {
            bail!(
                "no token for hetch:// servers: the service's token is not sent to them \
                 (give the servers' token with --token-file)"
            );
        }
        Ok(token)
    }

    /// This worker's known-hosts file.
    fn known_hosts_file(&self) -> hetch_net::KnownHosts {
        hetch_net::KnownHosts {
            path: self
                .known_hosts
                .clone()
                .unwrap_or_else(hetch_net::KnownHosts::default_path),
        }
    }

    /// Unit `u`'s destination (its node of the job's destination nodes), to copy
    /// *into* always: every unit must agree on where entries go, whichever of them
    /// creates the destination directory.
    pub(crate) fn dest_of(&self, u: &ClaimedUnit) -> anyhow::Result<Location> {
        let dest = u.spec.dest_for(u.seq, u.attempts);
        let mut dest = Location::parse(&dest).map_err(|e| anyhow!("{e}"))?;
        match &mut dest {
            Location::Local(p) => {
                let into = self.root.join(&*p);
                *p = PathBuf::from(format!("{}/", into.display()));
            }
            Location::Remote { path, .. } if !path.ends_with('/') => path.push('/'),
            _ => {}
        }
        Ok(dest)
    }

    /// How this worker reaches server `host` with the token in `token_file` (else
    /// `HETCH_TOKEN`): see [`UnitContext::server_token`] and [`UnitContext::pinned`].
    pub(crate) fn client_config(
        &self,
        host: &str,
        token_file: Option<&PathBuf>,
    ) -> anyhow::Result<hetch_session::client::ClientConfig> {
        Ok(hetch_session::client::ClientConfig {
            token: self.server_token(token_file)?,
            fingerprint: Some(self.pinned(host)?),
            known_hosts: self.known_hosts.clone(),
            socket: Default::default(),
            timeout: Duration::from_secs(30),
            opened: Default::default(),
            autotune: None,
        })
    }
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

/// Appends `path` to `list` after those of its parent directories that are not in it
/// yet (a unit's first entries may live in directories another unit lists).
fn with_parents(list: &mut Vec<Vec<u8>>, path: &str) {
    let mut at = 0;
    while let Some(i) = path[at..].find('/') {
        let parent = &path.as_bytes()[..at + i];
        if !list.iter().any(|e| e == parent) {
            list.push(parent.to_vec());
        }
        at += i + 1;
    }
    if !list.iter().any(|e| e == path.as_bytes()) {
        list.push(path.as_bytes().to_vec());
    }
}

/// A unit's sessions choose their streams as `hetch cp`'s do, unless the job gave a
/// number; then why not.
fn with_autotune(
    mut client: Option<hetch_session::client::ClientConfig>,
    streams: Option<u16>,
) -> (
    Option<hetch_session::client::ClientConfig>,
    Option<&'static str>,
) {
    if streams.is_some() {
        return (client, Some("--streams given"));
    }
    if let Some(c) = client.as_mut() {
        c.autotune = Some(Arc::new(hetch_session::Autotune::new(4)));
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
        };
        let (c, off) = super::with_autotune(Some(client.clone()), None);
        assert!(c.unwrap().autotune.is_some() && off.is_none());
        let (c, off) = super::with_autotune(Some(client), Some(2));
        assert!(c.unwrap().autotune.is_none());
        assert_eq!(off, Some("--streams given"));
        assert!(super::with_autotune(None, None).0.is_none());
    }

    #[test]
    fn idle_claims_say_what_the_worker_is_only_every_few_seconds() {
        let about = || hetch_service::api::WorkerAbout {
            host: Some("h".into()),
            ..Default::default()
        };
        let mut last = None;
        let first = super::claim_body("w", 2, &mut last, about);
        assert_eq!(first.about.unwrap().host.as_deref(), Some("h"));
        let next = super::claim_body("w", 2, &mut last, about);
        assert!(next.about.is_none(), "{next:?}");
        last = Some(std::time::Instant::now() - super::ABOUT_EVERY);
        assert!(super::claim_body("w", 1, &mut last, Default::default)
            .about
            .is_some());
    }

    #[test]
    fn parents_come_first_once() {
        let mut l = Vec::new();
        for p in ["run/a/b/f", "run/a/b/g", "run/c"] {
            super::with_parents(&mut l, p);
        }
        let l: Vec<String> = l
            .into_iter()
            .map(|e| String::from_utf8(e).unwrap())
            .collect();
        assert_eq!(
            l,
            ["run", "run/a", "run/a/b", "run/a/b/f", "run/a/b/g", "run/c"]
        );
    }
}
