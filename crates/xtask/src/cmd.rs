//! Running the external tools the tasks use. A failure is one line naming the command
//! and, for a captured one, the last line it wrote to stderr: CI's log shows why.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// `program args...` as a person would type it, for messages.
pub fn show(c: &Command) -> String {
    let mut s = c.get_program().to_string_lossy().into_owned();
    for a in c.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `c` with the terminal's stdout and stderr (a build's progress stays visible).
pub fn run(c: &mut Command) -> Result<()> {
    let status = c
        .status()
        .with_context(|| format!("cannot run {}", show(c)))?;
    if !status.success() {
        bail!("{} failed ({status})", show(c));
    }
    Ok(())
}

/// Runs `c` and returns its stdout; on failure, says what it wrote last on stderr.
pub fn output(c: &mut Command) -> Result<String> {
    let out = c
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", show(c)))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty());
        bail!(
            "{} failed ({}): {}",
            show(c),
            out.status,
            last.unwrap_or("no message")
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `c` and returns its stdout and stderr together, whatever its exit status
/// (`ldd` exits 1 on a static binary, which is what the check wants to see).
pub fn output_any(c: &mut Command) -> Result<String> {
    let out = c
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", show(c)))?;
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(s)
}

/// Where `prog` is on PATH, if it is.
pub fn which(prog: impl AsRef<OsStr>) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog.as_ref()))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
