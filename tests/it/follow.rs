//! Streaming transfers through the `hetch` binary: `hetch cp --follow` while a writer
//! process (`hetch bench write`) or the test itself appends to the source files.
//!
//! Every test waits for conditions (a journal record at the destination, a file
//! renamed into place, a process exit), never for fixed times; the writers are paced so
//! that the copies really overlap with the writing.

use crate::util;

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use util::*;

/// Starts `hetch bench write` on `files`.
fn writer(files: &[PathBuf], size: &str, rate: &str, extra: &[&str]) -> Running {
    let mut a: Vec<OsString> = args!["bench", "write", "--size", size, "--write-size", "1M"].into();
    a.extend(args!["--rate", rate]);
    a.extend(extra.iter().map(OsString::from));
    a.extend(files.iter().map(OsString::from));
    spawn(&a, &[])
}

/// `cp --follow --idle 1s --json EXTRA SRC DST/`.
fn follow_local(src: &Path, dst: &Path, extra: &[&str]) -> Vec<OsString> {
    let mut a: Vec<OsString> = args!["cp", "--follow", "--idle", "1s", "--json"].into();
    a.extend(extra.iter().map(OsString::from));
    a.extend(args![src, with_slash(dst)]);
    a
}

/// The `lag` object of a `--json` summary.
fn lag_of(out: &Out) -> serde_json::Value {
    let line = out.stdout.lines().rev().find(|l| !l.trim().is_empty());
    let v: serde_json::Value = serde_json::from_str(line.expect("JSON on stdout")).unwrap();
    v.get("lag")
        .cloned()
        .unwrap_or_else(|| panic!("no lag in the summary\n{out:?}"))
}

/// Copies three growing files locally and through a server; the copies are
/// identical and the lag figures show data arriving while the files grew.
#[test]
fn follow_copies_files_while_they_are_written() {
    let t = tempdir();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let files: Vec<PathBuf> = ["a", "b", "c"].iter().map(|n| src.join(n)).collect();
    let mut w = writer(&files, "12M", "12M", &[]);
    wait_for("the writer to start", || files.iter().all(|f| f.exists()));
    let dst = t.path().join("dst");
    let out = hetch(&follow_local(&src, &dst, &[]), &[]);
    out.ok();
    assert!(w.exited(), "the copy ended before the writer");
    w.wait().ok();
    assert_same_tree(&src, &dst.join("src"));
    assert_no_temp_files(&dst);
    let s = out.json();
    // Nothing announced twice: a finished file is not listed again by later scans.
    assert_eq!((s.files, s.failed, s.skipped), (3, 0, 0), "{out:?}");
    let lag = lag_of(&out);
    // One sample per observed growth: several per file means data were acknowledged
    // while the files still grew, not once at the end.
    assert!(lag["samples"].as_u64().unwrap() >= 6, "{lag}");
    assert!(lag["p50_ms"].as_f64().unwrap() <= lag["p99_ms"].as_f64().unwrap());

    // The same through a real server.
    let server = Server::start(&t.path().join("root"), &t.path().join("state"));
    let w = writer(&files, "12M", "12M", &["--seed", "7"]);
    wait_for("the writer to start again", || {
        files
            .iter()
            .all(|f| std::fs::metadata(f).is_ok_and(|m| m.len() < 12 << 20))
    });
    let out = server.cp(&args![
        "--follow",
        "--idle",
        "1s",
        "--json",
        &src,
        server.url("pushed/")
    ]);
    out.ok();
    w.wait().ok();
    assert_same_tree(&src, &t.path().join("root/pushed/src"));
    assert!(lag_of(&out)["samples"].as_u64().unwrap() >= 6);
}

/// Appends `total` bytes to `path` in 1 MiB writes, calling `between(written)` after
/// each write.
fn append(path: &Path, total: u64, seed: u64, mut between: impl FnMut(u64)) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let data = random_bytes(total as usize, seed);
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        f.write_all(chunk).unwrap();
        between((i as u64 + 1) << 20);
    }
}

/// A file truncated and written anew while followed is sent again from the start,
/// with a warning; the copy holds the new contents.
#[test]
fn a_truncated_file_is_detected_and_sent_again() {
    let t = tempdir();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let file = src.join("run.dat");
    std::fs::File::create(&file).unwrap();
    let dst = t.path().join("dst");
    let cp = spawn(&follow_local(&src, &dst, &["--block-size", "1M"]), &[]);
    let copy = dst.join("src/run.dat");
    append(&file, 10 << 20, 1, |_| {
        std::thread::sleep(Duration::from_millis(20))
    });
    // Blocks beyond 6 MiB are at the destination: the follower saw more than the file
    // will have after the truncation, whatever its timing.
    wait_for("7 blocks at the destination", || {
        journal_records(&copy) >= 7
    });
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(0)
        .unwrap();
    append(&file, 6 << 20, 2, |_| {});
    let out = cp.wait();
    out.ok();
    assert!(out.stderr.contains("truncated"), "{out:?}");
    assert_eq!(hash_file(&file), hash_file(&copy));
    assert_eq!(std::fs::metadata(&copy).unwrap().len(), 6 << 20);
    assert_no_temp_files(&dst);
}

/// Bytes rewritten in place after their block was sent (a file header updated at the
/// end, as HDF5 writers do) are found when the file is sealed and sent again.
#[test]
fn a_block_rewritten_after_it_was_sent_is_sent_again() {
    let t = tempdir();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let file = src.join("scan.h5");
    std::fs::File::create(&file).unwrap();
    let dst = t.path().join("dst");
    let copy = dst.join("src/scan.h5");
    let cp = spawn(&follow_local(&src, &dst, &["--block-size", "1M"]), &[]);
    let mut rewrote = false;
    append(&file, 8 << 20, 3, |written| {
        std::thread::sleep(Duration::from_millis(20));
        if written == 4 << 20 && !rewrote {
            wait_for("block 0 at the destination", || journal_records(&copy) >= 1);
            let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
            f.write_all_at(b"HEADER, FINAL VERSION", 0).unwrap();
            rewrote = true;
        }
    });
    let out = cp.wait();
    out.ok();
    assert!(out.stderr.contains("rewritten in place"), "{out:?}");
    assert_eq!(hash_file(&file), hash_file(&copy));
    assert_no_temp_files(&dst);
}

/// A writer that never closes its file: the file is shipped up to its size and
/// finished once idle, with a warning that it is still open.
#[test]
fn a_file_that_never_closes_is_finished_once_idle() {
    let t = tempdir();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let file = src.join("open.log");
    let mut w = writer(
        std::slice::from_ref(&file),
        "5M",
        "20M",
        &["--hold", "600s"],
    );
    wait_for("the writer to start", || file.exists());
    let dst = t.path().join("dst");
    let out = hetch(&follow_local(&src, &dst, &[]), &[]);
    out.ok();
    assert!(!w.exited(), "the writer was meant to hold the file open");
    assert!(out.stderr.contains("still open for writing"), "{out:?}");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 5 << 20);
    assert_eq!(hash_file(&file), hash_file(&dst.join("src/open.log")));
    w.kill9();
}

/// `NAME.done` completes NAME at once (no idle wait) and is copied after it.
#[test]
fn a_done_marker_completes_a_file_and_follows_it() {
    let t = tempdir();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let file = src.join("frame.tif");
    let mut w = writer(
        std::slice::from_ref(&file),
        "3M",
        "30M",
        &["--hold", "600s"],
    );
    wait_for("the writer to finish writing", || {
        std::fs::metadata(&file).is_ok_and(|m| m.len() == 3 << 20)
    });
    let dst = t.path().join("dst");
    // An idle time no test run reaches: only the marker can complete the file. 1 MiB
    // blocks: whole blocks of a growing file are sent before it completes.
    let mut cp = spawn(
        &args![
            "cp",
            "--follow",
            "--idle",
            "3600s",
            "--block-size",
            "1M",
            &src,
            with_slash(&dst)
        ],
        &[],
    );
    // Its data arrives and is verified; the file still waits for its marker.
    wait_for("the file's blocks at the destination", || {
        journal_records(&dst.join("src/frame.tif")) >= 2
    });
    assert!(!dst.join("src/frame.tif").exists());
    std::fs::File::create(src.join("frame.tif.done")).unwrap();
    let copy = dst.join("src/frame.tif");
    let marker = dst.join("src/frame.tif.done");
    wait_for("the marker at the destination", || {
        // The marker never arrives before its file.
        assert!(!marker.exists() || copy.exists());
        marker.exists()
    });
    assert_eq!(hash_file(&file), hash_file(&copy));
    assert!(!cp.exited());
    cp.kill9();
    w.kill9();
}

/// The client is killed mid-stream, then run again: the copy completes without
/// sending again what the destination had verified.
#[test]
fn a_restarted_client_resumes_a_stream() {
    let t = tempdir();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let files: Vec<PathBuf> = ["x", "y"].iter().map(|n| src.join(n)).collect();
    let server = Server::start(&t.path().join("root"), &t.path().join("state"));
    let w = writer(&files, "24M", "16M", &[]);
    wait_for("the writer to start", || files.iter().all(|f| f.exists()));
    let cmd = args![
        "--follow",
        "--idle",
        "2s",
        "--block-size",
        "1M",
        "--json",
        &src,
        server.url("in/")
    ];
    let mut cp = server.spawn_cp(&cmd, &[]);
    let copy = t.path().join("root/in/src/x");
    wait_for("4 blocks of x at the server", || {
        journal_records(&copy) >= 4
    });
    cp.kill9();
    let _ = cp.wait();
    let out = server.cp(&cmd);
    out.ok();
    w.wait().ok();
    assert_same_tree(&src, &t.path().join("root/in/src"));
    let s = out.json();
    assert!(s.bytes < 48 << 20, "everything was sent again: {s:?}");
}

/// The server is killed mid-stream and started again: the same command completes
/// the copy without sending again what was verified.
#[test]
fn a_restarted_server_loses_nothing() {
    let t = tempdir();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let file = src.join("big");
    let (root, state) = (t.path().join("root"), t.path().join("state"));
    let mut server = Server::start(&root, &state);
    let w = writer(std::slice::from_ref(&file), "24M", "12M", &[]);
    wait_for("the writer to start", || file.exists());
    let cmd = |s: &Server| {
        args![
            "--follow",
            "--idle",
            "2s",
            "--block-size",
            "1M",
            "--json",
            // This test is about the next run resuming, not this one recovering.
            "--retries",
            "0",
            &src,
            s.url("in/")
        ]
    };
    let cp = server.spawn_cp(&cmd(&server), &[]);
    let copy = root.join("in/src/big");
    wait_for("4 blocks at the server", || journal_records(&copy) >= 4);
    server.kill9();
    let out = cp.wait();
    out.expect_code(1);
    let server = Server::start(&root, &state);
    let out = server.cp(&cmd(&server));
    out.ok();
    w.wait().ok();
    assert_eq!(hash_file(&file), hash_file(&copy));
    let s = out.json();
    assert!(s.bytes < 24 << 20, "everything was sent again: {s:?}");
}

/// Bad combinations are refused with one line.
#[test]
fn follow_refuses_what_it_cannot_do() {
    let t = tempdir();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let out = hetch(
        &args![
            "cp",
            "--follow",
            "--verify-schedule",
            "file",
            &src,
            t.path().join("d")
        ],
        &[],
    );
    out.expect_code(2);
    out.one_line_naming(&["--verify-schedule"]);
    let out = hetch(
        &args![
            "cp",
            "--follow",
            "hetch://127.0.0.1:1/x",
            t.path().join("d")
        ],
        &[],
    );
    out.expect_code(2);
    out.one_line_naming(&["local sources"]);
}

/// `SRC.done` beside a source directory says the whole run is written: every file in
/// it is complete, and the copy ends once they are in place, without an idle wait.
#[test]
fn a_run_marker_completes_everything_and_ends_the_copy() {
    let t = tempdir();
    let src = t.path().join("run7");
    std::fs::create_dir(&src).unwrap();
    let files: Vec<PathBuf> = ["a", "b"].iter().map(|n| src.join(n)).collect();
    let w = writer(&files, "3M", "30M", &["--hold", "600s"]);
    wait_for("the writer to finish writing", || {
        files
            .iter()
            .all(|f| std::fs::metadata(f).is_ok_and(|m| m.len() == 3 << 20))
    });
    let dst = t.path().join("dst");
    // An idle time no test run reaches: only the run marker can end the copy.
    let cp = spawn(
        &args![
            "cp",
            "--follow",
            "--idle",
            "3600s",
            "--json",
            &src,
            with_slash(&dst)
        ],
        &[],
    );
    std::fs::File::create(t.path().join("run7.done")).unwrap();
    let out = cp.wait();
    out.ok();
    assert_same_tree(&src, &dst.join("run7"));
    assert_eq!(out.json().files, 2);
    drop(w);
}
