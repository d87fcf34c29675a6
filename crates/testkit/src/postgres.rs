//! A throwaway PostgreSQL server for tests: Debian's `postgresql` package, a fresh
//! cluster in the test's directory, on a free port of 127.0.0.1 with trust
//! authentication for user `hetch`, stopped when dropped.
//!
//! A suite takes [`Emulator::shared_postgres`] (one server per test process) and a
//! database of each case's own from it; [`Emulator::postgres`] is a server of one
//! test's own, for a test that stops or breaks it.
//!
//! PostgreSQL refuses to run as root, so as root (CI) the cluster is made and run as
//! the `postgres` user the package creates, and the test's directory is handed to it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;

use crate::emulators::{free_port, Emulator};
use crate::shared::{self, Shared};

impl Emulator {
    /// A PostgreSQL server over `dir/pg`; its [`Emulator::url`] is
    /// `postgres://hetch@127.0.0.1:PORT/postgres`.
    pub fn postgres(dir: &Path) -> std::io::Result<Emulator> {
        let (cmd, port) = postgres_command(dir)?;
        let mut pg = Emulator::spawn(cmd, dir, port)?;
        // SIGQUIT: immediate shutdown, which also frees the server's shared memory.
        pg.stop_signal = Some(libc::SIGQUIT);
        pg.until_accepting(port)?;
        Ok(pg)
    }

    /// The PostgreSQL server of this test process: started on first use, stopped (its
    /// directory removed) when the process ends (see [`crate::shared`]). Give each
    /// case a database of its own with [`Emulator::create_database`]: one `initdb`
    /// per run instead of one per case. Panics when it cannot be started (e.g. not
    /// installed: `apt-get install postgresql`).
    pub fn shared_postgres() -> &'static Emulator {
        static PG: Shared<Emulator> = Shared::new();
        PG.get_or_start(|| {
            let dir = shared::dir("postgres").map_err(|e| format!("shared postgres: {e}"))?;
            let start = || -> std::io::Result<Emulator> {
                let (cmd, port) = postgres_command(&dir)?;
                let mut watched = shared::watchdog_with_signal(&cmd, &dir, "QUIT");
                // The watchdog runs as the server does, so that it may remove the
                // server's directory at the end.
                if let Some((uid, gid)) = run_as()? {
                    watched.uid(uid).gid(gid);
                }
                let mut pg = Emulator::launch(watched, &dir, port, None)?;
                pg.until_accepting(port)?;
                Ok(pg)
            };
            start().map_err(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                format!("shared postgres: {e}")
            })
        })
    }

    /// Creates database `name` on this PostgreSQL server and returns its URL.
    pub fn create_database(&self, name: &str) -> std::io::Result<String> {
        let port = self.addr.port().to_string();
        let out = Command::new(pg_bin()?.join("createdb"))
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "hetch", name])
            .output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "createdb {name}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(format!("postgres://hetch@127.0.0.1:{port}/{name}"))
    }

    /// Waits until the server on `port` takes sessions (listening is not enough: it
    /// refuses them until recovery is over), and sets its URL.
    fn until_accepting(&mut self, port: u16) -> std::io::Result<()> {
        self.url = format!("postgres://hetch@127.0.0.1:{port}/postgres");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let log = std::fs::read_to_string(self.log()).unwrap_or_default();
            if log.contains("ready to accept connections") {
                return Ok(());
            }
            if self.exited()?.is_some() || Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "postgres did not start: {log}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A fresh cluster in `dir/pg` (owned by the user the server runs as) and the
/// command line of its server on a free port, with that port.
fn postgres_command(dir: &Path) -> std::io::Result<(Command, u16)> {
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
        .args(["-c", "max_connections=300"]);
    as_user(&mut cmd);
    Ok((cmd, port))
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
