//! Cloud storage emulators for tests: fake-gcs-server for Google Cloud Storage and
//! Azurite for Azure Blob Storage, each started on a free port of 127.0.0.1 over a
//! directory of its own, and stopped (with its process group) when dropped.
//!
//! `bench/install-emulators.sh` installs both at pinned versions into
//! `target/tools`; [`Emulator::binary`] finds them there (or on `PATH`).
//!
//! A suite whose every case needs one takes [`Emulator::shared_gcs`] or
//! [`Emulator::shared_azurite`]: one server per test process, started on first use and
//! stopped when the process ends (see [`crate::shared`]), with a bucket or container of
//! each case's own ([`Emulator::create_bucket`], [`Emulator::create_container`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::Sha256;

use crate::shared::{self, Shared};

/// Azurite's well-known development account and key (public, in Microsoft's docs).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
/// The key of [`AZURITE_ACCOUNT`].
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A running emulator.
#[derive(Debug)]
pub struct Emulator {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    pub(crate) addr: SocketAddr,
    log: PathBuf,
    /// A signal that stops the server cleanly, sent before the group is killed.
    pub(crate) stop_signal: Option<i32>,
}

impl Emulator {
    /// The emulator program `name` (`fake-gcs-server`, `azurite-blob`): under
    /// `$HETCH_TOOLS/bin` or this repository's `target/tools/bin`, else on `PATH`.
    /// `None` when it is not installed (run `bench/install-emulators.sh`).
    pub fn binary(name: &str) -> Option<PathBuf> {
        let tools = std::env::var_os("HETCH_TOOLS")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools"));
        let local = tools.join("bin").join(name);
        if local.exists() {
            return Some(local);
        }
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    }

    /// fake-gcs-server over `dir`, with (empty) buckets `buckets`.
    pub fn gcs(dir: &Path, buckets: &[&str]) -> std::io::Result<Emulator> {
        let (cmd, port) = Emulator::gcs_command(dir, buckets)?;
        Emulator::spawn(cmd, dir, port)
    }

    /// The fake-gcs-server of this test process, without buckets: started on first
    /// use, stopped (its directory removed) when the process ends. Give each case a
    /// bucket of its own with [`Emulator::create_bucket`]. Panics when it cannot be
    /// started (e.g. not installed: run `bash bench/install-emulators.sh`).
    pub fn shared_gcs() -> &'static Emulator {
        static GCS: Shared<Emulator> = Shared::new();
        GCS.get_or_start(|| Emulator::start_shared("gcs", |dir| Emulator::gcs_command(dir, &[])))
    }

    /// The Azurite of this test process, without containers: started on first use,
    /// stopped (its directory removed) when the process ends. Give each case a
    /// container of its own with [`Emulator::create_container`]. Panics when it cannot
    /// be started (e.g. not installed: run `bash bench/install-emulators.sh`).
    pub fn shared_azurite() -> &'static Emulator {
        static AZURITE: Shared<Emulator> = Shared::new();
        AZURITE.get_or_start(|| Emulator::start_shared("azurite", Emulator::azurite_command))
    }

    /// Starts the server `command` makes for a fresh directory, under
    /// [`shared::watchdog`].
    fn start_shared(
        name: &str,
        command: impl FnOnce(&Path) -> std::io::Result<(Command, u16)>,
    ) -> Result<Emulator, String> {
        let dir = shared::dir(name).map_err(|e| format!("shared {name}: {e}"))?;
        let started = command(&dir).and_then(|(cmd, port)| {
            Emulator::launch(shared::watchdog(&cmd, &dir), &dir, port, None)
        });
        started.map_err(|e| {
            // Dropping the failed server killed its watchdog too (the whole process
            // group): the directory is left to us.
            let _ = std::fs::remove_dir_all(&dir);
            format!("shared {name}: {e}")
        })
    }

    /// The command line of fake-gcs-server over `dir`, and its port.
    fn gcs_command(dir: &Path, buckets: &[&str]) -> std::io::Result<(Command, u16)> {
        let bin = need("fake-gcs-server")?;
        let data = dir.join("data");
        std::fs::create_dir_all(&data)?;
        for b in buckets {
            std::fs::create_dir_all(data.join(b))?;
        }
        let port = free_port()?;
        let url = format!("http://127.0.0.1:{port}");
        let mut cmd = Command::new(bin);
        cmd.args([
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-backend",
            "memory",
        ])
        .args(["-port", &port.to_string(), "-log-level", "error"])
        .args(["-public-host", &format!("127.0.0.1:{port}")])
        .args(["-external-url", &url])
        .arg("-data")
        .arg(&data);
        Ok((cmd, port))
    }

    /// Azurite's blob service over `dir`, with (empty) containers `containers` of
    /// [`AZURITE_ACCOUNT`]; its URL names the account path-style.
    pub fn azurite(dir: &Path, containers: &[&str]) -> std::io::Result<Emulator> {
        let (cmd, port) = Emulator::azurite_command(dir)?;
        let e = Emulator::spawn(cmd, dir, port)?;
        for c in containers {
            e.create_container(c)?;
        }
        Ok(e)
    }

    /// The command line of Azurite's blob service over `dir`, and its port.
    fn azurite_command(dir: &Path) -> std::io::Result<(Command, u16)> {
        let bin = need("azurite-blob")?;
        let port = free_port()?;
        let mut cmd = Command::new(bin);
        cmd.args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            .args(["--silent", "--skipApiVersionCheck", "--loose"])
            .args(["--disableProductStyleUrl", "--disableTelemetry"])
            .arg("--location")
            .arg(dir);
        Ok((cmd, port))
    }

    pub(crate) fn spawn(cmd: Command, dir: &Path, port: u16) -> std::io::Result<Emulator> {
        Emulator::launch(cmd, dir, port, Some(Stdio::null()))
    }

    /// Spawns `cmd` (with `stdin`, or the one it has: a watchdog's pipe) logging to
    /// `dir/emulator.log`, and waits until it listens on `port`.
    pub(crate) fn launch(
        mut cmd: Command,
        dir: &Path,
        port: u16,
        stdin: Option<Stdio>,
    ) -> std::io::Result<Emulator> {
        std::fs::create_dir_all(dir)?;
        let log = dir.join("emulator.log");
        let out = std::fs::File::create(&log)?;
        if let Some(stdin) = stdin {
            cmd.stdin(stdin);
        }
        let child = cmd
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()?;
        let mut e = Emulator {
            child,
            url: format!("http://127.0.0.1:{port}"),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
            stop_signal: None,
        };
        e.wait_ready()?;
        Ok(e)
    }

    /// The log file the server writes to.
    pub(crate) fn log(&self) -> &Path {
        &self.log
    }

    /// Whether the server has exited (with its status).
    pub(crate) fn exited(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }

    fn wait_ready(&mut self) -> std::io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.child.try_wait()? {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                return Err(std::io::Error::other(format!(
                    "emulator exited at start ({st}): {log}"
                )));
            }
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(300)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "emulator not listening on {} within 60 s",
                    self.addr
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Uploads `data` as `key` of `bucket` of fake-gcs-server, through its JSON API
    /// (it does not serve the XML API that object_store writes with).
    pub fn gcs_put(&self, bucket: &str, key: &str, data: &[u8]) -> std::io::Result<()> {
        let name: String = key
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let head = format!(
            "POST /upload/storage/v1/b/{bucket}/o?uploadType=media&name={name} HTTP/1.1\r\n\
             Host: {}\r\nContent-Type: application/octet-stream\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.addr,
            data.len()
        );
        self.request(head.as_bytes(), data, "200", &format!("uploading {key}"))
    }

    /// Creates bucket `name` of fake-gcs-server, through its JSON API.
    pub fn create_bucket(&self, name: &str) -> std::io::Result<()> {
        let body = serde_json::json!({ "name": name }).to_string();
        let head = format!(
            "POST /storage/v1/b HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.addr,
            body.len()
        );
        self.request(
            head.as_bytes(),
            body.as_bytes(),
            "200",
            &format!("creating bucket {name}"),
        )
    }

    /// Sends one request and checks the status line's code.
    fn request(&self, head: &[u8], body: &[u8], code: &str, what: &str) -> std::io::Result<()> {
        let mut s = TcpStream::connect(self.addr)?;
        s.write_all(head)?;
        s.write_all(body)?;
        let mut resp = String::new();
        s.read_to_string(&mut resp)?;
        match resp.starts_with(&format!("HTTP/1.1 {code}")) {
            true => Ok(()),
            false => Err(std::io::Error::other(format!(
                "{what}: {}",
                resp.lines().next().unwrap_or_default()
            ))),
        }
    }

    /// Creates container `name` of Azurite (of [`AZURITE_ACCOUNT`]), with a request
    /// signed with the account's shared key (object_store has no call for it).
    pub fn create_container(&self, name: &str) -> std::io::Result<()> {
        let date = http_date(std::time::SystemTime::now());
        let version = "2021-08-06";
        let path = format!("/{AZURITE_ACCOUNT}/{name}");
        // Shared Key: twelve standard headers (all empty here), the x-ms headers,
        // then the account and the path (which, path-style, names the account again).
        let to_sign = format!(
            "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n/{AZURITE_ACCOUNT}{path}\nrestype:container"
        );
        let key = base64_decode(AZURITE_KEY);
        let sig = base64_encode(&hmac_sha256(&key, to_sign.as_bytes()));
        let req = format!(
            "PUT {path}?restype=container HTTP/1.1\r\nHost: {}\r\nx-ms-date: {date}\r\n\
             x-ms-version: {version}\r\nAuthorization: SharedKey {AZURITE_ACCOUNT}:{sig}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n",
            self.addr
        );
        self.request(
            req.as_bytes(),
            &[],
            "201",
            &format!("creating container {name}"),
        )
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(sig) = self.stop_signal {
            // SAFETY: signalling the process we started.
            unsafe { libc::kill(self.child.id() as i32, sig) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // SAFETY: signalling the process group we created for the emulator.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

pub(crate) fn need(name: &str) -> std::io::Result<PathBuf> {
    Emulator::binary(name).ok_or_else(|| {
        std::io::Error::other(format!(
            "{name} not found: run bench/install-emulators.sh (or put it on PATH)"
        ))
    })
}

pub(crate) fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// HMAC-SHA256 (RFC 2104) of `msg` under `key`.
fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    use hmac::Mac;
    let mut mac =
        hmac::Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(msg);
    mac.finalize().into_bytes().into()
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(data: &[u8]) -> String {
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(s: &str) -> Vec<u8> {
    let vals: Vec<u32> = s
        .bytes()
        .filter(|b| *b != b'=')
        .map(|b| B64.iter().position(|x| *x == b).expect("base64") as u32)
        .collect();
    let mut out = Vec::new();
    for c in vals.chunks(4) {
        let n = c
            .iter()
            .enumerate()
            .fold(0, |n, (i, v)| n | v << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..c.len()]);
    }
    out
}

/// `Tue, 24 Nov 2026 15:00:00 GMT`.
fn http_date(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
    let mon = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][m as usize - 1];
    format!(
        "{wd}, {d:02} {mon} {y} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signing_pieces_match_their_references() {
        // RFC 4231 test case 2 (a short key; padded the same way).
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            base64_encode(&mac),
            "W9zBRr9gdU5qBCQmCJV1x1oAPwidJzmDnexYuWTsOEM="
        );
        assert_eq!(base64_decode(&base64_encode(b"hetch!?")), b"hetch!?");
        assert_eq!(base64_decode(AZURITE_KEY).len(), 64);
        let t = std::time::UNIX_EPOCH + Duration::from_secs(1_795_532_400);
        assert_eq!(http_date(t), "Tue, 24 Nov 2026 15:00:00 GMT");
    }
}
