//! `hetch-lab bench service`: the transfer service on this machine. A real `hetch
//! service` (SQLite in a fresh state directory) plans a job of a dataset, then 1, 2,
//! 4... `hetch worker`s copy it into a directory below the root, beside one `hetch cp`
//! of the same tree as the baseline; every copy is checked against the dataset.
//!
//! Measured: planning (files listed and written per second, the service's peak RSS),
//! and for each copy its wall time and the CPU seconds of every process involved
//! (workers, or cp; the service's own CPU during the copy beside it). All processes are
//! this machine's: with workers sharing two CPUs, the numbers show the service's
//! overhead against cp, not scaling across nodes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use hetch_bench::dataset::Dataset;

use hetch_units as units;

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
}

/// Milliseconds since the epoch: the clock the service stamps jobs with.
fn epoch_ms() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| d.as_millis() as u64)
}

/// CPU seconds (user + system) of the children reaped so far.
fn children_cpu() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// CPU seconds of running process `pid` so far, from /proc.
fn process_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis: utime and stime are the 12th and
    // 13th of them.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// Peak resident memory of process `pid`, bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmHWM:"));
    let kb = line.and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok());
    kb.unwrap_or(0) * 1024
}

/// A `hetch service` for the run, stopped when dropped.
struct Service {
    child: Child,
    addr: String,
    env: Vec<(String, String)>,
    /// The workers' environment: their own token where the service has one (a build
    /// from before workers had their own token has only the operator's).
    worker_env: Vec<(String, String)>,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Service {
    fn start(hetch: &Path, root: &Path, state: &Path, a: &ServiceArgs) -> anyhow::Result<Self> {
        let log = std::fs::File::create(state.with_extension("log"))?;
        let err = log.try_clone()?;
        let mut child = Command::new(hetch)
            .args(["service", "--listen", "127.0.0.1:0", "--root"])
            .arg(root)
            .arg("--state-dir")
            .arg(state)
            .args(["--batch-files", &a.batch_files.to_string()])
            .args(["--split-size", &a.split_size, "--range-size", &a.range_size])
            .stdout(log)
            .stderr(err)
            .spawn()
            .context("starting hetch service")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = loop {
            let text = std::fs::read_to_string(state.with_extension("log"))?;
            if let Some(a) = text.lines().find_map(|l| l.split("https://").nth(1)) {
                break a.trim().to_string();
            }
            if Instant::now() > deadline || child.try_wait()?.is_some() {
                bail!("hetch service did not start:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let token = std::fs::read_to_string(state.join("token"))?;
        let config = state.with_extension("config");
        let env = vec![
            ("HETCH_TOKEN".to_string(), token.trim().to_string()),
            ("HETCH_CONFIG_DIR".to_string(), config.display().to_string()),
        ];
        let worker_env = match std::fs::read_to_string(state.join("worker-token")) {
            Ok(t) => vec![
                ("HETCH_SERVICE_TOKEN".to_string(), t.trim().to_string()),
                ("HETCH_CONFIG_DIR".to_string(), config.display().to_string()),
            ],
            Err(_) => env.clone(),
        };
        Ok(Service {
            child,
            addr,
            env,
            worker_env,
        })
    }

    fn job(&self, hetch: &Path, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(hetch)
            .args(["job", "--service", &self.addr])
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()?;
        if !out.status.success() {
            bail!(
                "hetch job {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn state_of(&self, hetch: &Path, id: &str) -> anyhow::Result<String> {
        let shown = self.job(hetch, &["--json", "show", id])?;
        let v: serde_json::Value = serde_json::from_str(&shown)?;
        Ok(v["state"].as_str().unwrap_or("").to_string())
    }
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

/// With `on`, times a `hetch job --json show` of job `id` every 200 ms until `done`;
/// the times in milliseconds.
fn probe_api(
    svc: &Service,
    hetch: &Path,
    id: &str,
    done: &std::sync::atomic::AtomicBool,
    on: bool,
) -> Vec<f64> {
    let mut times = Vec::new();
    while on && !done.load(std::sync::atomic::Ordering::Relaxed) {
        let asked = Instant::now();
        if svc.state_of(hetch, id).is_ok() {
            times.push(asked.elapsed().as_secs_f64() * 1000.0);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    times
}

/// `median / p95 / max (n)` of `times`, or `-` for none.
fn quantiles(times: &[f64]) -> String {
    if times.is_empty() {
        return "-".into();
    }
    let mut t = times.to_vec();
    t.sort_by(f64::total_cmp);
    let at = |q: f64| t[((t.len() - 1) as f64 * q).round() as usize];
    format!(
        "{:.0} / {:.0} / {:.0} ({})",
        at(0.5),
        at(0.95),
        at(1.0),
        t.len()
    )
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

    let mut rows = Vec::new();
    let mut planning = Vec::new();
    for (i, &workers) in a.workers.iter().enumerate() {
        let state = scratch.join(format!("state{i}"));
        let svc = Service::start(&hetch, &root, &state, &a)?;
        let dest = format!("service-bench/out{i}/");
        let t0 = Instant::now();
        let id = svc.job(&hetch, &["submit", &rel_src, &dest])?;
        // Each look is a whole `hetch job --json show` (process, TLS, query): how
        // long a user waits for it while the service plans.
        let mut shows = Vec::new();
        loop {
            let asked = Instant::now();
            let state = svc.state_of(&hetch, &id)?;
            shows.push(asked.elapsed().as_secs_f64() * 1000.0);
            if state != "planning" {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let planned = t0.elapsed().as_secs_f64();
        shows.sort_by(f64::total_cmp);
        planning.push(Planned {
            seconds: planned,
            rss: peak_rss(svc.child.id()),
            show_median_ms: shows[shows.len() / 2],
            show_max_ms: shows[shows.len() - 1],
        });
        if a.plan_only {
            continue;
        }

        let cpu0 = children_cpu();
        let svc_cpu0 = process_cpu(svc.child.id());
        let t1 = epoch_ms();
        let mut procs = Vec::new();
        for w in 0..workers {
            let mut c = Command::new(&hetch);
            c.args(["worker", "--service", &svc.addr, "--root"])
                .arg(&root)
                .args(["--name", &format!("w{w}"), "--units", &a.units.to_string()])
                .args(["--idle-exit", "1"])
                .envs(svc.worker_env.iter().map(|(k, v)| (k, v)))
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            procs.push(c.spawn().context("starting hetch worker")?);
        }
        let done = std::sync::atomic::AtomicBool::new(false);
        let (waited, probes) = std::thread::scope(|scope| {
            let probe = scope.spawn(|| probe_api(&svc, &hetch, &id, &done, a.probe_api));
            let waited = svc.job(&hetch, &["--json", "wait", &id]);
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            (waited, probe.join().unwrap_or_default())
        });
        let service_cpu = process_cpu(svc.child.id()) - svc_cpu0;
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
