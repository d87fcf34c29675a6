//! `hetch-lab bench service`: the transfer service on this machine. A real `hetch
//! service` (SQLite in a fresh state directory, or `--db-url`) plans a job of a dataset, then 1, 2,
//! 4... `hetch worker`s copy it into a directory below the root, beside one `hetch cp`
//! of the same tree as the baseline; every copy is checked against the dataset.
//!
//! Measured: planning (files listed and written per second, the service's peak RSS),
//! and for each copy its wall time and the CPU seconds of every process involved
//! (workers, or cp; the service's own CPU during the copy beside it). All processes are
//! this machine's: with workers sharing two CPUs, the numbers show the service's
//! overhead against cp, not scaling across nodes.

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use hetch_bench::dataset::Dataset;

use hetch_units as units;

use crate::service_proc::{
    epoch_ms, peak_rss, probe_every_200ms, process_cpu, quantiles, until_planned, Service,
};

/// Flags of `hetch-lab bench service`.
#[derive(Args)]
pub struct ServiceArgs {
    /// Files in the dataset.
    #[arg(long, default_value_t = 20_000)]
    files: u64,
    /// Bytes per file (16K, 1M...).
    #[arg(long, default_value = "16K", value_parser = units::parse_size)]
    file_size: u64,
    /// Worker counts to run, comma-separated; each copies the whole dataset.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    workers: Vec<u32>,
    /// Units each worker runs at once.
    #[arg(long, default_value_t = 2)]
    units: u32,
    /// Files per unit (the service's --batch-files).
    #[arg(long, default_value_t = 1000)]
    batch_files: u64,
    /// Files above this are moved in block ranges by several workers (the service's
    /// --split-size; "off": never).
    #[arg(long, default_value = "1G")]
    split_size: String,
    /// Bytes per range (the service's --range-size).
    #[arg(long, default_value = "256M")]
    range_size: String,
    /// During each copy, time a `hetch job --json show` of the job every 200 ms (the
    /// API's latency under the workers' load), printed as median / 95th percentile /
    /// max; the probes' CPU then counts with the workers'.
    #[arg(long)]
    probe_api: bool,
    /// Plan the job of each worker count and stop there: no copies, no cp (for
    /// planning large listings).
    #[arg(long)]
    plan_only: bool,
    /// Where datasets are made (and kept between runs); the service's root.
    #[arg(long, default_value = "/var/tmp/hetch-bench/data")]
    data_dir: PathBuf,
    /// The job database, as the service's --db takes it (default: SQLite in each
    /// service's fresh state directory). Every worker count's job goes into it: for
    /// clean numbers give an empty database and one worker count per run.
    #[arg(long, value_name = "URL")]
    db_url: Option<String>,
}

/// CPU seconds (user + system) of the children reaped so far.
fn children_cpu() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// The service's flags for this run.
fn service_flags(a: &ServiceArgs) -> Vec<String> {
    let flags = [
        ("--batch-files", a.batch_files.to_string()),
        ("--split-size", a.split_size.clone()),
        ("--range-size", a.range_size.clone()),
    ];
    let db = a.db_url.iter().map(|url| ("--db", url.clone()));
    flags
        .into_iter()
        .chain(db)
        .flat_map(|(k, v)| [k.to_string(), v])
        .collect()
}

/// One job's planning.
struct Planned {
    seconds: f64,
    rss: u64,
    show_median_ms: f64,
    show_max_ms: f64,
}

fn print_planning(planning: &[Planned], files: u64) {
    println!(
        "\n| planning run | seconds | files/s | service peak RSS (MiB) | `job show` while planning, median / max (ms) |\n|---|---|---|---|---|"
    );
    for (i, p) in planning.iter().enumerate() {
        let rate = files as f64 / p.seconds;
        let mib = p.rss as f64 / (1 << 20) as f64;
        println!(
            "| {} | {:.2} | {rate:.0} | {mib:.1} | {:.0} / {:.0} |",
            i + 1,
            p.seconds,
            p.show_median_ms,
            p.show_max_ms
        );
    }
}

/// One line of the results.
struct Row {
    what: String,
    seconds: f64,
    cpu: f64,
    service_cpu: f64,
    /// `job show` times during the copy, ms (with --probe-api).
    probes: Vec<f64>,
}

/// Runs the benchmark and prints its results (Markdown, with the raw numbers).
pub fn run(a: ServiceArgs) -> anyhow::Result<ExitCode> {
    if a.workers.is_empty() || a.workers.contains(&0) {
        bail!("--workers needs one or more counts above 0");
    }
    let hetch = crate::hetch_binary()?;
    let ds = Dataset::uniform(a.file_size, a.files);
    std::fs::create_dir_all(&a.data_dir)?;
    let src = ds.materialise(&a.data_dir)?;
    let scratch = a.data_dir.join("service-bench");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let root = std::fs::canonicalize(&a.data_dir)?;
    let rel_src = src
        .strip_prefix(&root)
        .unwrap_or(&src)
        .display()
        .to_string();
    println!(
        "dataset {} ({} files of {} bytes), hetch {}",
        ds.name,
        ds.files,
        ds.file_size,
        hetch.display()
    );

    let mut flags = service_flags(&a);
    let units = crate::service_proc::units_of(&src, a.files)?;
    flags.extend(crate::service_proc::unit_bound(units));
    let mut rows = Vec::new();
    let mut planning = Vec::new();
    for (i, &workers) in a.workers.iter().enumerate() {
        let state = scratch.join(format!("state{i}"));
        let svc = Service::start(&hetch, &root, &state, &flags)?;
        let dest = format!("service-bench/out{i}/");
        let t0 = Instant::now();
        let id = svc.job(&hetch, &["submit", &rel_src, &dest])?;
        // Each look is a whole `hetch job --json show` (process, TLS, query): how
        // long a user waits for it while the service plans.
        let (mut shows, _) = until_planned(|| svc.state_of(&hetch, &id))?;
        let planned = t0.elapsed().as_secs_f64();
        shows.sort_by(f64::total_cmp);
        planning.push(Planned {
            seconds: planned,
            rss: peak_rss(svc.pid()),
            show_median_ms: shows[shows.len() / 2],
            show_max_ms: shows[shows.len() - 1],
        });
        if a.plan_only {
            continue;
        }

        let cpu0 = children_cpu();
        let svc_cpu0 = process_cpu(svc.pid());
        let t1 = epoch_ms();
        let mut procs = Vec::new();
        for w in 0..workers {
            let mut c = Command::new(&hetch);
            c.args(["worker", "--service", &svc.addr, "--root"])
                .arg(&root)
                .args(["--name", &format!("w{w}"), "--units", &a.units.to_string()])
                .args(["--idle-exit", "1"])
                .envs(svc.worker_env())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            procs.push(c.spawn().context("starting hetch worker")?);
        }
        let done = std::sync::atomic::AtomicBool::new(false);
        let (waited, probes) = std::thread::scope(|scope| {
            // Each probe is a whole `hetch job --json show`, as a user would run it.
            let probe = scope.spawn(|| match a.probe_api {
                true => probe_every_200ms(&done, || svc.state_of(&hetch, &id).is_ok()),
                false => Vec::new(),
            });
            let waited = svc.job(&hetch, &["--json", "wait", &id]);
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            (waited, probe.join().unwrap_or_default())
        });
        let service_cpu = process_cpu(svc.pid()) - svc_cpu0;
        // From the job's own end, not when `wait` next looked.
        let ended: serde_json::Value = serde_json::from_str(waited.as_deref().unwrap_or("{}"))?;
        let finished = ended["finished"].as_u64().unwrap_or_else(epoch_ms);
        let seconds = finished.saturating_sub(t1) as f64 / 1000.0;
        for mut p in procs {
            p.wait()?;
        }
        waited?;
        ds.check_copy(&root.join(format!("service-bench/out{i}")).join(&ds.name))
            .map_err(|e| anyhow::anyhow!("{workers} workers: {e}"))?;
        rows.push(Row {
            what: format!("service, {workers} worker(s)"),
            seconds,
            cpu: children_cpu() - cpu0,
            service_cpu,
            probes,
        });
    }

    print_planning(&planning, ds.files);
    if a.plan_only {
        let _ = std::fs::remove_dir_all(&scratch);
        return Ok(ExitCode::SUCCESS);
    }
    let dest = scratch.join("cp-out");
    let cpu0 = children_cpu();
    let t = Instant::now();
    let st = Command::new(&hetch)
        .args(["cp", "-q"])
        .arg(&src)
        .arg(format!("{}/", dest.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    let seconds = t.elapsed().as_secs_f64();
    if !st.success() {
        bail!("hetch cp failed: {st}");
    }
    ds.check_copy(&dest.join(&ds.name))
        .map_err(|e| anyhow::anyhow!("cp: {e}"))?;
    rows.push(Row {
        what: "hetch cp (baseline)".into(),
        seconds,
        cpu: children_cpu() - cpu0,
        service_cpu: 0.0,
        probes: Vec::new(),
    });

    let base = rows.last().map_or(1.0, |r| r.seconds);
    println!("\n| copy | seconds | MB/s | files/s | vs cp | CPU s (workers or cp) | CPU s (service) | `job show` during it, ms: median / p95 / max (n) |\n|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.2} | {:.1} | {:.0} | {:.2} | {:.2} | {:.2} | {} |",
            r.what,
            r.seconds,
            ds.bytes() as f64 / r.seconds / 1e6,
            ds.files as f64 / r.seconds,
            base / r.seconds,
            r.cpu,
            r.service_cpu,
            quantiles(&r.probes)
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(ExitCode::SUCCESS)
}
