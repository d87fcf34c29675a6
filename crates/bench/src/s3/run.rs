//! Runs an S3 benchmark plan. For each link: bring it up (loopback for RTT 0, else the
//! `hetch-lab wan` testbed), start MinIO on the server host, start each tool's server (the
//! hetch agent, iperf3); then for each dataset fill the prefix the downloads read
//! (once, with hetch on the server host) and, iteration by iteration, run every tool
//! up and then down, interleaved so that slow drifts of a shared machine touch all
//! tools alike. Every run is verified before it is recorded as a number.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use super::record::{write_meta, Direction, S3Meta, S3Record, S3Results, S3ToolInfo, ToolCommand};
use super::tools::{self, render, Job, S3Context, S3Tool};
use super::verify::{self, Digests, Hash};
use crate::dataset::Dataset;
use crate::minio::Minio;
use crate::run::{
    catch_interrupts, fresh_dir, run_with_timeout, run_with_timeout_to, tempdir_in, LinkSpec,
    Outcome, Testbed, INTERRUPTED,
};

/// The bucket every run uses (a directory of MinIO's data directory).
pub const BUCKET: &str = "bench";

/// One link of a plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct S3Link {
    /// Round-trip time in milliseconds; 0 runs everything on this host's loopback,
    /// without the testbed.
    pub rtt_ms: f64,
    /// The emulated link's rate in bits per second (0: unlimited); none on loopback.
    pub rate_bps: u64,
}

impl S3Link {
    /// The link as the harness's testbed takes it.
    fn spec(&self) -> LinkSpec {
        LinkSpec {
            rtt_ms: (self.rtt_ms > 0.0).then_some(self.rtt_ms),
            loss: 0.0,
            rate_bps: self.rate_bps,
            cc: "default".to_string(),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct S3Plan {
    /// Datasets, in the order given.
    pub datasets: Vec<Dataset>,
    /// Links, in order.
    pub links: Vec<S3Link>,
    /// Tools by name, in the order they take turns (unavailable ones are skipped).
    pub tools: Vec<String>,
    /// Iterations per (link, dataset, direction, tool).
    pub iterations: u32,
    /// Streams (or transfers) each tool is asked for.
    pub streams: u32,
    /// Where datasets (`src`), MinIO's data (`minio`), downloads (`dst`) and scratch
    /// live.
    pub data_dir: PathBuf,
    /// The hetch binary (the hetch tools, seeding and checking uploads).
    pub hetch: PathBuf,
    /// The lab binary (its `wan` testbed).
    pub lab: PathBuf,
    /// The MinIO server binary.
    pub minio: PathBuf,
    /// A run taking longer than this is killed and recorded as failed.
    pub run_timeout: Duration,
}

impl S3Plan {
    /// The tools of the plan that can run here, made.
    fn available_tools(&self) -> Result<Vec<Box<dyn S3Tool>>> {
        let mut out = Vec::new();
        for name in &self.tools {
            let t = tools::make(name, &self.hetch)?;
            if t.unavailable().is_none() {
                out.push(t);
            }
        }
        Ok(out)
    }

    /// Every tool asked for, as the report lists it: version, flags, and why it cannot
    /// run where it cannot.
    pub fn tool_infos(&self) -> Result<Vec<S3ToolInfo>> {
        self.tools
            .iter()
            .map(|name| {
                let t = tools::make(name, &self.hetch)?;
                let unavailable = t.unavailable();
                Ok(S3ToolInfo {
                    name: name.clone(),
                    version: if unavailable.is_some() {
                        "–".to_string()
                    } else {
                        t.version()
                    },
                    flags: t.flags(),
                    is_limit: t.is_limit(),
                    unavailable,
                })
            })
            .collect()
    }

    /// Runs the plan has in all (available tools only).
    pub fn total_runs(&self) -> Result<usize> {
        Ok(self.links.len()
            * self.datasets.len()
            * self.iterations as usize
            * Direction::BOTH.len()
            * self.available_tools()?.len())
    }

    /// Where MinIO keeps its data.
    fn minio_data(&self) -> PathBuf {
        self.data_dir.join("minio")
    }
}

/// What the progress display is told after each run.
pub struct S3Progress<'a> {
    /// Runs finished or skipped so far, including this one.
    pub done: usize,
    /// Runs in the plan.
    pub total: usize,
    /// This run.
    pub record: &'a S3Record,
}

/// A dataset's digests: SHA-256 for checking uploads, BLAKE3 for downloads (see
/// [`verify`] for why two).
struct Source {
    sha256: Digests,
    blake3: Digests,
}

impl Source {
    fn of(dir: &Path) -> Result<Source, String> {
        Ok(Source {
            sha256: verify::tree_digests(dir, Hash::Sha256)?,
            blake3: verify::tree_digests(dir, Hash::Blake3)?,
        })
    }
}

/// The prefix the downloads of `ds` read, filled once per benchmark.
fn seed_prefix(ds: &Dataset) -> String {
    format!("seed/{}", ds.name)
}

/// Runs `plan`, appending to `results` and recording each tool's command in `meta`
/// (written beside the results); `progress` is called after every run. MinIO's data,
/// the downloads and scratch are removed at the end; the datasets are kept for the
/// next benchmark.
pub fn run(
    plan: &S3Plan,
    results: &mut S3Results,
    meta: &mut S3Meta,
    mut progress: impl FnMut(&S3Progress),
) -> Result<()> {
    catch_interrupts();
    std::fs::create_dir_all(&plan.data_dir).with_context(|| plan.data_dir.display().to_string())?;
    let scratch = tempdir_in(&plan.data_dir, "scratch")?;
    let mut tools = plan.available_tools()?;
    let versions: Vec<String> = tools.iter().map(|t| t.version()).collect();
    let total = plan.total_runs()?;
    let mut digests: HashMap<String, Source> = HashMap::new();
    let mut done = 0usize;
    let names: Vec<&'static str> = tools.iter().map(|t| t.name()).collect();
    for link in &plan.links {
        let pending = |results: &S3Results, ds: &Dataset, only: Option<Direction>| {
            (1..=plan.iterations).any(|it| {
                Direction::BOTH
                    .into_iter()
                    .filter(|&d| only.is_none_or(|o| o == d))
                    .any(|d| {
                        names.iter().any(|name| {
                            let k =
                                S3Record::key_of(link.rtt_ms, rate(link), &ds.name, d, name, it);
                            !results.has(&k)
                        })
                    })
            })
        };
        if !plan.datasets.iter().any(|ds| pending(results, ds, None)) {
            done += plan.datasets.len()
                * plan.iterations as usize
                * Direction::BOTH.len()
                * tools.len();
            continue;
        }
        let testbed = Testbed::up(&plan.lab, &link.spec())?;
        // Uploads left by an interrupted benchmark only take memory: each run uploads
        // to a prefix of its own.
        let _ = std::fs::remove_dir_all(plan.minio_data().join(BUCKET).join("up"));
        let minio = Minio::start_on(&plan.minio, &plan.minio_data(), &testbed.server)
            .context("starting MinIO on the server host")?;
        minio.create_bucket(BUCKET)?;
        let ctx = S3Context {
            hetch: plan.hetch.clone(),
            client: testbed.client.clone(),
            server: testbed.server.clone(),
            scratch: scratch.clone(),
            streams: plan.streams,
            endpoint: minio.endpoint.clone(),
            bucket: BUCKET.to_string(),
        };
        for t in tools.iter_mut() {
            t.start(&ctx)
                .with_context(|| format!("{}: starting its server", t.name()))?;
        }
        for ds in &plan.datasets {
            if !pending(results, ds, None) {
                done += plan.iterations as usize * Direction::BOTH.len() * tools.len();
                continue;
            }
            let src = ds
                .materialise(&plan.data_dir.join("src"))
                .with_context(|| {
                    format!("making dataset {} in {}", ds.name, plan.data_dir.display())
                })?;
            if !digests.contains_key(&ds.name) {
                let d = Source::of(&src)
                    .map_err(|e| anyhow::anyhow!("hashing dataset {}: {e}", ds.name))?;
                digests.insert(ds.name.clone(), d);
            }
            let want = &digests[&ds.name];
            let seeded = if pending(results, ds, Some(Direction::Down)) {
                seed(plan, &ctx, &src, ds, want)?
            } else {
                Ok(())
            };
            for iteration in 1..=plan.iterations {
                for direction in Direction::BOTH {
                    for (i, tool) in tools.iter_mut().enumerate() {
                        done += 1;
                        let k = S3Record::key_of(
                            link.rtt_ms,
                            rate(link),
                            &ds.name,
                            direction,
                            tool.name(),
                            iteration,
                        );
                        if results.has(&k) {
                            continue;
                        }
                        if INTERRUPTED.load(Ordering::SeqCst) {
                            bail!("interrupted; the same command resumes");
                        }
                        let at = At {
                            plan,
                            ctx: &ctx,
                            link,
                            ds,
                            direction,
                            iteration,
                            version: &versions[i],
                        };
                        let record = match (&seeded, direction) {
                            (Err(e), Direction::Down) => at.record(
                                tool.as_ref(),
                                0.0,
                                Err(format!("filling the download prefix failed: {e}")),
                            ),
                            _ => at.run(tool.as_ref(), &src, want, meta, results.path())?,
                        };
                        if !record.verified && !tool.is_limit() {
                            // A failed copy may leave a session behind at the agent (the
                            // client killed at the timeout, say): a fresh one ends it.
                            tool.stop();
                            tool.start(&ctx).with_context(|| {
                                format!("{}: restarting its server", tool.name())
                            })?;
                        }
                        results.append(record.clone())?;
                        progress(&S3Progress {
                            done,
                            total,
                            record: &record,
                        });
                    }
                }
            }
        }
        for t in tools.iter_mut() {
            t.stop();
        }
        drop(minio);
        drop(testbed);
    }
    for leftover in [
        scratch,
        plan.data_dir.join("dst"),
        plan.minio_data(),
        plan.minio_data().with_extension("log"),
    ] {
        let _ = std::fs::remove_dir_all(&leftover).or_else(|_| std::fs::remove_file(&leftover));
    }
    Ok(())
}

/// The rate a link's records carry: none on loopback.
fn rate(link: &S3Link) -> u64 {
    if link.rtt_ms > 0.0 {
        link.rate_bps
    } else {
        0
    }
}

/// Makes sure the download prefix of `ds` holds exactly its files: kept from an earlier
/// link (MinIO's data outlives a restart) when `hetch sum` finds every digest right,
/// else uploaded again by hetch on the server host, untimed, and checked. The inner
/// error (one line) fails the downloads of `ds`; the outer one stops the benchmark.
fn seed(
    plan: &S3Plan,
    ctx: &S3Context,
    src: &Path,
    ds: &Dataset,
    want: &Source,
) -> Result<Result<(), String>> {
    let prefix = seed_prefix(ds);
    if check_upload(plan, ctx, &prefix, &want.sha256)?.is_ok() {
        return Ok(Ok(()));
    }
    remove_prefix(plan, &prefix);
    let log = ctx.scratch.join("seed.log");
    match run_with_timeout(ctx.seed_on_server(src, &prefix), &log, plan.run_timeout) {
        Outcome::Succeeded => {}
        Outcome::Failed(e) => return Ok(Err(format!("hetch cp on the server host: {e}"))),
        Outcome::Interrupted => {
            bail!("interrupted while filling {prefix}; the same command resumes")
        }
    }
    check_upload(plan, ctx, &prefix, &want.sha256)
}

/// Checks that `prefix` holds exactly the files of `want` (by SHA-256, as
/// `hetch sum --checksum sha256` reads every object back on the server host). The
/// inner error is the check's verdict.
fn check_upload(
    plan: &S3Plan,
    ctx: &S3Context,
    prefix: &str,
    want: &Digests,
) -> Result<Result<(), String>> {
    let (out, err) = (ctx.scratch.join("sum.out"), ctx.scratch.join("sum.err"));
    let outcome = run_with_timeout_to(ctx.sum_on_server(prefix), &out, &err, plan.run_timeout);
    Ok(match outcome {
        Outcome::Succeeded => {
            let text = std::fs::read_to_string(&out).with_context(|| out.display().to_string())?;
            verify::parse_sum(&text, &ctx.url(prefix)).and_then(|got| verify::compare(want, &got))
        }
        Outcome::Failed(e) => Err(format!("hetch sum: {e}")),
        Outcome::Interrupted => {
            bail!("interrupted while checking {prefix}; the same command resumes")
        }
    })
}

/// Removes every object under `prefix` by removing its directory from MinIO's data
/// directory (single-drive MinIO keeps each object as a directory named by its key).
fn remove_prefix(plan: &S3Plan, prefix: &str) {
    let _ = std::fs::remove_dir_all(plan.minio_data().join(BUCKET).join(prefix));
}

/// Where one run happens.
struct At<'a> {
    plan: &'a S3Plan,
    ctx: &'a S3Context,
    link: &'a S3Link,
    ds: &'a Dataset,
    direction: Direction,
    iteration: u32,
    version: &'a str,
}

impl At<'_> {
    /// The record of `tool`'s run here, started now, taking `seconds`, verified or
    /// failed with an error.
    fn record(&self, tool: &dyn S3Tool, seconds: f64, verdict: Result<(), String>) -> S3Record {
        S3Record {
            tool: tool.name().to_string(),
            version: self.version.to_string(),
            direction: self.direction,
            dataset: self.ds.name.clone(),
            files: self.ds.files,
            file_size: self.ds.file_size,
            bytes: self.ds.bytes(),
            rtt_ms: self.link.rtt_ms,
            rate_bps: rate(self.link),
            iteration: self.iteration,
            seconds,
            verified: verdict.is_ok(),
            error: verdict.err(),
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }

    /// One timed run of `tool` and its check. Up: into a prefix of its own, checked by
    /// `hetch sum --checksum sha256` on the server host, then removed. Down: from the
    /// dataset's download prefix into a directory that does not exist yet, hashed here
    /// (BLAKE3), then removed.
    fn run(
        &self,
        tool: &dyn S3Tool,
        src: &Path,
        want: &Source,
        meta: &mut S3Meta,
        results: &Path,
    ) -> Result<S3Record> {
        let unique = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let up_prefix = format!(
            "up/{}-{}-i{}-{unique}",
            self.ds.name,
            tool.name(),
            self.iteration
        );
        let down_prefix = seed_prefix(self.ds);
        let dst_root = self.plan.data_dir.join("dst");
        let dst = dst_root.join(tool.name());
        let job = match self.direction {
            Direction::Up => Job {
                local: src,
                prefix: &up_prefix,
                bytes: self.ds.bytes(),
            },
            Direction::Down => {
                // The parent exists; the destination itself does not, so every tool
                // makes it (and none finds an earlier run's files in it).
                std::fs::create_dir_all(&dst_root)?;
                if dst.exists() {
                    fresh_dir(&dst)?;
                    std::fs::remove_dir(&dst)?;
                }
                Job {
                    local: &dst,
                    prefix: &down_prefix,
                    bytes: self.ds.bytes(),
                }
            }
        };
        let cmd = tool.command(self.ctx, self.direction, &job);
        note_command(meta, results, tool.name(), self.direction, &cmd)?;
        let log = self.ctx.scratch.join("run.log");
        let started = self.record(tool, 0.0, Ok(())).started_unix;
        let t0 = Instant::now();
        let outcome = run_with_timeout(cmd, &log, self.plan.run_timeout);
        let seconds = t0.elapsed().as_secs_f64();
        let verdict = match outcome {
            Outcome::Interrupted => bail!(
                "interrupted: the run in progress ({} {} on {}) was stopped and not recorded; the same command resumes",
                tool.name(),
                self.direction.as_str(),
                self.ds.name
            ),
            Outcome::Failed(e) => Err(e),
            Outcome::Succeeded if tool.is_limit() => Ok(()),
            Outcome::Succeeded => match self.direction {
                Direction::Up => check_upload(self.plan, self.ctx, &up_prefix, &want.sha256)?,
                Direction::Down => verify::tree_digests(&dst, Hash::Blake3)
                    .and_then(|got| verify::compare(&want.blake3, &got)),
            }
            .map_err(|e| format!("not verified: {e}")),
        };
        match self.direction {
            Direction::Up => remove_prefix(self.plan, &up_prefix),
            Direction::Down => {
                let _ = std::fs::remove_dir_all(&dst);
            }
        }
        Ok(S3Record {
            started_unix: started,
            ..self.record(tool, seconds, verdict)
        })
    }
}

/// Records the exact command `tool` ran `direction` (its first run) in `meta`, written
/// at once beside the results.
fn note_command(
    meta: &mut S3Meta,
    results: &Path,
    tool: &str,
    direction: Direction,
    cmd: &std::process::Command,
) -> Result<()> {
    if meta
        .commands
        .iter()
        .any(|c| c.tool == tool && c.direction == direction)
    {
        return Ok(());
    }
    meta.commands.push(ToolCommand {
        tool: tool.to_string(),
        direction,
        command: render(cmd),
    });
    write_meta(results, meta)
}
