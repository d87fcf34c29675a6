//! The `hetch` command: flag parsing and glue over the library crates.
//!
//! Exit codes: 0 success; 1 the transfer failed (one line on stderr says why, naming
//! the file or host); 2 bad usage; 3 the transfer finished but some files failed (each
//! listed on stderr).

mod client;
mod cp;
mod demo;
mod location;
mod server;
mod ui;
mod units;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use hetch_engine::Options;
use hetch_net::SocketOptions;

use crate::location::Location;

/// hetch: a fast, encrypted, verified, resumable data mover.
#[derive(Parser)]
#[command(version, about, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Copy files and directory trees: local paths or hetch://HOST[:PORT]/path.
    ///
    /// Directories are copied recursively with `cp -r` rules: into DST when it is an
    /// existing directory, as DST when it does not exist (one source); a DST ending in
    /// '/' is created. Mode, mtime, empty directories and symlinks (as links) are kept.
    /// Running the same command again resumes: finished files are skipped, partly
    /// written ones continue from their verified blocks.
    Cp(CpArgs),
    /// Serve a directory to hetch clients (reading and writing).
    Serve(ServeArgs),
    /// Print whole-file BLAKE3 digests of files and trees, in the format `b3sum -c`
    /// checks (hashed block by block, as transfers do; several files at once).
    Sum(SumArgs),
    /// Run a demonstration transfer on this machine: a server on loopback, a mixed
    /// dataset pushed and pulled back over TLS, verified, with throughput.
    Demo(DemoArgs),
}

#[derive(Args)]
struct CpArgs {
    /// Sources then destination.
    #[arg(required = true, num_args = 2.., value_name = "SRC... DST")]
    paths: Vec<String>,
    #[command(flatten)]
    tuning: Tuning,
    /// Number of parallel data streams.
    #[arg(long, default_value_t = 4)]
    streams: u16,
    /// Cap on the transfer rate: bytes per second with SI suffixes (500M, 2G) or bits
    /// (4gbit).
    #[arg(long, value_parser = units::parse_rate)]
    rate_limit: Option<u64>,
    /// Do not encrypt data streams (control stays TLS). For trusted links only.
    #[arg(long)]
    no_encrypt: bool,
    /// Expected server key fingerprint (sha256:...), instead of the known-hosts file.
    #[arg(long)]
    fingerprint: Option<hetch_net::Fingerprint>,
    /// Known-hosts file (default: ~/.config/hetch/known_hosts).
    #[arg(long)]
    known_hosts: Option<PathBuf>,
    /// File holding the token (default: the HETCH_TOKEN environment variable).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Refuse to replace existing files that differ (they are reported as failed).
    #[arg(long)]
    no_clobber: bool,
    /// fdatasync each file before renaming it into place (slower; the whole
    /// destination is always synced once at the end).
    #[arg(long)]
    fsync: bool,
    /// Seconds to wait for a server to answer while connecting and setting up.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

/// Settings shared by `cp` and `serve`.
#[derive(Args)]
struct Tuning {
    /// Block size (a power of two, 1K..256M).
    #[arg(long, default_value = "4M", value_parser = units::parse_block_size)]
    block_size: u64,
    /// Files read concurrently (and blocks hashed in parallel).
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Memory for block buffers on each side.
    #[arg(long, default_value = "64M", value_parser = units::parse_size)]
    buffer_memory: u64,
    /// TCP congestion control for this side's sockets (cubic, bbr, reno, ...).
    #[arg(long)]
    cc: Option<String>,
    /// SO_SNDBUF for this side's sockets (default: kernel autotuning).
    #[arg(long, value_parser = units::parse_size)]
    sndbuf: Option<u64>,
    /// SO_RCVBUF for this side's sockets (default: kernel autotuning).
    #[arg(long, value_parser = units::parse_size)]
    rcvbuf: Option<u64>,
}

impl Tuning {
    fn engine(&self) -> anyhow::Result<Options> {
        hetch_integrity::check_block_size(self.block_size)?;
        let mut o = Options {
            block_size: self.block_size,
            concurrency: self.concurrency.max(1),
            writers: self.concurrency.max(1),
            buffer_memory: self.buffer_memory as usize,
            ..Options::default()
        };
        if let Ok(n) = std::env::var("HETCH_FAULT_CORRUPT_BLOCKS") {
            // Test-only fault hook (see Options::corrupt_blocks).
            o.corrupt_blocks = n.parse().unwrap_or(0);
        }
        Ok(o)
    }

    fn socket(&self) -> SocketOptions {
        SocketOptions {
            congestion: self.cc.clone(),
            send_buffer: self.sndbuf.unwrap_or(0) as u32,
            recv_buffer: self.rcvbuf.unwrap_or(0) as u32,
        }
    }
}

#[derive(Args)]
struct ServeArgs {
    /// Directory to serve; clients cannot reach outside it.
    #[arg(long)]
    root: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:7878")]
    listen: String,
    /// Where the server keeps its key, certificate and token
    /// (default: ~/.config/hetch/server).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Token file clients must match (default: STATE_DIR/token, made on first start).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Cap on each session's rate (a client may ask for less).
    #[arg(long, value_parser = units::parse_rate)]
    rate_limit: Option<u64>,
    #[command(flatten)]
    tuning: Tuning,
}

#[derive(Args)]
struct SumArgs {
    /// Files and directories to hash.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Block size (a power of two; the digest does not depend on it).
    #[arg(long, default_value = "4M", value_parser = units::parse_block_size)]
    block_size: u64,
    /// Files hashed at once.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Algorithm: blake3 (b3sum -c), md5 (md5sum -c), sha256 (sha256sum -c), xxh3,
    /// crc32c or adler32.
    #[arg(long, default_value = "blake3")]
    checksum: hetch_integrity::Algorithm,
}

#[derive(Args)]
struct DemoArgs {
    /// Work in this directory instead of a temporary one.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Size of the large file in MiB.
    #[arg(long, default_value_t = 256)]
    large_mib: u64,
    /// Keep the temporary directory.
    #[arg(long)]
    keep: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hetch: error: {}", one_line(&e));
            ExitCode::from(1)
        }
    }
}

/// Reports bad usage found after flag parsing (exit code 2, like clap's own).
fn usage_error(msg: &str) -> ExitCode {
    eprintln!("hetch: error: {msg}");
    ExitCode::from(2)
}

/// The error and its causes on one line, without repeating a cause already quoted.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if out.contains(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Cp(a) => {
            let mut locs = match a
                .paths
                .iter()
                .map(|p| Location::parse(p))
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(l) => l,
                Err(msg) => return Ok(usage_error(&msg)),
            };
            let dest = locs.pop().expect("clap requires two operands");
            let mut opts = a.tuning.engine()?;
            opts.rate_limit = a.rate_limit.unwrap_or(0);
            opts.no_clobber = a.no_clobber;
            opts.fsync = a.fsync;
            let remote = matches!(dest, Location::Remote { .. })
                || locs.iter().any(|l| matches!(l, Location::Remote { .. }));
            let client = if remote {
                Some(client::ClientConfig {
                    token: client::load_token(a.token_file.as_ref())?,
                    fingerprint: a.fingerprint,
                    known_hosts: a.known_hosts.clone(),
                    socket: a.tuning.socket(),
                    timeout: std::time::Duration::from_secs(a.timeout.max(1)),
                })
            } else {
                None
            };
            let job = cp::CopyJob {
                sources: locs,
                dest,
                opts,
                streams: a.streams.max(1),
                encrypt: !a.no_encrypt,
                client,
                json: a.json,
                quiet: a.quiet,
            };
            Ok(match cp::run(job).await? {
                cp::Outcome::Complete => ExitCode::SUCCESS,
                cp::Outcome::Partial => ExitCode::from(3),
            })
        }
        Command::Serve(a) => {
            let mut engine = a.tuning.engine()?;
            engine.rate_limit = a.rate_limit.unwrap_or(0);
            let cfg = server::ServeConfig {
                root: a.root,
                listen: a.listen,
                state_dir: a.state_dir.unwrap_or_else(server::default_state_dir),
                token_file: a.token_file,
                socket: a.tuning.socket(),
                engine,
            };
            let srv = server::Server::bind(cfg).await?;
            if srv.new_identity {
                eprintln!("hetch serve: created a new key");
            }
            eprintln!("hetch serve: listening on {}", srv.addr);
            eprintln!("hetch serve: fingerprint {}", srv.fingerprint);
            eprintln!("hetch serve: token in {}", srv.token_path.display());
            srv.run().await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sum(a) => {
            let paths = a.paths;
            let (bs, threads, algo) = (a.block_size, a.threads, a.checksum);
            let errors = tokio::task::spawn_blocking(move || {
                let mut out = std::io::BufWriter::new(std::io::stdout());
                let errors =
                    hetch_engine::sum::write_manifest(&paths, algo, bs, threads, &mut out)?;
                std::io::Write::flush(&mut out)?;
                Ok::<_, std::io::Error>(errors)
            })
            .await??;
            for e in &errors {
                eprintln!("hetch: error: {e}");
            }
            Ok(if errors.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            })
        }
        Command::Demo(a) => {
            demo::run(a.dir, a.large_mib, a.keep).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
