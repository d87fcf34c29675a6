//! `hetch doctor` (root only). In a network namespace of its own: with the kernel's
//! default TCP buffer limits, a 2 Gbit/s path at 100 ms is found limited by both
//! windows, each finding with a `sysctl` line; once the printed lines are run there,
//! the doctor finds nothing and predicts the path's rate. On the WAN testbed, against
//! real servers: a low MTU on one side is found from the other, its fix clears it;
//! `--apply` on both hosts clears the window finding and the measured throughput of a
//! push rises; `--undo` puts the old limits back.

use crate::util;

use std::path::Path;
use std::process::Command;

use util::testbed;
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
        util::skipped("needs root and `ip` (network namespaces)");
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
    // The path's rate, unless a measured link (hashing) is slower on a loaded machine.
    let slowest = after["measured"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["rate"].as_u64())
        .min()
        .unwrap_or(u64::MAX);
    assert_eq!(
        after["predicted"].as_u64(),
        Some(slowest.min(250_000_000)),
        "{after}"
    );
    // More streams instead of larger buffers: the second fix, for the same limits.
    ns.sh("sysctl -q -w net.ipv4.tcp_rmem='4096 131072 6291456'");
    let wider = ns.doctor(&["--rtt", "100ms", "--rate", "2gbit", "--streams", "8"]);
    assert!(windows(&wider).is_empty(), "{wider}");
}

/// `hetch ARGS` on testbed host `host` (a or b) with `env`; asserts success and
/// returns stdout.
fn on(host: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(lab_bin())
        .args(["wan", "exec", host, "--", BIN])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("hetch-lab wan exec");
    assert!(out.status.success(), "{host}: hetch {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Starts `hetch serve` on `host` listening on `listen`, below `dir`; returns it and
/// its token.
fn serve(host: &str, listen: &str, dir: &Path) -> (std::process::Child, String) {
    let here = dir.join(format!("server-{host}"));
    testbed::serve(host, listen, &here, &here.join("root"), &[])
}

fn links(report: &serde_json::Value) -> Vec<String> {
    let all = report["findings"].as_array().cloned().unwrap_or_default();
    all.iter()
        .map(|f| f["link"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn on_the_testbed_a_low_mtu_and_small_windows_are_found_and_applying_the_fixes_raises_throughput() {
    let Some(_turn) = testbed::turn("hetch doctor on the testbed") else {
        return;
    };
    let t = tempdir();
    let _down = testbed::Down;
    let up = Command::new(lab_bin())
        .args([
            "wan",
            "up",
            "--untuned",
            "--rtt",
            "100ms",
            "--rate",
            "2gbit",
        ])
        .output()
        .unwrap();
    assert!(up.status.success(), "{up:?}");
    let (mut server_b, token_b) = serve("b", "10.77.0.2:7878", t.path());
    let (mut server_a, _) = serve("a", "10.77.0.1:7879", t.path());
    let config = |h: &str| t.path().join(format!("doctor-{h}")).display().to_string();
    let (env_a, env_b) = (config("a"), config("b"));
    let env = |dir: &str| [("HETCH_CONFIG_DIR", dir.to_string())];
    let doctor = |host: &str, dir: &str, peer: &str| -> serde_json::Value {
        let e = env(dir);
        let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let out = on(host, &["doctor", "--json", "--rate", "2gbit", peer], &e);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    };

    // A low MTU on host a's side is found from host b, through the path's MSS.
    Command::new("ip")
        .args([
            "netns", "exec", "hetch-a", "ip", "link", "set", "dev", "wan0", "mtu", "1500",
        ])
        .status()
        .unwrap();
    let from_b = doctor("b", &env_b, "hetch://10.77.0.1:7879");
    let mtu = from_b["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["link"] == "mtu")
        .unwrap_or_else(|| panic!("no MTU finding: {from_b}"))
        .clone();
    assert!(
        mtu["finding"]
            .as_str()
            .unwrap()
            .contains("wan0 is set to 9000"),
        "{mtu}"
    );
    assert_eq!(
        mtu["fix"][0], "on the peer: ip link set dev IFACE mtu 9000",
        "{mtu}"
    );
    Command::new("ip")
        .args([
            "netns", "exec", "hetch-a", "ip", "link", "set", "dev", "wan0", "mtu", "9000",
        ])
        .status()
        .unwrap();
    let rtt = from_b["rtt_ms"].as_f64().unwrap();
    assert!((90.0..1000.0).contains(&rtt), "{from_b}");
    assert!(!links(&doctor("b", &env_b, "hetch://10.77.0.1:7879")).contains(&"mtu".into()));

    // Small windows on a: found, with their sysctl lines.
    let before = doctor("a", &env_a, "hetch://10.77.0.2:7878");
    assert!(links(&before).contains(&"send window".into()), "{before}");
    let src = t.path().join("big.bin");
    Tree::new(t.path()).file("big.bin", 128 << 20, 7);
    let known = t.path().join("known_hosts").display().to_string();
    let push = |to: &str| -> f64 {
        let dest = format!("hetch://10.77.0.2:7878/{to}");
        let a = [
            "cp",
            "-q",
            "--json",
            "--streams",
            "1",
            "--known-hosts",
            &known,
        ];
        let mut a: Vec<&str> = a.to_vec();
        a.extend([src.to_str().unwrap(), dest.as_str()]);
        let out = on("a", &a, &[("HETCH_TOKEN", token_b.as_str())]);
        let v: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        v["bytes_per_second"].as_f64().unwrap()
    };
    // One stream, so the window is what limits it: before --apply it caps the stream
    // near 21 MB/s, whatever else the machine runs; after, the stream is held back only
    // by the CPU the other tests leave the delay line (a stray loss or a slow start on
    // the shared machine can only lower a push, so the after side takes the better of two).
    let slow = push("before");

    // --apply on both hosts (each is one end of the windows), then nothing is found.
    let e = env(&env_a);
    on(
        "a",
        &[
            "doctor",
            "--apply",
            "--rate",
            "2gbit",
            "hetch://10.77.0.2:7878",
        ],
        &[(e[0].0, &e[0].1)],
    );
    let e = env(&env_b);
    on(
        "b",
        &[
            "doctor",
            "--apply",
            "--rate",
            "2gbit",
            "hetch://10.77.0.1:7879",
        ],
        &[(e[0].0, &e[0].1)],
    );
    let after = doctor("a", &env_a, "hetch://10.77.0.2:7878");
    assert!(
        !links(&after).iter().any(|l| l.ends_with("window")),
        "{after}"
    );
    assert!(Path::new(&env_a).join("doctor-undo.sh").exists());
    let fast = push("after").max(push("after2"));
    let _ = (
        server_a.kill(),
        server_b.kill(),
        server_a.wait(),
        server_b.wait(),
    );
    eprintln!("128 MiB push, 1 stream: before {slow:.0} B/s, after --apply {fast:.0} B/s");
    // The same push, the same link: the applied limits let one stream carry more.
    assert!(
        fast > 1.5 * slow,
        "before {slow:.0} B/s, after {fast:.0} B/s"
    );

    // --undo puts back the limit --apply replaced, and forgets it.
    let e = env(&env_a);
    on("a", &["doctor", "--undo"], &[(e[0].0, &e[0].1)]);
    let wmem = Command::new("ip")
        .args([
            "netns",
            "exec",
            "hetch-a",
            "cat",
            "/proc/sys/net/ipv4/tcp_wmem",
        ])
        .output()
        .unwrap();
    let max = String::from_utf8_lossy(&wmem.stdout);
    assert_eq!(max.split_whitespace().last(), Some("4194304"), "{max}");
    assert!(!Path::new(&env_a).join("doctor-undo.sh").exists());
}
