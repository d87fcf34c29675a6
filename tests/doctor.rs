//! `hetch doctor` in a network namespace of its own (root only): with the kernel's
//! default TCP buffer limits, a 2 Gbit/s path at 100 ms is found limited by both
//! windows, each finding with a `sysctl` line; once the printed lines are run there,
//! the doctor finds nothing and predicts the path's rate.

mod util;

use std::process::Command;

use util::*;

/// A network namespace, deleted when the test ends however it ends.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let name = format!("hetch-doctor-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        let st = Command::new("ip").args(["netns", "add", &name]).status();
        assert!(st.is_ok_and(|s| s.success()), "ip netns add {name}");
        Netns(name)
    }

    /// Runs `sh -c line` in the namespace.
    fn sh(&self, line: &str) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0, "sh", "-c", line])
            .output()
            .expect("ip netns exec");
        assert!(out.status.success(), "{line}: {out:?}");
    }

    /// `hetch doctor ARGS --json` in the namespace.
    fn doctor(&self, a: &[&str]) -> serde_json::Value {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0, BIN, "doctor", "--json"])
            .args(a)
            .output()
            .expect("ip netns exec hetch doctor");
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The findings about TCP windows (a host may add others, e.g. its CPU governor).
fn windows(report: &serde_json::Value) -> Vec<serde_json::Value> {
    let all = report["findings"].as_array().cloned().unwrap_or_default();
    all.into_iter()
        .filter(|f| f["link"].as_str().is_some_and(|l| l.ends_with("window")))
        .collect()
}

#[test]
fn default_buffer_limits_are_found_and_the_printed_fix_removes_the_finding() {
    let has_ip = Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !is_root() || !has_ip {
        eprintln!("SKIPPED: needs root and `ip` (network namespaces)");
        return;
    }
    let ns = Netns::new();
    // The kernel's defaults, set explicitly so that the test does not depend on them.
    ns.sh("sysctl -q -w net.ipv4.tcp_rmem='4096 131072 6291456'");
    ns.sh("sysctl -q -w net.ipv4.tcp_wmem='4096 16384 4194304'");
    let path = ["--rtt", "100ms", "--rate", "2gbit"];

    let before = ns.doctor(&path);
    assert_eq!(before["bdp"], 25_000_000, "{before}");
    let found = windows(&before);
    let links: Vec<_> = found.iter().map(|f| f["link"].clone()).collect();
    assert_eq!(links, ["send window", "receive window"], "{before}");
    // 4 streams of 2 MiB (send) carry 84 MB/s over 100 ms: a third of the path.
    assert_eq!(before["limited_by"], "send window", "{before}");
    assert_eq!(before["predicted"], 83_886_080, "{before}");
    for f in &found {
        let fix = f["fix"][0].as_str().unwrap();
        assert!(fix.starts_with("sysctl -w net.ipv4.tcp_"), "{f}");
        ns.sh(fix);
    }

    let after = ns.doctor(&path);
    assert!(windows(&after).is_empty(), "{after}");
    assert_eq!(after["predicted"], 250_000_000, "{after}");
    // More streams instead of larger buffers: the second fix, for the same limits.
    ns.sh("sysctl -q -w net.ipv4.tcp_rmem='4096 131072 6291456'");
    let wider = ns.doctor(&["--rtt", "100ms", "--rate", "2gbit", "--streams", "8"]);
    assert!(windows(&wider).is_empty(), "{wider}");
}
