//! Servers started once per test process and shared by its tests: a suite whose every
//! case needs a MinIO, a fake-gcs-server or an Azurite starts each on first use and
//! gives each case a bucket of its own, instead of a server per case.
//!
//! The catch is the end: a server kept in a `static` is never dropped, so nothing in
//! the test process stops it. [`watchdog`] runs the server under a small shell that
//! waits on its stdin, a pipe whose writing end only the test process holds. However
//! the process ends (the last test done, a panic, Ctrl-C, `kill -9`), the kernel closes
//! that end; the shell's `read` returns, it kills the server and removes the server's
//! directory. (`PR_SET_PDEATHSIG` would not do: it fires when the *thread* that spawned
//! the child ends, and libtest runs each test on a thread of its own.)
//!
//! ```ignore
//! fn gcs() -> &'static Emulator {
//!     static GCS: Shared<Emulator> = Shared::new();
//!     GCS.get_or_start(|| {
//!         let dir = shared::dir("gcs")?;
//!         // ... build the server's `Command`, then spawn it wrapped:
//!         let child = shared::watchdog(&cmd, &dir).stdout(log).spawn()?;
//!         // ... keep `child` (it holds the pipe) in what is returned.
//!     })
//! }
//! let bucket = shared::unique_name("case-"); // then create it on the server
//! ```
//!
//! [`Emulator::shared_gcs`](crate::emulators::Emulator::shared_gcs) and
//! [`Emulator::shared_azurite`](crate::emulators::Emulator::shared_azurite) are built
//! this way.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The watchdog: `$1` is the server's directory, the rest its command line.
///
/// - Its own stdin (the test process's pipe) is moved to fd 3 and replaced by
///   /dev/null, so that the server can never read (or hold) the pipe.
/// - A background reader waits for the pipe's end of file, then kills the server with
///   SIGKILL: its directory is removed next, so a graceful shutdown would save nothing,
///   and Azurite takes minutes to finish one. `HETCH_WATCHDOG_SIGNAL` in the
///   watchdog's environment names another signal ([`watchdog_with_signal`]).
/// - The foreground waits for the server and then leaves `.exited` in the directory:
///   the reader removes the directory only once the server is gone (and, as the
///   marker appears only after the server was reaped, never signals a recycled pid).
///   The shell exits with the server, so a caller polling the child (say, for a server
///   that exits at start) sees the exit; the reader stays to clean up at the end.
const SCRIPT: &str = r#"dir=$1; shift
exec 3<&0 </dev/null
"$@" 3<&- &
p=$!
{
    read _ <&3
    [ -e "$dir/.exited" ] || kill -"${HETCH_WATCHDOG_SIGNAL:-KILL}" "$p"
    n=0
    while [ ! -e "$dir/.exited" ] && [ "$n" -lt 200 ]; do sleep 0.05; n=$((n + 1)); done
    rm -rf "$dir"
} 2>/dev/null &
exec 3<&-
wait "$p"
s=$?
: >"$dir/.exited" 2>/dev/null
exit "$s"
"#;

/// `server` (its program, arguments, environment and working directory) wrapped in a
/// watchdog that kills it and removes `dir` when this process ends, however it ends.
///
/// The returned command (`sh`) has its stdin piped; set its stdout and stderr as the
/// server's and spawn it. Keep the [`Child`](std::process::Child) for as long as the
/// server should run: it holds the pipe's writing end (`child.stdin`), and dropping
/// that end stops the server, as the process's end does (and so does
/// [`Child::wait`](std::process::Child::wait), which closes stdin first: poll with
/// `try_wait`). `server`'s own stdio settings
/// are not carried over (the server's stdin is /dev/null), nor an `env_clear`.
///
/// The command runs in a process group of its own, so that a Ctrl-C at the terminal
/// reaches only the test process: the watchdog then cleans up as its pipe closes,
/// rather than dying with the terminal's group before it could.
pub fn watchdog(server: &Command, dir: &Path) -> Command {
    use std::os::unix::process::CommandExt;
    let mut w = Command::new("sh");
    w.arg("-c")
        .arg(SCRIPT)
        .arg("hetch-watchdog")
        .arg(dir)
        .arg(server.get_program())
        .args(server.get_args());
    for (k, v) in server.get_envs() {
        match v {
            Some(v) => w.env(k, v),
            None => w.env_remove(k),
        };
    }
    if let Some(d) = server.get_current_dir() {
        w.current_dir(d);
    }
    w.stdin(Stdio::piped()).process_group(0);
    w
}

/// [`watchdog`], stopping the server with signal `signal` (a name `kill` takes:
/// `QUIT` for PostgreSQL, whose immediate shutdown also frees its shared memory,
/// where SIGKILL would leave it behind).
pub fn watchdog_with_signal(server: &Command, dir: &Path, signal: &str) -> Command {
    let mut w = watchdog(server, dir);
    w.env("HETCH_WATCHDOG_SIGNAL", signal);
    w
}

/// A fresh temporary directory for a shared server `name` (`hetch-NAME-XXXXXX` in the
/// system's temporary directory), not removed by this process: hand it to
/// [`watchdog`], which removes it at the end.
pub fn dir(name: &str) -> std::io::Result<PathBuf> {
    Ok(tempfile::Builder::new()
        .prefix(&format!("hetch-{name}-"))
        .tempdir()?
        .keep())
}

/// `prefix` and a number no other call in this process returned: a bucket or container
/// name of a case's own on a shared server (lowercase, digits and `-` keep it valid
/// for S3, GCS and Azure alike).
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{prefix}{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A value made on first use and kept for the rest of the process: a shared server, in
/// a `static`. A failure to make it is kept too, so that every test needing it fails
/// with the same message instead of each trying again (and waiting again).
#[derive(Debug)]
pub struct Shared<T>(OnceLock<Result<T, String>>);

impl<T> Shared<T> {
    /// Nothing made yet.
    pub const fn new() -> Shared<T> {
        Shared(OnceLock::new())
    }

    /// The value, made by `start` if no call made it before (one call at a time runs
    /// `start`; the others wait for it). Panics with `start`'s error, at every call.
    #[track_caller]
    pub fn get_or_start(&self, start: impl FnOnce() -> Result<T, String>) -> &T {
        match self.0.get_or_init(start) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }
}

impl<T> Default for Shared<T> {
    fn default() -> Shared<T> {
        Shared::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::{Duration, Instant};

    fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn alive(pid: i32) -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        unsafe { libc::kill(pid, 0) == 0 }
    }

    #[test]
    fn closing_the_pipe_kills_the_server_and_removes_its_directory() {
        let dir = dir("watchdog-test").unwrap();
        std::fs::write(dir.join("state"), b"x").unwrap();
        // The "server" reports its pid, then would run for a long time.
        let mut server = Command::new("sh");
        server.args(["-c", "echo $$ > \"$D/pid\"; exec sleep 600"]);
        server.env("D", &dir);
        let mut child = watchdog(&server, &dir).spawn().unwrap();
        let pid_file = dir.join("pid");
        wait_for("server started", || {
            std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n'))
        });
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(alive(pid));
        // Writing does not stop it; only the end of the pipe does.
        child.stdin.as_mut().unwrap().write_all(b"").unwrap();
        drop(child.stdin.take());
        wait_for("server killed", || !alive(pid));
        wait_for("directory removed", || !dir.exists());
        assert!(!child.wait().unwrap().success(), "the shell exits with it");
    }

    #[test]
    fn a_server_that_exits_ends_the_shell_and_its_directory_goes_at_the_end() {
        let dir = dir("watchdog-test").unwrap();
        let mut server = Command::new("sh");
        server.args(["-c", "exit 3"]);
        let mut child = watchdog(&server, &dir).spawn().unwrap();
        // Not `wait`: it closes the child's stdin first, which would be the end.
        wait_for("shell exited", || child.try_wait().unwrap().is_some());
        assert_eq!(child.try_wait().unwrap().unwrap().code(), Some(3));
        assert!(dir.exists(), "kept while this process holds the pipe");
        drop(child.stdin.take());
        wait_for("directory removed", || !dir.exists());
    }

    #[test]
    fn a_failed_start_is_kept() {
        let s: Shared<u32> = Shared::new();
        let first = std::panic::catch_unwind(|| *s.get_or_start(|| Err("no server".into())));
        assert!(first.is_err());
        let again = std::panic::catch_unwind(|| *s.get_or_start(|| Ok(1)));
        assert!(again.is_err(), "not started again");
        assert!(unique_name("c-") != unique_name("c-"));
    }
}
