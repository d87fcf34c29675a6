//! The `hetch-lab wan` testbed, as the tests share it: it has fixed namespace names
//! (hetch-a, hetch-b, ...), so the tests that bring it up take turns ([`turn`]), take
//! it down however they end ([`Down`]) and start servers on its hosts ([`serve`]).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use super::{announced, lab_bin, skipped, BIN};

/// Why the testbed cannot run here, if it cannot: it needs root, /dev/net/tun and `ip`.
fn cannot_run() -> Option<&'static str> {
    if !super::is_root() {
        return Some("not root");
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun");
    }
    let ip = Command::new("ip").arg("-V").output();
    if !ip.is_ok_and(|o| o.status.success()) {
        return Some("no `ip` command");
    }
    None
}

/// This test's turn with the testbed (every test of the binary that brings it up takes
/// one), or `None`, having said why through [`skipped`], where it cannot run.
pub fn turn(what: &str) -> Option<MutexGuard<'static, ()>> {
    static TESTBED: Mutex<()> = Mutex::new(());
    if let Some(why) = cannot_run() {
        skipped(format_args!("{what}: {why}"));
        return None;
    }
    Some(TESTBED.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Brings the testbed down when dropped, however the test ends.
pub struct Down;

impl Drop for Down {
    fn drop(&mut self) {
        let _ = Command::new(lab_bin()).args(["wan", "down"]).output();
    }
}

/// Starts `hetch serve` on testbed host `host` (`hetch-lab wan exec`), listening on
/// `listen`, serving `root` (created), with its state and client config under `dir`;
/// returns the process and the token.
pub fn serve(
    host: &str,
    listen: &str,
    dir: &Path,
    root: &Path,
    extra: &[&str],
) -> (std::process::Child, String) {
    std::fs::create_dir_all(root).unwrap();
    let state = dir.join("state");
    let mut server = Command::new(lab_bin())
        .args(["wan", "exec", host, "--", BIN, "serve", "--listen", listen])
        .arg("--root")
        .arg(root)
        .arg("--state-dir")
        .arg(&state)
        .args(extra)
        .env("HETCH_CONFIG_DIR", dir.join("config"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Announced once it listens (the log thread drains its stderr from then on).
    let (_, _, token_path, _) = announced(&mut server);
    let token = std::fs::read_to_string(&token_path).unwrap();
    (server, token.trim().to_string())
}
