//! `hetch doctor`: what on this host (and on the path to a peer) keeps a transfer
//! below the path's rate, measured where it can be, and the commands that fix it (see
//! the hetch-doctor crate, which also takes the measurements and applies the fixes).
//! `--apply` runs the sysctl fixes and keeps a way back.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use hetch_doctor::measure::{hashing, storage, tls_loopback};
use hetch_doctor::{sysctl, Capacity, Probe};

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
        Err(e) => errln!(
            "hetch doctor: no TLS measurement: {:#}",
            anyhow::Error::new(e)
        ),
    }
    for dir in &a.dir {
        let (size, dir) = (a.storage_size, dir.clone());
        for c in tokio::task::spawn_blocking(move || storage(&dir, size)).await?? {
            report.add_capacity(c);
        }
    }
    match a.json {
        true => outln!("{}", serde_json::to_string(&report)?)?,
        false => out!("{}", report.to_text())?,
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

/// Where --apply keeps the values it replaced.
fn undo_file() -> PathBuf {
    hetch_net::KnownHosts::default_path().with_file_name("doctor-undo.sh")
}

/// Runs the report's sysctl fixes, the first of each finding that has one, after
/// writing the values they replace to the undo file.
fn apply(report: &hetch_doctor::Report) -> anyhow::Result<ExitCode> {
    let path = undo_file();
    let announce = |line: &str| errln!("hetch doctor: {line}");
    match sysctl::apply(&hetch_doctor::Host::default(), report, &path, announce)? {
        0 => errln!("hetch doctor: no sysctl to apply"),
        n => errln!(
            "hetch doctor: applied {n} setting(s); `hetch doctor --undo` puts back the old values ({})",
            path.display()
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// Puts back what `--apply` replaced, then removes the undo file.
fn undo() -> anyhow::Result<ExitCode> {
    let path = undo_file();
    let announce = |line: &str| errln!("hetch doctor: {line}");
    if !sysctl::undo(&hetch_doctor::Host::default(), &path, announce)? {
        errln!(
            "hetch doctor: nothing to undo ({} does not exist)",
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
