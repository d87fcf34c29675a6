//! Runs a benchmark plan: for each link condition, bring the link up, start every
//! tool's server, then for each dataset (smallest files first) and iteration, run each
//! tool in turn (interleaved, so slow drifts of a shared machine touch all tools alike)
//! and append the timed result, skipping runs the results file already holds.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};

use crate::dataset::Dataset;
use crate::place::Place;
use crate::record::{Mode, Point, Record};
use crate::results::Results;
use crate::tool::{Tool, ToolContext};

/// One link condition of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkSpec {
    /// Emulated RTT in milliseconds; `None` runs on loopback without the testbed.
    pub rtt_ms: Option<f64>,
    /// Loss fraction (testbed only).
    pub loss: f64,
    /// Rate in bits per second, 0 = unlimited (testbed only).
    pub rate_bps: u64,
    /// Congestion control set on both hosts (`default`: left as it is).
    pub cc: String,
}

/// What to run.
pub struct Plan {
    /// Suite name recorded with each run (`sweep-bulk`, `datasets`).
    pub suite: String,
    /// Datasets; run in order of file size.
    pub datasets: Vec<Dataset>,
    /// Link conditions, in order.
    pub links: Vec<LinkSpec>,
    /// Tools by name, in the order they take turns.
    pub tools: Vec<String>,
    /// Iterations per (dataset, tool, link).
    pub iterations: u32,
    /// Streams each tool is asked to use.
    pub streams: u32,
    /// Where datasets are made and copies land (`DATA/src`, `DATA/dst`).
    pub data_dir: PathBuf,
    /// Drop the page cache before each run (disk-to-disk runs).
    pub drop_caches: bool,
    /// The hetch binary (for `hetch wan` and hetch itself).
    pub hetch: PathBuf,
    /// A run taking longer than this is killed and recorded as failed.
    pub run_timeout: Duration,
}

impl Plan {
    /// Number of runs the plan has in all.
    pub fn total_runs(&self) -> usize {
        self.datasets.len() * self.links.len() * self.tools.len() * self.iterations as usize
    }
}

/// What the progress display is told after each run (or skip).
pub struct Progress<'a> {
    /// Runs finished or skipped so far, including this one.
    pub done: usize,
    /// Runs in the plan.
    pub total: usize,
    /// This run, `None` when it was already in the results file.
    pub record: Option<&'a Record>,
    /// Seconds spent on runs so far (this session), for an estimate of what remains.
    pub elapsed: f64,
    /// Runs actually executed this session.
    pub executed: usize,
}

/// Runs `plan`, appending to `results`; `progress` is called after every run.
pub fn run(
    plan: &Plan,
    results: &mut Results,
    mut progress: impl FnMut(&Progress),
) -> anyhow::Result<()> {
    catch_interrupts();
    let scratch = tempdir_in(&plan.data_dir, "scratch")?;
    let mut tools: Vec<Box<dyn Tool>> = plan
        .tools
        .iter()
        .map(|t| crate::tools::make(t))
        .collect::<anyhow::Result<_>>()?;
    let mut datasets = plan.datasets.clone();
    datasets.sort_by_key(|d| (d.file_size, d.files));
    let total = plan.total_runs();
    let (mut done, mut executed) = (0usize, 0usize);
    let started = Instant::now();
    for link in &plan.links {
        // Links whose runs are all recorded are not even brought up.
        let pending = datasets.iter().any(|d| {
            (1..=plan.iterations).any(|i| {
                tools
                    .iter()
                    .any(|t| !results.has(&key(plan, d, link, t.name(), i)))
            })
        });
        if !pending {
            done += datasets.len() * tools.len() * plan.iterations as usize;
            continue;
        }
        let testbed = Testbed::up(plan, link)?;
        let ctx = ToolContext {
            hetch: plan.hetch.clone(),
            client: testbed.client.clone(),
            server: testbed.server.clone(),
            scratch: scratch.clone(),
            streams: plan.streams,
        };
        for t in tools.iter_mut() {
            t.start(&ctx)
                .with_context(|| format!("{}: starting its server", t.name()))?;
        }
        for ds in &datasets {
            let src = ds
                .materialise(&plan.data_dir.join("src"))
                .with_context(|| {
                    format!("making dataset {} in {}", ds.name, plan.data_dir.display())
                })?;
            for iteration in 1..=plan.iterations {
                for t in tools.iter() {
                    if INTERRUPTED.load(Ordering::SeqCst) {
                        bail!("interrupted; the same command resumes");
                    }
                    done += 1;
                    if results.has(&key(plan, ds, link, t.name(), iteration)) {
                        progress(&Progress {
                            done,
                            total,
                            record: None,
                            elapsed: started.elapsed().as_secs_f64(),
                            executed,
                        });
                        continue;
                    }
                    let r = run_one(plan, &ctx, t.as_ref(), ds, &src, link, iteration)?;
                    executed += 1;
                    results.append(r.clone())?;
                    progress(&Progress {
                        done,
                        total,
                        record: Some(&r),
                        elapsed: started.elapsed().as_secs_f64(),
                        executed,
                    });
                }
            }
        }
        for t in tools.iter_mut() {
            t.stop();
        }
        drop(testbed);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

fn point(plan: &Plan, ds: &Dataset, link: &LinkSpec) -> Point {
    Point {
        suite: plan.suite.clone(),
        dataset: ds.name.clone(),
        file_size: ds.file_size,
        files: ds.files,
        bytes: ds.bytes(),
        rtt_ms: link.rtt_ms,
        loss: link.loss,
        rate_bps: link.rate_bps,
        cc: link.cc.clone(),
        write_rate_bps: None,
    }
}

fn key(plan: &Plan, ds: &Dataset, link: &LinkSpec, tool: &str, iteration: u32) -> String {
    Record::key_of(&point(plan, ds, link), tool, Mode::Bulk, iteration)
}

/// One timed run: a fresh empty destination, caches dropped, the tool's command, then
/// a check that every file arrived whole.
fn run_one(
    plan: &Plan,
    ctx: &ToolContext,
    tool: &dyn Tool,
    ds: &Dataset,
    src: &Path,
    link: &LinkSpec,
    iteration: u32,
) -> anyhow::Result<Record> {
    let dst = plan.data_dir.join("dst").join(tool.name());
    if dst.exists() {
        std::fs::remove_dir_all(&dst).with_context(|| dst.display().to_string())?;
    }
    std::fs::create_dir_all(&dst).with_context(|| dst.display().to_string())?;
    if plan.drop_caches {
        drop_caches()?;
    }
    let log = ctx.scratch.join("run.log");
    let cmd = tool.copy(ctx, src, &dst, ds.bytes());
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let t0 = Instant::now();
    let outcome = run_with_timeout(cmd, &log, plan.run_timeout);
    let seconds = t0.elapsed().as_secs_f64();
    let error = match outcome {
        Outcome::Interrupted => bail!(
            "interrupted: the run in progress ({} on {}) was stopped and not recorded; the same command resumes",
            tool.name(),
            ds.name
        ),
        Outcome::Failed(e) => Some(e),
        Outcome::Succeeded if tool.is_limit() => None,
        Outcome::Succeeded => ds
            .check_copy(&dst)
            .err()
            .map(|e| format!("incomplete copy: {e}")),
    };
    Ok(Record {
        point: point(plan, ds, link),
        tool: tool.name().to_string(),
        iteration,
        seconds,
        ok: error.is_none(),
        error,
        started_unix,
        mode: Mode::Bulk,
        lag: None,
        writer_seconds: None,
        complete_seconds: None,
    })
}

/// How a timed command ended.
enum Outcome {
    Succeeded,
    /// Failed, with the reason in one line.
    Failed(String),
    /// The harness was asked to stop (Ctrl-C, SIGTERM) while it ran.
    Interrupted,
}

/// Set by SIGINT or SIGTERM. The runs' commands live in process groups of their own
/// (so a timeout can kill a tool with every helper it started), which also keeps a
/// terminal's Ctrl-C from reaching them: the harness stops them itself.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Routes SIGINT and SIGTERM to [`INTERRUPTED`].
fn catch_interrupts() {
    let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// Runs `cmd` in its own process group with output to `log`; kills the whole group
/// after `limit`, or at once when the harness is interrupted. A failure's reason is the
/// command's last line of output.
fn run_with_timeout(mut cmd: Command, log: &Path, limit: Duration) -> Outcome {
    let spawned = std::fs::File::create(log)
        .and_then(|out| Ok((out.try_clone()?, out)))
        .and_then(|(err, out)| {
            cmd.stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .process_group(0)
                .spawn()
        });
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(format!("cannot start {:?}: {e}", cmd.get_program())),
    };
    let kill = |child: &mut std::process::Child| {
        // SAFETY: kill(2) on the group we made; no memory is touched.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let _ = child.wait();
    };
    let deadline = Instant::now() + limit;
    let status = loop {
        if INTERRUPTED.load(Ordering::SeqCst) {
            kill(&mut child);
            return Outcome::Interrupted;
        }
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                kill(&mut child);
                return Outcome::Failed(format!("killed after {} s", limit.as_secs()));
            }
            Err(e) => return Outcome::Failed(e.to_string()),
        }
    };
    if status.success() {
        return Outcome::Succeeded;
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    Outcome::Failed(format!(
        "{status}: {}",
        last.chars().take(300).collect::<String>()
    ))
}

/// Empties the page cache so that every disk-to-disk run reads from the device.
fn drop_caches() -> anyhow::Result<()> {
    // SAFETY: sync(2) takes no arguments.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .context("dropping the page cache (needs root; use --no-drop-caches)")
}

fn tempdir_in(parent: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let dir = parent.join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    Ok(dir)
}

/// The hosts of one link condition: loopback, or the `hetch wan` testbed (taken down
/// when dropped).
struct Testbed {
    client: Place,
    server: Place,
    hetch: Option<PathBuf>,
    /// The host's allowed congestion controls before this link widened them.
    allowed_before: Option<String>,
}

impl Testbed {
    fn up(plan: &Plan, link: &LinkSpec) -> anyhow::Result<Testbed> {
        let Some(rtt) = link.rtt_ms else {
            return Ok(Testbed {
                client: Place::loopback(),
                server: Place::loopback(),
                hetch: None,
                allowed_before: None,
            });
        };
        let hetch = plan.hetch.clone();
        let _ = Command::new(&hetch).args(["wan", "down"]).output();
        let out = Command::new(&hetch)
            .args([
                "wan",
                "up",
                "--rtt",
                &format!("{rtt}ms"),
                "--rate",
                &format!("{}bit", link.rate_bps),
            ])
            .args(["--loss", &link.loss.to_string()])
            .output()
            .with_context(|| format!("{}: cannot run", hetch.display()))?;
        if !out.status.success() {
            bail!(
                "hetch wan up: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let mut bed = Testbed {
            client: Place {
                netns: Some("hetch-a".into()),
                addr: "10.77.0.1".into(),
            },
            server: Place {
                netns: Some("hetch-b".into()),
                addr: "10.77.0.2".into(),
            },
            hetch: Some(hetch),
            allowed_before: None,
        };
        if link.cc != "default" {
            bed.allowed_before = allow_congestion_control(&link.cc)?;
            for p in [&bed.client, &bed.server] {
                let out = p
                    .command("sysctl")
                    .args([
                        "-q",
                        "-w",
                        &format!("net.ipv4.tcp_congestion_control={}", link.cc),
                    ])
                    .output()?;
                if !out.status.success() {
                    bail!(
                        "congestion control '{}': {}",
                        link.cc,
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
            }
        }
        Ok(bed)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Some(before) = &self.allowed_before {
            let _ = std::fs::write(ALLOWED_CC, before);
        }
        if let Some(h) = &self.hetch {
            let _ = Command::new(h).args(["wan", "down"]).output();
        }
    }
}

/// The congestion controls that namespaces other than the initial one may choose.
const ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

/// Lets the testbed's namespaces use `cc` as their default: Linux refuses a namespace
/// any algorithm outside the initial namespace's allowed list (EPERM), so `cc` is added
/// to it; returns the list as it was, to restore, or `None` when nothing changed.
fn allow_congestion_control(cc: &str) -> anyhow::Result<Option<String>> {
    let before = std::fs::read_to_string(ALLOWED_CC).with_context(|| ALLOWED_CC.to_string())?;
    if before.split_whitespace().any(|a| a == cc) {
        return Ok(None);
    }
    std::fs::write(ALLOWED_CC, format!("{} {cc}", before.trim()))
        .with_context(|| format!("allowing congestion control '{cc}' in {ALLOWED_CC}"))?;
    Ok(Some(before.trim().to_string()))
}

/// The congestion control new network namespaces (and loopback runs) get: the initial
/// namespace's default, which the report names instead of "default".
pub fn default_congestion_control() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "default".to_string())
}
