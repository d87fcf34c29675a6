//! `hetch-lab bench`: the benchmark harness's command line. The work is in `hetch-bench`;
//! this module turns flags into a plan, shows progress, and writes the report.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use hetch_bench::dataset::{self, Dataset};
use hetch_bench::results::{self, Results};
use hetch_bench::run::{self, LinkSpec, Plan, Progress, StreamingSpec};
use hetch_bench::s3;
use hetch_bench::tool::FollowSettings;
use hetch_bench::writer::{self, WriterSpec};
use hetch_bench::{Meta, Mode, ToolInfo};

use hetch_units as units;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Throughput against file size: datasets of one file size each, in powers of two
    /// (the zx paper's sweeps), for each link condition.
    Sweep(SweepArgs),
    /// The six datasets of paper 003: equal total size, 1 file to 100,000 files.
    Datasets(DatasetsArgs),
    /// Write the report (Markdown, CSV, JSON, SVG plots) of a results file again.
    Report {
        /// The results file (`.jsonl`).
        results: PathBuf,
    },
    /// Write growing files at a steady rate, round-robin like a detector writing several
    /// streams: the writer used by the streaming tests and the streaming sweep.
    Write(WriteArgs),
    /// Object stores: file -> MinIO (up) and MinIO -> file (down) for hetch as an agent
    /// next to the store (hetch-agent), hetch talking S3 itself, aws-cli v2, rclone and
    /// s5cmd, with iperf3 as the link's limit; every run verified by BLAKE3.
    S3(S3Args),
    /// The transfer service on this machine: planning rate and memory, then a job
    /// copied by 1, 2, 4 workers beside one `hetch cp` of the same tree.
    Service(crate::service_bench::ServiceArgs),
    /// The transfer service's coordinator alone: jobs of 10k, 100k... units, one
    /// empty file each, claimed and reported done by a load generator that copies
    /// nothing (units/s, claims/s, the API's latency, the service's CPU and memory).
    Coordinator(crate::coordinator_bench::CoordinatorArgs),
}

#[derive(Args)]
pub struct SweepArgs {
    /// bulk: files exist before the transfer; streaming: a writer makes the files while
    /// `hetch cp --follow` moves them, and a bulk copy of the same final files runs
    /// beside it (tools: hetch, and iperf3 as the limit).
    #[arg(long, default_value = "bulk")]
    mode: String,
    /// Smallest file size (default 1K; 4M in streaming mode, as the zx paper's
    /// streaming sweep).
    #[arg(long, value_parser = units::parse_size)]
    min: Option<u64>,
    /// Largest file size.
    #[arg(long, default_value = "256M", value_parser = units::parse_size)]
    max: u64,
    /// Step between sizes (2: every power of two).
    #[arg(long, default_value_t = 2)]
    factor: u64,
    /// Bytes per dataset ("hyperscale" scaled down: as many files as fit)...
    #[arg(long, default_value = "1G", value_parser = units::parse_size)]
    aggregate: u64,
    /// ...but no more files than this.
    #[arg(long, default_value_t = 4096)]
    max_files: u64,
    /// Streaming: the writer's aggregate rates, comma-separated (1gbit, 100M bytes/s);
    /// each is a point of its own. 0 = as fast as it can (the default).
    #[arg(long, value_delimiter = ',', value_parser = units::parse_rate)]
    write_rate: Vec<u64>,
    /// Streaming: bytes per write (default 1M).
    #[arg(long, value_parser = units::parse_size)]
    write_size: Option<u64>,
    /// Streaming: the copy's --idle (default 2s): it ends once every file is complete
    /// and nothing new has appeared for this long. Raised, where longer, to twice the
    /// writer's gap between writes to one file (files x write size / rate), so that
    /// no file is taken for complete between two of its writes.
    #[arg(long, value_parser = units::parse_duration)]
    follow_idle: Option<Duration>,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args)]
pub struct DatasetsArgs {
    /// Size of each dataset (paper 003: 10 GB; 1/10 of that by default).
    #[arg(long, default_value = "1000M", value_parser = units::parse_size)]
    total: u64,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args)]
pub struct WriteArgs {
    /// Final size of each file.
    #[arg(long, value_parser = units::parse_size)]
    size: u64,
    /// Bytes per write; the last write to a file is shorter if --size is not a multiple.
    #[arg(long, default_value = "1M", value_parser = units::parse_size)]
    write_size: u64,
    /// Aggregate rate over all files (100M bytes/s, 1gbit); 0 = as fast as possible.
    #[arg(long, default_value = "0", value_parser = units::parse_rate)]
    rate: u64,
    /// Keep every file open this long after the last write before closing it, so a
    /// follower sees an open, idle writer (10s, 500ms).
    #[arg(long, value_parser = units::parse_duration)]
    hold: Option<Duration>,
    /// After closing FILE, create the empty file FILE+SUFFIX (e.g. .done).
    #[arg(long, value_name = "SUFFIX")]
    done_suffix: Option<String>,
    /// Seed of the pseudo-random, incompressible data (same seed, same bytes).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The files, written round-robin; each is created or truncated, with its directory.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

#[derive(Args)]
pub struct S3Args {
    /// Datasets, comma-separated, each FILESxSIZE: 1x1G is one 1 GiB file, 1000x1M a
    /// thousand 1 MiB files (random bytes, made once in --data).
    #[arg(long, default_value = "1x1G,1000x1M", value_delimiter = ',', value_parser = parse_dataset)]
    datasets: Vec<Dataset>,
    /// Round-trip times, comma-separated: 0 runs everything on this host's loopback;
    /// longer ones use the `hetch-lab wan` testbed (root), with MinIO and the agent on host
    /// b and every client on host a.
    #[arg(long, default_value = "0ms,100ms", value_delimiter = ',', value_parser = units::parse_duration)]
    rtt: Vec<Duration>,
    /// Rate of the emulated link (2gbit, 250M bytes/s; 0 = unlimited); loopback has none.
    #[arg(long, default_value = "2gbit", value_parser = units::parse_rate)]
    rate: u64,
    /// Tools, comma-separated: hetch-agent, hetch, aws, rclone, s5cmd, iperf3 (the
    /// link's limit). One that is not installed is reported as unavailable.
    #[arg(
        long,
        default_value = "hetch-agent,hetch,aws,rclone,s5cmd,iperf3",
        value_delimiter = ','
    )]
    tools: Vec<String>,
    /// Runs per link, dataset, direction and tool.
    #[arg(long, default_value_t = 3)]
    iterations: u32,
    /// Parallel streams (hetch) or transfers (rclone) each tool is asked for, and
    /// iperf3's streams; aws-cli and s5cmd keep their defaults.
    #[arg(long, default_value_t = 4)]
    streams: u32,
    /// Where the datasets, MinIO's data, the downloads and scratch live (tmpfs, so
    /// that storage is not what is measured); MinIO's data, downloads and scratch are
    /// removed at the end, the datasets kept.
    #[arg(long, default_value = "/dev/shm/hetch-bench-s3")]
    data: PathBuf,
    /// Directory for the results: NAME.jsonl (one record per run; an existing one is
    /// resumed), NAME.meta.json and NAME.md (the report).
    #[arg(long, default_value = ".")]
    out: PathBuf,
    /// Name of the results files.
    #[arg(long, default_value = "hetch-bench-s3")]
    name: String,
    /// The MinIO server binary (default: $HETCH_MINIO, else target/tools/bin/minio,
    /// else minio on PATH; bench/install-minio.sh builds it).
    #[arg(long)]
    minio: Option<PathBuf>,
    /// Kill a run that takes longer than this and record it as failed.
    #[arg(long, default_value = "900s", value_parser = units::parse_duration)]
    run_timeout: Duration,
}

/// Parses a dataset `FILESxSIZE` (`1000x1M`).
fn parse_dataset(s: &str) -> Result<Dataset, String> {
    let (files, size) = s
        .trim()
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("'{s}': expected FILESxSIZE, like 1x1G or 1000x1M"))?;
    let files: u64 = files
        .trim()
        .parse()
        .map_err(|_| format!("'{s}': '{files}' is not a file count"))?;
    let size = units::parse_size(size)?;
    if files == 0 || size == 0 {
        return Err(format!(
            "'{s}': a dataset needs at least one file of at least one byte"
        ));
    }
    Ok(Dataset::uniform(size, files))
}

/// The largest --write-size: the writer holds one write plus 1 MiB in memory.
const MAX_WRITE_SIZE: u64 = 1 << 30;

#[derive(Args)]
struct CommonArgs {
    /// Tools, comma-separated: hetch, iperf3 (the memory-to-memory limit), rsync, scp,
    /// rclone, gridftp, xrootd. Peers come from `bench/install-peers.sh`.
    #[arg(long, default_value = "hetch,iperf3", value_delimiter = ',')]
    tools: Vec<String>,
    /// Round-trip times through the `hetch-lab wan` testbed (root); without --rtt, --loss,
    /// --rate or --cc the tools run on loopback.
    #[arg(long, value_delimiter = ',', value_parser = units::parse_duration)]
    rtt: Vec<Duration>,
    /// Packet losses of the emulated link (0.1% or 0.001), comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = crate::wan::parse_loss)]
    loss: Vec<f64>,
    /// Rates of the emulated link (2gbit, 250M bytes/s), comma-separated; 0 = unlimited.
    #[arg(long, value_delimiter = ',', value_parser = units::parse_rate)]
    rate: Vec<u64>,
    /// TCP congestion control of both hosts, comma-separated (cubic, bbr, reno).
    #[arg(long, value_delimiter = ',')]
    cc: Vec<String>,
    /// Runs per tool and point.
    #[arg(long, default_value_t = 3)]
    iterations: u32,
    /// Parallel streams (or transfers) each tool is asked for.
    #[arg(long, default_value_t = 4)]
    streams: u32,
    /// Where datasets are made and copies land (source and destination on one file
    /// system; a tmpfs such as /dev/shm makes it memory to memory).
    #[arg(long, default_value = "/var/tmp/hetch-bench")]
    data: PathBuf,
    /// The results file; an existing one is resumed (recorded runs are skipped).
    /// Default: hetch-bench-SUITE.jsonl in the current directory.
    #[arg(long)]
    results: Option<PathBuf>,
    /// Do not drop the page cache before each disk-to-disk run.
    #[arg(long)]
    no_drop_caches: bool,
    /// Kill a run that takes longer than this and record it as failed.
    #[arg(long, default_value = "900s", value_parser = units::parse_duration)]
    run_timeout: Duration,
}

/// Runs `hetch-lab bench ...`.
pub fn main(cmd: BenchCommand, argv: &[String]) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Sweep(a) => {
            let (suite, streaming) = match a.mode.as_str() {
                "bulk" => {
                    if !a.write_rate.is_empty() || a.write_size.is_some() || a.follow_idle.is_some()
                    {
                        bail!("--write-rate, --write-size and --follow-idle apply to --mode streaming");
                    }
                    ("sweep-bulk", None)
                }
                "streaming" => ("sweep-streaming", Some(streaming_spec(&a)?)),
                m => bail!("--mode {m}: choose bulk or streaming"),
            };
            let min = a.min.unwrap_or(if streaming.is_some() {
                4 << 20
            } else {
                1 << 10
            });
            if min == 0 || min > a.max {
                bail!("--min must be at least 1 byte and at most --max");
            }
            if streaming.is_some() {
                check_streaming_tools(&a.common.tools)?;
            }
            let sets = dataset::sweep(min, a.max, a.factor, a.aggregate, a.max_files);
            bench(suite, sets, a.common, streaming, argv)
        }
        BenchCommand::Datasets(a) => {
            if a.total < 100_000 {
                bail!("--total must be at least 100000 bytes (100,000 files of at least 1 byte)");
            }
            bench("datasets", dataset::paper003(a.total), a.common, None, argv)
        }
        BenchCommand::Report { results } => {
            if !results.is_file() {
                bail!("{}: no such results file", results.display());
            }
            if s3::record::is_s3_results(&results) {
                let r = s3::S3Results::open(&results)?;
                let meta = s3::record::read_meta(&results)?;
                println!("{}", s3_report(&results, r.records(), &meta)?.display());
                return Ok(ExitCode::SUCCESS);
            }
            let r = Results::open(&results)?;
            let meta = results::read_meta(&results)?;
            let written = report(&results, r.records(), &meta)?;
            println!("{}", written.join("\n"));
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Write(a) => write(a),
        BenchCommand::S3(a) => bench_s3(a, argv),
        BenchCommand::Service(a) => crate::service_bench::run(a),
        BenchCommand::Coordinator(a) => crate::coordinator_bench::run(a),
    }
}

/// `hetch-lab bench s3`: checks the flags, records what runs, runs, writes the report.
fn bench_s3(a: S3Args, argv: &[String]) -> anyhow::Result<ExitCode> {
    if a.datasets.is_empty() || a.rtt.is_empty() || a.tools.is_empty() {
        bail!("--datasets, --rtt and --tools need at least one value each");
    }
    for t in &a.tools {
        if !s3::tools::NAMES.contains(&t.as_str()) {
            bail!(
                "unknown tool '{t}': choose from {}",
                s3::tools::NAMES.join(", ")
            );
        }
    }
    let mut rtts: Vec<f64> = a.rtt.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    rtts.dedup();
    if rtts.iter().any(|&r| r > 0.0) && unsafe { libc::geteuid() } != 0 {
        bail!("--rtt above 0 uses the `hetch-lab wan` testbed, which needs root (--rtt 0 runs on loopback)");
    }
    let minio = match &a.minio {
        Some(m) => m.clone(),
        None => hetch_bench::minio::minio_binary(Path::new("."), false)?,
    };
    if !minio.is_file() {
        bail!("{}: no MinIO server binary there", minio.display());
    }
    let plan = s3::S3Plan {
        datasets: a.datasets.clone(),
        links: rtts
            .iter()
            .map(|&rtt_ms| s3::S3Link {
                rtt_ms,
                rate_bps: a.rate * 8,
            })
            .collect(),
        tools: a.tools.clone(),
        iterations: a.iterations.max(1),
        streams: a.streams.max(1),
        data_dir: a.data.clone(),
        hetch: crate::hetch_binary()?,
        lab: std::env::current_exe()?,
        minio: minio.clone(),
        run_timeout: a.run_timeout,
    };
    std::fs::create_dir_all(&a.out).with_context(|| a.out.display().to_string())?;
    std::fs::create_dir_all(&a.data).with_context(|| a.data.display().to_string())?;
    let results_path = a.out.join(format!("{}.jsonl", a.name));
    let mut meta = s3::record::read_meta(&results_path)?;
    if meta.started_unix == 0 {
        meta.started_unix = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    }
    meta.command = format!("hetch {}", argv.join(" "));
    meta.minio = format!(
        "{}; data in {} ({})",
        hetch_bench::minio::version(&minio),
        a.data.join("minio").display(),
        if is_tmpfs(&a.data) {
            "tmpfs, so storage is not the bottleneck"
        } else {
            "not tmpfs: storage speed is part of what is measured"
        }
    );
    meta.tools = plan.tool_infos()?;
    meta.notes = s3_notes(&plan);
    s3::record::write_meta(&results_path, &meta)?;
    let mut res = s3::S3Results::open(&results_path)?;
    for t in meta.tools.iter().filter(|t| t.unavailable.is_some()) {
        eprintln!(
            "hetch-lab bench s3: {} unavailable ({}): no runs",
            t.name,
            t.unavailable.as_deref().unwrap_or("")
        );
    }
    eprintln!(
        "hetch-lab bench s3: {} runs ({} datasets x {} links x 2 directions x tools x {}), results in {}",
        plan.total_runs()?,
        plan.datasets.len(),
        plan.links.len(),
        plan.iterations,
        results_path.display()
    );
    let outcome = s3::run::run(&plan, &mut res, &mut meta, show_s3_progress);
    // The report covers what ran, also when the run stopped early.
    let report = s3_report(&results_path, res.records(), &meta)?;
    outcome?;
    eprintln!("hetch-lab bench s3: report: {}", report.display());
    let failed = res.records().iter().filter(|r| !r.verified).count();
    if failed > 0 {
        eprintln!("hetch-lab bench s3: {failed} runs failed (see the report)");
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

/// The S3 report's notes: machine, settings, and how runs are timed and verified.
fn s3_notes(plan: &s3::S3Plan) -> Vec<String> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    vec![
        format!(
            "machine: {} CPUs, Linux {}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel.trim()
        ),
        format!(
            "streams: {} (hetch --streams, rclone --transfers, iperf3 -P); iterations: {}; data: {}",
            plan.streams,
            plan.iterations,
            plan.data_dir.display()
        ),
        "links: RTT 0 is plain loopback (everything on 127.0.0.1, no rate limit); a longer RTT is the `hetch-lab wan` testbed, MinIO and the hetch agent on host b (10.77.0.2, the agent reaching MinIO over b's own loopback), every client on host a (10.77.0.1)".into(),
        "time: wall clock around the tool's process, start to exit (connection set-up included); MB/s = dataset bytes / time / 10^6".into(),
        "up: each run into a fresh prefix up/..., verified by `hetch sum --checksum sha256` on the server host (every object read back from MinIO has the source file's SHA-256; none missing or extra; SHA-256 rather than hetch's default BLAKE3, so that hetch's own uploads are not checked with the algorithm hetch computed while copying), then removed".into(),
        "down: every run reads the prefix seed/DATASET, filled once by `hetch cp` on the server host and checked the same way, into a fresh directory, verified by BLAKE3 of every file against the source (none missing or extra), then removed".into(),
        "a run that fails or fails verification is recorded as failed, never as a number".into(),
    ]
}

fn show_s3_progress(p: &s3::S3Progress) {
    let r = p.record;
    let link = if r.rtt_ms > 0.0 {
        format!("RTT {} ms", r.rtt_ms)
    } else {
        "loopback".to_string()
    };
    let result = match r.mb_per_s() {
        Some(mb) => format!("{mb:.1} MB/s in {:.2} s, verified", r.seconds),
        None => format!("FAILED: {}", r.error.as_deref().unwrap_or("")),
    };
    eprintln!(
        "[{}/{}] {link} | {} | {} | {} #{}: {result}",
        p.done,
        p.total,
        r.dataset,
        r.direction.as_str(),
        r.tool,
        r.iteration
    );
}

/// Where a report of `results_path` goes: its directory and its stem (`default` for a
/// name without one).
fn report_place<'a>(results_path: &'a Path, default: &str) -> (&'a Path, String) {
    let dir = results_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let stem = results_path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| default.into());
    (dir, stem)
}

/// Writes the S3 report beside `results_path`.
fn s3_report(
    results_path: &Path,
    records: &[s3::S3Record],
    meta: &s3::S3Meta,
) -> anyhow::Result<PathBuf> {
    let (dir, stem) = report_place(results_path, "s3");
    s3::report::write(records, meta, dir, &stem)
}

/// The writer and follow settings of a streaming sweep, from its flags.
fn streaming_spec(a: &SweepArgs) -> anyhow::Result<StreamingSpec> {
    let write_size = a.write_size.unwrap_or(1 << 20);
    if write_size == 0 || write_size > MAX_WRITE_SIZE {
        bail!("--write-size must be between 1 byte and 1G");
    }
    let idle = a.follow_idle.unwrap_or(Duration::from_secs(2));
    if idle.is_zero() {
        bail!("--follow-idle must be longer than 0");
    }
    let mut write_rates = if a.write_rate.is_empty() {
        vec![0]
    } else {
        a.write_rate.clone()
    };
    write_rates.dedup();
    Ok(StreamingSpec {
        write_rates,
        write_size,
        follow: FollowSettings {
            idle,
            done_suffix: ".done".to_string(),
        },
    })
}

/// A streaming sweep compares hetch following growing files with hetch copying them
/// complete; only iperf3 (the limit) may join it: the peers cannot follow files.
fn check_streaming_tools(tools: &[String]) -> anyhow::Result<()> {
    if let Some(t) = tools
        .iter()
        .find(|t| !["hetch", "iperf3"].contains(&t.as_str()))
    {
        bail!("--mode streaming: tool '{t}' cannot follow growing files; use --tools hetch or hetch,iperf3");
    }
    if !tools.iter().any(|t| t == "hetch") {
        bail!("--mode streaming needs hetch in --tools (it is the tool that streams)");
    }
    Ok(())
}

/// `hetch-lab bench write`: writes, then prints one line of what was written.
fn write(a: WriteArgs) -> anyhow::Result<ExitCode> {
    if a.write_size == 0 || a.write_size > MAX_WRITE_SIZE {
        bail!("--write-size must be between 1 byte and 1G");
    }
    let spec = WriterSpec {
        files: a.files,
        size: a.size,
        write_size: a.write_size as usize,
        rate: a.rate,
        hold: a.hold,
        done_suffix: a.done_suffix,
        seed: a.seed,
    };
    let stats = writer::write(&spec)?;
    let rate = stats.rate();
    println!(
        "hetch-lab bench write: {} bytes ({}) in {} writes to {} files, {:.3} s, {}/s ({:.1} Mbit/s)",
        stats.bytes,
        units::human_bytes(stats.bytes as f64),
        stats.writes,
        spec.files.len(),
        stats.elapsed.as_secs_f64(),
        units::human_bytes(rate),
        rate * 8.0 / 1e6
    );
    Ok(ExitCode::SUCCESS)
}

fn bench(
    suite: &str,
    datasets: Vec<Dataset>,
    c: CommonArgs,
    streaming: Option<StreamingSpec>,
    argv: &[String],
) -> anyhow::Result<ExitCode> {
    let links = link_specs(&c);
    check_congestion_controls(&c.cc)?;
    if links.iter().any(|l| l.rtt_ms.is_some()) && unsafe { libc::geteuid() } != 0 {
        bail!("--rtt/--loss/--rate/--cc use the `hetch-lab wan` testbed, which needs root");
    }
    std::fs::create_dir_all(&c.data).with_context(|| c.data.display().to_string())?;
    let memory = is_tmpfs(&c.data);
    let results_path = c
        .results
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("hetch-bench-{suite}.jsonl")));
    let plan = Plan {
        suite: suite.to_string(),
        datasets,
        links,
        tools: c.tools.clone(),
        iterations: c.iterations.max(1),
        streams: c.streams.max(1),
        data_dir: c.data.clone(),
        drop_caches: !memory && !c.no_drop_caches,
        hetch: crate::hetch_binary()?,
        lab: std::env::current_exe()?,
        run_timeout: c.run_timeout,
        streaming,
    };
    let mut meta = results::read_meta(&results_path)?;
    if meta.started_unix == 0 {
        meta.started_unix = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    }
    meta.command = format!("hetch {}", argv.join(" "));
    meta.storage = if memory {
        "memory".into()
    } else {
        "disk".into()
    };
    meta.tools = tool_infos(&plan.tools)?;
    meta.notes = notes(&plan);
    results::write_meta(&results_path, &meta)?;
    let mut res = Results::open(&results_path)?;
    let writers = match &plan.streaming {
        Some(s) => format!(" x {} writer rates", s.write_rates.len()),
        None => String::new(),
    };
    eprintln!(
        "hetch-lab bench: {} runs ({} datasets x {} links{writers} x {} tools{} x {}), results in {}",
        plan.total_runs(),
        plan.datasets.len(),
        plan.links.len(),
        plan.tools.len(),
        if plan.streaming.is_some() {
            " (hetch streaming and bulk)"
        } else {
            ""
        },
        plan.iterations,
        results_path.display()
    );
    run::run(&plan, &mut res, show_progress)?;
    let written = report(&results_path, res.records(), &meta)?;
    eprintln!("hetch-lab bench: report: {}", written.join(", "));
    let failed = res.records().iter().filter(|r| !r.ok).count();
    if failed > 0 {
        eprintln!("hetch-lab bench: {failed} runs failed (see the report)");
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

/// Every combination of the link flags; loopback when none is given.
fn link_specs(c: &CommonArgs) -> Vec<LinkSpec> {
    if c.rtt.is_empty() && c.loss.is_empty() && c.rate.is_empty() && c.cc.is_empty() {
        return vec![LinkSpec {
            rtt_ms: None,
            loss: 0.0,
            rate_bps: 0,
            cc: run::default_congestion_control(),
        }];
    }
    let rtts = or_default(&c.rtt, Duration::ZERO);
    let mut out = Vec::new();
    for cc in or_default(&c.cc, run::default_congestion_control()) {
        for &rate in &or_default(&c.rate, 0) {
            for &loss in &or_default(&c.loss, 0.0) {
                for rtt in &rtts {
                    out.push(LinkSpec {
                        rtt_ms: Some(rtt.as_secs_f64() * 1000.0),
                        loss,
                        rate_bps: rate * 8,
                        cc: cc.clone(),
                    });
                }
            }
        }
    }
    out
}

/// Refuses, before anything runs, a congestion control this kernel does not have.
fn check_congestion_controls(wanted: &[String]) -> anyhow::Result<()> {
    let path = "/proc/sys/net/ipv4/tcp_available_congestion_control";
    let available = std::fs::read_to_string(path).unwrap_or_default();
    for cc in wanted {
        if !available.split_whitespace().any(|a| a == cc) {
            bail!(
                "--cc {cc}: not available in this kernel (available: {})",
                available.trim()
            );
        }
    }
    Ok(())
}

/// The values given, or the one default when none are.
fn or_default<T: Clone>(v: &[T], default: T) -> Vec<T> {
    if v.is_empty() {
        vec![default]
    } else {
        v.to_vec()
    }
}

fn tool_infos(names: &[String]) -> anyhow::Result<Vec<ToolInfo>> {
    names
        .iter()
        .map(|n| {
            let t = hetch_bench::tools::make(n)?;
            Ok(ToolInfo {
                name: n.clone(),
                version: t.version(),
                flags: t.flags(),
                is_limit: t.is_limit(),
            })
        })
        .collect()
}

fn notes(plan: &Plan) -> Vec<String> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut notes = vec![
        format!(
            "machine: {} CPUs, Linux {}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel.trim()
        ),
        format!("streams per tool: {}; iterations: {}", plan.streams, plan.iterations),
        format!(
            "data: {} ({}); page cache dropped before each run: {}",
            plan.data_dir.display(),
            if plan.drop_caches { "disk" } else { "as is" },
            if plan.drop_caches { "yes" } else { "no" }
        ),
        "time: wall clock of the whole command, connection set-up included; throughput = dataset bytes / time".into(),
    ];
    if let Some(s) = &plan.streaming {
        let rates: Vec<String> = s
            .write_rates
            .iter()
            .map(|&r| match r {
                0 => "unlimited".to_string(),
                r => format!(
                    "{}/s ({:.3} Gbit/s)",
                    units::human_bytes(r as f64),
                    r as f64 * 8e-9
                ),
            })
            .collect();
        notes.push(format!(
            "streaming: `hetch-lab bench write --write-size {} --rate R --done-suffix {}` (R: {}) makes the files in an empty directory while `hetch cp --follow --idle D --json` copies them (D: {} ms, or twice the writer's gap between writes to one file where that is longer), the writer starting on the client once the copy's session is up; once the writer exits the run marker SRC{} is made, which ends the copy as soon as every file is in place; time from the copy's start to its exit; 'to last file' stops when every file and its marker were in place at the destination (looked at every {} ms once the writer was done); lag from the copy's JSON summary",
            s.write_size,
            s.follow.done_suffix,
            rates.join(", "),
            s.follow.idle.as_millis(),
            s.follow.done_suffix,
            10
        ));
        notes.push("bulk: `hetch cp` of the same final files (the writer's, markers included) right after each streaming run; markers count no bytes but every copy is checked for them".into());
    }
    notes
}

fn show_progress(p: &Progress) {
    let Some(r) = p.record else {
        return;
    };
    let remaining = if p.executed > 0 {
        let per = p.elapsed / p.executed as f64;
        format!(
            ", about {} left",
            human_duration(per * (p.total - p.done) as f64)
        )
    } else {
        String::new()
    };
    let link = hetch_bench::stats::Link::of(&r.point).label();
    let mut result = if r.ok {
        format!("{:.2} Gbit/s in {:.2} s", r.gbit_per_s(), r.seconds)
    } else {
        format!("FAILED: {}", r.error.as_deref().unwrap_or(""))
    };
    if r.ok {
        if let Some(c) = r.complete_gbit_per_s() {
            result.push_str(&format!(" ({c:.2} Gbit/s to the last file)"));
        }
        if let Some(l) = r.lag {
            result.push_str(&format!(
                ", lag p50 {:.0} ms p99 {:.0} ms max {:.0} ms ({} samples)",
                l.p50_ms, l.p99_ms, l.max_ms, l.samples
            ));
        }
    }
    let mode = if r.mode == Mode::Streaming {
        " streaming"
    } else {
        ""
    };
    eprintln!(
        "[{}/{} {:.0}%{remaining}] {link} | {} | {}{mode} #{}: {result}",
        p.done,
        p.total,
        100.0 * p.done as f64 / p.total.max(1) as f64,
        r.point.dataset,
        r.tool,
        r.iteration
    );
}

fn human_duration(s: f64) -> String {
    let s = s as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

fn report(
    results_path: &Path,
    records: &[hetch_bench::Record],
    meta: &Meta,
) -> anyhow::Result<Vec<String>> {
    let (dir, stem) = report_place(results_path, "bench");
    let files = hetch_bench::report::write(records, meta, dir, &stem)?;
    Ok(files.iter().map(|p| p.display().to_string()).collect())
}

fn is_tmpfs(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs fills the zeroed struct we own from a valid C string.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut s) == 0 && s.f_type == libc::TMPFS_MAGIC
    }
}
