//! Network namespaces: creating, entering and removing them with `ip netns`.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;

/// Runs `ip ARGS`, turning a failure into an error that quotes the command.
pub fn ip(args: &[&str]) -> std::io::Result<()> {
    run("ip", args)
}

/// Runs `PROGRAM ARGS`, turning a failure into an error that quotes the command and
/// what it printed on stderr.
pub fn run(program: &str, args: &[&str]) -> std::io::Result<()> {
    let out = Command::new(program).args(args).output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(std::io::Error::other(format!(
        "`{program} {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// Runs `f` on a new thread that has entered namespace `name`, so that what `f` creates
/// (a TUN device, a socket) lives there; the rest of the process is not moved.
pub fn in_namespace<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let path = format!("/run/netns/{name}");
    let ns =
        File::open(&path).map_err(|e| std::io::Error::new(e.kind(), format!("{path}: {e}")))?;
    std::thread::spawn(move || {
        // SAFETY: a valid namespace fd; setns affects only this thread.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        f()
    })
    .join()
    .map_err(|_| std::io::Error::other("namespace thread panicked"))?
}
