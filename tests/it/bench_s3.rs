//! `hetch-lab bench s3` end to end on loopback with tiny datasets: every tool that is
//! installed moves both datasets up (file -> MinIO) and down (MinIO -> file), every run
//! is verified and recorded, the report names every tool (an uninstalled one as
//! unavailable), nothing is left in the data directory but the datasets, and running
//! the same command again runs nothing new. Also: bad arguments fail with one line.

use crate::util;

use std::path::Path;

use hetch_bench::minio::minio_binary;
use serde_json::Value;
use util::*;

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Whether `program` is on PATH.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

#[test]
#[ignore = "integration: needs MinIO and the S3 peers (bash test.sh runs it)"]
fn s3_loopback_moves_both_ways_verifies_every_run_and_reports_every_tool() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let minio = minio_binary(repo, false).unwrap_or_else(|e| panic!("{e:#}"));
    // The tools that must run here; s5cmd is asked for too and must either run or be
    // reported as unavailable.
    let mut must_run = vec!["hetch-agent", "hetch"];
    if Path::new("/usr/bin/aws").is_file() {
        must_run.push("aws");
    } else {
        eprintln!("(/usr/bin/aws not installed: aws-cli is left out of this test)");
    }
    if on_path("rclone") {
        must_run.push("rclone");
    } else {
        eprintln!("(rclone not installed: it is left out of this test)");
    }
    if on_path("s5cmd") {
        must_run.push("s5cmd");
    }
    let mut asked = must_run.clone();
    if !asked.contains(&"s5cmd") {
        asked.push("s5cmd");
    }
    let t = tempdir();
    let data = t.path().join("data");
    let args = args![
        "bench",
        "s3",
        "--rtt",
        "0",
        "--datasets",
        "1x8M,20x64K",
        "--iterations",
        "1",
        "--tools",
        asked.join(","),
        "--data",
        &data,
        "--out",
        t.path(),
        "--name",
        "s3",
        "--minio",
        &minio
    ];
    let out = hetch(&args, &[]);
    out.ok();
    let recs = records(&t.path().join("s3.jsonl"));
    // 2 datasets x 2 directions per tool that runs.
    assert_eq!(recs.len(), must_run.len() * 2 * 2, "{out:?}");
    for tool in &must_run {
        for direction in ["up", "down"] {
            for (dataset, files, bytes) in [("8MiB-x1", 1, 8 << 20), ("64KiB-x20", 20, 20 << 16)] {
                let r: Vec<&Value> = recs
                    .iter()
                    .filter(|r| {
                        r["tool"] == *tool && r["direction"] == direction && r["dataset"] == dataset
                    })
                    .collect();
                assert_eq!(r.len(), 1, "{tool} {direction} {dataset}: {recs:?}");
                let r = r[0];
                assert_eq!(r["verified"], true, "{r}");
                assert!(r["error"].is_null(), "{r}");
                assert!(r["seconds"].as_f64().unwrap() > 0.0, "{r}");
                assert_eq!(r["files"].as_u64(), Some(files), "{r}");
                assert_eq!(r["bytes"].as_u64(), Some(bytes), "{r}");
                assert_eq!(r["rtt_ms"].as_f64(), Some(0.0), "{r}");
                assert!(!r["version"].as_str().unwrap().is_empty(), "{r}");
            }
        }
    }
    let md = std::fs::read_to_string(t.path().join("s3.md")).unwrap();
    for tool in &must_run {
        assert!(
            md.contains(&format!("| {tool} |")),
            "report lacks {tool}:\n{md}"
        );
    }
    for needle in [
        "## hetch-agent against the others",
        "### 8MiB-x1: 1 × 8M, up (file → S3)",
        "### 64KiB-x20: 20 × 64K, down (S3 → file)",
        "- MinIO: ",
        "data in ",
    ] {
        assert!(md.contains(needle), "report lacks {needle}:\n{md}");
    }
    if !must_run.contains(&"s5cmd") {
        assert!(md.contains("| s5cmd | **unavailable**"), "{md}");
        assert!(md.contains("Not run, unavailable here: s5cmd"), "{md}");
    }
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(t.path().join("s3.meta.json")).unwrap())
            .unwrap();
    let commands = meta["commands"].as_array().unwrap();
    assert_eq!(commands.len(), must_run.len() * 2, "{meta}");
    // Only the datasets are left: MinIO's data, the downloads and scratch are gone.
    let mut left: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["src"], "left in {}", data.display());

    // Running the same command again runs nothing new.
    let again = hetch(&args, &[]);
    again.ok();
    assert_eq!(
        records(&t.path().join("s3.jsonl")).len(),
        recs.len(),
        "{again:?}"
    );
    // And the report can be written again from the results alone.
    std::fs::remove_file(t.path().join("s3.md")).unwrap();
    hetch(&args!["bench", "report", t.path().join("s3.jsonl")], &[]).ok();
    assert!(std::fs::read_to_string(t.path().join("s3.md"))
        .unwrap()
        .contains("hetch-agent"));
}

#[test]
fn bad_s3_bench_arguments_fail_with_one_line() {
    let t = tempdir();
    let run = |extra: &[&str]| {
        let mut a: Vec<std::ffi::OsString> = args![
            "bench",
            "s3",
            "--rtt",
            "0",
            "--data",
            t.path().join("data"),
            "--out",
            t.path(),
            "--minio",
            "/nonexistent/minio"
        ]
        .to_vec();
        a.extend(extra.iter().map(|s| s.into()));
        hetch(&a, &[])
    };
    let out = run(&["--tools", "hetch,nosuchtool"]);
    out.failed();
    out.one_line_naming(&["nosuchtool"]);
    // Flags that do not parse are clap's errors (the message and a hint line).
    let out = run(&["--datasets", "8M"]);
    out.failed();
    assert!(out.stderr.contains("expected FILESxSIZE"), "{out:?}");
    let out = run(&["--datasets", "0x8M"]);
    out.failed();
    assert!(out.stderr.contains("at least one file"), "{out:?}");
    let out = run(&["--tools", "hetch"]);
    out.failed();
    out.one_line_naming(&["/nonexistent/minio"]);
    assert!(
        !t.path().join("hetch-bench-s3.jsonl").exists(),
        "nothing ran"
    );
}
