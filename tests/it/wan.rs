//! `hetch-lab wan` end to end (root only): bring the testbed up with a 20 ms link, run a
//! real `hetch serve` on host b, push a tree to it from host a, check the copy, bring
//! the testbed down and check that nothing is left; the same with two pairs of hosts
//! and one directory they share. Skipped, with a message, where it cannot run (not
//! root, no /dev/net/tun, no `ip`).

use crate::util;

use std::path::Path;
use std::process::Command;

use util::testbed;
use util::*;

/// Starts `hetch serve` on host b (10.77.0.2:7878) serving `root`, with its state under
/// `dir`; returns the process and the token.
fn serve_on_b(dir: &Path, root: &Path, extra: &[&str]) -> (std::process::Child, String) {
    testbed::serve("b", "10.77.0.2:7878", dir, root, extra)
}

/// `hetch cp ARGS` on host a (started, not waited for).
fn cp_on_a(token: &str, args: &[std::ffi::OsString]) -> Running {
    cp_on("a", token, args)
}

/// `hetch cp ARGS` on `host` (started, not waited for).
fn cp_on(host: &str, token: &str, args: &[std::ffi::OsString]) -> Running {
    let mut full = Vec::from(args![
        "wan",
        "exec",
        host,
        "--",
        env!("CARGO_BIN_EXE_hetch"),
        "cp"
    ]);
    full.extend(args.iter().cloned());
    spawn(&full, &[("HETCH_TOKEN", token)])
}

/// The `reconnects` field of a `--json` summary.
fn reconnects(out: &Out) -> u64 {
    top_field(out, "reconnects")
}

/// Top-level number `field` of a `--json` summary.
fn top_field(out: &Out, field: &str) -> u64 {
    let line = out.stdout.lines().rev().find(|l| !l.trim().is_empty());
    let v: serde_json::Value = serde_json::from_str(line.expect("JSON on stdout")).unwrap();
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in --json"))
}

/// A link that damages TCP payloads and fixes their checksums (what TCP lets through
/// on real links, rarely): with TLS each damaged record ends its connection, a data
/// stream's joined again within the session, the control connection's ending the
/// session, and the one `cp` recovers each time until the copy is complete and
/// identical.
#[test]
fn tls_copy_through_a_link_that_damages_segments_recovers_and_is_identical() {
    let Some(_turn) = testbed::turn("hetch-lab wan corruption test") else {
        return;
    };
    let t = tempdir();
    let src = t.path().join("data");
    Tree::new(&src)
        .file("big.bin", 48 << 20, 93)
        .file("small", 7000, 94);
    let _down = testbed::Down;
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
    let rejoined = top_field(&out, "streams_rejoined");
    eprintln!(
        "recovered from {} lost sessions, {rejoined} data streams joined again",
        reconnects(&out)
    );
    assert!(
        reconnects(&out) + rejoined >= 1,
        "no connection was lost?\n{out:?}"
    );
    assert_same_tree(&src, &root.join("data"));
    assert_no_temp_files(&root);
}

/// The `--json` summary's number `field` (at any depth).
fn json_count(out: &Out, field: &str) -> u64 {
    let line = out.stdout.lines().rev().find(|l| !l.trim().is_empty());
    let v: serde_json::Value = serde_json::from_str(line.expect("JSON on stdout")).unwrap();
    let found = v.get(field).or_else(|| v["retried_because"].get(field));
    found
        .and_then(|n| n.as_u64())
        .unwrap_or_else(|| panic!("{field} in --json: {v}"))
}

/// Plain data streams through a link that damages 2% of TCP segments past their
/// checksum: nearly every 4 MiB block (hundreds of segments) arrives damaged
/// somewhere, and is repaired from the patches that differ rather than sent whole
/// again (which would fail as often); the frames' MACs catch damage to their headers
/// and a new session resumes. Pushed and pulled back, identical both ways.
#[test]
fn plain_copies_through_a_link_that_damages_2_percent_of_segments_are_repaired_and_identical() {
    let Some(_turn) = testbed::turn("hetch-lab wan 2% damage test") else {
        return;
    };
    let t = tempdir();
    let src = t.path().join("data");
    Tree::new(&src)
        .file("big.bin", 24 << 20, 96)
        .file("small", 9000, 97);
    let _down = testbed::Down;
    let up = args![
        "wan",
        "up",
        "--rtt",
        "2ms",
        "--rate",
        "2gbit",
        "--link",
        "delay-line",
        "--corrupt",
        "2%"
    ];
    hetch(&up, &[]).ok();
    let root = t.path().join("root");
    let (mut server, token) = serve_on_b(t.path(), &root, &[]);
    let known = t.path().join("known_hosts");
    let cp = |from: &std::ffi::OsStr, to: &std::ffi::OsStr| {
        cp_on_a(
            &token,
            &args![
                "-q",
                "--json",
                "--known-hosts",
                &known,
                "--no-encrypt",
                from,
                to
            ],
        )
        .wait()
    };
    let pushed = cp(src.as_os_str(), "hetch://10.77.0.2:7878/data".as_ref());
    let back = t.path().join("back");
    let pulled = cp("hetch://10.77.0.2:7878/data".as_ref(), back.as_os_str());
    let _ = server.kill();
    let _ = server.wait();
    pushed.ok();
    pulled.ok();
    for out in [&pushed, &pulled] {
        assert!(
            json_count(out, "repaired_blocks") >= 1,
            "no block repaired?\n{out:?}"
        );
        assert!(json_count(out, "patch_bytes") >= 4096, "{out:?}");
    }
    assert_same_tree(&src, &root.join("data"));
    assert_same_tree(&src, &back);
    assert_no_temp_files(&root);
    assert_no_temp_files(&back);
}

/// The link cut for longer than the stall timeout, then restored: both ends notice
/// the silence, and the one `cp` resumes once the path is back.
#[test]
fn a_link_cut_longer_than_the_stall_timeout_then_restored_is_recovered_from() {
    let Some(_turn) = testbed::turn("hetch-lab wan cut test") else {
        return;
    };
    let t = tempdir();
    let src = t.path().join("data");
    Tree::new(&src).file("big.bin", 32 << 20, 95);
    let _down = testbed::Down;
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

/// Both hosts at the namespaces' own socket-buffer limits, 100 ms apart: one stream's
/// window carries a fraction of the path, so autotuning opens more streams (as many as
/// it may); given --streams it keeps them, and says so.
#[test]
fn autotuning_opens_more_streams_on_a_long_path_between_untuned_hosts() {
    let Some(_turn) = testbed::turn("hetch-lab wan autotuning test") else {
        return;
    };
    let t = tempdir();
    let src = t.path().join("data");
    Tree::new(&src).file("one.bin", 1 << 20, 93);
    let _down = testbed::Down;
    hetch(&args!["wan", "up", "--untuned", "--rtt", "100ms"], &[]).ok();
    let root = t.path().join("root");
    let (mut server, token) = serve_on_b(t.path(), &root, &[]);
    let known = t.path().join("known_hosts");
    let push = |extra: &[&str], to: &str| {
        let mut a = Vec::from(args!["-q", "--json", "--known-hosts", &known]);
        a.extend(extra.iter().map(Into::into));
        a.extend(args![&src, format!("hetch://10.77.0.2:7878/{to}")]);
        let out = cp_on_a(&token, &a).wait();
        out.ok();
        out.json_value()["autotune"].clone()
    };
    let tuned = push(&[], "auto");
    let fixed = push(&["--streams", "3"], "fixed");
    let off = push(&["--no-autotune"], "off");
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(tuned["enabled"], true, "{tuned}");
    assert_eq!(tuned["streams"], 12, "{tuned}");
    let rtt = tuned["rtt_ms"].as_f64().unwrap();
    assert!((90.0..1000.0).contains(&rtt), "{tuned}");
    assert!(
        tuned["why"].as_str().unwrap().contains("12 streams"),
        "{tuned}"
    );
    assert_eq!(fixed["enabled"], false, "{fixed}");
    assert_eq!(fixed["streams"], 3, "{fixed}");
    assert_eq!(fixed["why"], "--streams given", "{fixed}");
    assert_eq!(
        (off["streams"].as_u64(), off["why"].as_str()),
        (Some(4), Some("--no-autotune"))
    );
    for to in ["auto", "fixed", "off"] {
        assert_same_tree(&src, &root.join(to));
    }
}

#[test]
fn push_across_the_emulated_wan_then_down_leaves_nothing() {
    let Some(_turn) = testbed::turn("hetch-lab wan test") else {
        return;
    };
    let t = tempdir();
    let src = t.path().join("data");
    Tree::new(&src)
        .file("big.bin", 6 << 20, 91)
        .file("a/small", 5000, 92)
        .bytes("a/empty", b"");
    let _down = testbed::Down;
    hetch(&args!["wan", "up", "--rtt", "20ms", "--rate", "1gbit"], &[]).ok();
    // Both hosts exist and see each other's addresses only through the link.
    for ns in ["hetch-a", "hetch-b"] {
        assert!(Path::new("/run/netns").join(ns).exists(), "{ns} missing");
    }
    // Each host resolves the other by name.
    assert_resolves("hetch-a", "hetch-b", "10.77.0.2");

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
    let Some(_turn) = testbed::turn("hetch-lab wan link-choice test") else {
        return;
    };
    let _down = testbed::Down;
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

/// Asserts that in namespace `netns`, `name` resolves to `addr` (servers that look up
/// their own address, as GridFTP does, need it: the namespaces have no DNS).
fn assert_resolves(netns: &str, name: &str, addr: &str) {
    let lookup = Command::new("ip")
        .args(["netns", "exec", netns, "getent", "hosts", name])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&lookup.stdout).contains(addr),
        "{netns}: {name}: {lookup:?}"
    );
}

/// The testbed's namespaces that exist now.
fn testbed_namespaces() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("hetch-a") || n.starts_with("hetch-b"))
        .collect();
    names.sort();
    names
}

/// Two pairs of hosts, each on its own 200 MB/s link, every one reaching every other,
/// and two `hetch serve` nodes (b1, b2) serving one directory, as nodes on a shared file system do: a1 pushes to b2
/// while a2 pushes to b1, across each other's links, and both copies land whole in the
/// one directory the test (outside every namespace) reads. Down, even after the
/// forwarder crashed and its state is gone, leaves no namespace.
#[test]
fn two_pairs_push_crosswise_at_once_into_one_shared_directory_then_down_leaves_nothing() {
    let Some(_turn) = testbed::turn("hetch-lab wan --pairs test") else {
        return;
    };
    let t = tempdir();
    let (src1, src2) = (t.path().join("one"), t.path().join("two"));
    Tree::new(&src1)
        .file("big.bin", 12 << 20, 101)
        .file("d/small", 3000, 102);
    Tree::new(&src2)
        .file("big.bin", 12 << 20, 103)
        .bytes("empty", b"");
    let _down = testbed::Down;
    let up = hetch(
        &args!["wan", "up", "--pairs", "2", "--rtt", "10ms", "--rate", "200M"],
        &[],
    );
    up.ok();
    assert!(up.stdout.contains("b2 = 10.77.0.102"), "{up:?}");
    assert_eq!(
        testbed_namespaces(),
        ["hetch-a1", "hetch-a2", "hetch-b1", "hetch-b2"]
    );
    // Every host resolves every other by name.
    assert_resolves("hetch-a1", "hetch-b2", "10.77.0.102");
    assert_resolves("hetch-b1", "hetch-a2", "10.77.0.2");

    // Every host reaches every other: with nothing listening yet, each connection is
    // refused by the other host's kernel (an unreachable one would go unanswered).
    let hosts = [("a1", 1), ("a2", 2), ("b1", 101), ("b2", 102)];
    for (from, _) in hosts {
        for (_, to) in hosts.iter().filter(|(h, _)| *h != from) {
            let url = format!("hetch://10.77.0.{to}:7878/x");
            let probe = t.path().join("known_hosts.probe");
            let out = cp_on(
                from,
                "0123456789abcdef0123456789abcdef",
                &args!["--retries", "0", "--known-hosts", &probe, &src1, &url],
            )
            .wait();
            assert!(
                out.stderr.contains("Connection refused"),
                "{from} -> {url}: {out:?}"
            );
        }
    }

    let shared = t.path().join("shared");
    let (b1, b2) = (t.path().join("b1"), t.path().join("b2"));
    let (mut s1, token1) = testbed::serve("b1", "10.77.0.101:7878", &b1, &shared, &[]);
    let (mut s2, token2) = testbed::serve("b2", "10.77.0.102:7878", &b2, &shared, &[]);
    let push = |host: &str, token: &str, src: &Path, url: &str| {
        let known = t.path().join(format!("known_hosts.{host}"));
        cp_on(
            host,
            token,
            &args!["-q", "--json", "--known-hosts", &known, src, url],
        )
    };
    let one = push("a1", &token2, &src1, "hetch://10.77.0.102:7878/from-a1");
    let two = push("a2", &token1, &src2, "hetch://10.77.0.101:7878/from-a2");
    let (one, two) = (one.wait(), two.wait());
    for s in [&mut s1, &mut s2] {
        let _ = s.kill();
        let _ = s.wait();
    }
    one.ok();
    two.ok();
    assert_eq!(
        (one.json().files, two.json().files),
        (2, 2),
        "{one:?}\n{two:?}"
    );
    assert_same_tree(&src1, &shared.join("from-a1"));
    assert_same_tree(&src2, &shared.join("from-a2"));
    assert_no_temp_files(&shared);

    // As after a crash: the forwarder killed and its state gone, `down` still finds the
    // namespaces by name.
    let pid = std::fs::read_to_string("/run/hetch-wan/pid").unwrap();
    let killed = Command::new("kill").args(["-9", pid.trim()]).status();
    assert!(killed.unwrap().success());
    std::fs::remove_dir_all("/run/hetch-wan").unwrap();
    hetch(&args!["wan", "down"], &[]).ok();
    assert_eq!(testbed_namespaces(), Vec::<String>::new(), "left behind");
    assert!(
        !Path::new("/etc/netns/hetch-a1").exists(),
        "hosts file left"
    );
    assert!(!Path::new("/run/hetch-wan").exists(), "state left behind");
}
