//! `hetch-lab bench coordinator`: the transfer service's coordinator alone under
//! load, as FTS3's scheduler is benchmarked. A real `hetch service` plans a job of N
//! empty files, one unit each (`--batch-files 1`), and a load generator of
//! `--loaders` tasks, each a worker of its own name, claims the units and reports
//! them done at once (a claim's units in one call, as a worker reports units that
//! ended together) without copying anything: what is measured is the service and
//! its database claiming, leasing and counting, not a data path.
//!
//! Per job size: planning time (from submission until the job leaves `planning`),
//! units/s and claims/s from the first claim until the job is done (the service's own
//! stamps), the latency of `GET /api/jobs/{id}` and of `GET /api/jobs` (what `hetch
//! job show` and `job ls` read) under that load (`--probe-api`), and
//! while the loaders run, the CPU seconds of the service, of a local PostgreSQL, and
//! of the load generator itself: on one machine it shares the CPUs with the service,
//! so its share says how much the numbers owe to it. The service's peak RSS is over
//! its whole life, planning included.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use hetch_bench::dataset::Dataset;
use hetch_jobs::UnitSpec;
use hetch_service_api::client::{Client, ClientError};
use hetch_service_api::{ClaimRequest, ClaimedUnit, FinishAll, FinishRequest, JobView, ListQuery};
use tokio::runtime::Runtime;

use crate::service_proc::{
    comm_cpu, peak_rss, probe_every_200ms, process_cpu, quantiles, until_planned, Service,
};

/// Flags of `hetch-lab bench coordinator`.
#[derive(Args)]
pub struct CoordinatorArgs {
    /// Job sizes, comma-separated: files per job, each one unit (so a job is these
    /// units and one per directory of the dataset). Each size is a job of its own on a
    /// service of its own.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    units: Vec<u64>,
    /// Concurrent load-generator tasks, each a worker named `load-N`.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    loaders: u32,
    /// Units each claim asks for (1 to 64, as a worker's --units).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    capacity: u32,
    /// The job database, as the service's --db takes it: postgres://USER@HOST/DB for
    /// PostgreSQL (default: SQLite in each service's fresh state directory). Every
    /// job size of the run uses this database, so the earlier sizes' jobs stay in it:
    /// for clean numbers give an empty database and one size per run. The CPU of
    /// PostgreSQL is that of this machine's processes named `postgres`.
    #[arg(long, value_name = "URL")]
    db_url: Option<String>,
    /// While units are claimed, time one `GET /api/jobs/{id}` and one `GET /api/jobs`
    /// (as the operator) every 200 ms each: the API's latency under the load, as
    /// median / p95 / max.
    #[arg(long)]
    probe_api: bool,
    /// Where the datasets of empty files are made (once per size, and kept) and the
    /// services run; the services' root.
    #[arg(long, default_value = "/var/tmp/hetch-bench/coord")]
    data_dir: PathBuf,
    /// The `hetch` binary to run as the service (default: HETCH_BIN, else the one
    /// beside this binary).
    #[arg(long, value_name = "PATH")]
    hetch: Option<PathBuf>,
}

impl CoordinatorArgs {
    /// Whether the job database is PostgreSQL (its CPU is then measured too).
    fn postgres(&self) -> bool {
        let url = self.db_url.as_deref();
        url.is_some_and(|u| u.starts_with("postgres:") || u.starts_with("postgresql:"))
    }
}

/// What the loaders did, counted as they go.
#[derive(Default)]
struct Tally {
    /// Claims that got units.
    claims: AtomicU64,
    /// Claims that got none (the tail of the job, or units not ready yet).
    empty_claims: AtomicU64,
    /// Units reported done and taken (each unit once, however often it was claimed).
    reported: AtomicU64,
    /// Reports the service refused (409: the lease is not the unit's any more...).
    refused: AtomicU64,
    /// Calls answered 429/503 or not reached, and asked again.
    retried: AtomicU64,
    /// The first few refusals, as the service worded them.
    refusals: Mutex<Vec<String>>,
    /// When the first claim that got units came back.
    first_claim: OnceLock<Instant>,
}

/// Refusals kept word for word per job size; the rest are only counted.
const REFUSALS_KEPT: usize = 5;

/// A loader's pause after an empty claim or a call the service was too busy for:
/// `hetch worker` waits 250 ms to 2 s after an empty claim, so loaders press harder
/// at a job's tail than workers would.
const PAUSE: Duration = Duration::from_millis(50);

/// One job size's results.
struct Row {
    files: u64,
    units: u64,
    planning_s: f64,
    run_s: f64,
    probes: Vec<f64>,
    /// The same for `GET /api/jobs` (the list `hetch job ls` shows).
    list_probes: Vec<f64>,
    service_cpu: f64,
    service_rss: u64,
    postgres_cpu: Option<f64>,
    load_cpu: f64,
    tally: Arc<Tally>,
}

impl Row {
    fn print(&self) {
        let claims = self.tally.claims.load(Ordering::Relaxed);
        let pg = self.postgres_cpu.map_or("-".into(), |c| format!("{c:.2}"));
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.0} | {:.0} | {} | {} | {:.2} | {:.1} | {pg} | {:.2} |",
            self.files,
            self.units,
            self.planning_s,
            self.run_s,
            self.units as f64 / self.run_s,
            claims as f64 / self.run_s,
            quantiles(&self.probes),
            quantiles(&self.list_probes),
            self.service_cpu,
            self.service_rss as f64 / (1 << 20) as f64,
            self.load_cpu,
        );
    }

    /// What the loaders met beside the units they reported, one line, if anything.
    fn notes(&self) -> Option<String> {
        let t = &self.tally;
        let (refused, retried) = (
            t.refused.load(Ordering::Relaxed),
            t.retried.load(Ordering::Relaxed),
        );
        let empty = t.empty_claims.load(Ordering::Relaxed);
        if refused == 0 && retried == 0 && empty == 0 {
            return None;
        }
        let mut line = format!(
            "{} files: {empty} empty claims, {retried} calls asked again (busy or not reached), {refused} reports refused",
            self.files
        );
        let words = t.refusals.lock().map(|r| r.join("; ")).unwrap_or_default();
        if !words.is_empty() {
            line.push_str(&format!(" ({words})"));
        }
        Some(line)
    }
}

/// Runs the benchmark and prints its results (Markdown).
pub fn run(a: CoordinatorArgs) -> anyhow::Result<ExitCode> {
    if a.units.is_empty() || a.units.contains(&0) {
        bail!("--units needs one or more job sizes above 0");
    }
    let hetch = match &a.hetch {
        Some(p) => p.clone(),
        None => crate::hetch_binary()?,
    };
    std::fs::create_dir_all(&a.data_dir)?;
    let root = std::fs::canonicalize(&a.data_dir)?;
    let scratch = root.join("coordinator-bench");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let postgres = a.postgres();
    // Tokio's default of a thread per CPU: the loaders wait on the service almost all
    // the time, so they need no more, and should take no more from it.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "hetch {}, {} database, {} loaders claiming {} unit(s) each",
        hetch.display(),
        if postgres { "PostgreSQL" } else { "SQLite" },
        a.loaders,
        a.capacity
    );
    println!(
        "\n| files | units | planning s | claims to done s | units/s | claims/s | `GET /api/jobs/{{id}}` ms: median / p95 / max (n) | `GET /api/jobs` ms | service CPU s | service peak RSS MiB | postgres CPU s | load generator CPU s |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let mut notes = Vec::new();
    for (i, &files) in a.units.iter().enumerate() {
        let row = one_size(
            &rt,
            &a,
            &hetch,
            &root,
            &scratch.join(format!("state{i}")),
            files,
        )
        .with_context(|| {
            format!(
                "{files} files (service log and state in {})",
                scratch.display()
            )
        })?;
        row.print();
        notes.extend(row.notes());
    }
    for n in notes {
        println!("\n{n}");
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(ExitCode::SUCCESS)
}

/// One job of `files` files on a service of its own (state directory `state`).
fn one_size(
    rt: &Runtime,
    a: &CoordinatorArgs,
    hetch: &Path,
    root: &Path,
    state: &Path,
    files: u64,
) -> anyhow::Result<Row> {
    let ds = Dataset::uniform(0, files);
    let src = ds.materialise(root)?;
    let rel_src = src.strip_prefix(root).unwrap_or(&src).display().to_string();
    // One file per unit; nothing is ever split (the files are empty anyway).
    let mut flags: Vec<String> = ["--batch-files", "1", "--split-size", "off"]
        .map(String::from)
        .into();
    let units = crate::service_proc::units_of(&src, files)?;
    flags.extend(crate::service_proc::unit_bound(units));
    if let Some(db) = &a.db_url {
        flags.extend(["--db".into(), db.clone()]);
    }
    let svc = Service::start(hetch, root, state, &flags)?;
    let dest = format!("coordinator-bench/out-{files}/");
    let t0 = Instant::now();
    // Submitted with the CLI as a user would, which also trusts the service's key on
    // first use in the run's configuration directory: the clients below read it there.
    let id = svc.job(hetch, &["submit", &rel_src, &dest])?;
    let operator = rt.block_on(Client::new(
        &svc.addr,
        None,
        Some(svc.known_hosts()),
        svc.token.clone().into_bytes(),
    ))?;
    let operator = Arc::new(operator);
    let look = || -> anyhow::Result<String> { Ok(rt.block_on(operator.job(&id))?.state) };
    let (_, planned) = until_planned(look)?;
    let planning_s = t0.elapsed().as_secs_f64();
    if !["queued", "running"].contains(&planned.as_str()) {
        let j = rt.block_on(operator.job(&id))?;
        bail!(
            "job {id} is {planned} after planning: {}",
            j.error.unwrap_or_default()
        );
    }

    // Each loader is a worker of its own, with a connection of its own, made before
    // the clock starts (the key is known by now: no handshake to learn it).
    let mut clients = Vec::new();
    for _ in 0..a.loaders {
        let token = svc.worker_token.clone().into_bytes();
        let c = Client::new(&svc.addr, None, Some(svc.known_hosts()), token);
        clients.push(rt.block_on(c)?);
    }
    let tally = Arc::new(Tally::default());
    let svc_cpu0 = process_cpu(svc.pid());
    let own_cpu0 = process_cpu(std::process::id());
    let pg_cpu0 = a.postgres().then(|| comm_cpu("postgres"));
    let done = AtomicBool::new(false);
    let (loaded, probes, list_probes) = std::thread::scope(|s| {
        let probe = s.spawn(|| match a.probe_api {
            true => probe_every_200ms(&done, || rt.block_on(operator.job(&id)).is_ok()),
            false => Vec::new(),
        });
        let list = s.spawn(|| match a.probe_api {
            true => probe_every_200ms(&done, || {
                rt.block_on(operator.list(&ListQuery::default())).is_ok()
            }),
            false => Vec::new(),
        });
        let load = Load {
            operator: operator.clone(),
            job: id.clone(),
            capacity: a.capacity,
            tally: tally.clone(),
        };
        let loaded = rt.block_on(load.run(clients));
        done.store(true, Ordering::Relaxed);
        let probes = probe.join().unwrap_or_default();
        (loaded, probes, list.join().unwrap_or_default())
    });
    let service_cpu = process_cpu(svc.pid()) - svc_cpu0;
    let load_cpu = process_cpu(std::process::id()) - own_cpu0;
    let postgres_cpu = pg_cpu0.map(|before| comm_cpu("postgres") - before);
    let ended = loaded?;
    check_done(&ended, units)?;
    let reported = tally.reported.load(Ordering::Relaxed);
    if reported != units {
        bail!("{reported} reports taken for {units} units");
    }
    // The service's own stamps: its first claim and the report that ended the job.
    let run_ms = match (ended.started, ended.finished) {
        (Some(s), Some(f)) => f.saturating_sub(s) as f64,
        _ => tally
            .first_claim
            .get()
            .map_or(0.0, |t| t.elapsed().as_secs_f64() * 1000.0),
    };
    Ok(Row {
        files,
        units,
        planning_s,
        run_s: (run_ms / 1000.0).max(0.001),
        probes,
        list_probes,
        service_cpu,
        service_rss: peak_rss(svc.pid()),
        postgres_cpu,
        load_cpu,
        tally,
    })
}

/// Fails unless job `j` is done with every one of its `units` units done and every
/// file counted.
fn check_done(j: &JobView, units: u64) -> anyhow::Result<()> {
    let u = &j.units;
    let total = u.waiting + u.ready + u.leased + u.done + u.failed + u.cancelled;
    let whole = j.state == "done"
        && j.files_done == j.files
        && j.files == units
        && total == units
        && u.done == units;
    if !whole {
        bail!(
            "job {} ended {} with {} of {} files done (expected {units}), units {:?}{}",
            j.id,
            j.state,
            j.files_done,
            j.files,
            u,
            j.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}

/// The load generator of one job.
struct Load {
    /// The operator's client: whether the job is over (a worker's token may not
    /// read a job).
    operator: Arc<Client>,
    job: String,
    capacity: u32,
    tally: Arc<Tally>,
}

impl Load {
    /// Runs one loader per client until the job is over: the job as it ended. The
    /// first loader that fails stops them all.
    async fn run(self, clients: Vec<Client>) -> anyhow::Result<JobView> {
        let me = Arc::new(self);
        let mut set = tokio::task::JoinSet::new();
        for (n, c) in clients.into_iter().enumerate() {
            let me = me.clone();
            set.spawn(async move { me.loader(format!("load-{n}"), c).await });
        }
        while let Some(ended) = set.join_next().await {
            ended.context("a loader panicked")??;
        }
        Ok(me.operator.job(&me.job).await?)
    }

    /// One worker: claims, reports the units it got done at once, and again, until a
    /// claim gets nothing and the job is over.
    async fn loader(&self, name: String, c: Client) -> anyhow::Result<()> {
        let ask = ClaimRequest {
            worker: name.clone(),
            max: self.capacity,
            about: None,
        };
        loop {
            let units = match c.claim(&ask).await {
                Ok(u) => u,
                Err(e) if e.is_transient() => {
                    self.tally.retried.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(PAUSE).await;
                    continue;
                }
                Err(e) => return Err(e).with_context(|| format!("{name}: claim")),
            };
            if units.is_empty() {
                self.tally.empty_claims.fetch_add(1, Ordering::Relaxed);
                match self.operator.job(&self.job).await {
                    Ok(j) if j.is_finished() => return Ok(()),
                    Ok(_) => {}
                    Err(e) if e.is_transient() => {
                        self.tally.retried.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => return Err(e).context("looking at the job"),
                }
                tokio::time::sleep(PAUSE).await;
                continue;
            }
            self.tally.first_claim.get_or_init(Instant::now);
            self.tally.claims.fetch_add(1, Ordering::Relaxed);
            self.report(&name, &c, units).await?;
        }
    }

    /// Reports units `units` done, each as having moved what its plan holds and
    /// written nothing, in one call as a worker reports units that ended together
    /// (one alone by `/api/work/finish`); a refusal is counted (the unit then comes
    /// back when its lease runs out), a call the service was too busy for is made
    /// again.
    async fn report(&self, name: &str, c: &Client, units: Vec<ClaimedUnit>) -> anyhow::Result<()> {
        let reports: Vec<FinishRequest> = units
            .into_iter()
            .map(|u| {
                let (files, bytes) = match u.unit {
                    UnitSpec::Files { first, end, bytes } => (end - first, bytes),
                    _ => (0, 0),
                };
                let mut done = FinishRequest::done(&u.job, u.seq, files, bytes);
                done.worker = name.to_string();
                done.lease = u.lease;
                done.written = Some(0);
                done
            })
            .collect();
        let all = FinishAll { reports };
        loop {
            let answered = match all.reports.as_slice() {
                [one] => c
                    .finish(one)
                    .await
                    .map(|_| vec![None])
                    .or_else(|e| match e {
                        ClientError::Service {
                            status: 409,
                            message,
                            ..
                        } => Ok(vec![Some(message)]),
                        e => Err(e),
                    }),
                _ => (c.finish_all(&all).await)
                    .map(|r| r.answers.into_iter().map(|a| a.refused).collect()),
            };
            match answered {
                Ok(answers) => {
                    for (r, refused) in all.reports.iter().zip(answers) {
                        let Some(message) = refused else {
                            self.tally.reported.fetch_add(1, Ordering::Relaxed);
                            continue;
                        };
                        self.tally.refused.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut kept) = self.tally.refusals.lock() {
                            if kept.len() < REFUSALS_KEPT {
                                kept.push(format!("unit {}: {message}", r.seq));
                            }
                        }
                    }
                    return Ok(());
                }
                Err(e) if e.is_transient() => {
                    self.tally.retried.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(PAUSE).await;
                }
                Err(e) => return Err(e).with_context(|| format!("{name}: report")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job of one entry per unit is its files, a unit per directory they are
    /// spread over (none for a flat dataset), and the top directory.
    #[test]
    fn units_count_the_directories() {
        let t = tempfile::tempdir().unwrap();
        for (files, units) in [(1, 2), (1000, 1001), (1001, 1001 + 2 + 1)] {
            let top = Dataset::uniform(0, files).materialise(t.path()).unwrap();
            assert_eq!(
                crate::service_proc::units_of(&top, files).unwrap(),
                units,
                "{files} files"
            );
        }
    }
}
