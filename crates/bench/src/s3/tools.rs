//! The tools `hetch-lab bench s3` compares, each moving a directory's files into a prefix
//! of the store (up) and a prefix's objects into a directory (down):
//! - `hetch-agent`: hetch's intended architecture, `hetch serve --root s3://BUCKET/` on
//!   the server host next to MinIO, the client talking hetch's protocol to it across
//!   the link;
//! - `hetch`: hetch talking S3 itself across the link (`--s3-endpoint`);
//! - `aws`: aws-cli v2 (`aws s3 cp --recursive`), with its defaults;
//! - `rclone`: `rclone copy` to an S3 remote made from environment variables;
//! - `s5cmd`: `s5cmd cp`, when it is installed;
//! - `iperf3`: memory to memory, the link's limit.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::record::Direction;
use crate::minio::{ACCESS_KEY, SECRET_KEY};
use crate::net;
use crate::place::Place;
use crate::server::{find_program, not_started, program, url_host, version_line, Server};
use crate::tool::{Tool, ToolContext};
use crate::tools::Iperf3;

/// The tools by name, in the order they take turns and reports list them.
pub const NAMES: [&str; 6] = ["hetch-agent", "hetch", "aws", "rclone", "s5cmd", "iperf3"];

/// Where aws-cli v2 lives on Debian. An older v1 from PyPI may come first on `PATH`;
/// the absolute path makes sure the benchmark runs the one users get from Debian.
pub const AWS_CLI: &str = "/usr/bin/aws";

/// What every tool is told about the run it takes part in.
#[derive(Debug, Clone)]
pub struct S3Context {
    /// The hetch binary.
    pub hetch: PathBuf,
    /// The client host: where the files are, and where every client runs.
    pub client: Place,
    /// The server host: where MinIO and the hetch agent run.
    pub server: Place,
    /// A private directory for the tools' configuration, state and logs.
    pub scratch: PathBuf,
    /// Parallel streams (or transfers) each tool is asked to use, where it has such a
    /// setting.
    pub streams: u32,
    /// MinIO's endpoint, `http://SERVER:PORT`: across the link from the client, over
    /// the server host's own loopback from the agent.
    pub endpoint: String,
    /// The bucket every run uses.
    pub bucket: String,
}

impl S3Context {
    /// The context the harness's general tools (iperf3, server start-up) take.
    fn tool_context(&self) -> ToolContext {
        ToolContext {
            hetch: self.hetch.clone(),
            client: self.client.clone(),
            server: self.server.clone(),
            scratch: self.scratch.clone(),
            streams: self.streams,
        }
    }

    /// `s3://BUCKET/PREFIX`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// Gives `cmd` the store's credentials and region, and nothing of the machine's own
    /// AWS set-up: shared config and credentials files that do not exist (a user's
    /// `~/.aws/config` could change a tool's concurrency or part size; every tool here
    /// takes a missing file as an empty one), no profile, no endpoint from the
    /// environment (each tool is given the endpoint explicitly). Building a command
    /// touches no file.
    pub fn s3_env(&self, cmd: &mut Command) {
        let dir = self.scratch.join("no-aws-config");
        for k in [
            "AWS_PROFILE",
            "AWS_DEFAULT_PROFILE",
            "AWS_SESSION_TOKEN",
            "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3",
            "AWS_REGION",
        ] {
            cmd.env_remove(k);
        }
        cmd.env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("AWS_CONFIG_FILE", dir.join("config"))
            .env("AWS_SHARED_CREDENTIALS_FILE", dir.join("credentials"));
    }

    /// `hetch` on `place`, pointed at `endpoint`, with its upload journals in scratch
    /// (`name` keeps each user's apart) instead of the user's state directory.
    fn hetch(&self, place: &Place, name: &str, endpoint: &str) -> Command {
        let mut c = place.command(&self.hetch.to_string_lossy());
        self.s3_env(&mut c);
        c.env(
            "HETCH_STATE_DIR",
            self.scratch.join(format!("{name}-state")),
        )
        .arg("--s3-endpoint")
        .arg(endpoint);
        c
    }

    /// `hetch sum --checksum sha256 s3://BUCKET/PREFIX` on the server host: the
    /// SHA-256 of every object under the prefix, read back from MinIO over the server's
    /// own loopback (the runner's check of an upload; it costs no time on the link).
    /// SHA-256 rather than hetch's default BLAKE3, so that the check of hetch's own
    /// uploads does not use the algorithm hetch computed while copying.
    pub fn sum_on_server(&self, prefix: &str) -> Command {
        let mut c = self.hetch(&self.server, "sum", &self.endpoint);
        c.args(["sum", "--checksum", "sha256"])
            .arg(self.url(prefix));
        c
    }

    /// `hetch cp SRC s3://BUCKET/PREFIX` on the server host: how the runner fills the
    /// prefix the downloads read, once, without crossing the link.
    pub fn seed_on_server(&self, src: &Path, prefix: &str) -> Command {
        let mut c = self.hetch(&self.server, "seed", &self.endpoint);
        c.args(["cp", "-q"]).arg(src).arg(self.url(prefix));
        c
    }
}

/// One transfer a tool is asked for.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    /// Up: the directory whose files go to the prefix (`local/REL` becomes
    /// `PREFIX/REL`). Down: a directory that does not exist yet (its parent does), to
    /// be made holding the prefix's objects (`PREFIX/REL` becomes `local/REL`).
    pub local: &'a Path,
    /// The key prefix in the bucket, without a trailing `/`.
    pub prefix: &'a str,
    /// The dataset's size (the limit sends this many bytes instead).
    pub bytes: u64,
}

/// A data mover under test in `hetch-lab bench s3` (or the link's limit).
pub trait S3Tool {
    /// Its name in results and reports.
    fn name(&self) -> &'static str;

    /// Its version line.
    fn version(&self) -> String;

    /// How it runs and why (one line, for the report).
    fn flags(&self) -> String;

    /// Why it cannot take part here (not installed, wrong version); `None` when it can.
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// Whether this is the limit (iperf3): it moves memory, not files, so its runs are
    /// not verified and the report shows the movers as fractions of it.
    fn is_limit(&self) -> bool {
        false
    }

    /// Starts whatever server the tool needs on the server host; called once per link
    /// before any run, and again after a failed run.
    fn start(&mut self, _ctx: &S3Context) -> Result<()> {
        Ok(())
    }

    /// The command that performs `job` in `direction`, on the client host.
    fn command(&self, ctx: &S3Context, direction: Direction, job: &Job) -> Command;

    /// Stops its server; idempotent.
    fn stop(&mut self) {}
}

/// Makes the tool called `name`; `hetch` is the binary the hetch tools run (its
/// version is theirs).
pub fn make(name: &str, hetch: &Path) -> Result<Box<dyn S3Tool>> {
    let hetch = hetch.to_path_buf();
    Ok(match name {
        "hetch-agent" => Box::new(HetchAgent {
            hetch,
            server: None,
        }),
        "hetch" => Box::new(HetchDirect { hetch }),
        "aws" => Box::new(AwsCli),
        "rclone" => Box::new(Rclone),
        "s5cmd" => Box::new(S5cmd),
        "iperf3" => Box::<Limit>::default(),
        _ => bail!("unknown tool '{name}': choose from {}", NAMES.join(", ")),
    })
}

/// The version line of the hetch binary that runs (not this crate's).
fn hetch_version(hetch: &Path) -> String {
    version_line(&hetch.to_string_lossy(), &["--version"])
}

/// hetch talking S3 itself: the client sends its files to MinIO across the link
/// (`hetch --s3-endpoint http://SERVER:PORT cp`), and reads them back the same way.
struct HetchDirect {
    hetch: PathBuf,
}

impl S3Tool for HetchDirect {
    fn name(&self) -> &'static str {
        "hetch"
    }

    fn version(&self) -> String {
        hetch_version(&self.hetch)
    }

    fn flags(&self) -> String {
        "cp -q --streams N --s3-endpoint http://SERVER:PORT: hetch's S3 client across the \
         link, its defaults (blocks hashed with BLAKE3, SHA-256 checksum headers on \
         every request, ETag-checked ranged reads)"
            .to_string()
    }

    fn command(&self, ctx: &S3Context, direction: Direction, job: &Job) -> Command {
        let mut c = ctx.hetch(&ctx.client, "hetch", &ctx.endpoint);
        c.args(["cp", "-q", "--streams", &ctx.streams.to_string(), "--"]);
        // A directory copied to a prefix (or a prefix to a directory) that does not
        // exist yet is copied *as* it (cp -r rules), so REL lands at PREFIX/REL.
        match direction {
            Direction::Up => c.arg(job.local).arg(ctx.url(job.prefix)),
            Direction::Down => c.arg(ctx.url(job.prefix)).arg(job.local),
        };
        c
    }
}

/// hetch's intended architecture for object stores: `hetch serve --root s3://BUCKET/`
/// on the server host, next to MinIO (endpoint on the server's own address, so its S3
/// requests never cross the link), and the client's `hetch cp` talking hetch's
/// protocol to it across the link.
struct HetchAgent {
    hetch: PathBuf,
    server: Option<Agent>,
}

/// A running agent and what a client needs to reach it.
struct Agent {
    _server: Server,
    port: u16,
    fingerprint: String,
    token_file: PathBuf,
}

/// How long the agent may take to print its fingerprint once it accepts connections.
const FINGERPRINT_WAIT: Duration = Duration::from_secs(10);

impl S3Tool for HetchAgent {
    fn name(&self) -> &'static str {
        "hetch-agent"
    }

    fn version(&self) -> String {
        hetch_version(&self.hetch)
    }

    fn flags(&self) -> String {
        "server: serve --root s3://BUCKET/ --s3-endpoint http://SERVER:PORT (on the \
         server host, MinIO over its own loopback); client: cp -q --streams N \
         --fingerprint FP --token-file F to hetch://SERVER:PORT/PREFIX: TLS on every \
         stream, BLAKE3 per block, the agent's defaults"
            .to_string()
    }

    fn start(&mut self, ctx: &S3Context) -> Result<()> {
        self.stop();
        let state = ctx.scratch.join("agent-identity");
        std::fs::create_dir_all(&state)?;
        let port = net::free_port(&ctx.server)?;
        let mut cmd = ctx.hetch(&ctx.server, "agent", &ctx.endpoint);
        cmd.args(["serve", "--root"])
            .arg(format!("s3://{}/", ctx.bucket))
            .arg("--listen")
            .arg(format!("{}:{port}", url_host(&ctx.server.addr)))
            .arg("--state-dir")
            .arg(&state);
        let log = ctx.scratch.join("hetch-agent.log");
        // A fresh log for each start, so the fingerprint read below is this server's.
        let _ = std::fs::remove_file(&log);
        let server = Server::start("hetch-agent", cmd, &log, &ctx.tool_context(), port)?;
        let (fingerprint, token_file) = agent_identity(&log)?;
        self.server = Some(Agent {
            _server: server,
            port,
            fingerprint,
            token_file,
        });
        Ok(())
    }

    fn command(&self, ctx: &S3Context, direction: Direction, job: &Job) -> Command {
        let Some(a) = &self.server else {
            return not_started("hetch-agent");
        };
        let mut c = ctx.client.command(&ctx.hetch.to_string_lossy());
        // The client keeps no state of its own here; pinning the fingerprint means no
        // known-hosts file is read or written.
        c.env_remove("HETCH_TOKEN")
            .args(["cp", "-q", "--streams", &ctx.streams.to_string()])
            .args(["--fingerprint", &a.fingerprint])
            .arg("--token-file")
            .arg(&a.token_file)
            .arg("--");
        let remote = format!(
            "hetch://{}:{}/{}",
            url_host(&ctx.server.addr),
            a.port,
            job.prefix
        );
        match direction {
            Direction::Up => c.arg(job.local).arg(remote),
            Direction::Down => c.arg(remote).arg(job.local),
        };
        c
    }

    fn stop(&mut self) {
        // Dropping the Server stops it (and its process group).
        self.server = None;
    }
}

/// The fingerprint and token file `hetch serve` printed to `log` (it prints them right
/// after binding, so they may trail the first accepted connection by a moment).
fn agent_identity(log: &Path) -> Result<(String, PathBuf)> {
    let deadline = Instant::now() + FINGERPRINT_WAIT;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let find = |prefix: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .map(|v| v.trim().to_string())
        };
        if let (Some(fp), Some(token)) = (
            find("hetch serve: fingerprint "),
            find("hetch serve: token in "),
        ) {
            return Ok((fp, PathBuf::from(token)));
        }
        if Instant::now() >= deadline {
            bail!(
                "hetch-agent: no fingerprint and token in {} after {} s",
                log.display(),
                FINGERPRINT_WAIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// aws-cli v2 (`aws s3 cp --recursive`) as users run it: its defaults (10 concurrent
/// requests, 8 MiB multipart threshold and chunks); `--no-progress` only quiets its
/// output.
struct AwsCli;

impl S3Tool for AwsCli {
    fn name(&self) -> &'static str {
        "aws"
    }

    fn version(&self) -> String {
        version_line(AWS_CLI, &["--version"])
    }

    fn flags(&self) -> String {
        format!(
            "{AWS_CLI} s3 cp --recursive --no-progress --endpoint-url http://SERVER:PORT: \
             defaults (max_concurrent_requests 10, multipart_threshold and \
             multipart_chunksize 8 MiB), an empty config file of its own; --streams does \
             not apply"
        )
    }

    fn unavailable(&self) -> Option<String> {
        if !Path::new(AWS_CLI).is_file() {
            return Some(format!("{AWS_CLI} not installed (Debian's awscli package)"));
        }
        let v = self.version();
        (!v.starts_with("aws-cli/2."))
            .then(|| format!("{AWS_CLI} is not aws-cli v2 (it says: {v})"))
    }

    fn command(&self, ctx: &S3Context, direction: Direction, job: &Job) -> Command {
        let mut c = ctx.client.command(AWS_CLI);
        ctx.s3_env(&mut c);
        c.env("AWS_PAGER", "")
            .args(["s3", "cp", "--recursive", "--no-progress", "--endpoint-url"])
            .arg(&ctx.endpoint);
        // Trailing slashes: the directory's contents go under the prefix and back.
        let remote = format!("{}/", ctx.url(job.prefix));
        match direction {
            Direction::Up => c.arg(job.local).arg(remote),
            Direction::Down => c.arg(remote).arg(slash(job.local)),
        };
        c
    }
}

/// `path/`, the spelling that says "a directory" to aws-cli and s5cmd.
fn slash(path: &Path) -> String {
    format!("{}/", path.display())
}

/// The name of rclone's on-the-fly remote (`RCLONE_CONFIG_<NAME>_...` variables).
const RCLONE_REMOTE: &str = "HETCHBENCHS3";

/// rclone's (empty) configuration file, made by its `start`.
fn rclone_config(ctx: &S3Context) -> PathBuf {
    ctx.scratch.join("rclone-s3.conf")
}

/// `rclone copy` to an S3 remote defined by environment variables; `--transfers` is
/// the streams setting, everything else rclone's defaults.
struct Rclone;

impl S3Tool for Rclone {
    fn name(&self) -> &'static str {
        "rclone"
    }

    fn version(&self) -> String {
        version_line("rclone", &["version"])
    }

    fn flags(&self) -> String {
        "copy --transfers N to an S3 remote (provider Minio) from RCLONE_CONFIG_* \
         variables, an empty config file; otherwise defaults (4 concurrent parts per \
         file, 5 MiB chunks, multipart from 200 MiB, 8 checkers)"
            .to_string()
    }

    fn start(&mut self, ctx: &S3Context) -> Result<()> {
        // An empty configuration of its own: no notice about a missing rclone.conf and
        // no remote of the user's can interfere.
        let conf = rclone_config(ctx);
        std::fs::write(&conf, "").with_context(|| conf.display().to_string())
    }

    fn unavailable(&self) -> Option<String> {
        find_program("rclone")
            .is_none()
            .then(|| "rclone not installed".to_string())
    }

    fn command(&self, ctx: &S3Context, direction: Direction, job: &Job) -> Command {
        let mut c = ctx.client.command(&program("rclone"));
        let var = |k: &str| format!("RCLONE_CONFIG_{RCLONE_REMOTE}_{k}");
        // rclone's S3 backend fails while AWS_CA_BUNDLE is set (it tries to load it as
        // a custom bundle even for http://), so the variable goes.
        c.env_remove("AWS_CA_BUNDLE")
            .env(var("TYPE"), "s3")
            .env(var("PROVIDER"), "Minio")
            .env(var("ENDPOINT"), &ctx.endpoint)
            .env(var("ACCESS_KEY_ID"), ACCESS_KEY)
            .env(var("SECRET_ACCESS_KEY"), SECRET_KEY);
        c.arg("--config").arg(rclone_config(ctx)).arg("copy");
        let remote = format!("{RCLONE_REMOTE}:{}/{}", ctx.bucket, job.prefix);
        match direction {
            Direction::Up => c.arg(job.local).arg(remote),
            Direction::Down => c.arg(remote).arg(job.local),
        };
        c.args(["--transfers", &ctx.streams.max(1).to_string()]);
        c
    }
}

/// `s5cmd cp` with its defaults, when s5cmd is on `PATH` (Debian has no package, and
/// the Go module proxy does not serve it here, so it is usually unavailable).
struct S5cmd;

impl S3Tool for S5cmd {
    fn name(&self) -> &'static str {
        "s5cmd"
    }

    fn version(&self) -> String {
        version_line("s5cmd", &["version"])
    }

    fn flags(&self) -> String {
        "--endpoint-url http://SERVER:PORT cp 'SRC/*' s3://BUCKET/PREFIX/ (and back): \
         defaults (256 workers, 5 concurrent parts per file, 50 MiB parts); --streams \
         does not apply"
            .to_string()
    }

    fn unavailable(&self) -> Option<String> {
        find_program("s5cmd")
            .is_none()
            .then(|| "s5cmd not on PATH (no Debian package; not installable here)".to_string())
    }

    fn command(&self, ctx: &S3Context, direction: Direction, job: &Job) -> Command {
        let mut c = ctx.client.command(&program("s5cmd"));
        ctx.s3_env(&mut c);
        c.arg("--endpoint-url").arg(&ctx.endpoint).arg("cp");
        // s5cmd expands the wildcard itself (no shell here) and keeps the paths below
        // it, so `SRC/*` copies the directory's contents.
        match direction {
            Direction::Up => c
                .arg(format!("{}/*", job.local.display()))
                .arg(format!("{}/", ctx.url(job.prefix))),
            Direction::Down => c
                .arg(format!("{}/*", ctx.url(job.prefix)))
                .arg(slash(job.local)),
        };
        c
    }
}

/// iperf3, memory to memory with the streams setting: the most the link gives TCP
/// each way (`-R` for down: the server host sends).
#[derive(Default)]
struct Limit {
    iperf3: Iperf3,
}

impl S3Tool for Limit {
    fn name(&self) -> &'static str {
        "iperf3"
    }

    fn version(&self) -> String {
        self.iperf3.version()
    }

    fn flags(&self) -> String {
        format!("{}; -R for down", self.iperf3.flags())
    }

    fn unavailable(&self) -> Option<String> {
        find_program("iperf3")
            .is_none()
            .then(|| "iperf3 not installed".to_string())
    }

    fn is_limit(&self) -> bool {
        true
    }

    fn start(&mut self, ctx: &S3Context) -> Result<()> {
        self.iperf3
            .start(&ctx.tool_context())
            .context("iperf3: starting its server")
    }

    fn command(&self, ctx: &S3Context, direction: Direction, job: &Job) -> Command {
        let mut c = self
            .iperf3
            .copy(&ctx.tool_context(), job.local, job.local, job.bytes);
        if direction == Direction::Down {
            c.arg("-R");
        }
        c
    }

    fn stop(&mut self) {
        self.iperf3.stop();
    }
}

/// `cmd` as one line a person could run: the environment it sets (secrets elided)
/// and its words, shell-quoted.
pub fn render(cmd: &Command) -> String {
    let mut words: Vec<String> = Vec::new();
    for (k, v) in cmd.get_envs() {
        let k = k.to_string_lossy();
        match v {
            None => words.push(format!("-u {k}")),
            Some(_) if k.contains("SECRET") || k.contains("TOKEN") => {
                words.push(format!("{k}=…"));
            }
            Some(v) => words.push(format!("{k}={}", quote(v))),
        }
    }
    if !words.is_empty() {
        words.insert(0, "env".to_string());
    }
    words.push(quote(cmd.get_program()));
    words.extend(cmd.get_args().map(quote));
    words.join(" ")
}

/// `word` single-quoted unless it is plainly safe for a shell.
fn quote(word: &OsStr) -> String {
    let w = word.to_string_lossy();
    let plain = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c);
    if !w.is_empty() && w.chars().all(plain) {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> S3Context {
        S3Context {
            hetch: PathBuf::from("/opt/hetch"),
            client: Place {
                netns: Some("hetch-a".into()),
                addr: "10.77.0.1".into(),
            },
            server: Place {
                netns: Some("hetch-b".into()),
                addr: "10.77.0.2".into(),
            },
            // Never created: building a command must not touch the file system.
            scratch: PathBuf::from("/nonexistent/hetch-bench-s3-test"),
            streams: 8,
            endpoint: "http://10.77.0.2:9000".into(),
            bucket: "bench".into(),
        }
    }

    fn line(tool: &str, d: Direction) -> String {
        let job = Job {
            local: Path::new("/data/src/1MiB-x4"),
            prefix: "up/run-1",
            bytes: 4 << 20,
        };
        render(
            &make(tool, Path::new("/opt/hetch"))
                .unwrap()
                .command(&ctx(), d, &job),
        )
    }

    #[test]
    fn commands_run_on_the_client_with_the_endpoint_and_the_right_operands() {
        let aws = line("aws", Direction::Up);
        assert!(
            aws.ends_with(
                "ip netns exec hetch-a /usr/bin/aws s3 cp --recursive --no-progress \
                 --endpoint-url http://10.77.0.2:9000 /data/src/1MiB-x4 s3://bench/up/run-1/"
            ),
            "{aws}"
        );
        assert!(aws.contains("AWS_SECRET_ACCESS_KEY=…"), "{aws}");
        assert!(!aws.contains(SECRET_KEY), "secrets are elided: {aws}");
        let down = line("aws", Direction::Down);
        assert!(
            down.ends_with("s3://bench/up/run-1/ /data/src/1MiB-x4/"),
            "{down}"
        );
        let hetch = line("hetch", Direction::Up);
        assert!(
            hetch.ends_with(
                "ip netns exec hetch-a /opt/hetch --s3-endpoint http://10.77.0.2:9000 cp -q \
                 --streams 8 -- /data/src/1MiB-x4 s3://bench/up/run-1"
            ),
            "{hetch}"
        );
        let rclone = line("rclone", Direction::Down);
        assert!(rclone.contains("-u AWS_CA_BUNDLE"), "{rclone}");
        assert!(rclone.contains("RCLONE_CONFIG_HETCHBENCHS3_PROVIDER=Minio"));
        assert!(
            rclone.ends_with("copy HETCHBENCHS3:bench/up/run-1 /data/src/1MiB-x4 --transfers 8"),
            "{rclone}"
        );
        let s5 = line("s5cmd", Direction::Up);
        assert!(
            s5.ends_with("cp '/data/src/1MiB-x4/*' s3://bench/up/run-1/"),
            "{s5}"
        );
        // Without its server the agent's command fails, naming it.
        assert!(line("hetch-agent", Direction::Up).contains("before its server started"));
        assert!(make("nosuch", Path::new("hetch")).is_err());
        assert!(
            !Path::new("/nonexistent/hetch-bench-s3-test").exists(),
            "building commands wrote files"
        );
    }
}
