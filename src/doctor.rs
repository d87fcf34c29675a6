//! `hetch doctor`: what on this host (and on the path to a peer) keeps a transfer
//! below the path's rate, measured where it can be, and the commands that fix it (see
//! the hetch-doctor crate). `--apply` runs the sysctl fixes and keeps a way back.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use hetch_doctor::{Capacity, Probe};

use crate::location::Location;

/// `hetch doctor`.
#[derive(Args)]
pub struct DoctorArgs {
    /// A server to check the path to (hetch://HOST[:PORT]): its round trip and the
    /// packet size the path carries are measured with plain TCP connections.
    peer: Option<String>,
    /// The path's round-trip time (e.g. 100ms); default: measured to the peer, else 0.
    #[arg(long, value_parser = hetch_units::parse_duration)]
    rtt: Option<Duration>,
    /// The path's rate: bytes per second with SI suffixes (500M) or bits (2gbit);
    /// default 10gbit.
    #[arg(long, value_parser = hetch_units::parse_rate)]
    rate: Option<u64>,
    /// Data streams the transfer is to use (as `hetch cp --streams`).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    streams: u32,
    /// A directory the transfer reads or writes (repeat for several): its write rate
    /// (with fdatasync) and read rate (page cache dropped) are measured with a
    /// temporary file of --storage-size, written and read in 4 MiB blocks.
    #[arg(long, value_name = "DIR")]
    dir: Vec<PathBuf>,
    /// Bytes each --dir test writes and reads.
    #[arg(long, default_value = "256M", value_parser = hetch_units::parse_size)]
    storage_size: u64,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Run the sysctl fixes (root), first saving the values they replace to
    /// doctor-undo.sh beside the known-hosts file.
    #[arg(long, conflicts_with = "undo")]
    apply: bool,
    /// Put back the values the last --apply replaced.
    #[arg(long)]
    undo: bool,
}

/// The 10 Gbit/s assumed when no rate is given.
const DEFAULT_RATE: u64 = hetch_doctor::tune::TARGET_RATE;

/// Runs the checks and prints the report. Exit code 0 whatever it finds (a finding is
/// advice, not an error); 1 when --apply or --undo fail.
pub async fn run(a: DoctorArgs) -> anyhow::Result<ExitCode> {
    if a.undo {
        return undo();
    }
    let host = hetch_doctor::Host::default();
    let probed = match &a.peer {
        Some(p) => Some(probe(p).await?),
        None => None,
    };
    let path = hetch_doctor::Path {
        rate: a.rate.unwrap_or(DEFAULT_RATE),
        rtt: a
            .rtt
            .or(probed.as_ref().map(|p| p.0.rtt))
            .unwrap_or_default(),
        streams: a.streams,
        probe: probed.as_ref().map(|(p, interface)| Probe {
            interface: interface.clone(),
            mss: p.mss,
            ipv6: p.addr.is_ipv6(),
        }),
    };
    let mut report = hetch_doctor::check(&host, path);
    if let Some((p, _)) = &probed {
        report.add_capacity(Capacity {
            link: format!("path to {}", p.addr),
            rate: a.rate.unwrap_or(DEFAULT_RATE),
            how: format!(
                "rate {}; round trip {:.2} ms, least of {} TCP handshakes",
                if a.rate.is_some() {
                    "as given"
                } else {
                    "assumed"
                },
                p.rtt.as_secs_f64() * 1e3,
                hetch_net::PROBES
            ),
        });
    }
    report.add_capacity(tokio::task::spawn_blocking(hashing).await?);
    // Loopback may be down (a bare network namespace): then there is no TLS figure.
    match tls_loopback().await {
        Ok(c) => report.add_capacity(c),
        Err(e) => eprintln!("hetch doctor: no TLS measurement: {e:#}"),
    }
    for dir in &a.dir {
        let (size, dir) = (a.storage_size, dir.clone());
        for c in tokio::task::spawn_blocking(move || storage(&dir, size)).await?? {
            report.add_capacity(c);
        }
    }
    match a.json {
        true => println!("{}", serde_json::to_string(&report)?),
        false => print!("{}", report.to_text()),
    }
    if a.apply {
        return apply(&report);
    }
    Ok(ExitCode::SUCCESS)
}

/// Probes the path to `peer`, and finds the interface toward it.
async fn probe(peer: &str) -> anyhow::Result<(hetch_net::PathProbe, Option<String>)> {
    let host = match Location::parse(peer) {
        Ok(Location::Remote { host, .. }) => host,
        _ => bail!("{peer}: not a server (expected hetch://HOST[:PORT])"),
    };
    let p = hetch_net::probe(&host).await?;
    let interface = match p.addr.ip() {
        std::net::IpAddr::V4(v4) => hetch_doctor::Host::default().route_interface(v4),
        std::net::IpAddr::V6(_) => None,
    };
    Ok((p, interface))
}

/// `len` bytes of a fixed pattern that neither compresses nor repeats at block size:
/// the data every measurement moves.
fn test_bytes(len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect()
}

/// BLAKE3 over 64 MiB in one thread: what one core hashes (each block is hashed once
/// by the source and once by the destination).
fn hashing() -> Capacity {
    let data = test_bytes(64 << 20);
    let started = Instant::now();
    let digest = hetch_integrity::Algorithm::Blake3.digest(&data);
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    std::hint::black_box(digest);
    Capacity {
        link: "hashing (blake3, one core)".into(),
        rate: (data.len() as f64 / secs) as u64,
        how: "64 MiB in memory".into(),
    }
}

/// One TLS stream over loopback, both ends in this process: what one stream's
/// encryption and decryption (AES-GCM on this CPU, rustls) and the kernel's TCP carry.
async fn tls_loopback() -> anyhow::Result<Capacity> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const BLOCK: usize = 1 << 20;
    const BLOCKS: usize = 256;
    let dir = tempfile::tempdir()?;
    let (id, _) = hetch_net::ServerIdentity::load_or_create(dir.path())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let config = id.server_config();
    let receiver = tokio::spawn(async move {
        let (socket, _) = listener.accept().await?;
        let mut acc = hetch_net::accept(socket, &Default::default(), &config).await?;
        acc.read_buffer.grow();
        let (mut buf, mut total) = (vec![0u8; BLOCK], 0usize);
        loop {
            match acc.stream.read(&mut buf).await? {
                0 => return Ok::<_, anyhow::Error>(total),
                n => total += n,
            }
        }
    });
    let client = hetch_net::TlsClient::new(&addr, hetch_net::Trust::Pinned(id.fingerprint))?;
    let mut s = hetch_net::connect(&addr, &Default::default(), Some(&client)).await?;
    let block = test_bytes(BLOCK);
    let started = Instant::now();
    for _ in 0..BLOCKS {
        s.write_all(&block).await?;
    }
    s.shutdown().await?;
    let moved = receiver.await??;
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    anyhow::ensure!(
        moved == BLOCK * BLOCKS,
        "TLS test: {moved} bytes arrived of {}",
        BLOCK * BLOCKS
    );
    Ok(Capacity {
        link: "TLS, one stream on loopback".into(),
        rate: (moved as f64 / secs) as u64,
        how: "256 MiB encrypted and decrypted in this process".into(),
    })
}

/// The write and read rates of `dir` with a temporary file of `size` bytes.
fn storage(dir: &Path, size: u64) -> anyhow::Result<Vec<Capacity>> {
    const BLOCK: usize = 4 << 20;
    let mut file = tempfile::Builder::new()
        .prefix(".hetch-doctor-")
        .tempfile_in(dir)
        .with_context(|| format!("{}: cannot create a test file", dir.display()))?;
    let block = test_bytes(BLOCK);
    let blocks = size.div_ceil(BLOCK as u64).max(1);
    let name = file.path().display().to_string();
    let started = Instant::now();
    for _ in 0..blocks {
        file.write_all(&block)
            .with_context(|| format!("{name}: write"))?;
    }
    file.as_file()
        .sync_data()
        .with_context(|| format!("{name}: fdatasync"))?;
    let wrote = started.elapsed().as_secs_f64().max(1e-9);
    let bytes = blocks * BLOCK as u64;
    hetch_storage::meta::drop_cached_range(file.as_file(), 0, bytes);
    let mut f = std::fs::File::open(file.path()).with_context(|| format!("{name}: open"))?;
    let mut buf = vec![0u8; BLOCK];
    let started = Instant::now();
    let mut read = 0u64;
    loop {
        let n = f.read(&mut buf).with_context(|| format!("{name}: read"))?;
        if n == 0 {
            break;
        }
        read += n as u64;
    }
    let reading = started.elapsed().as_secs_f64().max(1e-9);
    let shown = dir.display();
    let size = hetch_units::human_bytes(bytes as f64);
    Ok(vec![
        Capacity {
            link: format!("storage write {shown}"),
            rate: (bytes as f64 / wrote) as u64,
            how: format!("{size} in 4 MiB writes, then fdatasync"),
        },
        Capacity {
            link: format!("storage read {shown}"),
            rate: (read as f64 / reading) as u64,
            how: format!("{size} in 4 MiB reads, page cache dropped first"),
        },
    ])
}

/// Where --apply keeps the values it replaced.
fn undo_file() -> PathBuf {
    hetch_net::KnownHosts::default_path().with_file_name("doctor-undo.sh")
}

/// The only settings `--apply` changes and `--undo` writes back: a hand-edited undo
/// file (it lives in the user's config directory) cannot make root set anything else.
const APPLIED: [&str; 3] = [
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_congestion_control",
];

/// `(key, value)` of a fix that is one `sysctl -w KEY="VALUE"` of a setting in
/// [`APPLIED`], with a value of numbers or a name.
fn sysctl_of(fix: &str) -> Option<(String, String)> {
    let (key, value) = fix.strip_prefix("sysctl -w ")?.split_once('=')?;
    let value = value.trim_matches('"');
    let plain = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b' ' || b == b'_');
    (APPLIED.contains(&key) && plain).then(|| (key.to_string(), value.to_string()))
}

/// `/proc/sys` path of a sysctl key.
fn proc_sys(key: &str) -> PathBuf {
    Path::new("/proc/sys").join(key.replace('.', "/"))
}

/// Runs the report's sysctl fixes, the first of each finding that has one, after
/// writing the values they replace to the undo file.
fn apply(report: &hetch_doctor::Report) -> anyhow::Result<ExitCode> {
    let fixes: Vec<(String, String)> = report
        .findings
        .iter()
        .filter_map(|f| f.fix.first().and_then(|fix| sysctl_of(fix)))
        .collect();
    if fixes.is_empty() {
        eprintln!("hetch doctor: no sysctl to apply");
        return Ok(ExitCode::SUCCESS);
    }
    let path = undo_file();
    // An earlier undo file keeps the values from before any --apply; keys it lacks are
    // added with their values now.
    let mut undo = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            String::from("#!/bin/sh\n# written by hetch doctor --apply: the values it replaced\n")
        }
        Err(e) => bail!("{}: {e}", path.display()),
    };
    let kept: Vec<String> = undo
        .lines()
        .filter_map(|l| sysctl_of(l).map(|(k, _)| k))
        .collect();
    for (key, _) in fixes.iter().filter(|(k, _)| !kept.contains(k)) {
        let old = std::fs::read_to_string(proc_sys(key))
            .with_context(|| format!("{key}: cannot read the current value"))?;
        let old = old.split_whitespace().collect::<Vec<_>>().join(" ");
        undo.push_str(&format!("sysctl -w {key}=\"{old}\"\n"));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    }
    std::fs::write(&path, &undo).with_context(|| format!("{}", path.display()))?;
    for (key, value) in &fixes {
        eprintln!("hetch doctor: sysctl -w {key}=\"{value}\"");
        std::fs::write(proc_sys(key), value)
            .with_context(|| format!("{key}: cannot set it (root only)"))?;
    }
    eprintln!(
        "hetch doctor: applied {} setting(s); `hetch doctor --undo` puts back the old values ({})",
        fixes.len(),
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Puts back what `--apply` replaced, then removes the undo file.
fn undo() -> anyhow::Result<ExitCode> {
    let path = undo_file();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "hetch doctor: nothing to undo ({} does not exist)",
                path.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => bail!("{}: {e}", path.display()),
    };
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let Some((key, value)) = sysctl_of(line) else {
            bail!("{}: not a line --apply writes: {line}", path.display());
        };
        eprintln!("hetch doctor: {line}");
        std::fs::write(proc_sys(&key), &value)
            .with_context(|| format!("{key}: cannot set it (root only)"))?;
    }
    std::fs::remove_file(&path).with_context(|| format!("{}", path.display()))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_sysctl_fixes_are_applied() {
        assert_eq!(
            sysctl_of("sysctl -w net.ipv4.tcp_wmem=\"4096 16384 12582912\""),
            Some(("net.ipv4.tcp_wmem".into(), "4096 16384 12582912".into()))
        );
        assert_eq!(
            sysctl_of("sysctl -w net.ipv4.tcp_congestion_control=bbr"),
            Some(("net.ipv4.tcp_congestion_control".into(), "bbr".into()))
        );
        for not in [
            "modprobe tcp_bbr && sysctl -w net.ipv4.tcp_congestion_control=bbr",
            "hetch cp --streams 12 ...",
            "sysctl -w a/../b=1",
            "sysctl -w net.ipv4.tcp_rmem=\"1; rm -rf /\"",
            "sysctl -w net.ipv4.tcp_wmem=\"$(id)\"",
            "sysctl -w kernel.modprobe=\"/home/u/x\"",
            "sysctl -w net.ipv4.tcp_rmem=\"\"",
            "ip link set dev eth0 mtu 1500",
        ] {
            assert_eq!(sysctl_of(not), None, "{not}");
        }
        assert_eq!(
            proc_sys("net.ipv4.tcp_rmem"),
            Path::new("/proc/sys/net/ipv4/tcp_rmem")
        );
    }
}
