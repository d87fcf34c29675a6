//! A throwaway PostgreSQL server for tests: Debian's `postgresql` package, a fresh
//! cluster in the test's directory, on a free port of 127.0.0.1 with trust
//! authentication for user `hetch`, stopped when dropped.
//!
//! PostgreSQL refuses to run as root, so as root (CI) the cluster is made and run as
//! the `postgres` user the package creates, and the test's directory is handed to it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;

use crate::emulators::{free_port, Emulator};

impl Emulator {
    /// A PostgreSQL server over `dir/pg`; its [`Emulator::url`] is
    /// `postgres://hetch@127.0.0.1:PORT/postgres`.
    pub fn postgres(dir: &Path) -> std::io::Result<Emulator> {
        let bin = pg_bin()?;
        let data = dir.join("pg");
        std::fs::create_dir_all(&data)?;
        let user = run_as()?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
            std::os::unix::fs::chown(&data, Some(uid), Some(gid))?;
        }
        let as_user = |cmd: &mut Command| {
            if let Some((uid, gid)) = user {
                cmd.uid(uid).gid(gid);
            }
        };
        let mut init = Command::new(bin.join("initdb"));
        init.arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "hetch", "-E", "UTF8", "--no-sync"]);
        as_user(&mut init);
        let out = init.output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let port = free_port()?;
        let mut cmd = Command::new(bin.join("postgres"));
        cmd.arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&data)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "max_connections=200"]);
        as_user(&mut cmd);
        let mut pg = Emulator::spawn(cmd, dir, port)?;
        // SIGQUIT: immediate shutdown, which also frees the server's shared memory.
        pg.stop_signal = Some(libc::SIGQUIT);
        pg.url = format!("postgres://hetch@127.0.0.1:{port}/postgres");
        // Listening is not ready: it refuses sessions until recovery is over.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let log = std::fs::read_to_string(pg.log()).unwrap_or_default();
            if log.contains("ready to accept connections") {
                return Ok(pg);
            }
            if pg.exited()?.is_some() || Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "postgres did not start: {log}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The directory of `initdb` and `postgres`: `$HETCH_PG_BIN`, else the newest
/// `/usr/lib/postgresql/*/bin`.
fn pg_bin() -> std::io::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("HETCH_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or_else(|| {
        std::io::Error::other(
            "PostgreSQL not found: apt-get install postgresql (or set HETCH_PG_BIN)",
        )
    })
}

/// As root, the `postgres` user's uid and gid (PostgreSQL will not run as root);
/// otherwise none: it runs as whoever runs the test.
fn run_as() -> std::io::Result<Option<(u32, u32)>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let id = |flag: &str| -> std::io::Result<u32> {
        let out = Command::new("id").args([flag, "postgres"]).output()?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| std::io::Error::other("running as root and there is no postgres user"))
    };
    Ok(Some((id("-u")?, id("-g")?)))
}
