//! `hetch-lab wan` end to end (root only): bring the testbed up with a 20 ms link, run a
//! real `hetch serve` on host b, push a tree to it from host a, check the copy, bring
//! the testbed down and check that nothing is left. Skipped, with a message, where it
//! cannot run (not root, no /dev/net/tun, no `ip`).

mod util;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use util::*;

/// Brings the testbed down when the test ends, however it ends.
struct Down;
impl Drop for Down {
    fn drop(&mut self) {
        let _ = hetch(&args!["wan", "down"], &[]);
    }
}

fn can_run() -> Result<(), &'static str> {
    if !is_root() {
        return Err("not root");
    }
    if !Path::new("/dev/net/tun").exists() {
        return Err("no /dev/net/tun");
    }
    let ip = Command::new("ip").arg("-V").output();
    if !ip.is_ok_and(|o| o.status.success()) {
        return Err("no `ip` command");
    }
    Ok(())
}

/// Starts `hetch serve` on host b (10.77.0.2:7878) serving `root`, with its state under
/// `dir`; returns the process and the token.
fn serve_on_b(dir: &Path, root: &Path, extra: &[&str]) -> (std::process::Child, String) {
    std::fs::create_dir_all(root).unwrap();
    let state = dir.join("state");
    let server = Command::new(lab_bin())
        .args([
            "wan",
            "exec",
            "b",
            "--",
            env!("CARGO_BIN_EXE_hetch"),
            "serve",
            "--listen",
            "10.77.0.2:7878",
        ])
        .arg("--root")
        .arg(root)
        .arg("--state-dir")
        .arg(&state)
        .args(extra)
        .env("HETCH_CONFIG_DIR", dir.join("config"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let token_path = state.join("token");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !token_path.exists()
        || std::fs::read_to_string(&token_path)
            .unwrap_or_default()
            .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the server on host b did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200)); // let it reach listen()
    let token = std::fs::read_to_string(&token_path).unwrap();
    (server, token.trim().to_string())
}

/// `hetch cp ARGS` on host a (started, not waited for).
fn cp_on_a(token: &str, args: &[std::ffi::OsString]) -> Running {
    let mut full = Vec::from(args![
        "wan",
        "exec",
        "a",
        "--",
        env!("CARGO_BIN_EXE_hetch"),
        "cp"
    ]);
    full.extend(args.iter().cloned());
    spawn(&full, &[("HETCH_TOKEN", token)])
}

/// The `reconnects` field of a `--json` summary.
fn reconnects(out: &Out) -> u64 {
    let line = out.stdout.lines().rev().find(|l| !l.trim().is_empty());
    let v: serde_json::Value = serde_json::from_str(line.expect("JSON on stdout")).unwrap();
    v["reconnects"].as_u64().expect("reconnects in --json")
}

/// A link that damages TCP payloads and fixes their checksums (what TCP lets through
/// on real links, rarely): with TLS each damaged record ends the session, and the one
/// `cp` recovers each time until the copy is complete and identical.
#[test]
fn tls_copy_through_a_link_that_damages_segments_recovers_and_is_identical() {
    let Some(_turn) = testbed_turn("hetch-lab wan corruption test") else {
        return;
    };
    let t = tempdir();
    let src = t.path().join("data");
    Tree::new(&src)
        .file("big.bin", 48 << 20, 93)
        .file("small", 7000, 94);
    let _down = Down;
    let up = args![
        "wan",
        "up",
        "--rtt",
        "2ms",
        "--rate",
        "2gbit",
        "--corrupt",
        "0.1%"
    ];
    hetch(&up, &[]).ok();
    let root = t.path().join("root");
    let (mut server, token) = serve_on_b(t.path(), &root, &[]);
    let known = t.path().join("known_hosts");
    let cp = cp_on_a(
        &token,
        &args![
            "-q",
            "--json",
            "--known-hosts",
            &known,
            "--block-size",
            "1M",
            "--retries",
            "20",
            &src,
            "hetch://10.77.0.2:7878/data"
        ],
    );
    let out = cp.wait();
    let _ = server.kill();
    let _ = server.wait();
    out.ok();
    eprintln!("recovered from {} lost sessions", reconnects(&out));
    assert!(reconnects(&out) >= 1, "no session was lost?\n{out:?}");
    assert_same_tree(&src, &root.join("data"));
    assert_no_temp_files(&root);
}

/// The link cut for longer than the stall timeout, then restored: both ends notice
/// the silence, and the one `cp` resumes once the path is back.
#[test]
fn a_link_cut_longer_than_the_stall_timeout_then_restored_is_recovered_from() {
    let Some(_turn) = testbed_turn("hetch-lab wan cut test") else {
        return;
    };
    let t = tempdir();
    let src = t.path().join("data");
    Tree::new(&src).file("big.bin", 32 << 20, 95);
    let _down = Down;
    hetch(
        &args![
            "wan",
            "up",
            "--rtt",
            "10ms",
            "--rate",
            "100mbit",
            "--link",
            "delay-line"
        ],
        &[],
    )
    .ok();
    let root = t.path().join("root");
    let (mut server, token) = serve_on_b(t.path(), &root, &["--stall-timeout", "3s"]);
    let known = t.path().join("known_hosts");
    let mut cp = cp_on_a(
        &token,
        &args![
            "-q",
            "--json",
            "--known-hosts",
            &known,
            "--block-size",
            "256K",
            "--stall-timeout",
            "3s",
            &src,
            "hetch://10.77.0.2:7878/data"
        ],
    );
    let journal = root.join("data/.big.bin.hetch-journal");
    wait_for("blocks verified at the server", || {
        std::fs::metadata(&journal).is_ok_and(|m| m.len() > 40 + 8 * 44)
    });
    hetch(&args!["wan", "cut"], &[]).ok();
    wait_for("the client to notice the silence", || {
        cp.stderr_so_far().contains("stopped answering") || cp.exited()
    });
    hetch(&args!["wan", "restore"], &[]).ok();
    let out = cp.wait();
    let _ = server.kill();
    let _ = server.wait();
    out.ok();
    assert!(reconnects(&out) >= 1, "{out:?}");
    assert_same_tree(&src, &root.join("data"));
}

/// The tests share one testbed (fixed namespace names), so they take turns.
static TESTBED: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// This test's turn with the testbed, or `None` (having said why) where it cannot run.
fn testbed_turn(what: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    if let Err(why) = can_run() {
        eprintln!("SKIPPED {what}: {why}");
        return None;
    }
    Some(TESTBED.lock().unwrap_or_else(|e| e.into_inner()))
}

#[test]
fn push_across_the_emulated_wan_then_down_leaves_nothing() {
    let Some(_turn) = testbed_turn("hetch-lab wan test") else {
        return;
    };
    let t = tempdir();
    let src = t.path().join("data");
    Tree::new(&src)
        .file("big.bin", 6 << 20, 91)
        .file("a/small", 5000, 92)
        .bytes("a/empty", b"");
    let _down = Down;
    hetch(&args!["wan", "up", "--rtt", "20ms", "--rate", "1gbit"], &[]).ok();
    // Both hosts exist and see each other's addresses only through the link.
    for ns in ["hetch-a", "hetch-b"] {
        assert!(Path::new("/run/netns").join(ns).exists(), "{ns} missing");
    }
    // Each host resolves the other by name (servers that look up their own address,
    // as GridFTP does, need it: the namespaces have no DNS).
    let lookup = Command::new("ip")
        .args(["netns", "exec", "hetch-a", "getent", "hosts", "hetch-b"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&lookup.stdout).contains("10.77.0.2"),
        "{lookup:?}"
    );

    let root = t.path().join("root");
    let (mut server, token) = serve_on_b(t.path(), &root, &[]);
    let known = t.path().join("known_hosts");
    let out = hetch(
        &args![
            "wan",
            "exec",
            "a",
            "--",
            env!("CARGO_BIN_EXE_hetch"),
            "cp",
            "-q",
            "--json",
            "--known-hosts",
            &known,
            &src,
            "hetch://10.77.0.2:7878/data"
        ],
        &[("HETCH_TOKEN", token.trim())],
    );
    let _ = server.kill();
    let _ = server.wait();
    out.ok();
    assert_eq!(out.json().files, 3, "{out:?}");
    assert_same_tree(&src, &root.join("data"));

    hetch(&args!["wan", "down"], &[]).ok();
    for ns in ["hetch-a", "hetch-b"] {
        assert!(
            !Path::new("/run/netns").join(ns).exists(),
            "{ns} left behind"
        );
    }
    assert!(!Path::new("/run/hetch-wan").exists(), "state left behind");
    assert!(
        !Path::new("/etc/netns/hetch-a").exists(),
        "hosts file left behind"
    );
    // Down again is harmless.
    hetch(&args!["wan", "down"], &[]).ok();
}

#[test]
fn auto_picks_netem_exactly_when_the_kernel_has_it_and_refuses_it_clearly_otherwise() {
    let Some(_turn) = testbed_turn("hetch-lab wan link-choice test") else {
        return;
    };
    let _down = Down;
    let netem = hetch(&args!["wan", "up", "--link", "netem", "--rtt", "2ms"], &[]);
    let has_netem = netem.code() == Some(0);
    if has_netem {
        assert!(netem.stdout.contains("tc netem"), "{netem:?}");
    } else {
        netem.one_line_naming(&["netem", "delay-line"]);
        assert!(
            !Path::new("/run/netns/hetch-a").exists(),
            "a refused netem link leaves no host behind"
        );
    }
    hetch(&args!["wan", "down"], &[]).ok();
    let auto = hetch(&args!["wan", "up", "--link", "auto", "--rtt", "2ms"], &[]);
    auto.ok();
    let used = if has_netem {
        "tc netem"
    } else {
        "userspace TUN delay line"
    };
    assert!(auto.stdout.contains(used), "expected {used}: {auto:?}");
    hetch(&args!["wan", "down"], &[]).ok();
    assert!(!Path::new("/run/netns/hetch-a").exists());
}
