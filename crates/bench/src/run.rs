//! Runs a benchmark plan: for each link condition, bring the link up, start every
//! tool's server, then for each dataset (smallest files first) and iteration, run each
//! tool in turn (interleaved, so slow drifts of a shared machine touch all tools alike)
//! and append the timed result, skipping runs the results file already holds.
//!
//! A streaming plan (`sweep --mode streaming`) goes iteration by iteration through
//! every dataset, smallest first, as the zx paper's sweeps do, and at each point runs
//! a tool that can follow growing files twice: first *streaming* (a writer makes the
//! dataset's files in an empty directory while the tool copies them), then *bulk*
//! (the same final files, complete); a limit (iperf3) runs after them.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};

use crate::dataset::Dataset;
use crate::place::Place;
use crate::record::{Lag, Mode, Point, Record};
use crate::results::Results;
use crate::tool::{FollowSettings, Tool, ToolContext};

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

/// What a streaming plan adds: the writer and how the copy follows it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamingSpec {
    /// The writer's aggregate rates to run, in bytes per second (0: as fast as it
    /// can); each is a point of its own.
    pub write_rates: Vec<u64>,
    /// Bytes per write.
    pub write_size: u64,
    /// How the copy follows the growing files; its idle time is the least one used
    /// (see [`StreamingSpec::follow_for`]).
    pub follow: FollowSettings,
}

impl StreamingSpec {
    /// How the copy follows the files of `ds` written at `rate` bytes per second: the
    /// spec's settings, with the idle time raised to twice the writer's gap between
    /// two writes to one file (files x write size / rate) where that is longer. A
    /// shorter idle would have the copy finish files the writer has not finished
    /// (they look idle between its writes): runs measuring nothing but that.
    pub fn follow_for(&self, ds: &Dataset, rate: u64) -> FollowSettings {
        let mut f = self.follow.clone();
        if rate > 0 {
            let round = ds.files as f64 * self.write_size.min(ds.file_size) as f64;
            let gap = Duration::from_secs_f64(round / rate as f64);
            f.idle = f.idle.max(gap * 2);
        }
        f
    }
}

/// What to run.
pub struct Plan {
    /// Suite name recorded with each run (`sweep-bulk`, `sweep-streaming`, `datasets`).
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
    /// Where datasets are made and copies land (`DATA/src`, `DATA/dst`; streaming
    /// sources in `DATA/stream`).
    pub data_dir: PathBuf,
    /// Drop the page cache before each run (disk-to-disk runs).
    pub drop_caches: bool,
    /// The hetch binary under test.
    pub hetch: PathBuf,
    /// The lab binary (its `wan` testbed and `bench write` writer).
    pub lab: PathBuf,
    /// A run taking longer than this is killed and recorded as failed.
    pub run_timeout: Duration,
    /// Streaming runs; `None` for a bulk plan.
    pub streaming: Option<StreamingSpec>,
}

impl Plan {
    /// Number of runs the plan has in all.
    pub fn total_runs(&self) -> usize {
        let tools: Vec<Box<dyn Tool>> = self
            .tools
            .iter()
            .filter_map(|t| crate::tools::make(t).ok())
            .collect();
        self.slots().len() * self.links.len() * self.entries(&tools).len()
    }

    /// The writer rates of the plan: one `None` for a bulk plan.
    fn write_rates(&self) -> Vec<Option<u64>> {
        match &self.streaming {
            None => vec![None],
            Some(s) => s.write_rates.iter().map(|&r| Some(r)).collect(),
        }
    }

    /// Every (dataset, writer rate, iteration) of one link, in the order they run:
    /// dataset by dataset for a bulk plan (each dataset is made once, then every
    /// iteration copies it), iteration by iteration through every dataset for a
    /// streaming plan (the zx paper's sweep: a sweep is one pass over the datasets,
    /// smallest first, repeated).
    fn slots(&self) -> Vec<Slot> {
        let mut datasets = self.datasets.clone();
        datasets.sort_by_key(|d| (d.file_size, d.files));
        let mut slots = Vec::new();
        for (d, ds) in datasets.iter().enumerate() {
            for &write_rate in &self.write_rates() {
                for iteration in 1..=self.iterations {
                    slots.push(Slot {
                        dataset: ds.clone(),
                        write_rate,
                        iteration,
                        order: d,
                    });
                }
            }
        }
        if self.streaming.is_some() {
            slots.sort_by_key(|s| (s.iteration, s.order));
        }
        slots
    }

    /// The runs at each slot, in turn: every tool in bulk; in a streaming plan, a tool
    /// that can follow growing files runs streaming first (its writer makes the final
    /// files that its bulk run then copies).
    fn entries(&self, tools: &[Box<dyn Tool>]) -> Vec<(usize, Mode)> {
        let mut out = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            if self.streaming.is_some() && t.can_follow() {
                out.push((i, Mode::Streaming));
            }
            out.push((i, Mode::Bulk));
        }
        out
    }
}

/// One (dataset, writer rate, iteration) of a link.
struct Slot {
    dataset: Dataset,
    /// The writer's rate in bytes per second (streaming plans).
    write_rate: Option<u64>,
    iteration: u32,
    /// The dataset's place in size order.
    order: usize,
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
    let slots = plan.slots();
    let entries = plan.entries(&tools);
    let names: Vec<&'static str> = tools.iter().map(|t| t.name()).collect();
    let total = slots.len() * plan.links.len() * entries.len();
    let (mut done, mut executed) = (0usize, 0usize);
    let started = Instant::now();
    for link in &plan.links {
        let key_at = |s: &Slot, &(t, mode): &(usize, Mode)| {
            let p = point(plan, &s.dataset, link, s.write_rate);
            Record::key_of(&p, names[t], mode, s.iteration)
        };
        // Links whose runs are all recorded are not even brought up.
        let pending = slots
            .iter()
            .any(|s| entries.iter().any(|e| !results.has(&key_at(s, e))));
        if !pending {
            done += slots.len() * entries.len();
            continue;
        }
        let testbed = Testbed::up(&plan.lab, link)?;
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
        for slot in &slots {
            let ds = &slot.dataset;
            // Bulk plans copy a dataset made once; streaming plans make their files
            // with the writer.
            let src = match plan.streaming {
                None if entries.iter().any(|e| !results.has(&key_at(slot, e))) => Some(
                    ds.materialise(&plan.data_dir.join("src"))
                        .with_context(|| {
                            format!("making dataset {} in {}", ds.name, plan.data_dir.display())
                        })?,
                ),
                _ => None,
            };
            for e in &entries {
                if INTERRUPTED.load(Ordering::SeqCst) {
                    bail!("interrupted; the same command resumes");
                }
                done += 1;
                if results.has(&key_at(slot, e)) {
                    progress(&Progress {
                        done,
                        total,
                        record: None,
                        elapsed: started.elapsed().as_secs_f64(),
                        executed,
                    });
                    continue;
                }
                let tool = tools[e.0].as_ref();
                let at = At {
                    plan,
                    ctx: &ctx,
                    ds,
                    link,
                    write_rate: slot.write_rate,
                    iteration: slot.iteration,
                };
                let r = match (&plan.streaming, e.1) {
                    (Some(spec), Mode::Streaming) => run_streaming(&at, tool, spec)?,
                    (Some(spec), Mode::Bulk) => {
                        let final_files = if tool.is_limit() {
                            // A limit sends bytes, not files.
                            Ok(stream_dir(plan, ds))
                        } else {
                            final_files(&at, spec)?
                        };
                        match final_files {
                            Ok(src) => run_one(&at, tool, &src, Some(&spec.follow.done_suffix))?,
                            Err(e) => {
                                at.failed(tool, Mode::Bulk, format!("making the final files: {e}"))
                            }
                        }
                    }
                    (None, _) => {
                        let src = src.as_deref().expect("materialised above");
                        run_one(&at, tool, src, None)?
                    }
                };
                if !r.ok && !tools[e.0].is_limit() {
                    // A failed copy may leave its session writing at the server (the
                    // client killed, say): a fresh server ends it before the next run.
                    let t = &mut tools[e.0];
                    t.stop();
                    t.start(&ctx)
                        .with_context(|| format!("{}: restarting its server", t.name()))?;
                }
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
        for t in tools.iter_mut() {
            t.stop();
        }
        drop(testbed);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

fn point(plan: &Plan, ds: &Dataset, link: &LinkSpec, write_rate: Option<u64>) -> Point {
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
        write_rate_bps: write_rate.map(|r| r.saturating_mul(8)),
    }
}

/// Where one run happens: the plan, the hosts, the dataset, the link, the writer's
/// rate and the iteration.
struct At<'a> {
    plan: &'a Plan,
    ctx: &'a ToolContext,
    ds: &'a Dataset,
    link: &'a LinkSpec,
    write_rate: Option<u64>,
    iteration: u32,
}

impl At<'_> {
    /// A record of `tool`'s run here, started now, with nothing measured yet.
    fn record(&self, tool: &dyn Tool, mode: Mode) -> Record {
        Record {
            point: point(self.plan, self.ds, self.link, self.write_rate),
            tool: tool.name().to_string(),
            iteration: self.iteration,
            seconds: 0.0,
            ok: false,
            error: None,
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            mode,
            lag: None,
            writer_seconds: None,
            complete_seconds: None,
        }
    }

    /// A failed run that never started its copy.
    fn failed(&self, tool: &dyn Tool, mode: Mode, error: String) -> Record {
        Record {
            error: Some(error),
            ..self.record(tool, mode)
        }
    }

    /// A fresh, empty destination for `tool`.
    fn fresh_dst(&self, tool: &dyn Tool) -> anyhow::Result<PathBuf> {
        let dst = self.plan.data_dir.join("dst").join(tool.name());
        fresh_dir(&dst)?;
        Ok(dst)
    }
}

/// Removes `dir` if it exists and makes it again, empty. A removal that fails is
/// tried again a few times: a process that has not quite stopped may still be adding
/// files to it.
pub(crate) fn fresh_dir(dir: &Path) -> anyhow::Result<()> {
    let mut tries = 0;
    while dir.exists() {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(_) if tries < 5 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e).with_context(|| dir.display().to_string()),
        }
    }
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())
}

/// One timed run: a fresh empty destination, caches dropped, the tool's command, then
/// a check that every file arrived whole (and, given a done suffix, every marker).
fn run_one(at: &At, tool: &dyn Tool, src: &Path, markers: Option<&str>) -> anyhow::Result<Record> {
    let dst = at.fresh_dst(tool)?;
    if at.plan.drop_caches {
        drop_caches()?;
    }
    let log = at.ctx.scratch.join("run.log");
    let cmd = tool.copy(at.ctx, src, &dst, at.ds.bytes());
    let mut record = at.record(tool, Mode::Bulk);
    let t0 = Instant::now();
    let outcome = run_with_timeout(cmd, &log, at.plan.run_timeout);
    record.seconds = t0.elapsed().as_secs_f64();
    record.error = match outcome {
        Outcome::Interrupted => bail!(
            "interrupted: the run in progress ({} on {}) was stopped and not recorded; the same command resumes",
            tool.name(),
            at.ds.name
        ),
        Outcome::Failed(e) => Some(e),
        Outcome::Succeeded if tool.is_limit() => None,
        Outcome::Succeeded => check(at.ds, &dst, markers).err(),
    };
    record.ok = record.error.is_none();
    Ok(record)
}

/// Checks a copy in `dst`: every file whole and, given a done suffix, every marker.
fn check(ds: &Dataset, dst: &Path, markers: Option<&str>) -> Result<(), String> {
    ds.check_copy(dst)
        .and_then(|()| markers.map_or(Ok(()), |m| ds.check_markers(dst, m)))
        .map_err(|e| format!("incomplete copy: {e}"))
}

/// Where a streaming plan's writer makes the files of `ds` (its streaming source,
/// and, once the writer is done, the bulk run's final files).
fn stream_dir(plan: &Plan, ds: &Dataset) -> PathBuf {
    plan.data_dir.join("stream").join(&ds.name)
}

/// The mark beside [`stream_dir`] that says a writer finished it (written last), and
/// what it holds: the files' shape and the writer's settings.
fn stream_ready(plan: &Plan, ds: &Dataset, spec: &StreamingSpec) -> (PathBuf, String) {
    let mark = plan
        .data_dir
        .join("stream")
        .join(format!("{}.ready", ds.name));
    let want = format!(
        "{} {} {} {} {}\n",
        ds.file_size,
        ds.files,
        spec.write_size,
        writer_seed(ds),
        spec.follow.done_suffix
    );
    (mark, want)
}

/// The writer's seed for `ds`: the same bytes in every iteration and at every rate.
fn writer_seed(ds: &Dataset) -> u64 {
    ds.file_size
}

/// `hetch-lab bench write` of the files of `ds` into `dir` at `rate` bytes per second,
/// with a done marker after each file, on the client host.
fn writer_command(at: &At, spec: &StreamingSpec, dir: &Path, rate: u64) -> Command {
    let mut c = at.ctx.client.command(&at.plan.lab.to_string_lossy());
    c.args(["bench", "write", "--size"])
        .arg(at.ds.file_size.to_string())
        .arg("--write-size")
        .arg(spec.write_size.to_string())
        .arg("--rate")
        .arg(rate.to_string())
        .arg("--done-suffix")
        .arg(&spec.follow.done_suffix)
        .arg("--seed")
        .arg(writer_seed(at.ds).to_string())
        .arg("--");
    for i in 0..at.ds.files {
        c.arg(dir.join(at.ds.rel_path(i)));
    }
    c
}

/// The final files of the streaming runs at `at`, for its bulk runs: those its last
/// streaming run's writer finished, or, when there are none (that run was recorded
/// in an earlier session, or its writer failed), made now by the writer at full
/// speed, untimed. The inner error (one line) is the bulk run's failure; the outer
/// one stops the benchmark (interrupted).
fn final_files(at: &At, spec: &StreamingSpec) -> anyhow::Result<Result<PathBuf, String>> {
    let dir = stream_dir(at.plan, at.ds);
    let (mark, want) = stream_ready(at.plan, at.ds, spec);
    if std::fs::read_to_string(&mark).is_ok_and(|m| m == want) {
        return Ok(Ok(dir));
    }
    let _ = std::fs::remove_file(&mark);
    if let Err(e) = fresh_dir(&dir) {
        return Ok(Err(format!("{e:#}")));
    }
    let log = at.ctx.scratch.join("writer.log");
    match run_with_timeout(writer_command(at, spec, &dir, 0), &log, at.plan.run_timeout) {
        Outcome::Succeeded => {}
        Outcome::Failed(e) => return Ok(Err(format!("writer: {e}"))),
        Outcome::Interrupted => bail!(
            "interrupted while making the final files of {}; the same command resumes",
            at.ds.name
        ),
    }
    Ok(std::fs::write(&mark, want)
        .map(|()| dir)
        .map_err(|e| format!("{}: {e}", mark.display())))
}

/// How often the destination is looked at for the last done markers, once the writer
/// has finished (not before: it writes every file's marker only at the end).
const MARKER_POLL: Duration = Duration::from_millis(10);

/// One streaming run: an empty source directory; the writer (`hetch-lab bench write`,
/// paced at the slot's rate, done markers on) started on the client once the tool's
/// following copy has its session up; timed from the copy's start to its exit. Also
/// times the writer, and when every file and its marker were in place at the
/// destination; reads the lag from the copy's JSON summary; then checks the copy
/// (every file whole, every marker there).
fn run_streaming(at: &At, tool: &dyn Tool, spec: &StreamingSpec) -> anyhow::Result<Record> {
    let mut record = at.record(tool, Mode::Streaming);
    let src = stream_dir(at.plan, at.ds);
    let (mark, _) = stream_ready(at.plan, at.ds, spec);
    let _ = std::fs::remove_file(&mark);
    // `SRC.done` beside the source directory tells the copy the whole run is written
    // (the writer's per-file markers only say each file is); it is made once the
    // writer exits, as an instrument marks the end of a run.
    let run_marker = run_marker(&src, &spec.follow.done_suffix);
    let _ = std::fs::remove_file(&run_marker);
    fresh_dir(&src)?;
    let dst = at.fresh_dst(tool)?;
    if at.plan.drop_caches {
        drop_caches()?;
    }
    let rate = at.write_rate.unwrap_or(0);
    let follow = spec.follow_for(at.ds, rate);
    let Some(copy) = tool.follow(at.ctx, &src, &dst, &follow) else {
        return Ok(at.failed(
            tool,
            Mode::Streaming,
            format!("{} cannot follow growing files", tool.name()),
        ));
    };
    let writer = writer_command(at, spec, &src, rate);
    let scratch = &at.ctx.scratch;
    let (writer_log, copy_out, copy_log) = (
        scratch.join("writer.log"),
        scratch.join("follow.json"),
        scratch.join("follow.log"),
    );
    // The copy starts first and the writer once the copy's session is up (the source
    // directory's copy appears at the destination), as with a `hetch watch` already
    // running: lag then measures streaming, not connection set-up. The clock starts
    // with the copy, so set-up counts in the throughput as it does for bulk runs.
    let before = dir_id(&dst);
    let t0 = Instant::now();
    let mut c = match Proc::spawn(copy, &copy_out, &copy_log) {
        Ok(p) => p,
        Err(e) => return Ok(at.failed(tool, Mode::Streaming, e)),
    };
    let up = t0 + SESSION_UP_LIMIT;
    while !session_up(&dst, before) && Instant::now() < up && c.try_wait().is_none() {
        std::thread::sleep(Duration::from_millis(2));
    }
    let w0 = Instant::now();
    let mut w = match Proc::spawn(writer, &writer_log, &writer_log) {
        Ok(p) => p,
        Err(e) => {
            c.kill();
            return Ok(at.failed(tool, Mode::Streaming, format!("writer: {e}")));
        }
    };
    let deadline = t0 + at.plan.run_timeout;
    let mut markers = MarkerWatch::default();
    let mut next_look = t0;
    let mut writer_status: Option<ExitStatus> = None;
    let error = loop {
        if INTERRUPTED.load(Ordering::SeqCst) {
            w.kill();
            c.kill();
            bail!(
                "interrupted: the run in progress ({} streaming on {}) was stopped and not recorded; the same command resumes",
                tool.name(),
                at.ds.name
            );
        }
        if writer_status.is_none() {
            if let Some(status) = w.try_wait() {
                record.writer_seconds = Some(w0.elapsed().as_secs_f64());
                writer_status = Some(status);
                if !status.success() {
                    c.kill();
                    break Some(format!("writer: {}", failure(status, &writer_log)));
                }
                if let Err(e) = std::fs::write(&run_marker, b"") {
                    c.kill();
                    break Some(format!("{}: {e}", run_marker.display()));
                }
            }
        }
        if writer_status.is_some()
            && record.complete_seconds.is_none()
            && Instant::now() >= next_look
        {
            if markers.all_in(at.ds, &dst, &spec.follow.done_suffix) {
                record.complete_seconds = Some(t0.elapsed().as_secs_f64());
            }
            next_look = Instant::now() + MARKER_POLL;
        }
        if let Some(status) = c.try_wait() {
            record.seconds = t0.elapsed().as_secs_f64();
            if writer_status.is_none() {
                w.kill();
                break Some(if status.success() {
                    "the copy ended before the writer finished".to_string()
                } else {
                    failure(status, &copy_log)
                });
            }
            if !status.success() {
                break Some(failure(status, &copy_log));
            }
            // Everything may have landed since the last look.
            if record.complete_seconds.is_none()
                && markers.all_in(at.ds, &dst, &spec.follow.done_suffix)
            {
                record.complete_seconds = Some(record.seconds);
            }
            break check(at.ds, &dst, Some(&spec.follow.done_suffix)).err();
        }
        if Instant::now() >= deadline {
            w.kill();
            c.kill();
            break Some(format!("killed after {} s", at.plan.run_timeout.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if record.seconds == 0.0 {
        record.seconds = t0.elapsed().as_secs_f64();
    }
    if writer_status.is_some_and(|s| s.success()) {
        // The writer's files are whole: the bulk run copies them.
        let (mark, want) = stream_ready(at.plan, at.ds, spec);
        std::fs::write(&mark, want).with_context(|| mark.display().to_string())?;
    }
    record.lag = read_lag(&copy_out);
    record.ok = error.is_none();
    record.error = error;
    Ok(record)
}

/// Longest wait for a following copy's session before the writer starts anyway.
const SESSION_UP_LIMIT: Duration = Duration::from_secs(30);

/// Inode and status-change time of a directory, if it exists (a directory removed and
/// made again may get the same inode, never the same change time).
fn dir_id(dir: &Path) -> Option<(u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir)
        .ok()
        .map(|m| (m.ino(), m.ctime(), m.ctime_nsec()))
}

/// Whether a following copy into `dst` (an empty directory with id `before` when the
/// copy started) has its session up: the copy made `dst` anew (a tool that copies the
/// source directory *as* `dst`) or put something in it.
fn session_up(dst: &Path, before: Option<(u64, i64, i64)>) -> bool {
    let now = dir_id(dst);
    (now.is_some() && now != before) || std::fs::read_dir(dst).is_ok_and(|mut d| d.next().is_some())
}

/// The marker that says the whole source directory `src` is written: `SRC` + suffix.
fn run_marker(src: &Path, suffix: &str) -> PathBuf {
    let mut m = src.as_os_str().to_os_string();
    m.push(suffix);
    PathBuf::from(m)
}

/// Watches a destination for the done markers of a dataset's files, in file order,
/// remembering how far it got so that each look costs a stat per new marker.
#[derive(Default)]
struct MarkerWatch {
    /// Markers `0..next` are in place.
    next: u64,
}

impl MarkerWatch {
    /// Whether every marker of `ds` is in `dst` now.
    fn all_in(&mut self, ds: &Dataset, dst: &Path, suffix: &str) -> bool {
        while self.next < ds.files {
            let mut m = dst.join(ds.rel_path(self.next)).into_os_string();
            m.push(suffix);
            if !Path::new(&m).is_file() {
                return false;
            }
            self.next += 1;
        }
        true
    }
}

/// The lag in the JSON summary a following copy printed to `out` (its last line that
/// is a JSON object); `None` without one, or when the copy saw no file grow.
fn read_lag(out: &Path) -> Option<Lag> {
    let text = std::fs::read_to_string(out).ok()?;
    let summary: serde_json::Value = text.lines().rev().find_map(|l| {
        serde_json::from_str(l.trim())
            .ok()
            .filter(|v: &serde_json::Value| v.is_object())
    })?;
    serde_json::from_value(summary.get("lag")?.clone()).ok()
}

/// A command running in a process group of its own, its output in files.
struct Proc {
    child: Child,
}

impl Proc {
    /// Spawns `cmd` with stdout to `out` and stderr to `err` (the same file for both
    /// when equal); an error is one line naming the program.
    fn spawn(mut cmd: Command, out: &Path, err: &Path) -> Result<Proc, String> {
        let files = std::fs::File::create(out).and_then(|o| {
            let e = if out == err {
                o.try_clone()?
            } else {
                std::fs::File::create(err)?
            };
            Ok((o, e))
        });
        let spawned = files.and_then(|(o, e)| {
            cmd.stdin(Stdio::null())
                .stdout(o)
                .stderr(e)
                .process_group(0)
                .spawn()
        });
        match spawned {
            Ok(child) => Ok(Proc { child }),
            Err(e) => Err(format!("cannot start {:?}: {e}", cmd.get_program())),
        }
    }

    /// Its exit status once it has exited (an error to wait counts as a failure).
    fn try_wait(&mut self) -> Option<ExitStatus> {
        match self.child.try_wait() {
            Ok(s) => s,
            Err(_) => Some(ExitStatus::from_raw(1 << 8)),
        }
    }

    /// Kills its whole process group and reaps it.
    fn kill(&mut self) {
        // SAFETY: kill(2) on the group we made; no memory is touched.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// Why a command failed: its status and its last line of output in `log`.
fn failure(status: ExitStatus, log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    format!("{status}: {}", last.chars().take(300).collect::<String>())
}

/// How a timed command ended.
pub(crate) enum Outcome {
    Succeeded,
    /// Failed, with the reason in one line.
    Failed(String),
    /// The harness was asked to stop (Ctrl-C, SIGTERM) while it ran.
    Interrupted,
}

/// Set by SIGINT or SIGTERM. The runs' commands live in process groups of their own
/// (so a timeout can kill a tool with every helper it started), which also keeps a
/// terminal's Ctrl-C from reaching them: the harness stops them itself.
pub(crate) static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Routes SIGINT and SIGTERM to [`INTERRUPTED`].
pub(crate) fn catch_interrupts() {
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
pub(crate) fn run_with_timeout(cmd: Command, log: &Path, limit: Duration) -> Outcome {
    run_with_timeout_to(cmd, log, log, limit)
}

/// [`run_with_timeout`] with stdout to `out` and stderr to `err` (the same file for
/// both when equal): for a command whose output is read afterwards. A failure's
/// reason is the last line of `err`.
pub(crate) fn run_with_timeout_to(
    cmd: Command,
    out: &Path,
    err: &Path,
    limit: Duration,
) -> Outcome {
    let mut child = match Proc::spawn(cmd, out, err) {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(e),
    };
    let deadline = Instant::now() + limit;
    let status = loop {
        if INTERRUPTED.load(Ordering::SeqCst) {
            child.kill();
            return Outcome::Interrupted;
        }
        match child.try_wait() {
            Some(s) => break s,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            None => {
                child.kill();
                return Outcome::Failed(format!("killed after {} s", limit.as_secs()));
            }
        }
    };
    if status.success() {
        Outcome::Succeeded
    } else {
        Outcome::Failed(failure(status, err))
    }
}

/// Empties the page cache so that every disk-to-disk run reads from the device.
fn drop_caches() -> anyhow::Result<()> {
    // SAFETY: sync(2) takes no arguments.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .context("dropping the page cache (needs root; use --no-drop-caches)")
}

pub(crate) fn tempdir_in(parent: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let dir = parent.join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    Ok(dir)
}

/// The hosts of one link condition: loopback, or the `hetch-lab wan` testbed (taken down
/// when dropped).
pub(crate) struct Testbed {
    /// Where clients run.
    pub(crate) client: Place,
    /// Where servers run.
    pub(crate) server: Place,
    hetch: Option<PathBuf>,
    /// The host's allowed congestion controls before this link widened them.
    allowed_before: Option<String>,
}

impl Testbed {
    /// Brings up `link` with the lab binary `hetch` (`hetch-lab wan up`), or hands out
    /// loopback for a link without an RTT.
    pub(crate) fn up(hetch: &Path, link: &LinkSpec) -> anyhow::Result<Testbed> {
        let Some(rtt) = link.rtt_ms else {
            return Ok(Testbed {
                client: Place::loopback(),
                server: Place::loopback(),
                hetch: None,
                allowed_before: None,
            });
        };
        let hetch = hetch.to_path_buf();
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
                "hetch-lab wan up: {}",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(write_size: u64) -> StreamingSpec {
        StreamingSpec {
            write_rates: vec![0],
            write_size,
            follow: FollowSettings {
                idle: Duration::from_secs(2),
                done_suffix: ".done".into(),
            },
        }
    }

    #[test]
    fn idle_outlasts_the_writers_gap_between_writes_to_one_file() {
        let s = spec(1 << 20);
        // 256 files, 1 MiB each turn, at 1 Gbit/s: 268 MB per round, 2.15 s.
        let many = Dataset::uniform(4 << 20, 256);
        let idle = s.follow_for(&many, 125_000_000).idle;
        let gap = 256.0 * 1048576.0 / 125e6;
        assert!((idle.as_secs_f64() - 2.0 * gap).abs() < 1e-6, "{idle:?}");
        // A short round keeps the given idle; so does an unlimited writer.
        let few = Dataset::uniform(256 << 20, 4);
        assert_eq!(s.follow_for(&few, 125_000_000).idle, Duration::from_secs(2));
        assert_eq!(s.follow_for(&many, 0).idle, Duration::from_secs(2));
        // Files smaller than a write take one (short) write each.
        let tiny = Dataset::uniform(1000, 1000);
        let idle = spec(1 << 30).follow_for(&tiny, 1000).idle;
        assert_eq!(idle, Duration::from_secs(2000));
        assert_eq!(s.follow_for(&many, 125_000_000).done_suffix, ".done");
    }

    #[test]
    fn streaming_plans_sweep_iteration_by_iteration_and_stream_before_bulk() {
        let plan = Plan {
            suite: "sweep-streaming".into(),
            datasets: vec![Dataset::uniform(8, 1), Dataset::uniform(4, 2)],
            links: vec![],
            tools: vec!["hetch".into(), "iperf3".into()],
            iterations: 2,
            streams: 1,
            data_dir: PathBuf::new(),
            drop_caches: false,
            hetch: PathBuf::new(),
            lab: PathBuf::new(),
            run_timeout: Duration::from_secs(1),
            streaming: Some(StreamingSpec {
                write_rates: vec![100, 0],
                ..spec(1)
            }),
        };
        let order: Vec<(u32, u64, Option<u64>)> = plan
            .slots()
            .iter()
            .map(|s| (s.iteration, s.dataset.file_size, s.write_rate))
            .collect();
        assert_eq!(
            order,
            [
                (1, 4, Some(100)),
                (1, 4, Some(0)),
                (1, 8, Some(100)),
                (1, 8, Some(0)),
                (2, 4, Some(100)),
                (2, 4, Some(0)),
                (2, 8, Some(100)),
                (2, 8, Some(0)),
            ]
        );
        let tools: Vec<Box<dyn Tool>> = ["hetch", "iperf3"]
            .iter()
            .map(|t| crate::tools::make(t).unwrap())
            .collect();
        assert_eq!(
            plan.entries(&tools),
            [(0, Mode::Streaming), (0, Mode::Bulk), (1, Mode::Bulk)]
        );
        // No links, no runs; with one link, 8 slots x 3 runs.
        assert_eq!(plan.total_runs(), 0);
        let plan = Plan {
            links: vec![LinkSpec {
                rtt_ms: None,
                loss: 0.0,
                rate_bps: 0,
                cc: "bbr".into(),
            }],
            ..plan
        };
        assert_eq!(plan.total_runs(), 24);
        // A bulk plan keeps its order: dataset by dataset, every iteration of each.
        let bulk = Plan {
            streaming: None,
            ..plan
        };
        let order: Vec<(u64, u32)> = bulk
            .slots()
            .iter()
            .map(|s| (s.dataset.file_size, s.iteration))
            .collect();
        assert_eq!(order, [(4, 1), (4, 2), (8, 1), (8, 2)]);
        assert_eq!(bulk.entries(&tools), [(0, Mode::Bulk), (1, Mode::Bulk)]);
    }
}
