//! `hetch-lab bench` end to end on tiny datasets: a loopback sweep with hetch and iperf3
//! (the limit), resuming a results file, the report it writes; a loopback streaming
//! sweep (hetch following a writer, beside a bulk copy of the same files); and, as
//! root, a sweep through the `hetch-lab wan` testbed.

use crate::util;

use std::path::Path;

use serde_json::Value;
use util::*;

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn have(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn sweep_args(t: &Path, extra: &[&str]) -> Vec<std::ffi::OsString> {
    let mut a: Vec<std::ffi::OsString> = args![
        "bench",
        "sweep",
        "--min",
        "1K",
        "--max",
        "64K",
        "--factor",
        "8",
        "--aggregate",
        "256K",
        "--max-files",
        "40",
        "--iterations",
        "2",
        "--no-drop-caches",
        "--data",
        t.join("data"),
        "--results",
        t.join("r.jsonl")
    ]
    .to_vec();
    a.extend(extra.iter().map(|s| s.into()));
    a
}

#[test]
fn loopback_sweep_records_every_run_resumes_and_reports() {
    let tools = if have("iperf3") {
        "hetch,iperf3"
    } else {
        eprintln!("(iperf3 not installed: the limit is left out of this test)");
        "hetch"
    };
    let n_tools = tools.split(',').count();
    let t = tempdir();
    let out = hetch(&sweep_args(t.path(), &["--tools", tools]), &[]);
    out.ok();
    let recs = records(&t.path().join("r.jsonl"));
    // 1K, 8K, 64K: three datasets, each tool twice.
    assert_eq!(recs.len(), 3 * n_tools * 2, "{out:?}");
    for r in &recs {
        assert_eq!(r["ok"], true, "{r}");
        assert!(r["seconds"].as_f64().unwrap() > 0.0);
        assert!(r["point"]["rtt_ms"].is_null(), "loopback runs have no RTT");
    }
    let first = &recs[0]["point"];
    assert_eq!(
        (first["file_size"].as_u64(), first["files"].as_u64()),
        (Some(1024), Some(40))
    );
    let last = &recs.last().unwrap()["point"];
    assert_eq!(
        (last["file_size"].as_u64(), last["files"].as_u64()),
        (Some(65536), Some(4))
    );
    // The copies were checked: hetch's last destination holds the last dataset.
    assert_same_tree(
        &t.path().join("data/src/64KiB-x4"),
        &t.path().join("data/dst/hetch"),
    );

    let md = std::fs::read_to_string(t.path().join("r.md")).unwrap();
    for needle in ["hetch", "1KiB-x40", "64KiB-x4"] {
        assert!(md.contains(needle), "report lacks {needle}:\n{md}");
    }
    assert!(t.path().join("r.csv").exists() && t.path().join("r.json").exists());

    // Running the same command again runs nothing new.
    let again = hetch(&sweep_args(t.path(), &["--tools", tools]), &[]);
    again.ok();
    assert_eq!(
        records(&t.path().join("r.jsonl")).len(),
        recs.len(),
        "{again:?}"
    );

    // A results file cut short (a crash mid-sweep) is completed: only the lost runs run.
    let text = std::fs::read_to_string(t.path().join("r.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let kept = lines.len() - 3;
    let mut cut = lines[..kept].join("\n");
    cut.push_str("\n{\"point\":{\"sui"); // and a torn last line
    std::fs::write(t.path().join("r.jsonl"), cut).unwrap();
    hetch(&sweep_args(t.path(), &["--tools", tools]), &[]).ok();
    let redone = records(&t.path().join("r.jsonl"));
    assert_eq!(redone.len(), recs.len());
    let key = |r: &Value| format!("{}|{}|{}", r["point"]["dataset"], r["tool"], r["iteration"]);
    let mut before: Vec<String> = recs.iter().map(key).collect();
    let mut after: Vec<String> = redone.iter().map(key).collect();
    before.sort();
    after.sort();
    assert_eq!(before, after, "the same runs, each once");

    // The report can be written again from the results alone.
    std::fs::remove_file(t.path().join("r.md")).unwrap();
    hetch(&args!["bench", "report", t.path().join("r.jsonl")], &[]).ok();
    assert!(t.path().join("r.md").exists());
}

#[test]
fn bad_bench_arguments_fail_with_one_line() {
    let t = tempdir();
    let out = hetch(&sweep_args(t.path(), &["--tools", "hetch,nosuchtool"]), &[]);
    out.failed();
    out.one_line_naming(&["nosuchtool"]);
    let out = hetch(
        &sweep_args(t.path(), &["--mode", "streaming", "--tools", "hetch,rsync"]),
        &[],
    );
    out.failed();
    out.one_line_naming(&["streaming", "rsync"]);
    let out = hetch(
        &sweep_args(t.path(), &["--mode", "streaming", "--tools", "iperf3"]),
        &[],
    );
    out.failed();
    out.one_line_naming(&["streaming", "hetch"]);
    let out = hetch(&sweep_args(t.path(), &["--write-rate", "1gbit"]), &[]);
    out.failed();
    out.one_line_naming(&["--write-rate", "streaming"]);
    let out = hetch(
        &sweep_args(
            t.path(),
            &[
                "--mode",
                "streaming",
                "--tools",
                "hetch",
                "--write-size",
                "0",
            ],
        ),
        &[],
    );
    out.failed();
    out.one_line_naming(&["--write-size"]);
    let out = hetch(
        &args![
            "bench",
            "sweep",
            "--min",
            "1M",
            "--max",
            "1K",
            "--data",
            t.path().join("data")
        ],
        &[],
    );
    out.failed();
    out.one_line_naming(&["--min"]);
    let out = hetch(&sweep_args(t.path(), &["--cc", "nosuchcc"]), &[]);
    out.failed();
    out.one_line_naming(&["nosuchcc", "available"]);
    let out = hetch(
        &args!["bench", "report", t.path().join("missing.jsonl")],
        &[],
    );
    out.failed();
    out.one_line_naming(&["missing.jsonl"]);
    assert!(
        !t.path().join("missing.md").exists(),
        "no report of nothing"
    );
    assert!(!t.path().join("r.jsonl").exists(), "nothing ran");
}

#[test]
fn loopback_streaming_sweep_records_both_modes_with_lag_and_reports_them() {
    let tools = if have("iperf3") {
        "hetch,iperf3"
    } else {
        eprintln!("(iperf3 not installed: the limit is left out of this test)");
        "hetch"
    };
    let t = tempdir();
    let results = t.path().join("s.jsonl");
    // The writer is paced (8 MB/s: 2 s per 16 MiB dataset) so that the copy certainly
    // sees the files grow and reports lag.
    let args = args![
        "bench",
        "sweep",
        "--mode",
        "streaming",
        "--min",
        "4M",
        "--max",
        "8M",
        "--aggregate",
        "16M",
        "--iterations",
        "1",
        "--write-rate",
        "8M",
        "--tools",
        tools,
        "--no-drop-caches",
        "--data",
        t.path().join("data"),
        "--results",
        &results
    ];
    let out = hetch(&args, &[]);
    out.ok();
    let recs = records(&results);
    // 4M x 4 and 8M x 2; per dataset: hetch streaming, hetch bulk (and iperf3).
    let per_dataset = if tools.contains("iperf3") { 3 } else { 2 };
    assert_eq!(recs.len(), 2 * per_dataset, "{out:?}");
    for r in &recs {
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["point"]["suite"], "sweep-streaming");
        assert_eq!(r["point"]["write_rate_bps"].as_u64(), Some(64_000_000));
    }
    let of = |tool: &str, mode: &str| -> Vec<&Value> {
        recs.iter()
            .filter(|r| r["tool"] == tool && r["mode"] == mode)
            .collect()
    };
    let (streaming, bulk) = (of("hetch", "streaming"), of("hetch", "bulk"));
    assert_eq!((streaming.len(), bulk.len()), (2, 2), "{out:?}");
    let sizes = |rs: &[&Value]| -> Vec<u64> {
        let mut v: Vec<u64> = rs
            .iter()
            .map(|r| r["point"]["file_size"].as_u64().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(sizes(&streaming), [4 << 20, 8 << 20]);
    assert_eq!(
        sizes(&bulk),
        sizes(&streaming),
        "a bulk run beside each streaming run"
    );
    for r in &streaming {
        let lag = &r["lag"];
        assert!(lag["samples"].as_u64().unwrap() > 0, "{r}");
        let (p50, p99, max) = (
            lag["p50_ms"].as_f64().unwrap(),
            lag["p99_ms"].as_f64().unwrap(),
            lag["max_ms"].as_f64().unwrap(),
        );
        assert!(0.0 <= p50 && p50 <= p99 && p99 <= max, "{r}");
        // The clock runs from the writer's start: the writer and the last file land
        // before the copy exits.
        let secs = r["seconds"].as_f64().unwrap();
        assert!(r["writer_seconds"].as_f64().unwrap() <= secs, "{r}");
        assert!(r["complete_seconds"].as_f64().unwrap() <= secs, "{r}");
    }
    for r in &bulk {
        assert!(r["lag"].is_null() && r["writer_seconds"].is_null(), "{r}");
    }
    // The copies were checked: the last one (bulk, 8M x 2) holds the writer's final
    // files and their done markers.
    let src = t.path().join("data/stream/8MiB-x2");
    assert!(src.join("f000001.done").exists());
    assert_same_tree(&src, &t.path().join("data/dst/hetch"));

    let md = std::fs::read_to_string(t.path().join("s.md")).unwrap();
    for needle in [
        "## sweep-streaming",
        "### loopback",
        "writer 64 Mbit/s",
        "| bulk Gbit/s (sd) | streaming Gbit/s (sd) | streaming/bulk (≥ 0.90) |",
        "| lag p50 ms | lag p99 ms (worst) | p99 < 250 ms |",
        "| 4MiB-x4 | 4 × 4M |",
        "| 8MiB-x2 | 2 × 8M |",
        "(writer-paced)",
    ] {
        assert!(md.contains(needle), "report lacks {needle}:\n{md}");
    }
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(t.path().join("s.json")).unwrap()).unwrap();
    assert_eq!(json["streaming"].as_array().unwrap().len(), 2);
    let csv = std::fs::read_to_string(t.path().join("s.csv")).unwrap();
    assert!(csv
        .lines()
        .next()
        .unwrap()
        .contains(",mode,write_rate_bps,"));
    // The plot draws streaming and bulk against file size: one legend entry each.
    let svg = std::fs::read_to_string(t.path().join("s-sweep-streaming.svg")).unwrap();
    let legend = |label: &str| svg.lines().filter(|l| l.trim() == label).count();
    assert_eq!(
        (legend("hetch"), legend("hetch (streaming)")),
        (1, 1),
        "{svg}"
    );

    // Running the same command again runs nothing new.
    let again = hetch(&args, &[]);
    again.ok();
    assert_eq!(records(&results).len(), recs.len(), "{again:?}");
}

#[test]
fn sweep_through_the_wan_testbed_records_the_link_and_takes_it_down() {
    let Some(_turn) = util::testbed::turn("hetch-lab bench through the testbed") else {
        return;
    };
    // A congestion control outside the host's allowed list (cubic here) makes the
    // harness widen the list for the run, and put it back afterwards.
    let allowed = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
    let before = std::fs::read_to_string(allowed).unwrap();
    let available =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap();
    let cc = if available.split_whitespace().any(|c| c == "cubic") {
        "cubic"
    } else {
        "reno"
    };
    let t = tempdir();
    let out = hetch(
        &sweep_args(
            t.path(),
            &[
                "--tools", "hetch", "--rtt", "5ms", "--rate", "1gbit", "--cc", cc,
            ],
        ),
        &[],
    );
    let _ = hetch(&args!["wan", "down"], &[]);
    out.ok();
    let recs = records(&t.path().join("r.jsonl"));
    assert_eq!(recs.len(), 3 * 2, "{out:?}");
    for r in &recs {
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["point"]["rtt_ms"].as_f64(), Some(5.0));
        assert_eq!(r["point"]["rate_bps"].as_u64(), Some(1_000_000_000));
        assert_eq!(r["point"]["cc"], cc);
    }
    assert!(
        !Path::new("/run/netns/hetch-a").exists(),
        "the testbed is taken down"
    );
    assert_eq!(
        std::fs::read_to_string(allowed).unwrap(),
        before,
        "allowed list restored"
    );
}

#[test]
fn an_interrupted_sweep_stops_its_servers_and_the_same_command_finishes_it() {
    // Enough runs that the signal lands mid-sweep (one run takes a fraction of a
    // second), few enough that finishing the rest stays short.
    const ITERATIONS: u64 = 25;
    let t = tempdir();
    let data = t.path().join("data");
    let results = t.path().join("i.jsonl");
    let run = || {
        let mut c = std::process::Command::new(lab_bin());
        c.env("HETCH_BIN", BIN)
            .args([
                "bench",
                "sweep",
                "--min",
                "64K",
                "--max",
                "64K",
                "--aggregate",
                "256K",
            ])
            .args([
                "--iterations",
                &ITERATIONS.to_string(),
                "--tools",
                "hetch",
                "--no-drop-caches",
            ])
            .arg("--data")
            .arg(&data)
            .arg("--results")
            .arg(&results)
            .env("HETCH_CONFIG_DIR", t.path().join("config"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        c
    };
    let mut child = run().spawn().unwrap();
    // Interrupt once the first run is recorded (Ctrl-C sends SIGINT).
    while !results.exists() || records(&results).is_empty() {
        assert!(child.try_wait().unwrap().is_none(), "the sweep ended early");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let done = records(&results).len();
    if out.status.success() {
        // It finished before the signal landed (a very fast machine): only the count.
        assert_eq!(done, ITERATIONS as usize);
        return;
    }
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(done < ITERATIONS as usize, "{stderr}");
    // No server of this sweep is left running.
    let ours = data.to_string_lossy().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            !(cmdline.contains("serve") && cmdline.contains(&ours)),
            "left running: {cmdline}"
        );
    }
    let out = run().output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut its: Vec<u64> = records(&results)
        .iter()
        .map(|r| r["iteration"].as_u64().unwrap())
        .collect();
    its.sort();
    assert_eq!(its, (1..=ITERATIONS).collect::<Vec<u64>>(), "each run once");
}
