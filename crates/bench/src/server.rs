//! Running a tool's server: spawned in a process group of its own with its output in a
//! log file, waited for until it accepts connections, and stopped with the processes
//! it forked. Also the small helpers every peer needs: finding a program, reading its
//! version, dropping root.

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::net;
use crate::place::Place;
use crate::tool::ToolContext;

/// How long a server may take to accept connections before `start` gives up.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a server may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// A running peer server: the leader of its own process group.
#[derive(Debug)]
pub(crate) struct Server {
    tool: &'static str,
    child: Option<Child>,
    log: PathBuf,
}

impl Server {
    /// Spawns `cmd` for peer `tool`, its stdout and stderr appended to `log`. The
    /// command gets a process group of its own so that `stop` also ends the processes
    /// it forks per connection (GridFTP) and the `ip netns exec` wrapper.
    fn spawn(tool: &'static str, mut cmd: Command, log: &Path) -> Result<Server> {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("{tool}: cannot open log {}", log.display()))?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = cmd
            .spawn()
            .with_context(|| format!("{tool}: cannot start server {cmd:?}"))?;
        Ok(Server {
            tool,
            child: Some(child),
            log: log.to_path_buf(),
        })
    }

    /// Spawns `cmd` for `tool` (output to `log`) on the server of `ctx` and waits until
    /// it accepts connections on `port`, as seen from the client: a server is only
    /// handed out once it can be used.
    pub(crate) fn start(
        tool: &'static str,
        cmd: Command,
        log: &Path,
        ctx: &ToolContext,
        port: u16,
    ) -> Result<Server> {
        let mut server = Server::spawn(tool, cmd, log)?;
        server.wait_ready(&ctx.client, &ctx.server.addr, port)?;
        Ok(server)
    }

    /// Waits until the server accepts TCP connections on `addr:port`, as seen from
    /// `from` (the client's place, so the check also covers the route between them).
    /// Fails, stopping the server, if it exits first or is not ready within 20 s.
    fn wait_ready(&mut self, from: &Place, addr: &str, port: u16) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    // Reaped: there is no process group left to signal.
                    self.child = None;
                    bail!(
                        "{}: server exited before accepting connections ({status}); log {}:\n{}",
                        self.tool,
                        self.log.display(),
                        tail(&self.log)
                    );
                }
            }
            if net::accepts(from, addr, port) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.stop();
                bail!(
                    "{}: server not accepting connections on {addr}:{port} after {} s; log {}:\n{}",
                    self.tool,
                    READY_TIMEOUT.as_secs(),
                    self.log.display(),
                    tail(&self.log)
                );
            }
            sleep(Duration::from_millis(100));
        }
    }

    /// Stops the server: SIGTERM to its process group, SIGKILL to whatever is left of
    /// it after 5 s (or at once after the leader exits), then reaps the leader.
    /// Idempotent.
    pub(crate) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let Ok(pgid) = libc::pid_t::try_from(child.id()) else {
            return;
        };
        signal_group(pgid, libc::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while !exited(pgid) && Instant::now() < deadline {
            sleep(Duration::from_millis(50));
        }
        // The leader is not reaped yet, so its id cannot have been reused for another
        // process group: signalling the group reaches only what the server started.
        signal_group(pgid, libc::SIGKILL);
        let _ = child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends `sig` to process group `pgid`.
fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions; a negative pid names a group.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// Whether child `pid` has exited, without reaping it (WNOWAIT), so that its id stays
/// reserved until `Child::wait`.
fn exited(pid: libc::pid_t) -> bool {
    // SAFETY: siginfo_t is plain data that waitid fills in; zeroed is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let id = libc::id_t::try_from(pid).unwrap_or_default();
    // SAFETY: `info` is a valid, writable siginfo_t for the duration of the call.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            id,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: waitid succeeded, so `info` is initialised; si_pid is 0 while the child
    // still runs (WNOHANG).
    rc != 0 || unsafe { info.si_pid() } != 0
}

/// The last lines of a log, for error messages.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(12)..].join("\n")
}

/// Where `program` is installed: on `PATH`, or in the sbin directories that a root
/// shell has but a plain `PATH` may lack (sshd, globus-gridftp-server).
pub(crate) fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// `program` as an absolute path where it is installed, else as given (the spawn then
/// fails with "not found", naming it).
pub(crate) fn program(program: &str) -> String {
    find_program(program)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| program.to_string())
}

/// The first non-empty line `program args` prints (on stdout, else on stderr, where
/// `ssh -V` writes), with runs of blanks squeezed; `unknown (...)` if it cannot run.
pub(crate) fn version_line<S: AsRef<OsStr>>(program_name: &str, args: &[S]) -> String {
    let out = match Command::new(program(program_name))
        .args(args)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) => return format!("unknown ({program_name}: {e})"),
    };
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .find(|l| !l.is_empty())
        .unwrap_or_else(|| format!("unknown ({program_name} printed no version)"))
}

/// The `setpriv` arguments that run `program` as `user`:`group` but keep
/// CAP_DAC_OVERRIDE, so that it can read and write wherever root can. The GridFTP
/// server refuses anonymous access as root and xrootd refuses to run as root, yet
/// both must write into destination directories the harness (root) made inside
/// private 0700 directories; keeping this one capability beats chmod-ing the
/// harness's directories. setpriv execs, so the server stays in the process group
/// that `Server::stop` signals.
pub(crate) fn as_user(user: &str, group: &str, program_name: &str) -> Vec<String> {
    vec![
        format!("--reuid={user}"),
        format!("--regid={group}"),
        "--clear-groups".to_string(),
        "--inh-caps=+dac_override".to_string(),
        "--ambient-caps=+dac_override".to_string(),
        "--".to_string(),
        program(program_name),
    ]
}

/// A command that fails at once saying `tool` was asked to copy before `start`
/// succeeded (the trait's `copy` cannot return an error itself).
pub(crate) fn not_started(tool: &str) -> Command {
    failing(&format!("{tool}: copy called before its server started"))
}

/// A command that prints `message` on stderr and fails.
pub(crate) fn failing(message: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "echo \"$1\" >&2; exit 1", "sh", message]);
    cmd
}

/// `addr` as the host part of a URL or `user@host:` target: IPv6 in brackets.
pub(crate) fn url_host(addr: &str) -> String {
    if addr.contains(':') {
        format!("[{addr}]")
    } else {
        addr.to_string()
    }
}
