//! A MinIO server for the S3 tests and benchmarks: found (or built, with
//! `bench/install-minio.sh`) and started on a free port (of this host's loopback, or of
//! a testbed host) over a data directory of its own, with fixed test credentials. Buckets are made by creating directories in
//! the data directory, which MinIO's single-drive mode takes as buckets.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::net;
use crate::place::Place;

/// Access key of the servers started here.
pub const ACCESS_KEY: &str = "hetchtest";
/// Secret key of the servers started here.
pub const SECRET_KEY: &str = "hetchtest-secret";

/// A running MinIO server; stopped (and its process group killed) when dropped.
#[derive(Debug)]
pub struct Minio {
    child: Child,
    /// `http://ADDR:PORT` (`http://127.0.0.1:PORT` unless started on another host).
    pub endpoint: String,
    /// The data directory (buckets are its subdirectories).
    pub data: PathBuf,
    /// Where the server's output goes.
    pub log: PathBuf,
}

/// The MinIO binary: `$HETCH_MINIO`, else `target/tools/bin/minio` of this repository,
/// else `minio` on `PATH`; built with `bench/install-minio.sh` when there is none and
/// `install` is set (one build at a time, under a lock, as tests run in parallel).
pub fn minio_binary(repo: &Path, install: bool) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("HETCH_MINIO").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let tools = std::env::var_os("HETCH_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target/tools"));
    let local = tools.join("bin/minio");
    let stamp_ok = || local.is_file() && tools.join("bin/minio.version").is_file();
    if stamp_ok() {
        return Ok(local);
    }
    if let Ok(out) = Command::new("sh").args(["-c", "command -v minio"]).output() {
        let found = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !found.is_empty() {
            return Ok(PathBuf::from(found));
        }
    }
    if !install {
        bail!("MinIO not found: run bench/install-minio.sh (or set HETCH_MINIO to its binary)");
    }
    std::fs::create_dir_all(&tools)?;
    let lock = std::fs::File::create(tools.join("minio.lock"))?;
    // SAFETY: flock on a file descriptor we own; released when `lock` is dropped.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    if !stamp_ok() {
        let status = Command::new("bash")
            .arg(repo.join("bench/install-minio.sh"))
            .env("HETCH_TOOLS", &tools)
            .status()
            .context("running bench/install-minio.sh")?;
        if !status.success() {
            bail!("bench/install-minio.sh failed ({status}): MinIO is needed for the S3 tests");
        }
    }
    Ok(local)
}

/// What `binary` is: the module version `bench/install-minio.sh` stamped next to it
/// (a `go install` build calls itself DEVELOPMENT.GOGET), else its own version line.
pub fn version(binary: &Path) -> String {
    let stamp = binary.with_file_name("minio.version");
    if let Ok(v) = std::fs::read_to_string(&stamp) {
        return format!(
            "minio {} (github.com/minio/minio@{})",
            binary.display(),
            v.trim()
        );
    }
    match Command::new(binary).arg("--version").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("minio (no version line)")
            .trim()
            .to_string(),
        Err(e) => format!("minio {}: {e}", binary.display()),
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Minio {
    /// Starts `binary` over `data` (created if needed) on a free port of 127.0.0.1 and
    /// waits until it answers its readiness check.
    pub fn start(binary: &Path, data: &Path) -> Result<Minio> {
        let port = free_port()?;
        let console = free_port()?;
        Minio::spawn(binary, data, &Place::loopback(), port, console)
    }

    /// Starts `binary` over `data` on host `place` (through `ip netns exec` on a
    /// testbed host), listening on `place.addr` and a free port there, and waits until
    /// it answers its readiness check from that host. The benchmarks run it next to
    /// `hetch serve` on the server host; clients on the other host reach it across the
    /// emulated link, while the agent beside it reaches it over the host's own
    /// loopback (traffic to a local address never leaves the host).
    pub fn start_on(binary: &Path, data: &Path, place: &Place) -> Result<Minio> {
        let port = net::free_port(place)?;
        let console = net::free_port(place)?;
        Minio::spawn(binary, data, place, port, console)
    }

    fn spawn(binary: &Path, data: &Path, place: &Place, port: u16, console: u16) -> Result<Minio> {
        std::fs::create_dir_all(data)?;
        let log = data.with_extension("log");
        let out = std::fs::File::create(&log)?;
        let host = crate::server::url_host(&place.addr);
        let child = place
            .command(&binary.to_string_lossy())
            .args(["server", "--quiet", "--address"])
            .arg(format!("{host}:{port}"))
            .arg("--console-address")
            .arg(format!("{host}:{console}"))
            .arg(data)
            .env("MINIO_ROOT_USER", ACCESS_KEY)
            .env("MINIO_ROOT_PASSWORD", SECRET_KEY)
            .env("MINIO_BROWSER", "off")
            .env("MINIO_UPDATE", "off")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let mut m = Minio {
            child,
            endpoint: format!("http://{host}:{port}"),
            data: data.to_path_buf(),
            log,
        };
        let addr = (place.addr.as_str(), port)
            .to_socket_addrs()?
            .next()
            .with_context(|| format!("no address for {}", place.addr))?;
        m.wait_ready(&addr, place.netns.as_deref())?;
        Ok(m)
    }

    fn wait_ready(&mut self, addr: &SocketAddr, netns: Option<&str>) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.child.try_wait()? {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                bail!("MinIO exited at start ({st}): {log}");
            }
            // The check runs where the server does: a testbed host's address is only
            // reachable from the testbed's namespaces.
            if net::in_netns(netns, || ready(addr))? {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("MinIO not ready on {addr} within 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Creates bucket `name` (a directory of the data directory).
    pub fn create_bucket(&self, name: &str) -> Result<()> {
        std::fs::create_dir_all(self.data.join(name))?;
        Ok(())
    }

    /// The environment a client needs to reach this server with the AWS variables.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            ("AWS_DEFAULT_REGION", "us-east-1".to_string()),
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
        ]
    }

    /// Multipart uploads the server holds (started and neither completed nor
    /// aborted): MinIO keeps one directory per upload under `.minio.sys/multipart`.
    pub fn open_uploads(&self) -> usize {
        let root = self.data.join(".minio.sys/multipart");
        let mut n = 0;
        // Layout: multipart/<object hash>/<upload id>/...
        if let Ok(objects) = std::fs::read_dir(root) {
            for o in objects.flatten() {
                if let Ok(uploads) = std::fs::read_dir(o.path()) {
                    n += uploads.flatten().filter(|u| u.path().is_dir()).count();
                }
            }
        }
        n
    }
}

/// MinIO's readiness endpoint answers 200.
fn ready(addr: &SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req =
        format!("GET /minio/health/ready HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200")
}

impl Drop for Minio {
    fn drop(&mut self) {
        // SAFETY: signalling the process group we created for the server.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}
