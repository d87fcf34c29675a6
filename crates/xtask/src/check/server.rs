//! A `hetch serve` started by a check: waits for the lines that say where it listens,
//! which key it presents and where its token is, and is killed when dropped, so a
//! failing check leaves no server behind.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::cmd::show;

/// A running server and what a client needs to reach it.
pub struct Server {
    child: Child,
    /// HOST:PORT it listens on.
    pub addr: String,
    /// Its key fingerprint (sha256:...), for the client's --fingerprint.
    pub fingerprint: String,
    /// Its token file, as the server names it.
    pub token_file: PathBuf,
}

impl Server {
    /// Starts `cmd` (a `hetch serve`, under qemu or chroot if need be) and waits up to
    /// `timeout` for it to say it is ready.
    pub fn start(mut cmd: Command, timeout: Duration) -> Result<Server> {
        let what = show(&cmd);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {what}"))?;
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        // Reads to the end, so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let (mut addr, mut fingerprint, mut last) = (None, None, String::new());
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = match rx.recv_timeout(left) {
                Ok(l) => l,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    bail!("{what}: not ready after {} s", timeout.as_secs());
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = child.wait()?;
                    bail!("{what} exited ({status}) before it was ready: {last}");
                }
            };
            if let Some(a) = line.strip_prefix("hetch serve: listening on ") {
                addr = Some(a.trim().to_string());
            } else if let Some(f) = line.strip_prefix("hetch serve: fingerprint ") {
                fingerprint = Some(f.trim().to_string());
            } else if let Some(t) = line.strip_prefix("hetch serve: token in ") {
                // The last of the three lines.
                let (Some(addr), Some(fingerprint)) = (addr, fingerprint) else {
                    bail!("{what}: said its token before its address and key");
                };
                return Ok(Server {
                    child,
                    addr,
                    fingerprint,
                    token_file: PathBuf::from(t.trim()),
                });
            }
            last = line;
        }
    }

    /// `client cp -q` with this server's key and the token in `token_file` (the
    /// server's own, or the same file seen from outside its root); the caller adds
    /// the operands.
    pub fn cp(&self, client: &Path, token_file: &Path) -> Command {
        let mut c = Command::new(client);
        c.args([
            "cp",
            "-q",
            "--fingerprint",
            &self.fingerprint,
            "--token-file",
        ])
        .arg(token_file);
        c
    }

    /// The process id (to see whose it is).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
