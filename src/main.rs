//! The `hetch` command: flag parsing and glue over the library crates.
//!
//! Exit codes: 0 success; 1 the transfer failed (one line on stderr says why, naming
//! the file or host); 2 bad usage; 3 the transfer finished but some files failed (each
//! listed on stderr). `hetch job`: 4 the service could not be reached (`wait`: not
//! within `--retry-for`); `hetch job wait` (and `submit --wait`) 0 when the job is
//! done, 3 when it failed, 1 when it was cancelled.
//!
//! A reader of standard output that stops reading (`hetch job ls | head -1`) ends the
//! process quietly, as if by SIGPIPE (see `out`).

// First: its `out!`, `outln!`, `err!` and `errln!` macros are for the modules below.
#[macro_use]
mod out;
mod clean;
mod copy_args;
mod cp;
mod demo;
mod doctor;
mod follow;
#[cfg(feature = "service")]
mod jobcli;
#[cfg(feature = "service")]
mod schedulecli;
mod serve;
mod sum;
mod sync;
mod ui;
mod usage;
mod watch;
#[cfg(feature = "service")]
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, CommandFactory, Parser, Subcommand};
use hetch_engine::Options;
use hetch_net::SocketOptions;

use crate::location::Location;
use crate::usage::{config_of, ArgsError};
use hetch_copy::CopyJob;
use hetch_session::{client, location, server};
use hetch_units as units;

/// hetch: a fast, encrypted, verified, resumable data mover.
#[derive(Parser)]
// The long version (commit, features) comes from build.rs.
#[command(version, long_version = env!("HETCH_LONG_VERSION"), about, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Endpoint of an S3-compatible store (MinIO, Ceph) for s3:// operands.
    ///
    /// http[s]://HOST:PORT; overrides AWS_ENDPOINT_URL. Credentials and region come
    /// from the AWS environment variables or ~/.aws/{credentials,config} (AWS_PROFILE).
    #[arg(long, global = true, value_name = "URL", hide = !hetch_copy::OBJECT_STORES)]
    s3_endpoint: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Copy files and trees between paths, servers and object stores.
    ///
    /// Operands are local paths, hetch://HOST[:PORT]/path, or objects (s3://, gs://,
    /// az://BUCKET/KEY).
    ///
    /// Directories are copied recursively with `cp -r` rules: into DST when it is an
    /// existing directory, as DST when it does not exist (one source); a DST ending in
    /// '/' is created. Mode, mtime, empty directories and symlinks (as links) are kept.
    /// Running the same command again resumes: finished files are skipped, partly
    /// written ones continue from their verified blocks.
    Cp(CpArgs),
    /// Make DST a mirror of SRC... (cp, then delete what SRC lacks).
    ///
    /// Copies what differs (as cp does, same flags and the same destination rules),
    /// then deletes what DST has below the copied trees that the sources lack.
    ///
    /// The same as `hetch cp --delete`. DST gets the same layout as `hetch cp SRC... DST`
    /// would give it: `hetch sync src dst` makes `dst` equal to `src` (when `dst` does not
    /// exist yet or is a copy hetch made of `src`), and `hetch sync src dir/` makes
    /// `dir/src` equal to `src`; nothing else in `dir` is touched. Deletion starts only
    /// after every file was copied without a failure; any failure, or more than
    /// --max-delete entries to delete, deletes nothing (exit code 3, with a line saying
    /// why). Entries the --include/--exclude globs leave out are kept unless
    /// --delete-excluded. Symlinks are deleted as links, never followed. Each deleted
    /// entry is one line on stderr ("deleted PATH") and is counted in --json
    /// (deleted, deleted_paths: the first 1000). The destination side remembers every
    /// path the sources announce: memory grows with the number of entries, as with
    /// rsync --delete.
    Sync(SyncArgs),
    /// Predict how long a copy would take and what would limit it.
    ///
    /// Predicts `hetch cp SRC... DST`: a dry run (what would be copied and replaced, as
    /// `cp --dry-run` lists it) through a bottleneck model of this machine's per-file
    /// and per-byte costs, the path's rate (--rate) and the round trip and stream
    /// windows measured on connecting. Changes nothing.
    Predict(PredictArgs),
    /// Ship files to DST as they appear or grow under DIR.
    ///
    /// Runs for as long as it is left running (an instrument host's mover): files go
    /// block by block as they are written and are renamed into place once complete
    /// (see --idle, --done-suffix). Survives a restart of itself or of the server
    /// without sending verified data again.
    Watch(WatchArgs),
    /// Serve a directory to hetch clients (reading and writing).
    Serve(ServeArgs),
    /// Print or check whole-file digests (BLAKE3 by default).
    ///
    /// Prints whole-file BLAKE3 digests of files and trees, in the format `b3sum -c`
    /// checks (hashed block by block, as transfers do; several files at once); with
    /// --check, checks the files a manifest names.
    Sum(SumArgs),
    /// Remove what interrupted transfers left under DIR.
    ///
    /// Removes the part files and journals (.NAME.hetch-part, .NAME.hetch-journal)
    /// that interrupted transfers left under DIR. Those a running transfer holds are
    /// kept; no symlink is followed. (A transfer removes them by itself in the
    /// directories it copies.)
    Clean(CleanArgs),
    /// Find what on this host and path slows transfers down.
    ///
    /// Checks what on this host, and on the path to a peer, keeps a transfer below the
    /// path's rate: TCP buffer limits against the bandwidth-delay product, congestion
    /// control, MTU (and a mismatch with the path's), the CPU frequency governor, swap;
    /// measures hashing, TLS and the storage of --dir; worst first, each with the
    /// command that fixes it. Changes nothing unless --apply (sysctls only, undone by
    /// --undo).
    Doctor(doctor::DoctorArgs),
    /// Compare two trees by digest and list every difference.
    ///
    /// Trees are local paths or hetch://HOST/path; differences are missing, extra,
    /// different type, size or content.
    ///
    /// DST is compared as the copy of SRC (like `diff -r SRC DST`): after
    /// `hetch cp -r src dir/` compare `src` with `dir/src`. Exit code 0 when the trees are
    /// identical, 3 when they differ (each difference on stderr), 1 on errors.
    Verify(VerifyArgs),
    /// Run a demonstration transfer on this machine.
    ///
    /// A server on loopback, a mixed dataset pushed and pulled back over TLS,
    /// verified, with throughput.
    Demo(DemoArgs),
    /// Run the transfer service (a job queue with a REST API).
    ///
    /// A REST API over HTTPS (same key and token scheme as `serve`) that queues copy
    /// jobs in a database (SQLite by default, PostgreSQL for several instances), plans
    /// them into work units and hands those to workers under leases. OpenAPI document
    /// at /api/openapi.json.
    #[cfg(feature = "service")]
    Service(jobcli::ServiceArgs),
    /// Submit, list, show, cancel, retry and wait for the service's jobs.
    ///
    /// The service is --service HOST:PORT or HETCH_SERVICE; the token is as for `cp`.
    #[cfg(feature = "service")]
    Job(jobcli::JobArgs),
    /// Run the service's work as a worker.
    ///
    /// Claims units of queued jobs, copies them (sources below --root, as the service
    /// sees them), extends the leases while they run, reports each; a unit whose lease
    /// is lost (expired or cancelled) is stopped.
    #[cfg(feature = "service")]
    Worker(worker::WorkerArgs),
    /// A worker's unit run as its user's local account (started by `hetch worker`;
    /// reads the unit on its standard input).
    #[cfg(feature = "service")]
    #[command(hide = true)]
    WorkerUnit,
    /// Serve hetch to an AI assistant over MCP (stdio).
    ///
    /// Serves the Model Context Protocol on stdio: tools to list, dry-run, verify, and
    /// to plan copies and syncs that run only with the confirmation token their plan
    /// returned, inside the limits of the operator's --policy file (roots to read and
    /// write, bytes and files per action, rate, deletion); every call is appended to
    /// its audit log.
    #[cfg(feature = "mcp")]
    Mcp(McpArgs),
    /// Print a shell completion script (bash, zsh, fish...) on stdout.
    ///
    /// `source <(hetch completions bash)` loads it into a running bash; packages
    /// install it as /usr/share/bash-completion/completions/hetch (zsh:
    /// /usr/share/zsh/vendor-completions/_hetch; fish:
    /// /usr/share/fish/vendor_completions.d/hetch.fish).
    Completions(hetch_manual::CompletionsArgs),
    /// Write the man pages (hetch.1, hetch-SUBCOMMAND.1...) into DIR.
    Man(hetch_manual::ManArgs),
}

#[cfg(feature = "mcp")]
#[derive(Args)]
struct McpArgs {
    /// The operator's policy (TOML): read and write roots, max_bytes, max_files,
    /// rate_limit, allow_delete, audit_log... (see docs/SECURITY.md).
    #[arg(long, value_name = "FILE")]
    policy: PathBuf,
}

#[derive(Args)]
struct CpArgs {
    /// Sources then destination.
    #[arg(required = true, num_args = 2.., value_name = "SRC... DST")]
    paths: Vec<String>,
    #[command(flatten)]
    tuning: Tuning,
    #[command(flatten)]
    streams: StreamArgs,
    #[command(flatten)]
    conn: ConnArgs,
    #[command(flatten)]
    integrity: IntegrityArgs,
    /// Write the whole-file digests of the copied files to FILE, paths relative to the
    /// destination directory: `cd DST && b3sum -c FILE` (or md5sum/sha256sum) checks it.
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// Skip an existing destination file only when its whole-file digest matches the
    /// source's (both sides read their file); without it, same size and mtime skip.
    #[arg(long)]
    checksum_skip: bool,
    /// Refuse to replace existing files that differ (they are reported as failed).
    #[arg(long)]
    no_clobber: bool,
    /// Keep setuid, setgid and sticky bits on received files and directories (they
    /// are stripped by default; a server keeps them only if it too was started with
    /// this option). Ownership is never copied.
    #[arg(long)]
    preserve_special_modes: bool,
    /// Recreate FIFOs and sockets (skipped with a warning by default).
    #[arg(long)]
    specials: bool,
    /// Recreate devices, as root (a server only when started with --devices too);
    /// skipped with a warning by default.
    #[arg(long)]
    devices: bool,
    #[command(flatten)]
    keep: KeepArgs,
    /// The same as --specials --devices (rsync's -D).
    #[arg(short = 'D')]
    specials_and_devices: bool,
    /// fdatasync each file before renaming it into place (slower; the whole
    /// destination is always synced once at the end).
    #[arg(long)]
    fsync: bool,
    /// A source file that changes while it is read (written, truncated or replaced:
    /// its size, mtime, ctime or inode differs from the listing) is dropped at the
    /// destination and sent again from a fresh listing, up to 3 times; without it, such
    /// a file fails at once with "changed while being read".
    #[arg(long)]
    retry_changed: bool,
    /// On resume, take the blocks an interrupted run journaled as done without reading
    /// them back from the part file. Saves reading them, but damage to the part file
    /// between the runs (or a block a host crash lost) then reaches the final file.
    #[arg(long)]
    trust_journal: bool,
    /// Copy files that are still being written: new data go as they appear, and each
    /// file is renamed into place once complete (see --idle, --done-suffix); new files
    /// under source directories are picked up too. Ends once every file is complete
    /// and nothing new has appeared for --idle, or once every file is complete after
    /// SRC.done (a run marker) appears beside a source directory. Sources must be local.
    #[arg(long)]
    follow: bool,
    #[command(flatten)]
    follow_args: follow::FollowArgs,
    #[command(flatten)]
    retry: RetryArgs,
    #[command(flatten)]
    filter: follow::FilterArgs,
    #[command(flatten)]
    mirror: sync::MirrorArgs,
    /// A local destination must stay inside DIR, whatever symlinks its path holds or
    /// gains meanwhile (for programs that drive hetch: `hetch mcp` passes the write
    /// root it checked the destination against).
    #[arg(long, value_name = "DIR", hide = true)]
    confine_to: Option<PathBuf>,
}

#[derive(Args)]
struct PredictArgs {
    /// The path's rate: bytes per second with SI suffixes (500M) or bits (2gbit);
    /// default: unknown, as fast as this machine.
    #[arg(long, value_parser = units::parse_rate)]
    rate: Option<u64>,
    #[command(flatten)]
    cp: CpArgs,
}

/// `hetch sync`: the flags of `cp`, mirroring always.
#[derive(Args)]
struct SyncArgs {
    #[command(flatten)]
    cp: CpArgs,
}

impl CpArgs {
    /// How the copy is shown: as the flags say, deleted entries named below the
    /// destination operand as typed.
    fn shown(&self) -> cp::Shown {
        cp::Shown {
            dest_shown: self.paths.last().cloned().unwrap_or_default(),
            ..self.conn.shown()
        }
    }
}

/// How a run recovers from lost sessions (`cp`, `verify`): the flags of
/// [`hetch_copy::RetryPolicy`].
#[derive(Args, Clone, Debug)]
struct RetryArgs {
    /// Sessions opened again in a row, after a lost connection, without any data
    /// getting through in between, at most (a session that moves data resets the
    /// count); 0 gives up at the first loss. Default: no count, --retry-for alone
    /// bounds them.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=1000))]
    retries: Option<u32>,
    /// Give up recovering once this long has passed without any data getting through.
    #[arg(long, default_value = "10m", value_parser = units::parse_duration)]
    retry_for: std::time::Duration,
}

impl RetryArgs {
    /// The policy these flags set.
    fn policy(&self) -> hetch_copy::RetryPolicy {
        hetch_copy::RetryPolicy {
            retries: self.retries.unwrap_or(hetch_copy::RetryPolicy::UNCOUNTED),
            retry_for: self.retry_for,
        }
    }
}

#[derive(Args)]
struct WatchArgs {
    /// The directory to watch (local).
    dir: PathBuf,
    /// Where to ship it: a local directory or hetch://HOST[:PORT]/path.
    dst: String,
    #[command(flatten)]
    filter: follow::FilterArgs,
    /// Delete each source file once its copy is verified at the destination (skipped
    /// files are compared by digest first). Off by default; not with --verify none.
    #[arg(long)]
    remove_source: bool,
    /// How often the counters are printed.
    #[arg(long, default_value = "60s", value_parser = units::parse_duration)]
    stats_interval: std::time::Duration,
    #[command(flatten)]
    follow_args: follow::FollowArgs,
    #[command(flatten)]
    tuning: Tuning,
    #[command(flatten)]
    streams: StreamArgs,
    #[command(flatten)]
    conn: ConnArgs,
    #[command(flatten)]
    integrity: IntegrityArgs,
}

/// The data streams of a transfer (`cp` and `watch`).
#[derive(Args)]
struct StreamArgs {
    /// Number of parallel data streams (1 to 256, what a server accepts). Without it,
    /// autotuning chooses per session from the round trip measured while connecting:
    /// 4 on short paths, up to 12 where this host's socket-buffer limits
    /// (tcp_rmem/tcp_wmem) need more streams to fill a long path.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    streams: Option<u16>,
    /// Do not autotune: 4 data streams (or --streams) whatever the path.
    #[arg(long)]
    no_autotune: bool,
    /// Cap on the transfer rate: bytes per second with SI suffixes (500M, 500MB, 2G),
    /// binary ones (400MiB), or bits (4gbit).
    #[arg(long, value_parser = units::parse_rate)]
    rate_limit: Option<u64>,
    /// Do not encrypt data streams (control stays TLS). For trusted links only.
    #[arg(long)]
    no_encrypt: bool,
    /// Compress blocks on the wire: `zstd` (level 3), `zstd:LEVEL` (1 to 19), `auto`
    /// (zstd level 1 while the link, not the CPU, is the bottleneck) or `none`. Blocks
    /// that do not shrink go as they are; digests are over the uncompressed bytes.
    #[arg(long, default_value = "none", value_parser = clap::value_parser!(hetch_engine::Compression))]
    compress: hetch_engine::Compression,
}

impl StreamArgs {
    /// The streams sessions open unless autotuning chooses.
    fn count(&self) -> u16 {
        self.streams.unwrap_or(hetch_copy::DEFAULT_STREAMS)
    }

    /// Autotuning, unless streams were given or it was turned off (then why).
    fn autotune(&self) -> Result<Arc<client::Autotune>, &'static str> {
        match (self.streams, self.no_autotune) {
            (_, true) => Err("--no-autotune"),
            (Some(_), false) => Err("--streams given"),
            (None, false) => Ok(Arc::new(client::Autotune::new(hetch_copy::DEFAULT_STREAMS))),
        }
    }
}

/// How transfers check what they wrote (`cp` and `verify`).
#[derive(Args)]
struct IntegrityArgs {
    /// Checksum for block and file digests: blake3 (default), xxh3, crc32c, md5,
    /// sha256 or adler32.
    #[arg(long, default_value = "blake3")]
    checksum: hetch_integrity::Algorithm,
    /// What the destination checks: `written` reads every block back from storage
    /// after writing it (page cache dropped first) and hashes that; `received` hashes
    /// the received bytes before writing; `none` checks nothing.
    #[arg(long, default_value = "written")]
    verify: hetch_engine::Verify,
    /// When `--verify written` checks: `block` (as soon as each block is written),
    /// `file` (once a whole file is written) or `sequential` (once everything is).
    #[arg(long, default_value = "block")]
    verify_schedule: hetch_engine::Schedule,
    /// Threads hashing at once on each side (default: one per CPU).
    #[arg(long)]
    hash_threads: Option<usize>,
}

impl IntegrityArgs {
    fn apply(&self, o: &mut Options) {
        o.checksum = self.checksum;
        o.verify = self.verify;
        o.schedule = self.verify_schedule;
        if let Some(n) = self.hash_threads {
            o.hash_threads = n.max(1);
        }
    }
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
    #[arg(long, value_parser = units::parse_socket_buffer)]
    sndbuf: Option<u32>,
    /// SO_RCVBUF for this side's sockets (default: kernel autotuning).
    #[arg(long, value_parser = units::parse_socket_buffer)]
    rcvbuf: Option<u32>,
    /// A session that hears nothing from its peer for this long counts as lost (a
    /// client then opens a new one); 2s to 1h, or 0 to wait forever. Each side sends
    /// a keep-alive every second when it has nothing else to say.
    #[arg(long, default_value = "60s", value_parser = units::parse_stall_timeout)]
    stall_timeout: std::time::Duration,
}

impl Tuning {
    fn engine(&self) -> anyhow::Result<Options> {
        hetch_integrity::check_block_size(self.block_size)?;
        let mut o = Options {
            block_size: self.block_size,
            concurrency: self.concurrency.max(1),
            writers: self.concurrency.max(1),
            buffer_memory: self.buffer_memory as usize,
            stall_timeout: (!self.stall_timeout.is_zero()).then_some(self.stall_timeout),
            ..Options::default()
        };
        // Test-only fault hooks, in test builds only.
        hetch_engine::faults::from_env(&mut o);
        Ok(o)
    }

    fn socket(&self) -> SocketOptions {
        SocketOptions {
            congestion: self.cc.clone(),
            send_buffer: self.sndbuf.unwrap_or(0),
            recv_buffer: self.rcvbuf.unwrap_or(0),
        }
    }
}

#[derive(Args)]
struct ServeArgs {
    /// Directory to serve, or s3://, gs:// or az://BUCKET[/PREFIX] to be an agent next
    /// to an object store; clients cannot reach outside it.
    #[arg(long)]
    root: String,
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
    /// Let clients that ask for it keep setuid, setgid and sticky bits on what they
    /// push (stripped otherwise). Ownership is never copied.
    #[arg(long)]
    preserve_special_modes: bool,
    /// Let clients push device nodes (--devices, made as root). Off by default: a
    /// device node in the served tree would let pulls read the raw device.
    #[arg(long)]
    devices: bool,
    #[command(flatten)]
    pre_auth: PreAuthArgs,
    #[command(flatten)]
    fair: serve::ServeLimitArgs,
    /// Serve metrics in Prometheus' text format at http://ADDR/metrics (HOST:PORT; off
    /// by default). Plain HTTP without a token: they are counts (sessions, bytes,
    /// files, failures, refused connections), never a path, a client's address or a
    /// token; bind it to loopback or a monitoring network if the volume of traffic is
    /// not for everyone to see.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Servers (HOST[:PORT], repeatable or comma-separated) this one may push to when a
    /// client asks it to relay a copy between two servers (`hetch cp hetch://THIS/x
    /// hetch://OTHER/y`); `any` for every server. Off by default: a token holder
    /// cannot make this server connect anywhere else.
    #[arg(long, value_delimiter = ',')]
    relay_to: Vec<String>,
    #[command(flatten)]
    tuning: Tuning,
}

#[derive(Args)]
struct SumArgs {
    /// Files and directories to hash (or s3://, gs://, az://BUCKET/KEY objects and
    /// prefixes); with --check, manifests.
    #[arg(required = true)]
    paths: Vec<String>,
    /// Check the files the manifests name (as hetch sum, cp --manifest, b3sum, md5sum
    /// or sha256sum write them, any byte in a name): NAME: OK or NAME: FAILED each.
    #[arg(long, short)]
    check: bool,
    /// With --check, print only what failed.
    #[arg(long, short, requires = "check")]
    quiet: bool,
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
struct CleanArgs {
    /// The directory to clean, and everything below it.
    dir: PathBuf,
    /// Only list what would be removed.
    #[arg(long)]
    dry_run: bool,
    /// Also the part files and range journals of large files a transfer service
    /// moved in ranges (`.NAME.hetch-split*`), e.g. of a job cancelled for good.
    /// Between two ranges nobody holds them: not while such a job may still run.
    #[arg(long)]
    split: bool,
}

// verify only compares what cp and sync keep: the same flags, their own words.
#[derive(Args)]
#[command(
    mut_arg("hard_links", |a| a.help("Compare hard links too (which names share an inode)")),
    mut_arg("xattrs", |a| a.help("Compare user extended attributes (user.*) too")),
    mut_arg("acls", |a| a.help("Compare POSIX ACLs (access and default) too"))
)]
struct VerifyArgs {
    /// The original tree (or file).
    src: String,
    /// Its copy.
    dst: String,
    /// Checksum to compare with.
    #[arg(long, default_value = "blake3")]
    checksum: hetch_integrity::Algorithm,
    #[command(flatten)]
    keep: KeepArgs,
    #[command(flatten)]
    tuning: Tuning,
    #[command(flatten)]
    conn: ConnArgs,
    #[command(flatten)]
    retry: RetryArgs,
}

/// What is kept beyond contents, modes and mtimes (and, for `verify`, compared).
#[derive(Args)]
pub(crate) struct KeepArgs {
    /// Keep names of one file as hard links (copied as separate files by default).
    #[arg(short = 'H', long)]
    hard_links: bool,
    /// Keep user extended attributes (user.*) of files and directories.
    #[arg(short = 'X', long)]
    xattrs: bool,
    /// Keep POSIX ACLs (access and default; numeric user and group ids).
    #[arg(short = 'A', long)]
    acls: bool,
}

impl KeepArgs {
    fn apply(&self, opts: &mut hetch_engine::Options) {
        (opts.hard_links, opts.xattrs, opts.acls) = (self.hard_links, self.xattrs, self.acls);
    }
}

/// Which server key to trust and which token to present: the flags of every command
/// that talks to one server or service (`cp`, `verify`, `job`).
#[derive(Args)]
pub(crate) struct PinArgs {
    /// Expected key fingerprint of the server (sha256:...), instead of the known-hosts
    /// file.
    #[arg(long)]
    pub(crate) fingerprint: Option<hetch_net::Fingerprint>,
    /// Known-hosts file (default: ~/.config/hetch/known_hosts).
    #[arg(long)]
    pub(crate) known_hosts: Option<PathBuf>,
    /// File holding the token (default: the HETCH_TOKEN environment variable).
    #[arg(long)]
    pub(crate) token_file: Option<PathBuf>,
}

/// How to reach and trust a server (`cp` and `verify`).
#[derive(Args)]
struct ConnArgs {
    #[command(flatten)]
    pin: PinArgs,
    /// Copies between two servers: the destination server's token file (default: the
    /// HETCH_DEST_TOKEN environment variable, else the source server's token). The
    /// source server presents it there, inside TLS.
    #[arg(long)]
    dest_token_file: Option<PathBuf>,
    /// Copies between two servers: the destination server's key fingerprint
    /// (sha256:...), which the source server pins (default: the known-hosts file's,
    /// learned on first use like any server's).
    #[arg(long)]
    dest_fingerprint: Option<hetch_net::Fingerprint>,
    /// Seconds to wait for a server to answer while connecting and setting up.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
    /// Print nothing but what failed: no progress bar, no summary at the end
    /// (errors still go to stderr; --json still prints its JSON).
    #[arg(long, short)]
    quiet: bool,
    /// Progress as a JSON line on stderr each second instead of a bar (skipped files
    /// count as done), for programs that drive hetch: {"progress": {"bytes": B,
    /// "total_bytes": T, "files": F, "total_files": N}}.
    #[arg(long)]
    progress_json: bool,
}

impl ConnArgs {
    /// How progress is shown: JSON lines, a bar, or nothing.
    fn progress_view(&self) -> ui::ProgressView {
        if self.progress_json {
            ui::ProgressView::JsonLines
        } else if self.quiet {
            ui::ProgressView::Hidden
        } else {
            ui::ProgressView::Bar
        }
    }

    /// How a copy is shown: as these flags say.
    fn shown(&self) -> cp::Shown {
        cp::Shown {
            json: self.json,
            progress: self.progress_view(),
            dest_shown: String::new(),
        }
    }

    /// The connection settings, when any operand is on a server.
    fn client_for(
        &self,
        sources: &[Location],
        dest: &Location,
        socket: SocketOptions,
        autotune: Option<Arc<client::Autotune>>,
    ) -> anyhow::Result<Option<client::ClientConfig>> {
        let remote = sources
            .iter()
            .chain(std::iter::once(dest))
            .any(|l| matches!(l, Location::Remote { .. }));
        if !remote {
            return Ok(None);
        }
        Ok(Some(client::ClientConfig {
            token: client::load_token(self.pin.token_file.as_ref())?,
            fingerprint: self.pin.fingerprint,
            known_hosts: self.pin.known_hosts.clone(),
            socket,
            timeout: std::time::Duration::from_secs(self.timeout.max(1)),
            opened: Default::default(),
            autotune,
            reuse: None,
        }))
    }

    /// The destination server of a copy between two servers, as far as flags and
    /// environment say.
    fn dest_server(&self) -> anyhow::Result<hetch_copy::DestServer> {
        Ok(hetch_copy::DestServer {
            token: client::load_dest_token(self.dest_token_file.as_ref())?,
            fingerprint: self.dest_fingerprint,
        })
    }
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
            report(&e);
            ExitCode::from(1)
        }
    }
}

/// Says why a command failed: one line on stderr.
pub(crate) fn report(e: &anyhow::Error) {
    errln!("hetch: error: {}", hetch_proto::escape_text(&one_line(e)));
}

/// The error and its causes on one line, without repeating a cause already quoted.
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    hetch_copy::one_line(e.as_ref())
}

/// The job of a subcommand's arguments (with the global `--s3-endpoint`), or the exit
/// code once bad usage is reported.
fn job_of<'a, A>(a: &'a A, s3: &hetch_copy::S3Options) -> anyhow::Result<Result<CopyJob, ExitCode>>
where
    CopyJob: TryFrom<&'a A, Error = ArgsError>,
{
    Ok(config_of(a)?.map(|job: CopyJob| CopyJob {
        s3: s3.clone(),
        ..job
    }))
}

/// Runs the copy the arguments `a` ask for, shown as `shown` says.
async fn copy<'a, A>(
    a: &'a A,
    s3: &hetch_copy::S3Options,
    shown: cp::Shown,
) -> anyhow::Result<ExitCode>
where
    CopyJob: TryFrom<&'a A, Error = ArgsError>,
{
    match job_of(a, s3)? {
        Ok(job) => Ok(cp::run(job, shown).await?.exit_code()),
        Err(code) => Ok(code),
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let s3 = hetch_copy::S3Options {
        endpoint: cli.s3_endpoint.clone(),
    };
    match cli.command {
        Command::Cp(a) => copy(&a, &s3, a.shown()).await,
        Command::Predict(a) => copy(&a, &s3, a.cp.shown()).await,
        Command::Sync(a) => copy(&a, &s3, a.cp.shown()).await,
        Command::Verify(a) => copy(&a, &s3, a.conn.shown()).await,
        #[cfg(feature = "mcp")]
        Command::Mcp(a) => {
            if s3.endpoint.is_some() {
                return Ok(usage::usage_error(
                    "hetch mcp takes the S3 endpoint from its policy (s3_endpoint), not --s3-endpoint",
                ));
            }
            let policy = hetch_mcp::Policy::load(&a.policy)?;
            let exe = std::env::current_exe()?;
            hetch_mcp::serve_stdio(policy, exe).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Watch(a) => match job_of(&a, &s3)? {
            Ok(job) => watch::run(job, a.conn.json, a.conn.quiet, a.stats_interval).await,
            Err(code) => Ok(code),
        },
        Command::Serve(a) => match config_of(serve::ServeFlags(&a, &s3))? {
            Ok(cfg) => serve::run(cfg).await,
            Err(code) => Ok(code),
        },
        Command::Doctor(a) => doctor::run(a).await,
        Command::Clean(a) => clean::command(a).await,
        Command::Sum(a) => sum::run(a, &s3).await,
        #[cfg(feature = "service")]
        Command::Service(a) => jobcli::service(a).await,
        #[cfg(feature = "service")]
        Command::Job(a) => jobcli::job(a).await,
        #[cfg(feature = "service")]
        Command::Worker(a) => worker::run(a).await,
        #[cfg(feature = "service")]
        Command::WorkerUnit => worker::unit().await,
        Command::Completions(a) => {
            a.run(Cli::command(), "hetch", &mut out::Stdout);
            Ok(ExitCode::SUCCESS)
        }
        Command::Man(a) => a
            .run(Cli::command())
            .map(|_| ExitCode::SUCCESS)
            .map_err(Into::into),
        Command::Demo(a) => {
            demo::run(a.dir, a.large_mib, a.keep).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Limits on connections that have not authenticated yet: `hetch serve`'s and
/// `hetch service`'s.
#[derive(Args)]
pub(crate) struct PreAuthArgs {
    /// Connections that have not authenticated yet, at most, from everyone; more are
    /// closed at once.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    max_unauthenticated: u32,
    /// Connections that have not authenticated yet, at most, from one address (IPv6:
    /// one /64).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    max_unauthenticated_per_address: u32,
    /// Seconds a connection has from accept to authentication (TLS handshake, then a
    /// hello and token, or a request with a token or session cookie).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    auth_timeout: u64,
}

impl PreAuthArgs {
    /// The limits these flags set.
    pub(crate) fn limits(&self) -> hetch_net::PreAuthLimits {
        hetch_net::PreAuthLimits {
            max_total: self.max_unauthenticated as usize,
            max_per_address: self.max_unauthenticated_per_address as usize,
            deadline: std::time::Duration::from_secs(self.auth_timeout),
            ..Default::default()
        }
    }
}
