//! `hetch-lab wan`: the WAN testbed on this machine (network namespaces joined by
//! emulated links: two hosts, or N pairs). `up` starts a background forwarder (`hetch-lab wan forward`, hidden)
//! and waits until the link works; `down` stops it and removes the namespaces, also
//! after a crash; `exec` runs a command on one host.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hetch_wan::hosts::{hosts, Host};
use hetch_wan::testbed::{self, Link};

/// Where the running forwarder leaves its pid, its log and its "ready" mark.
const STATE_DIR: &str = "/run/hetch-wan";

fn state(name: &str) -> PathBuf {
    Path::new(STATE_DIR).join(name)
}

/// Parses a fraction of packets (`--loss`, `--corrupt`): `0.01%` or `0.0001`.
pub fn parse_loss(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    };
    match v {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}': expected a fraction of packets like 0.1% or 0.001"
        )),
    }
}

/// Which emulation makes the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LinkKind {
    /// The kernel's netem where it exists, else the userspace delay line.
    Auto,
    /// A veth pair shaped by `tc netem` (needs the kernel's sch_netem).
    Netem,
    /// hetch's userspace TUN delay line (works on any kernel with /dev/net/tun).
    DelayLine,
}

/// Starts the testbed with `pairs` pairs of hosts.
pub fn up(link: Link, kind: LinkKind, pairs: u8) -> anyhow::Result<()> {
    if forwarder_pid().is_some()
        || state("netem").exists() && !testbed::existing_namespaces().is_empty()
    {
        bail!("the WAN testbed is already up; run `hetch-lab wan down` first");
    }
    down_quietly();
    let netem = match kind {
        LinkKind::DelayLine => false,
        LinkKind::Netem if pairs > 1 => bail!(
            "--pairs above 1 needs the delay-line link (a veth pair joins two hosts only): use --link delay-line"
        ),
        LinkKind::Auto if pairs > 1 => false,
        LinkKind::Netem if link.corrupt > 0.0 => bail!(
            "--corrupt needs the delay-line link (netem's corruption is caught by TCP's checksum): use --link delay-line"
        ),
        // Only the delay line damages segments past TCP's checksum.
        LinkKind::Auto if link.corrupt > 0.0 => false,
        LinkKind::Auto => hetch_wan::netem::available(),
        LinkKind::Netem if hetch_wan::netem::available() => true,
        LinkKind::Netem => bail!(
            "this kernel has no netem qdisc (sch_netem): use --link delay-line, or --link auto to pick one"
        ),
    };
    std::fs::create_dir_all(STATE_DIR).with_context(|| STATE_DIR.to_string())?;
    if netem {
        std::fs::write(state("netem"), b"")?;
        if let Err(e) = hetch_wan::netem::create(&link) {
            down_quietly();
            return Err(e).context("creating the emulated hosts with netem");
        }
        print_up(&link, pairs, "tc netem on a veth pair".to_string());
        return Ok(());
    }
    let log = std::fs::File::create(state("forwarder.log"))?;
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(["wan", "forward"])
        .arg(format!("--rtt={}us", link.rtt.as_micros()))
        .arg(format!("--rate={}", link.rate))
        .arg(format!("--loss={}", link.loss))
        .arg(format!("--corrupt={}", link.corrupt))
        .arg(format!("--mtu={}", link.mtu))
        .arg(format!("--pairs={pairs}"))
        .args((!link.tuned).then_some("--untuned"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // Its own session: the forwarder outlives this command and its terminal.
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("starting the forwarder")?;
    std::fs::write(state("pid"), child.id().to_string())?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !state("ready").exists() {
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(state("forwarder.log")).unwrap_or_default();
            down_quietly();
            bail!(
                "the WAN forwarder stopped ({status}): {}",
                log.trim().lines().last().unwrap_or("no message")
            );
        }
        if Instant::now() > deadline {
            down_quietly();
            bail!("the WAN forwarder did not come up within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    print_up(
        &link,
        pairs,
        format!("userspace TUN delay line (pid {})", child.id()),
    );
    Ok(())
}

fn print_up(link: &Link, pairs: u8, how: String) {
    let hosts: Vec<String> = hosts(pairs)
        .iter()
        .map(|h| format!("{} = {} (netns {})", h.name, h.addr, h.netns))
        .collect();
    println!(
        "hetch-lab wan: up: {}; {}RTT {:?}, rate {}, loss {}%, corrupt {}%, MTU {}, TCP buffers {}; link: {how}",
        hosts.join(", "),
        if pairs > 1 { "each host's link: " } else { "" },
        link.rtt,
        if link.rate == 0 {
            "unlimited".to_string()
        } else {
            format!("{} bit/s", link.rate * 8)
        },
        link.loss * 100.0,
        link.corrupt * 100.0,
        link.mtu,
        if link.tuned { "tuned (64 MiB)" } else { "as the namespaces start" },
    );
}

/// The forwarder itself (runs in the background until killed).
pub fn forward(link: Link, pairs: u8) -> anyhow::Result<()> {
    let ports = testbed::create(pairs, &link).context("creating the emulated hosts")?;
    let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _counters = hetch_wan::forward::start(ports, link.direction(), 0x5eed, cut.clone());
    std::fs::write(state("ready"), b"")?;
    // `hetch-lab wan cut` and `restore` make and remove a file: no signals, no sockets.
    loop {
        cut.store(state("cut").exists(), std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Cuts every host's link (`true`: every packet is dropped from now on, silently) or
/// restores them. Only the delay line can: netem links have no forwarder.
pub fn cut(on: bool) -> anyhow::Result<()> {
    if forwarder_pid().is_none() {
        bail!(
            "the WAN testbed is not up with a delay-line link (`hetch-lab wan up --link delay-line`)"
        );
    }
    if on {
        std::fs::write(state("cut"), b"")?;
    } else if let Err(e) = std::fs::remove_file(state("cut")) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Err(e).context(state("cut").display().to_string());
        }
    }
    // The forwarder looks every 20 ms: wait until it has certainly seen it.
    std::thread::sleep(Duration::from_millis(60));
    eprintln!(
        "hetch-lab wan: link {}",
        if on { "cut" } else { "restored" }
    );
    Ok(())
}

/// Stops the testbed and removes everything it made.
pub fn down() -> anyhow::Result<()> {
    let was_up = forwarder_pid().is_some() || !testbed::existing_namespaces().is_empty();
    down_quietly();
    eprintln!(
        "hetch-lab wan: {}",
        if was_up {
            "down"
        } else {
            "was not up (nothing to remove)"
        }
    );
    Ok(())
}

fn down_quietly() {
    if let Some(pid) = forwarder_pid() {
        // SAFETY: plain kill(2) on a pid we started.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    testbed::remove_namespaces();
    let _ = std::fs::remove_dir_all(STATE_DIR);
}

/// The forwarder's pid, if it is running.
fn forwarder_pid() -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(state("pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    // A pid may be reused: check that it is one of ours.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let is_ours = cmdline.windows(7).any(|w| w == b"forward");
    is_ours.then_some(pid)
}

fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// Runs `cmd` on host `host` (`a`, `b`, `a1`, `b3`, ...) in place of this process.
pub fn exec(host: &str, cmd: &[String]) -> anyhow::Result<ExitCode> {
    let Some(h) = Host::named(host) else {
        bail!(
            "unknown host '{host}': the testbed's hosts are a and b, or with --pairs N a1..aN and b1..bN"
        );
    };
    if !netns_exists(&h.netns) {
        let up: Vec<String> = testbed::existing_namespaces()
            .iter()
            .filter_map(|ns| Host::of_netns(ns).map(|h| h.name))
            .collect();
        if up.is_empty() {
            bail!(
                "the WAN testbed is not up (no netns {}); run `hetch-lab wan up`",
                h.netns
            );
        }
        bail!(
            "the WAN testbed has no host {host} (no netns {}); its hosts are {}",
            h.netns,
            up.join(", ")
        );
    }
    // Replace this process (rather than wait for a child), so that signals sent to
    // `hetch-lab wan exec` reach the command itself.
    use std::os::unix::process::CommandExt;
    let err = Command::new("ip")
        .args(["netns", "exec", &h.netns])
        .args(cmd)
        .exec();
    Err(err).context("running ip netns exec")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losses_parse() {
        assert_eq!(parse_loss("0.1%").unwrap(), 0.001);
        assert_eq!(parse_loss("0.01").unwrap(), 0.01);
        assert!(parse_loss("150%").is_err() && parse_loss("x").is_err());
    }
}
