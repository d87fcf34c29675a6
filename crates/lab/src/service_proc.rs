//! What the benchmarks of the transfer service share: a real `hetch service` started
//! for the run (its address and tokens read from its log and state directory), `hetch
//! job` calls against it, the CPU and memory of processes read from /proc, and the
//! quantiles a latency column prints.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Milliseconds since the epoch: the clock the service stamps jobs with.
pub fn epoch_ms() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| d.as_millis() as u64)
}

/// CPU seconds (user + system) a process has used so far, from its `stat` text (the
/// contents of /proc/PID/stat); 0 for text that is not one.
fn stat_cpu(stat: &str) -> f64 {
    // Fields after the command's closing parenthesis (the command may itself hold
    // one): utime and stime are the 12th and 13th of them.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    // SAFETY: sysconf reads a constant of the system.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// CPU seconds of running process `pid` so far, from /proc.
pub fn process_cpu(pid: u32) -> f64 {
    stat_cpu(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
}

/// CPU seconds so far of every running process whose command name (`comm`) is
/// `comm`, e.g. all of a local PostgreSQL's. A process that ended in between is not
/// counted, so a difference of two readings is a floor for short-lived processes.
pub fn comm_cpu(comm: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let mut total = 0.0;
    for e in dir.flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue; // gone since the listing
        };
        // The name stands between the first '(' and the last ')'.
        let name = stat
            .split_once('(')
            .and_then(|(_, r)| r.rsplit_once(')'))
            .map(|(n, _)| n);
        if name == Some(comm) {
            total += stat_cpu(&stat);
        }
    }
    total
}

/// Peak resident memory of process `pid`, bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmHWM:"));
    let kb = line.and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok());
    kb.unwrap_or(0) * 1024
}

/// `median / p95 / max (n)` of `times`, or `-` for none.
pub fn quantiles(times: &[f64]) -> String {
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

/// Looks at a job's state with `state` every 20 ms until it is no longer
/// `planning`: the milliseconds each look took, and the state it left planning for.
pub fn until_planned(
    mut state: impl FnMut() -> anyhow::Result<String>,
) -> anyhow::Result<(Vec<f64>, String)> {
    let mut looks = Vec::new();
    loop {
        let asked = Instant::now();
        let now = state()?;
        looks.push(asked.elapsed().as_secs_f64() * 1000.0);
        if now != "planning" {
            return Ok((looks, now));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Times `look` (a call of the API, answering whether it was answered) every 200 ms
/// until `done`: the answered ones' times in milliseconds.
pub fn probe_every_200ms(done: &AtomicBool, mut look: impl FnMut() -> bool) -> Vec<f64> {
    let mut times = Vec::new();
    while !done.load(Ordering::Relaxed) {
        let asked = Instant::now();
        if look() {
            times.push(asked.elapsed().as_secs_f64() * 1000.0);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    times
}

/// A `hetch service` for the run (listening on a free port of 127.0.0.1), stopped
/// when dropped.
pub struct Service {
    child: Child,
    /// Its address, `HOST:PORT`, as it printed it.
    pub addr: String,
    /// The operator's token (`STATE/token`).
    pub token: String,
    /// The workers' token (`STATE/worker-token`); the operator's for a build from
    /// before workers had their own, which took the operator's on the worker routes.
    pub worker_token: String,
    /// Whether the service has a workers' token of its own.
    own_worker_token: bool,
    /// The clients' configuration directory (`HETCH_CONFIG_DIR`): where `hetch job`
    /// and the benchmark's own clients keep the service's key once trusted.
    pub config: PathBuf,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Service {
    /// Starts `hetch service` with `root` and a fresh state directory `state`, its
    /// output in `STATE.log` and the clients' configuration in `STATE.config`, with
    /// the service's flags `flags` besides; returns once it has said where it listens.
    pub fn start(
        hetch: &Path,
        root: &Path,
        state: &Path,
        flags: &[String],
    ) -> anyhow::Result<Self> {
        let log_path = state.with_extension("log");
        let log = std::fs::File::create(&log_path)?;
        let err = log.try_clone()?;
        let mut child = Command::new(hetch)
            .args(["service", "--listen", "127.0.0.1:0", "--root"])
            .arg(root)
            .arg("--state-dir")
            .arg(state)
            .args(flags)
            .stdout(log)
            .stderr(err)
            .spawn()
            .context("starting hetch service")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = loop {
            let text = std::fs::read_to_string(&log_path)?;
            if let Some(a) = text.lines().find_map(|l| l.split("https://").nth(1)) {
                break a.trim().to_string();
            }
            if Instant::now() > deadline || child.try_wait()?.is_some() {
                let _ = child.kill();
                let _ = child.wait();
                bail!("hetch service did not start:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let token = std::fs::read_to_string(state.join("token"))?
            .trim()
            .to_string();
        let worker = std::fs::read_to_string(state.join("worker-token"));
        let own_worker_token = worker.is_ok();
        let worker_token = worker.map_or_else(|_| token.clone(), |t| t.trim().to_string());
        Ok(Service {
            child,
            addr,
            token,
            worker_token,
            own_worker_token,
            config: state.with_extension("config"),
        })
    }

    /// The service's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The known-hosts file of [`Service::config`], where `hetch job` records the
    /// service's key on first use.
    pub fn known_hosts(&self) -> PathBuf {
        self.config.join("known_hosts")
    }

    /// The environment of `hetch job`: the operator's token and the run's
    /// configuration directory.
    fn env(&self) -> Vec<(&str, String)> {
        vec![
            ("HETCH_TOKEN", self.token.clone()),
            ("HETCH_CONFIG_DIR", self.config.display().to_string()),
        ]
    }

    /// The environment of `hetch worker`: the workers' token where the service has
    /// one, else the operator's, as `hetch job` takes it.
    pub fn worker_env(&self) -> Vec<(&str, String)> {
        match self.own_worker_token {
            true => vec![
                ("HETCH_SERVICE_TOKEN", self.worker_token.clone()),
                ("HETCH_CONFIG_DIR", self.config.display().to_string()),
            ],
            false => self.env(),
        }
    }

    /// `hetch job --service ADDR ARGS...` as the operator: what it printed, or its
    /// error.
    pub fn job(&self, hetch: &Path, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(hetch)
            .args(["job", "--service", &self.addr])
            .args(args)
            .envs(self.env())
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

    /// The state of job `id` (`planning`, `queued`, `running`, `done`...), as `hetch
    /// job --json show` says it.
    pub fn state_of(&self, hetch: &Path, id: &str) -> anyhow::Result<String> {
        let shown = self.job(hetch, &["--json", "show", id])?;
        let v: serde_json::Value = serde_json::from_str(&shown)?;
        Ok(v["state"].as_str().unwrap_or("").to_string())
    }
}

/// Units of a job of the `files` files under `top`, one entry per unit: every entry
/// of the listing, so the files, the directories they are spread over, and `top`.
pub fn units_of(top: &std::path::Path, files: u64) -> anyhow::Result<u64> {
    let mut dirs = 0;
    for e in std::fs::read_dir(top)? {
        dirs += u64::from(e?.file_type()?.is_dir());
    }
    Ok(files + dirs + 1)
}

/// The service's flags that let one job hold `units` units. Its default bound is a
/// million units a job: a million files and their directories are more. None when not
/// needed, so that a build from before the flag still runs the smaller sizes.
pub fn unit_bound(units: u64) -> Vec<String> {
    match units > 1_000_000 {
        true => vec!["--max-units-per-job".into(), units.to_string()],
        false => Vec::new(),
    }
}
