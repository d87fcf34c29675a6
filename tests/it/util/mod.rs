//! Helpers shared by the end-to-end tests of the `hetch` binary: a command runner, a
//! server under test, a deterministic tree builder and a tree comparator.
//!
//! Every helper panics with the full command output on unexpected results, so a failing
//! test explains itself.

#![allow(dead_code)]

pub mod service;
pub mod testbed;
pub mod webdriver;

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_hetch");

/// The subcommands of `hetch-lab` (the benchmark harness and the WAN testbed), which
/// [`spawn`] runs with that binary.
const LAB_COMMANDS: [&str; 2] = ["bench", "wan"];

/// The `hetch-lab` binary: the one `HETCH_LAB_BIN` names (`bash test.sh` builds it with
/// the tests, in one cargo command), else the one beside [`BIN`], built once per test
/// process with the same profile by `cargo build`: cargo builds only the binaries of the
/// package under test for its tests, and `hetch-lab` is another package of the
/// workspace. (`cargo build -p hetch-lab` resolves the features of the lab's own tree,
/// not the workspace's, so on a fresh tree it compiles a second copy of many crates:
/// about a minute here, which `HETCH_LAB_BIN` saves.)
pub fn lab_bin() -> &'static Path {
    static LAB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LAB.get_or_init(|| {
        if let Some(lab) = std::env::var_os("HETCH_LAB_BIN") {
            let lab = PathBuf::from(lab);
            assert!(lab.is_file(), "HETCH_LAB_BIN={} is no file", lab.display());
            return lab;
        }
        let lab = Path::new(BIN).with_file_name("hetch-lab");
        let mut build = Command::new(env!("CARGO"));
        build
            .args(["build", "--quiet", "-p", "hetch-lab"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            // bash test.sh runs the tests under RUSTC_BOOTSTRAP=1 (for libtest's
            // --report-time); cargo counts it in every fingerprint, so passing it on
            // would rebuild the lab and its whole tree here, and everything once more
            // in the next cargo command without it.
            .env_remove("RUSTC_BOOTSTRAP");
        if Path::new(BIN).parent().and_then(Path::file_name) == Some("release".as_ref()) {
            build.arg("--release");
        }
        let st = build.status().expect("run cargo build -p hetch-lab");
        assert!(st.success(), "cargo build -p hetch-lab failed");
        assert!(lab.is_file(), "no {} after the build", lab.display());
        lab
    })
}

/// A safety net against hangs: no single command may run longer than this. This is not
/// a performance assertion; every command in these tests normally takes seconds.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(240);

/// Builds an array of `OsString`s from anything `OsString::from` accepts (`&str`,
/// `String`, `&Path`, `&PathBuf`...).
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        [$(::std::ffi::OsString::from($a)),*]
    };
}

// ---------------------------------------------------------------------------------------
// Running the binary
// ---------------------------------------------------------------------------------------

/// Config directory used when a test does not pass its own `HETCH_CONFIG_DIR`: it
/// keeps the binary away from the real `~/.config`. One per test (libtest names each
/// test's thread after it) in each process: keys learned on first use by one test
/// (the service tests' clients learn them) must not meet another test's server on
/// the same reused port, now that every module shares one test process.
fn default_config_dir() -> PathBuf {
    let thread = std::thread::current();
    let test: String = thread
        .name()
        .unwrap_or("main")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let name = format!("hetch-e2e-config-{}-{test}", std::process::id());
    let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&p).expect("create default config dir");
    p
}

/// Says that a check cannot run on this machine, and why: the calling test leaves that
/// part out (and says so on stderr). Where `HETCH_REQUIRE_ALL` is set, as the full
/// tier (`bash test.sh`, which provisions every tool first) sets it, leaving a check
/// out is a failure instead: there a missing tool is a broken set-up, not a pass.
pub fn skipped(what: impl std::fmt::Display) {
    assert!(
        std::env::var_os("HETCH_REQUIRE_ALL").is_none(),
        "cannot run here, and HETCH_REQUIRE_ALL is set: {what}"
    );
    eprintln!("SKIPPED: {what}");
}

/// The result of a finished command.
pub struct Out {
    /// What was run (for messages).
    pub cmd: String,
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "command: {}\nstatus: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--------------",
            self.cmd, self.status, self.stdout, self.stderr
        )
    }
}

impl Out {
    /// The exit code (`None` if killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Asserts exit code 0.
    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert_eq!(self.code(), Some(0), "expected success\n{self:?}");
        self
    }

    /// Asserts the given exit code.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code(),
            Some(code),
            "expected exit code {code}\n{self:?}"
        );
        self
    }

    /// Asserts a non-zero exit code (and that the process was not killed).
    #[track_caller]
    pub fn failed(&self) -> &Self {
        let c = self.code();
        assert!(
            matches!(c, Some(n) if n != 0),
            "expected a non-zero exit code\n{self:?}"
        );
        self
    }

    /// Non-empty lines of stderr.
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect()
    }

    /// Asserts that stderr holds exactly one line and returns it.
    #[track_caller]
    pub fn one_line(&self) -> &str {
        let lines = self.stderr_lines();
        assert_eq!(
            lines.len(),
            1,
            "expected exactly one line on stderr\n{self:?}"
        );
        lines[0]
    }

    /// Asserts exactly one line on stderr that contains every one of `needles`.
    #[track_caller]
    pub fn one_line_naming(&self, needles: &[&str]) -> &str {
        let line = self.one_line();
        for n in needles {
            assert!(
                line.contains(n),
                "the error line does not name {n:?}: {line:?}\n{self:?}"
            );
        }
        line
    }

    /// The JSON summary printed on stdout (the last non-empty line).
    #[track_caller]
    pub fn json(&self) -> Summary {
        Summary::from_value(&self.json_value(), self)
    }

    /// The `--json` summary (the last line of stdout), whole.
    #[track_caller]
    pub fn json_value(&self) -> serde_json::Value {
        let line = self
            .stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_else(|| panic!("no JSON on stdout\n{self:?}"));
        serde_json::from_str(line).unwrap_or_else(|e| panic!("stdout is not JSON ({e})\n{self:?}"))
    }
}

/// The fields of `--json` output the tests care about.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Files (and symlinks) written.
    pub files: u64,
    /// Payload bytes transferred.
    pub bytes: u64,
    /// Entries skipped because they were already there.
    pub skipped: u64,
    /// Files that failed.
    pub failed: u64,
    /// Blocks re-sent after failing their check.
    pub retried_blocks: u64,
    /// Journaled blocks of a resumed part file read back and found intact.
    pub reverified_blocks: u64,
    /// Duration.
    pub seconds: f64,
}

impl Summary {
    #[track_caller]
    fn from_value(v: &serde_json::Value, out: &Out) -> Summary {
        let int = |k: &str| {
            v.get(k).and_then(|x| x.as_u64()).unwrap_or_else(|| {
                panic!("JSON field {k:?} missing or not an integer: {v}\n{out:?}")
            })
        };
        let seconds = v
            .get("seconds")
            .and_then(|x| x.as_f64())
            .unwrap_or_else(|| {
                panic!("JSON field \"seconds\" missing or not a number: {v}\n{out:?}")
            });
        assert!(seconds >= 0.0 && seconds.is_finite(), "bad seconds in {v}");
        Summary {
            files: int("files"),
            bytes: int("bytes"),
            skipped: int("skipped"),
            failed: int("failed"),
            retried_blocks: int("retried_blocks"),
            reverified_blocks: int("reverified_blocks"),
            seconds,
        }
    }
}

/// A running `hetch` process whose output is being collected.
pub struct Running {
    /// What was run.
    pub cmd: String,
    /// The process.
    pub child: Child,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
    /// What the process wrote to stderr so far.
    stderr_seen: Arc<Mutex<Vec<u8>>>,
}

/// Reads `r` to its end on a thread, keeping what arrived so far in `seen`.
fn collect(mut r: impl Read + Send + 'static, seen: Arc<Mutex<Vec<u8>>>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = r.read(&mut chunk) {
            if n == 0 {
                break;
            }
            seen.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&seen.lock().unwrap()).into_owned()
    })
}

/// Starts `hetch ARGS` with the environment cleaned of anything that could make the
/// test depend on the machine, plus `env`.
pub fn spawn(args: &[OsString], env: &[(&str, &str)]) -> Running {
    let (mut cmd, shown) = command(args, env);
    let mut child = cmd.spawn().expect("spawn hetch");
    let stdout = collect(child.stdout.take().expect("stdout"), Arc::default());
    let stderr_seen = Arc::new(Mutex::new(Vec::new()));
    let stderr = collect(child.stderr.take().expect("stderr"), stderr_seen.clone());
    Running {
        cmd: shown,
        child,
        stdout: Some(stdout),
        stderr: Some(stderr),
        stderr_seen,
    }
}

/// Runs `hetch ARGS` (as [`spawn`] does) with its standard output a pipe whose
/// reader is closed before the command writes anything, as `hetch ARGS | true` runs
/// it; its stdout is empty.
pub fn with_stdout_closed(args: &[OsString], env: &[(&str, &str)]) -> Out {
    with_outputs(args, env, Output::ClosedPipe, Output::Captured)
}

/// Where [`with_outputs`] sends a standard output or error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// A pipe read to the end: what was written is in the [`Out`].
    Captured,
    /// A pipe whose reader is closed before the command writes anything (`| true`).
    ClosedPipe,
    /// `/dev/full`: every write fails with "no space left on device".
    DevFull,
}

/// Runs `hetch ARGS` (as [`spawn`] does) with its standard output and error as
/// `stdout` and `stderr` say; what is not captured is empty in the [`Out`].
pub fn with_outputs(
    args: &[OsString],
    env: &[(&str, &str)],
    stdout: Output,
    stderr: Output,
) -> Out {
    let (mut cmd, shown) = command(args, env);
    let full = || {
        File::options()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full")
    };
    if stdout == Output::DevFull {
        cmd.stdout(full());
    }
    if stderr == Output::DevFull {
        cmd.stderr(full());
    }
    let mut child = cmd.spawn().expect("spawn hetch");
    let read = |pipe: Option<Box<dyn Read + Send>>, how| match (pipe, how) {
        (Some(p), Output::Captured) => Some(collect(p, Arc::default())),
        _ => None, // dropped: a closed pipe
    };
    let out = read(child.stdout.take().map(|p| Box::new(p) as _), stdout);
    let err = read(child.stderr.take().map(|p| Box::new(p) as _), stderr);
    let deadline = Instant::now() + COMMAND_LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("hung: `{shown}` did not finish within {COMMAND_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let text = |h: Option<JoinHandle<String>>| h.map(|h| h.join().unwrap_or_default());
    Out {
        cmd: shown,
        status,
        stdout: text(out).unwrap_or_default(),
        stderr: text(err).unwrap_or_default(),
    }
}

/// The command `hetch ARGS` (or `hetch-lab ARGS`) with the environment cleaned of
/// anything that could make the test depend on the machine, plus `env`, its output
/// piped; and how it is shown in messages.
fn command(args: &[OsString], env: &[(&str, &str)]) -> (Command, String) {
    let lab = args
        .first()
        .is_some_and(|a| LAB_COMMANDS.iter().any(|c| a == *c));
    let mut cmd = match lab {
        true => Command::new(lab_bin()),
        false => Command::new(BIN),
    };
    cmd.args(args)
        .env("HETCH_BIN", BIN)
        .env_remove("HETCH_TOKEN")
        .env_remove("HETCH_FAULT_CORRUPT_BLOCKS")
        .env_remove("HETCH_FAULT_CORRUPT_WRITTEN")
        .env_remove("XDG_CONFIG_HOME")
        .env("HETCH_CONFIG_DIR", default_config_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let shown = format!(
        "{}{} {}",
        env.iter()
            .map(|(k, v)| format!("{k}={v} "))
            .collect::<String>(),
        if lab { "hetch-lab" } else { "hetch" },
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    );
    (cmd, shown)
}

impl Running {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the process wrote to stderr so far.
    pub fn stderr_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stderr_seen.lock().unwrap()).into_owned()
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }

    /// SIGKILLs the process (no cleanup of any kind can run) and reaps it, so that
    /// what it held (a listening port) is free once this returns, even on a loaded
    /// machine where dying takes a while.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the end (at most [`COMMAND_LIMIT`], then kills and panics).
    pub fn wait(self) -> Out {
        self.wait_at_most(COMMAND_LIMIT)
    }

    /// Waits for the end (at most `limit`, then kills and panics).
    pub fn wait_at_most(mut self, limit: Duration) -> Out {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let stderr = self
                    .stderr
                    .take()
                    .expect("stderr")
                    .join()
                    .unwrap_or_default();
                panic!(
                    "hung: `{}` did not finish within {limit:?}\nstderr:\n{stderr}",
                    self.cmd
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Out {
            cmd: self.cmd.clone(),
            status,
            stdout: self
                .stdout
                .take()
                .expect("stdout")
                .join()
                .unwrap_or_default(),
            stderr: self
                .stderr
                .take()
                .expect("stderr")
                .join()
                .unwrap_or_default(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.stdout.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `hetch ARGS` to the end (see [`spawn`]).
pub fn hetch(args: &[OsString], env: &[(&str, &str)]) -> Out {
    spawn(args, env).wait()
}

/// Waits until `cond` holds (at most [`COMMAND_LIMIT`]), checking every 20 ms.
#[track_caller]
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + COMMAND_LIMIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the tests run as root (then permissions do not stop reads).
pub fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("run id -u");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

// ---------------------------------------------------------------------------------------
// The server under test
// ---------------------------------------------------------------------------------------

/// A `hetch serve` process on 127.0.0.1 and an OS-chosen port, killed on drop.
pub struct Server {
    child: Child,
    /// `127.0.0.1:PORT` as printed by the server.
    pub addr: String,
    /// `sha256:...`
    pub fingerprint: String,
    /// The token clients must present.
    pub token: String,
    /// Where the token is.
    pub token_path: PathBuf,
    /// Served directory.
    pub root: PathBuf,
    /// Key, certificate and token.
    pub state_dir: PathBuf,
    log: Arc<Mutex<Vec<String>>>,
}

/// What a starting `hetch serve` announces on stderr (piped), read until it has said
/// all of it, which it does once it listens: its address, its fingerprint, where its
/// token is, and its log so far (kept growing by a thread until the process ends).
#[allow(clippy::type_complexity)]
pub(crate) fn announced(child: &mut Child) -> (String, String, PathBuf, Arc<Mutex<Vec<String>>>) {
    let stderr = child.stderr.take().expect("stderr");
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel::<String>();
    {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                log.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
    }
    let (mut addr, mut fingerprint, mut token_path): (
        Option<String>,
        Option<String>,
        Option<PathBuf>,
    ) = (None, None, None);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let (Some(a), Some(f), Some(t)) = (&addr, &fingerprint, &token_path) {
            return (a.clone(), f.clone(), t.clone(), log);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match rx.recv_timeout(left) {
            Ok(l) => l,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "hetch serve did not start ({e:?}); its stderr:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        if let Some(a) = line.strip_prefix("hetch serve: listening on ") {
            addr = Some(a.trim().to_string());
        } else if let Some(f) = line.strip_prefix("hetch serve: fingerprint ") {
            fingerprint = Some(f.trim().to_string());
        } else if let Some(t) = line.strip_prefix("hetch serve: token in ") {
            token_path = Some(PathBuf::from(t.trim()));
        }
    }
}

impl Server {
    /// Serves `root` with its identity in `state_dir`.
    pub fn start(root: &Path, state_dir: &Path) -> Server {
        Server::start_with(root, state_dir, &[], &[])
    }

    /// Serves `root` with extra flags and environment.
    pub fn start_with(
        root: &Path,
        state_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        Server::start_limited(root, state_dir, extra, env, None)
    }

    /// [`Server::start_with`], with its open-file limit (soft and hard) at `nofile`
    /// when given, as an operator's `ulimit -n` or systemd's `LimitNOFILE` sets it.
    pub fn start_limited(
        root: &Path,
        state_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        nofile: Option<u64>,
    ) -> Server {
        if !root.to_string_lossy().starts_with("s3://") {
            std::fs::create_dir_all(root).expect("create server root");
        }
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg("--root")
            .arg(root)
            .args(["--state-dir"])
            .arg(state_dir)
            // A test that restarts a server on its old address passes its own --listen.
            .args(if extra.contains(&"--listen") {
                &[][..]
            } else {
                &["--listen", "127.0.0.1:0"][..]
            })
            .args(extra)
            .env_remove("HETCH_TOKEN")
            .env_remove("HETCH_FAULT_CORRUPT_BLOCKS")
            .env_remove("HETCH_FAULT_CORRUPT_WRITTEN")
            .env_remove("XDG_CONFIG_HOME")
            .env("HETCH_CONFIG_DIR", default_config_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            let lim = libc::rlimit {
                rlim_cur: n,
                rlim_max: n,
            };
            // SAFETY: between fork and exec only setrlimit runs, which is
            // async-signal-safe and reads the struct copied into the closure.
            unsafe {
                cmd.pre_exec(move || match libc::setrlimit(libc::RLIMIT_NOFILE, &lim) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                });
            }
        }
        let mut child = cmd.spawn().expect("spawn hetch serve");
        let (addr, fingerprint, token_path, log) = announced(&mut child);
        let token = std::fs::read_to_string(&token_path)
            .unwrap_or_else(|e| panic!("read token {}: {e}", token_path.display()))
            .trim()
            .to_string();
        assert!(
            fingerprint.starts_with("sha256:"),
            "odd fingerprint {fingerprint:?}"
        );
        Server {
            child,
            addr,
            fingerprint,
            token,
            token_path,
            root: root.to_path_buf(),
            state_dir: state_dir.to_path_buf(),
            log,
        }
    }

    /// `hetch://ADDR/path`.
    pub fn url(&self, path: &str) -> String {
        format!("hetch://{}/{}", self.addr, path)
    }

    /// One tree copied the three ways a copy can go, each as (`cp` arguments, where
    /// the copy lands, what it copies): locally (`src` to `dir/local`), pushed (`src`
    /// to this server's `pushed`) and pulled (this server's `offered` to
    /// `dir/pulled`), `flags` first. The caller makes the tree at `src` and at
    /// `offered` below the served root.
    pub fn three_ways(
        &self,
        dir: &Path,
        src: &Path,
        flags: &[&str],
    ) -> [(Vec<OsString>, PathBuf, PathBuf); 3] {
        let with = |from: OsString, to: OsString| -> Vec<OsString> {
            flags.iter().map(OsString::from).chain([from, to]).collect()
        };
        let (local, pulled) = (dir.join("local"), dir.join("pulled"));
        [
            (
                with(src.into(), local.clone().into()),
                local,
                src.to_path_buf(),
            ),
            (
                with(src.into(), self.url("pushed").into()),
                self.root.join("pushed"),
                src.to_path_buf(),
            ),
            (
                with(self.url("offered").into(), pulled.clone().into()),
                pulled,
                self.root.join("offered"),
            ),
        ]
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port in address")
    }

    /// Runs `hetch cp --fingerprint FP -q ARGS` with the server's token.
    pub fn cp(&self, args: &[OsString]) -> Out {
        self.cp_env(args, &[])
    }

    /// Like [`Server::cp`] with extra environment.
    pub fn cp_env(&self, args: &[OsString], env: &[(&str, &str)]) -> Out {
        self.spawn_cp(args, env).wait()
    }

    /// Runs `hetch cp -q --fingerprint FP --token-file FILE ARGS`, with no token in the
    /// environment.
    pub fn cp_token_file(&self, token_file: &Path, args: &[OsString]) -> Out {
        let mut full = Vec::from(args![
            "cp",
            "-q",
            "--fingerprint",
            &self.fingerprint,
            "--token-file",
            token_file
        ]);
        full.extend(args.iter().cloned());
        hetch(&full, &[])
    }

    /// Starts `hetch watch --fingerprint FP ARGS` with the server's token.
    pub fn spawn_watch(&self, args: &[OsString]) -> Running {
        let mut full = Vec::from(args!["watch", "--fingerprint", &self.fingerprint]);
        full.extend(args.iter().cloned());
        spawn(&full, &[("HETCH_TOKEN", self.token.as_str())])
    }

    /// Starts `hetch cp --fingerprint FP -q ARGS` with the server's token.
    pub fn spawn_cp(&self, args: &[OsString], env: &[(&str, &str)]) -> Running {
        let mut full = Vec::from(args!["cp", "--fingerprint", &self.fingerprint, "-q"]);
        full.extend(args.iter().cloned());
        let mut e = vec![("HETCH_TOKEN", self.token.as_str())];
        e.extend_from_slice(env);
        spawn(&full, &e)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the server process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// SIGKILLs the server and reaps it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What the server printed so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The `--metrics` address it printed (`HOST:PORT`; printed before the lines
    /// [`Server::start_with`] waits for).
    pub fn metrics_addr(&self) -> String {
        let log = self.log();
        log.lines()
            .find_map(|l| l.strip_prefix("hetch serve: metrics on http://"))
            .and_then(|a| a.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("no metrics address in\n{log}"))
            .to_string()
    }
}

/// `hetch cp -q --json` from server `a` to server `b`, with `a`'s token in the
/// environment, `b`'s in a file, and both keys pinned; `extra` goes before the operands.
pub fn relay_args(a: &Server, b: &Server, from: &str, to: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "cp",
        "-q",
        "--json",
        "--fingerprint",
        &a.fingerprint,
        "--dest-fingerprint",
        &b.fingerprint,
        "--dest-token-file",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(b.token_path.display().to_string());
    v.extend(extra.iter().map(|s| s.to_string()));
    v.push(a.url(from));
    v.push(b.url(to));
    v
}

pub fn os_args(v: &[String]) -> Vec<std::ffi::OsString> {
    v.iter().map(Into::into).collect()
}

/// `GET http://ADDR/metrics`: the body as Prometheus parses it, and as it is. Panics
/// unless it is served as the text format, and all of it parses.
pub fn scrape(addr: &str) -> (hetch_testkit::prometheus::Scrape, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
    s.set_read_timeout(Some(COMMAND_LIMIT)).unwrap();
    let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not HTTP: {answer}"));
    assert!(head.starts_with("HTTP/1.1 200 "), "{answer}");
    let kind = "content-type: text/plain; version=0.0.4; charset=utf-8";
    assert!(head.to_ascii_lowercase().contains(kind), "{head}");
    (
        hetch_testkit::prometheus::Scrape::parse(body),
        body.to_string(),
    )
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

// ---------------------------------------------------------------------------------------
// Deterministic trees
// ---------------------------------------------------------------------------------------

pub use hetch_testkit::data::{random_bytes, write_random, Rng};

/// Builds a directory tree under a root; every method panics on failure.
pub struct Tree {
    /// The root.
    pub root: PathBuf,
}

impl Tree {
    /// A tree rooted at `root` (created).
    pub fn new(root: impl Into<PathBuf>) -> Tree {
        let root = root.into();
        std::fs::create_dir_all(&root).expect("create tree root");
        Tree { root }
    }

    /// `root/rel`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn parent_of(&self, rel: &str) -> PathBuf {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("create parent dirs");
        }
        p
    }

    /// A directory (and its parents).
    pub fn dir(&self, rel: &str) -> &Tree {
        std::fs::create_dir_all(self.path(rel)).expect("create dir");
        self
    }

    /// A file of `len` pseudo-random bytes.
    pub fn file(&self, rel: &str, len: u64, seed: u64) -> &Tree {
        write_random(&self.parent_of(rel), len, seed);
        self
    }

    /// A file with exactly these bytes.
    pub fn bytes(&self, rel: &str, data: &[u8]) -> &Tree {
        std::fs::write(self.parent_of(rel), data).expect("write file");
        self
    }

    /// A sparse file of `len` bytes whose last bytes are `tail`.
    pub fn sparse(&self, rel: &str, len: u64, tail: &[u8]) -> &Tree {
        use std::os::unix::fs::FileExt;
        let f = File::create(self.parent_of(rel)).expect("create sparse file");
        f.set_len(len).expect("set_len");
        f.write_all_at(tail, len - tail.len() as u64)
            .expect("write tail");
        self
    }

    /// A symbolic link at `rel` pointing at `target` (not resolved).
    pub fn symlink(&self, rel: &str, target: &str) -> &Tree {
        std::os::unix::fs::symlink(target, self.parent_of(rel)).expect("create symlink");
        self
    }

    /// Sets permission bits.
    pub fn mode(&self, rel: &str, mode: u32) -> &Tree {
        std::fs::set_permissions(self.path(rel), std::fs::Permissions::from_mode(mode))
            .expect("chmod");
        self
    }

    /// Sets the modification time of a file or directory.
    pub fn mtime(&self, rel: &str, secs: u64, nanos: u32) -> &Tree {
        set_mtime(&self.path(rel), secs, nanos);
        self
    }
}

/// Sets the modification time of a file or directory (follows symlinks).
pub fn set_mtime(path: &Path, secs: u64, nanos: u32) {
    let t = SystemTime::UNIX_EPOCH + Duration::new(secs, nanos);
    let f = File::options()
        .read(true)
        .open(path)
        .or_else(|_| File::open(path))
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    f.set_modified(t)
        .unwrap_or_else(|e| panic!("set mtime of {}: {e}", path.display()));
}

/// Number of levels of the deep chain in [`mixed_tree`].
pub const DEEP: usize = 20;

/// Relative path of the file at the bottom of the deep chain.
pub fn deep_file() -> String {
    let mut p = String::new();
    for i in 0..DEEP {
        p.push_str(&format!("level{i:02}/"));
    }
    p.push_str("bottom.txt");
    p
}

/// Size of the large multi-block file in [`mixed_tree`]: 16 blocks of 64 KiB + 17 bytes.
pub const BIG: u64 = (1 << 20) + 17;
/// Size of the sparse file in [`mixed_tree`].
pub const SPARSE: u64 = 64 << 20;
/// Block size used with [`mixed_tree`].
pub const BLOCK: &str = "64K";

/// The reference tree of the transfer tests: deep nesting, empty files and an empty
/// directory, a 64 MiB sparse file with a few bytes at the end, a multi-block file,
/// files of exactly one block and one block plus one byte, unicode names, symlinks
/// (relative, to a directory, dangling, absolute dangling), unusual modes and mtimes.
pub fn mixed_tree(root: &Path) -> Tree {
    let t = Tree::new(root);
    t.file(&deep_file(), 321, 1)
        .bytes("empty.txt", b"")
        .bytes("sub/empty-too", b"")
        .dir("empty_dir")
        .sparse("sparse.img", SPARSE, b"the end of a sparse file\n")
        .file("big.bin", BIG, 2)
        .file("edge/one-block", 64 << 10, 3)
        .file("edge/one-block-plus-one", (64 << 10) + 1, 4)
        .file("héllo wörld.txt", 1000, 5)
        .file("日本語/ファイル 📁.txt", 2000, 6)
        .file("Ελληνικά/ñandú (1).bin", 3000, 7)
        .file("sub/file.txt", 5000, 8)
        .file("sub/run.sh", 100, 9)
        .mode("sub/run.sh", 0o755)
        .file("sub/private", 100, 10)
        .mode("sub/private", 0o600)
        .file("old.txt", 77, 11)
        .mtime("old.txt", 1_500_000_000, 123_456_789)
        .file("restricted/inside", 10, 12)
        .mode("restricted", 0o750)
        .symlink("link-rel", "sub/file.txt")
        .symlink("link-dir", "level00")
        .symlink("link-dangling", "no/such/target")
        .symlink("link-abs-dangling", "/nonexistent-hetch-test/target")
        .symlink("sub/link-up", "../big.bin");
    t.mtime("level00", 1_400_000_000, 5);
    t
}

// ---------------------------------------------------------------------------------------
// Comparing trees
// ---------------------------------------------------------------------------------------

/// What an entry is, with what identifies its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A regular file: size and BLAKE3 of the contents.
    File {
        /// Size.
        size: u64,
        /// BLAKE3, hex.
        hash: String,
    },
    /// A directory.
    Dir,
    /// A symlink and its target.
    Symlink(PathBuf),
    /// A FIFO, socket or device: its type bits (`S_IFMT`) and device number.
    Special {
        /// `st_mode & S_IFMT`.
        file_type: u32,
        /// `st_rdev`.
        rdev: u64,
    },
}

/// One entry of a [`snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Kind and contents.
    pub kind: Kind,
    /// Permission bits (`None` for symlinks, whose mode means nothing).
    pub mode: Option<u32>,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, i64),
}

/// BLAKE3 of a file's contents.
pub fn hash_file(path: &Path) -> String {
    let f = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut h = blake3::Hasher::new();
    h.update_reader(f)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    h.finalize().to_hex().to_string()
}

/// Every entry under `root` (the root itself as ""), keyed by relative path, without
/// following symlinks.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    snap(root, Path::new(""), &mut out);
    out
}

fn snap(abs: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Entry>) {
    let md =
        std::fs::symlink_metadata(abs).unwrap_or_else(|e| panic!("lstat {}: {e}", abs.display()));
    let ft = md.file_type();
    let mtime = (md.mtime(), md.mtime_nsec());
    let mode = Some(md.mode() & 0o7777);
    let entry = if ft.is_symlink() {
        Entry {
            kind: Kind::Symlink(std::fs::read_link(abs).expect("readlink")),
            mode: None,
            mtime,
        }
    } else if ft.is_dir() {
        let mut names: Vec<_> = std::fs::read_dir(abs)
            .unwrap_or_else(|e| panic!("read_dir {}: {e}", abs.display()))
            .map(|e| e.expect("dir entry").file_name())
            .collect();
        names.sort();
        for n in names {
            snap(&abs.join(&n), &rel.join(&n), out);
        }
        Entry {
            kind: Kind::Dir,
            mode,
            mtime,
        }
    } else if ft.is_file() {
        Entry {
            kind: Kind::File {
                size: md.len(),
                hash: hash_file(abs),
            },
            mode,
            mtime,
        }
    } else {
        Entry {
            kind: Kind::Special {
                file_type: md.mode() & libc::S_IFMT,
                rdev: md.rdev(),
            },
            mode,
            mtime,
        }
    };
    out.insert(rel.to_path_buf(), entry);
}

/// Asserts that two trees are identical: same entries, contents (BLAKE3), modes, mtimes
/// and symlink targets, including the roots' own mode and mtime.
#[track_caller]
pub fn assert_same_tree(expected: &Path, actual: &Path) {
    let a = snapshot(expected);
    let b = snapshot(actual);
    assert_same_snapshot(
        &a,
        &b,
        &format!("{} vs {}", expected.display(), actual.display()),
    );
}

/// Asserts that two snapshots are identical, listing the differences.
#[track_caller]
pub fn assert_same_snapshot(
    a: &BTreeMap<PathBuf, Entry>,
    b: &BTreeMap<PathBuf, Entry>,
    what: &str,
) {
    let mut diffs = Vec::new();
    for (p, ea) in a {
        match b.get(p) {
            None => diffs.push(format!("missing: {p:?} ({ea:?})")),
            Some(eb) if eb != ea => {
                diffs.push(format!("differs: {p:?}\n   want {ea:?}\n   got  {eb:?}"))
            }
            Some(_) => {}
        }
    }
    for p in b.keys() {
        if !a.contains_key(p) {
            diffs.push(format!("extra: {p:?} ({:?})", b[p]));
        }
    }
    if !diffs.is_empty() {
        let n = diffs.len();
        diffs.truncate(30);
        panic!(
            "trees differ ({what}), {n} differences:\n{}",
            diffs.join("\n")
        );
    }
}

/// Number of files and symlinks in a tree (what a transfer counts as files).
pub fn count_files(root: &Path) -> u64 {
    snapshot(root)
        .values()
        .filter(|e| !matches!(e.kind, Kind::Dir))
        .count() as u64
}

/// Total size of the regular files in a tree.
pub fn total_bytes(root: &Path) -> u64 {
    snapshot(root)
        .values()
        .map(|e| match e.kind {
            Kind::File { size, .. } => size,
            _ => 0,
        })
        .sum()
}

/// Every path under `root` with its type (symlinks are not followed).
pub fn paths_under(root: &Path) -> Vec<(PathBuf, std::fs::FileType)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            }
            out.push((e.path(), t));
        }
    }
    out
}

/// hetch's temporary files (`.NAME.hetch-part`, `.NAME.hetch-journal`) under `root`.
pub fn temp_files(root: &Path) -> Vec<PathBuf> {
    paths_under(root)
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.ends_with(".hetch-part") || name.ends_with(".hetch-journal")
        })
        .collect()
}

/// Journal layout (crates/storage/src/journal.rs): a 40-byte header, then one 44-byte
/// record per verified block.
pub const JOURNAL_HEADER: u64 = 40;
/// See [`JOURNAL_HEADER`].
pub const JOURNAL_RECORD: u64 = 44;

/// `.NAME.hetch-journal` next to `final_path`.
pub fn journal_of(final_path: &Path) -> PathBuf {
    let name = final_path.file_name().unwrap().to_string_lossy();
    final_path.with_file_name(format!(".{name}.hetch-journal"))
}

/// `.NAME.hetch-part` next to `final_path`.
pub fn part_of(final_path: &Path) -> PathBuf {
    let name = final_path.file_name().unwrap().to_string_lossy();
    final_path.with_file_name(format!(".{name}.hetch-part"))
}

/// Verified blocks the journal of `final_path` records (0 while there is none).
pub fn journal_records(final_path: &Path) -> u64 {
    std::fs::metadata(journal_of(final_path))
        .map(|m| m.len().saturating_sub(JOURNAL_HEADER) / JOURNAL_RECORD)
        .unwrap_or(0)
}

/// Asserts that no temporary files are left under `root`.
#[track_caller]
pub fn assert_no_temp_files(root: &Path) {
    let t = temp_files(root);
    assert!(t.is_empty(), "temporary files left behind: {t:?}");
}

/// Bytes actually allocated on disk for a file.
pub fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).expect("stat").blocks() * 512
}

/// A temporary directory (removed on drop).
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hetch-e2e-")
        .tempdir()
        .expect("tempdir")
}

/// `path` as an `OsStr` with a trailing `/`.
pub fn with_slash(path: &Path) -> OsString {
    let mut s = path.as_os_str().to_os_string();
    s.push("/");
    s
}

/// Lossy string of a path, for `contains` checks on messages.
pub fn shown(path: &Path) -> String {
    path.display().to_string()
}

/// Shorthand for `OsStr::new`.
pub fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// A file system mounted for a test (root only), unmounted on drop.
pub struct Mount {
    /// The mount point.
    pub dir: PathBuf,
}

impl Mount {
    /// A tmpfs of `size` (e.g. "1m") at `dir`, for disk-full tests; `None` (with a
    /// SKIPPED line) where mounting is not permitted.
    pub fn tmpfs(dir: &Path, size: &str) -> Option<Mount> {
        std::fs::create_dir_all(dir).unwrap();
        let size = format!("size={size}");
        Mount::run(dir, &["-t", "tmpfs", "-o", &size, "tmpfs"])
    }

    /// `dir` bound read-only onto itself (its contents stay visible, writes fail with
    /// EROFS); `None` (with a SKIPPED line) where mounting is not permitted.
    pub fn read_only(dir: &Path) -> Option<Mount> {
        std::fs::create_dir_all(dir).unwrap();
        let m = Mount::run(dir, &["--bind", &dir.to_string_lossy()])?;
        // A first bind ignores "ro" on older kernels: the remount makes it stick.
        let remounted = Command::new("mount")
            .args(["-o", "remount,bind,ro"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        let probe = dir.join(".hetch-test-probe");
        if !remounted || std::fs::write(&probe, b"x").is_ok() {
            let _ = std::fs::remove_file(&probe);
            skipped(format_args!("cannot make {} read-only", dir.display()));
            return None;
        }
        Some(m)
    }

    fn run(dir: &Path, args: &[&str]) -> Option<Mount> {
        if !is_root() {
            skipped("mounting needs root");
            return None;
        }
        let ok = Command::new("mount")
            .args(args)
            .arg(dir)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !ok {
            skipped(format_args!("cannot mount {args:?} at {}", dir.display()));
            return None;
        }
        Some(Mount {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// Files under `root` with their BLAKE3, by relative path, sorted.
pub fn contents(root: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = snapshot(root)
        .into_iter()
        .filter_map(|(p, e)| match e.kind {
            Kind::File { hash, .. } => Some((p.display().to_string(), hash)),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

pub fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in a path")
}

/// The extended attributes of `path` (not following a symlink), by name.
pub fn xattrs(path: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let c = c_path(path);
    let mut out = BTreeMap::new();
    // SAFETY: a valid path; a null buffer of size 0 asks for the size.
    let n = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
    assert!(
        n >= 0,
        "llistxattr {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    let mut names = vec![0u8; n as usize];
    // SAFETY: the buffer holds `names.len()` bytes.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "llistxattr {}", path.display());
    names.truncate(n as usize);
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cn = CString::new(name).unwrap();
        // SAFETY: valid path and name; size query.
        let len = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), std::ptr::null_mut(), 0) };
        assert!(len >= 0, "lgetxattr {}", path.display());
        let mut value = vec![0u8; len as usize];
        // SAFETY: the buffer holds `value.len()` bytes.
        let len = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                cn.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        assert!(len >= 0, "lgetxattr {}", path.display());
        value.truncate(len as usize);
        out.insert(name.to_vec(), value);
    }
    out
}

pub fn run_tool(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    let (c, n) = (c_path(path), CString::new(name).unwrap());
    // SAFETY: valid path, name and value buffer.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "lsetxattr {name} on {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

pub fn remove_xattr(path: &Path, name: &str) {
    let (c, n) = (c_path(path), CString::new(name).unwrap());
    // SAFETY: valid path and name.
    let r = unsafe { libc::lremovexattr(c.as_ptr(), n.as_ptr()) };
    assert_eq!(r, 0, "lremovexattr {name} on {}", path.display());
}
