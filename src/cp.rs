//! `hetch cp`: decides between local copy, push and pull, and runs it.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use hetch_engine::{DestSpec, Manifest, Options, Progress, Report};
use hetch_proto::{IntegrityRequest, Op, SessionRequest};

use crate::client::{open_session, ClientConfig};
use crate::location::Location;
use crate::ui::{print_comparison, print_summary, Display};

/// Everything `cp` needs, after flag parsing.
pub struct CopyJob {
    /// Source operands.
    pub sources: Vec<Location>,
    /// Destination operand.
    pub dest: Location,
    /// Engine settings.
    pub opts: Options,
    /// Data streams.
    pub streams: u16,
    /// TLS on data streams.
    pub encrypt: bool,
    /// Connection settings (token, trust, sockets); only used for remote copies.
    pub client: Option<ClientConfig>,
    /// Print JSON at the end.
    pub json: bool,
    /// No progress bar.
    pub quiet: bool,
    /// Write whole-file digests of the copied files here.
    pub manifest: Option<PathBuf>,
}

/// Outcome of a copy, for the exit code.
pub enum Outcome {
    /// Everything copied.
    Complete,
    /// Some files failed (listed already).
    Partial,
}

impl Outcome {
    /// 0 when complete, 3 when some files failed (or, comparing, differ).
    pub fn exit_code(self) -> std::process::ExitCode {
        match self {
            Outcome::Complete => std::process::ExitCode::SUCCESS,
            Outcome::Partial => std::process::ExitCode::from(3),
        }
    }
}

/// Runs a copy job.
pub async fn run(mut job: CopyJob) -> anyhow::Result<Outcome> {
    let progress = Arc::new(Progress::default());
    let started = Instant::now();
    let manifest = match &job.manifest {
        Some(p) => Some(Arc::new(Manifest::create(p)?)),
        None => None,
    };
    if let Some(m) = &manifest {
        job.opts.file_digests = true;
        job.opts.manifest = Some(m.clone());
    }
    // Warnings (a followed file truncated, rewritten, still open) go out as they happen.
    progress.set_log(Box::new(|line: &str| {
        if let Some(w) = line.strip_prefix("warning: ") {
            eprintln!("hetch: warning: {w}");
        }
    }));
    let display = Display::start(progress.clone(), job.quiet || job.json);
    let result = dispatch(&job, progress.clone()).await;
    display.finish();
    let report = match (result, &manifest) {
        (Ok(r), Some(m)) => {
            m.commit()?;
            r
        }
        (Ok(r), None) => r,
        (Err(e), m) => {
            if let Some(m) = m {
                m.abandon();
            }
            return Err(e);
        }
    };
    if job.opts.compare_only {
        print_comparison(&report, started, job.json);
    } else {
        print_summary(&report, &progress, started, job.json);
    }
    Ok(if report.summary.failed > 0 || !report.errors.is_empty() {
        Outcome::Partial
    } else {
        Outcome::Complete
    })
}

/// Runs one session of `job` (local copy, push or pull).
pub async fn dispatch(job: &CopyJob, progress: Arc<Progress>) -> anyhow::Result<Report> {
    let remote_sources: Vec<_> = job
        .sources
        .iter()
        .filter_map(|s| match s {
            Location::Remote { host, path } => Some((host.clone(), path.clone())),
            Location::Local(_) => None,
        })
        .collect();
    let local_sources: Vec<PathBuf> = job
        .sources
        .iter()
        .filter_map(|s| match s {
            Location::Local(p) => Some(p.clone()),
            Location::Remote { .. } => None,
        })
        .collect();
    if !remote_sources.is_empty() && !local_sources.is_empty() {
        bail!("sources must be all local or all on one server");
    }
    // Refuse '..' before connecting, naming the operand (the server would refuse too).
    for loc in job.sources.iter().chain(std::iter::once(&job.dest)) {
        if let Location::Remote { host, path } = loc {
            if path.split('/').any(|c| c == "..") {
                bail!(
                    "hetch://{host}/{path}: path escapes the server's root ('..' is not allowed)"
                );
            }
        }
    }
    for p in &local_sources {
        std::fs::symlink_metadata(p).with_context(|| format!("{}", p.display()))?;
    }
    let n = job.sources.len() as u32;
    let req = |op: Op| SessionRequest {
        op,
        streams: job.streams,
        encrypt_data: job.encrypt,
        block_size: job.opts.block_size as u32,
        congestion: job
            .client
            .as_ref()
            .and_then(|c| c.socket.congestion.clone()),
        send_buffer: job.client.as_ref().map_or(0, |c| c.socket.send_buffer),
        recv_buffer: job.client.as_ref().map_or(0, |c| c.socket.recv_buffer),
        rate_limit: job.opts.rate_limit,
        no_clobber: job.opts.no_clobber,
        fsync: job.opts.fsync,
        integrity: IntegrityRequest {
            checksum: job.opts.checksum.name().to_string(),
            verify: job.opts.verify,
            schedule: job.opts.schedule,
            hash_threads: job.opts.hash_threads.min(u16::MAX as usize) as u16,
            file_digests: job.opts.file_digests,
            checksum_skip: job.opts.checksum_skip,
            compare_only: job.opts.compare_only,
        },
    };
    match &job.dest {
        Location::Local(dest) => {
            let spec = DestSpec {
                path: dest.clone(),
                sources: n,
                trailing_slash: dest.as_os_str().as_bytes().ends_with(b"/"),
                confine_to: None,
                as_operand: job.opts.compare_only,
            };
            if remote_sources.is_empty() {
                return Ok(hetch_engine::copy_local(
                    job.opts.clone(),
                    local_sources,
                    spec,
                    job.streams as usize,
                    progress,
                )
                .await?);
            }
            let host = &remote_sources[0].0;
            if remote_sources.iter().any(|(h, _)| h != host) {
                bail!("all remote sources must be on the same server");
            }
            let paths = remote_sources
                .iter()
                .map(|(_, p)| p.as_bytes().to_vec())
                .collect();
            let cfg = job
                .client
                .as_ref()
                .expect("client config for remote copies");
            let transport = open_session(host, cfg, req(Op::Pull { sources: paths })).await?;
            Ok(hetch_engine::run_sink(job.opts.clone(), spec, transport, progress).await?)
        }
        Location::Remote { host, path } => {
            if !remote_sources.is_empty() {
                bail!("copying from one server to another is not supported yet; copy through a local directory");
            }
            let cfg = job
                .client
                .as_ref()
                .expect("client config for remote copies");
            let op = Op::Push {
                dest: path.as_bytes().to_vec(),
                sources: n,
            };
            let transport = open_session(host, cfg, req(op)).await?;
            Ok(
                hetch_engine::run_source(job.opts.clone(), local_sources, transport, progress)
                    .await?,
            )
        }
    }
}
