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
use sha2::{Digest, Sha256};

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
        Minio::start_with(binary, data, |c| c)
    }

    /// As [`Minio::start`], with the server's command passed through `wrap` before it
    /// is spawned: a test keeping one server for its whole process wraps it in
    /// `hetch_testkit::shared::watchdog` (which kills it, and removes its directory,
    /// when the process ends). The command `wrap` returns is spawned with its stdin as
    /// `wrap` set it (the server's own is /dev/null), its output to the log.
    pub fn start_with(
        binary: &Path,
        data: &Path,
        wrap: impl FnOnce(Command) -> Command,
    ) -> Result<Minio> {
        let port = free_port()?;
        let console = free_port()?;
        Minio::spawn(binary, data, &Place::loopback(), port, console, wrap)
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
        Minio::spawn(binary, data, place, port, console, |c| c)
    }

    fn spawn(
        binary: &Path,
        data: &Path,
        place: &Place,
        port: u16,
        console: u16,
        wrap: impl FnOnce(Command) -> Command,
    ) -> Result<Minio> {
        std::fs::create_dir_all(data)?;
        let log = data.with_extension("log");
        let out = std::fs::File::create(&log)?;
        let host = crate::server::url_host(&place.addr);
        let mut server = place.command(&binary.to_string_lossy());
        server
            .args(["server", "--quiet", "--address"])
            .arg(format!("{host}:{port}"))
            .arg("--console-address")
            .arg(format!("{host}:{console}"))
            .arg(data)
            .env("MINIO_ROOT_USER", ACCESS_KEY)
            .env("MINIO_ROOT_PASSWORD", SECRET_KEY)
            .env("MINIO_BROWSER", "off")
            .env("MINIO_UPDATE", "off")
            .stdin(Stdio::null());
        let child = wrap(server)
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

    /// Multipart uploads in progress (started, neither completed nor aborted) in
    /// `bucket` only, as the server lists them (S3 ListMultipartUploads): unlike
    /// [`Minio::open_uploads`], right for a server whose other buckets other tests use
    /// at the same time. (MinIO names an upload's directory by a hash of bucket and
    /// key, so the directories cannot tell the buckets apart.)
    pub fn open_uploads_in(&self, bucket: &str) -> Result<usize> {
        let host = self
            .endpoint
            .strip_prefix("http://")
            .with_context(|| format!("not an http endpoint: {}", self.endpoint))?;
        let path = format!("/{bucket}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs();
        let auth = sigv4_get(
            host,
            &path,
            "uploads=",
            &amz_date(now),
            ACCESS_KEY,
            SECRET_KEY,
        );
        // HTTP/1.0: the body comes whole, never chunked, and ends with the connection.
        let req = format!(
            "GET {path}?uploads HTTP/1.0\r\nHost: {host}\r\nx-amz-date: {}\r\n\
             x-amz-content-sha256: {EMPTY_SHA256}\r\nAuthorization: {}\r\n\r\n",
            auth.date, auth.header
        );
        let addr = host
            .to_socket_addrs()?
            .next()
            .with_context(|| format!("no address for {host}"))?;
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        s.write_all(req.as_bytes())?;
        let mut resp = String::new();
        s.read_to_string(&mut resp)?;
        let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
        if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
            bail!(
                "listing the uploads of {bucket}: {}: {body}",
                head.lines().next().unwrap_or_default()
            );
        }
        if body.contains("<IsTruncated>true</IsTruncated>") {
            bail!("listing the uploads of {bucket}: more than one page");
        }
        Ok(body.matches("<Upload>").count())
    }
}

/// SHA-256 of an empty payload (a GET's), hex.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// `YYYYMMDDTHHMMSSZ` for Unix time `unix`.
fn amz_date(unix: u64) -> String {
    let (y, m, d) = hetch_units::civil_from_days((unix / 86_400) as i64);
    let secs = unix % 86_400;
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// A request's AWS Signature Version 4.
struct SigV4 {
    /// The `x-amz-date` header it signed.
    date: String,
    /// The `Authorization` header.
    header: String,
}

/// Signs a GET of `path?query` (`query` canonical: `name=value`, sorted) on `host`,
/// region us-east-1, with the headers `host`, `x-amz-content-sha256` (of an empty
/// body) and `x-amz-date` (`date`). Written out here rather than pulling an S3 client
/// into hetch-bench for its one signed request.
fn sigv4_get(host: &str, path: &str, query: &str, date: &str, access: &str, secret: &str) -> SigV4 {
    let day = &date[..8];
    let scope = format!("{day}/us-east-1/s3/aws4_request");
    let signed = "host;x-amz-content-sha256;x-amz-date";
    let canonical = format!(
        "GET\n{path}\n{query}\nhost:{host}\nx-amz-content-sha256:{EMPTY_SHA256}\n\
         x-amz-date:{date}\n\n{signed}\n{EMPTY_SHA256}"
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac_sha256(format!("AWS4{secret}").as_bytes(), day.as_bytes());
    for part in ["us-east-1", "s3", "aws4_request"] {
        key = hmac_sha256(&key, part.as_bytes());
    }
    let signature = hex(&hmac_sha256(&key, to_sign.as_bytes()));
    SigV4 {
        date: date.to_string(),
        header: format!(
            "AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders={signed}, \
             Signature={signature}"
        ),
    }
}

/// HMAC-SHA256 (RFC 2104) of `msg` under `key`.
fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    use hmac::Mac;
    let mut mac =
        hmac::Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(msg);
    mac.finalize().into_bytes().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_signed_as_aws_documents() {
        // AWS's Signature Version 4 example "GET Bucket Lifecycle" (examplebucket,
        // 2013-05-24, the documentation's example keys).
        let sig = sigv4_get(
            "examplebucket.s3.amazonaws.com",
            "/",
            "lifecycle=",
            "20130524T000000Z",
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        );
        assert_eq!(
            sig.header,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/\
             aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, \
             Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
        );
        assert_eq!(amz_date(1_369_353_600), "20130524T000000Z");
        // RFC 4231 test case 2.
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
