//! Failures that must be clear: a destination that refuses every write stops the
//! session with one line; per-file failures are each named, on stderr and in `--json`.

use crate::util;

use std::path::Path;

use util::*;

/// A tree of `n` small files in two directories, plus `big.bin` of `big` bytes.
fn tree_with(root: &Path, n: u64, big: u64) -> Tree {
    let t = Tree::new(root);
    for i in 0..n {
        t.file(&format!("d{}/f{i}.bin", i % 2), 20_000, i);
    }
    if big > 0 {
        t.file("big.bin", big, 99);
    }
    t
}

/// Asserts the one line of a stopped session: names `needles`, says why and that the
/// session stopped.
#[track_caller]
fn assert_stopped(out: &Out, cause: &str, needles: &[&str]) {
    out.expect_code(1);
    let line = out.one_line_naming(needles);
    assert!(line.contains(cause), "cause {cause:?} not in {line:?}");
    assert!(line.contains("stopped ("), "no 'stopped' in {line:?}");
    assert!(!line.contains("os error"), "raw OS error in {line:?}");
}

/// A local copy into a read-only file system: one line naming the destination and
/// the cause, exit 1, nothing created.
#[test]
fn read_only_destination_stops_a_local_copy() {
    let t = tempdir();
    let src = tree_with(&t.path().join("src"), 12, 0);
    let Some(ro) = Mount::read_only(&t.path().join("ro")) else {
        return;
    };
    let out = hetch(&args!["cp", "-q", &src.root, &ro.dir], &[]);
    assert_stopped(&out, "read-only file system", &[&ro.dir.to_string_lossy()]);
    assert!(
        paths_under(&ro.dir).is_empty(),
        "{:?}",
        paths_under(&ro.dir)
    );

    // One file into it: the same.
    let out = hetch(
        &args!["cp", "-q", src.path("d0/f0.bin"), ro.dir.join("f0.bin")],
        &[],
    );
    assert_stopped(&out, "read-only file system", &["f0.bin"]);
    assert!(
        out.one_line().contains("(1 listed file not copied)"),
        "{out:?}"
    );
}

/// A push onto a server whose root is read-only: the server stops the session, and the
/// client prints its reason in one line naming the server.
#[test]
fn read_only_server_root_stops_a_push() {
    let t = tempdir();
    let src = tree_with(&t.path().join("src/tree"), 12, 0);
    let Some(ro) = Mount::read_only(&t.path().join("root")) else {
        return;
    };
    let mut srv = Server::start(&ro.dir, &t.path().join("state"));
    let out = srv.cp(&args![&src.root, srv.url("tree")]);
    assert_stopped(&out, "read-only file system", &[&srv.addr, "tree"]);
    assert!(srv.alive(), "server died; log:\n{}", srv.log());
    assert!(paths_under(&ro.dir).is_empty());
}

/// A destination that fills up: the session stops at once naming the file that did
/// not fit, and neither a torn file under a final name nor a part file is left.
#[test]
fn full_destination_stops_with_no_torn_file() {
    let t = tempdir();
    let src = tree_with(&t.path().join("src"), 4, 4 << 20);
    let Some(small) = Mount::tmpfs(&t.path().join("small"), "1m") else {
        return;
    };
    let out = hetch(
        &args!["cp", "-q", "--block-size", "256K", &src.root, &small.dir],
        &[],
    );
    // It names the file whose block met the full disk: big.bin fills it, but with four
    // writers a block of a small file may be the one that comes last.
    let dest = small.dir.join("src").display().to_string();
    assert_stopped(&out, "no space left on device", &[&dest]);
    let named = out.one_line();
    let files = ["big.bin", "f0.bin", "f1.bin", "f2.bin", "f3.bin"];
    assert!(
        files.iter().any(|f| named.contains(f)),
        "no file named: {named}"
    );
    assert!(!small.dir.join("src/big.bin").exists(), "torn file");
    assert_no_temp_files(&small.dir);
    // What did arrive is whole.
    for (p, ty) in paths_under(&small.dir.join("src")) {
        if ty.is_file() {
            let rel = p.strip_prefix(small.dir.join("src")).unwrap();
            assert_eq!(hash_file(&p), hash_file(&src.root.join(rel)), "{p:?}");
        }
    }
}

/// Per-file failures are each named with their cause, on stderr and in `--json`'s
/// `errors`, and the session goes on (exit 3).
#[test]
fn every_failed_file_is_named_on_stderr_and_in_json() {
    let t = tempdir();
    let src = tree_with(&t.path().join("src"), 4, 0);
    let dst = t.path().join("dst");
    // Directories that are not empty where the copy needs files: two failures (a
    // plain copy replaces only empty ones), the rest copied.
    std::fs::create_dir_all(dst.join("src/d0/f0.bin/kept")).unwrap();
    std::fs::create_dir_all(dst.join("src/d1/f1.bin/kept")).unwrap();
    let out = hetch(&args!["cp", "--json", &src.root, &dst], &[]);
    out.expect_code(3);
    let lines = out.stderr_lines();
    assert_eq!(lines.len(), 2, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let errors: Vec<&str> = v["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no errors list\n{out:?}"))
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(errors.len(), 2, "{out:?}");
    for name in ["d0/f0.bin", "d1/f1.bin"] {
        let named = |l: &&str| l.contains(name) && l.contains("is a directory that is not empty");
        assert!(lines.iter().any(named), "{name} not on stderr\n{out:?}");
        assert!(errors.iter().any(named), "{name} not in JSON\n{out:?}");
    }
    assert_eq!(
        hash_file(&dst.join("src/d0/f2.bin")),
        hash_file(&src.path("d0/f2.bin"))
    );
}

/// `cp a a`, `cp a a/sub` and `cp a/sub a` would copy a tree into (or onto) itself:
/// refused as bad usage (exit 2) in one line before anything is written.
#[test]
fn copy_into_itself_is_refused() {
    let t = tempdir();
    let a = tree_with(&t.path().join("a"), 4, 0);
    let before = snapshot(&a.root);
    let cases = [
        (a.root.clone(), a.root.clone()),
        (a.root.clone(), a.path("d0")),
        (a.root.clone(), a.path("d0/new")),
        (a.path("d1"), a.root.clone()),
    ];
    for (src, dst) in cases {
        let out = hetch(&args!["cp", "-q", &src, &dst], &[]);
        out.expect_code(2);
        out.one_line_naming(&[&src.to_string_lossy(), "itself"]);
    }
    // Through another path to the same directory, too.
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&a.root, &link).unwrap();
    let out = hetch(&args!["cp", "-q", &a.root, link.join("d1")], &[]);
    out.expect_code(2);
    assert_eq!(snapshot(&a.root), before, "the source tree changed");
    // A sibling is fine.
    hetch(&args!["cp", "-q", &a.root, t.path().join("b")], &[]).ok();
}

/// A symlink planted at the destination is named as a symlink, never as a file: where
/// the source has a directory, and with `--no-clobber` where it has a file; and
/// `--no-clobber` keeps a file where the source has a symlink.
#[test]
fn planted_symlinks_are_reported_as_symlinks() {
    let t = tempdir();
    let src = Tree::new(t.path().join("src"));
    src.file("x/f", 100, 1)
        .file("g", 100, 2)
        .symlink("lnk", "x");
    let outside = t.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("file"), b"keep").unwrap();
    let dst = Tree::new(t.path().join("dst"));
    dst.symlink("src/x", &outside.to_string_lossy())
        .symlink("src/g", &outside.join("file").to_string_lossy())
        .bytes("src/lnk", b"a file where the source has a link");
    let out = hetch(
        &args!["cp", "-q", "--no-clobber", &src.root, &dst.root],
        &[],
    );
    out.expect_code(3);
    let lines = out.stderr_lines();
    let has = |path: &str, what: &str| {
        let p = dst.path(path).display().to_string();
        lines.iter().any(|l| l.contains(&format!("{p}: {what}")))
    };
    assert!(
        has("src/x", "is a symlink where a directory is needed"),
        "{out:?}"
    );
    assert!(
        has("src/g", "is a symlink that differs; not replaced"),
        "{out:?}"
    );
    assert!(
        has("src/lnk", "exists and differs; not replaced"),
        "{out:?}"
    );
    assert!(!out.stderr.contains("is a file where"), "{out:?}");
    assert!(std::fs::symlink_metadata(dst.path("src/lnk"))
        .unwrap()
        .is_file());
    assert_eq!(std::fs::read(outside.join("file")).unwrap(), b"keep");
    assert_eq!(paths_under(&outside).len(), 1, "written through the link");
}

/// The server is killed (SIGKILL) in the middle of a push: the client ends non-zero
/// with one plain line naming the server, with no URL and no debug output.
#[test]
fn losing_the_server_reads_as_one_plain_line() {
    let t = tempdir();
    let src = Tree::new(t.path().join("src"));
    src.file("big.bin", 8 << 20, 7);
    let mut srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let cp = srv.spawn_cp(
        &args![
            "--rate-limit",
            "1M",
            // The message of the loss itself, not of the recoveries (tests/it/recover.rs).
            "--retries",
            "0",
            src.path("big.bin"),
            srv.url("big.bin")
        ],
        &[],
    );
    // Mid-copy: the part file exists and has data.
    let part = srv.root.join(".big.bin.hetch-part");
    wait_for("the first blocks", || {
        std::fs::metadata(&part).is_ok_and(|m| m.len() > 0)
    });
    srv.kill9();
    let out = cp.wait();
    out.failed();
    let line = out.one_line_naming(&[&srv.addr, "lost"]);
    for bad in ["http", "Custom {", "Os {", "kind:"] {
        assert!(!line.contains(bad), "{bad:?} in {line:?}");
    }
}

/// Part files and journals whose source is gone are removed by the next run into their
/// directory, but not those of a second hetch writing there at the same time, and not
/// those in the destination directory itself (other transfers into it may resume).
#[test]
fn the_next_run_removes_stale_part_files_but_not_live_ones() {
    let t = tempdir();
    let src = tree_with(&t.path().join("src"), 4, 0);
    src.file("d0/gone.bin", 3 << 20, 8);
    let dst = t.path().join("dst");
    std::fs::create_dir_all(&dst).unwrap();
    // An interrupted copy leaves the part file and journal of gone.bin...
    let slow = |what: &Path, to: &Path| {
        let args = args![
            "cp",
            "-q",
            "--block-size",
            "256K",
            "--rate-limit",
            "1M",
            what,
            to
        ];
        spawn(&args, &[])
    };
    let mut cp = slow(&src.root, &dst);
    let part = dst.join("src/d0/.gone.bin.hetch-part");
    wait_for("gone.bin's first blocks", || {
        std::fs::metadata(&part).is_ok_and(|m| m.len() > 0)
    });
    cp.kill9();
    let _ = cp.wait();
    // ... and its source goes away.
    std::fs::remove_file(src.path("d0/gone.bin")).unwrap();
    assert!(dst.join("src/d0/.gone.bin.hetch-journal").exists());
    std::fs::write(dst.join(".other.bin.hetch-part"), b"paused elsewhere").unwrap();

    // Another hetch is writing into d0 while the next run goes through it.
    let other = Tree::new(t.path().join("other"));
    other.file("live.bin", 4 << 20, 9);
    let live = slow(&other.path("live.bin"), &dst.join("src/d0/live.bin"));
    let live_part = dst.join("src/d0/.live.bin.hetch-part");
    wait_for("live.bin's first blocks", || {
        std::fs::metadata(&live_part).is_ok_and(|m| m.len() > 0)
    });
    hetch(&args!["cp", "-q", &src.root, &dst], &[]).ok();
    assert!(!part.exists(), "stale part file kept");
    assert!(!dst.join("src/d0/.gone.bin.hetch-journal").exists());
    assert!(
        dst.join(".other.bin.hetch-part").exists(),
        "removed outside the copy"
    );
    live.wait().ok();
    assert_eq!(
        hash_file(&dst.join("src/d0/live.bin")),
        hash_file(&other.path("live.bin"))
    );
    assert_same_tree(&src.path("d1"), &dst.join("src/d1"));
    assert_no_temp_files(&dst.join("src"));
}

/// `hetch clean DIR` lists (`--dry-run`) and removes leftovers anywhere below DIR,
/// without following symlinks, keeping what a running transfer holds.
#[test]
fn hetch_clean_removes_leftovers_below_a_directory() {
    let t = tempdir();
    let d = Tree::new(t.path().join("d"));
    d.bytes("a/.x.bin.hetch-part", &[1; 5000])
        .bytes("a/.x.bin.hetch-journal", b"j")
        .bytes("a/b/c/.y.hetch-part", b"y")
        .bytes("a/keep.txt", b"mine")
        .symlink("a/.z.hetch-part", "/etc/hostname");
    let outside = Tree::new(t.path().join("outside"));
    outside.bytes(".far.hetch-part", b"not below d");
    d.symlink("via", &outside.root.to_string_lossy());

    let out = hetch(&args!["clean", "--dry-run", &d.root], &[]);
    out.ok();
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.starts_with("would remove"))
            .count(),
        4,
        "{out:?}"
    );
    assert!(d.path("a/.x.bin.hetch-part").exists());

    let out = hetch(&args!["clean", &d.root], &[]);
    out.ok();
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.starts_with("removed"))
            .count(),
        4,
        "{out:?}"
    );
    assert!(out.stdout.contains(".x.bin.hetch-part"), "{out:?}");
    assert!(
        out.one_line().contains("removed 4 leftover files"),
        "{out:?}"
    );
    assert_no_temp_files(&d.root);
    assert!(std::fs::symlink_metadata(d.path("a/.z.hetch-part")).is_err());
    assert!(d.path("a/keep.txt").exists() && std::fs::metadata("/etc/hostname").is_ok());
    assert!(
        outside.path(".far.hetch-part").exists(),
        "followed a symlink"
    );

    // A split file's leftovers (a cancelled service job's) go only with --split.
    d.bytes("a/.big.bin.hetch-split", &[2; 300])
        .bytes("a/.big.bin.hetch-split.0", b"j0")
        .bytes("a/.big.bin.hetch-split.64", b"j64");
    let out = hetch(&args!["clean", &d.root], &[]);
    out.ok();
    assert!(d.path("a/.big.bin.hetch-split").exists(), "{out:?}");
    let out = hetch(&args!["clean", "--split", &d.root], &[]);
    out.ok();
    assert!(
        out.one_line().contains("removed 3 leftover files"),
        "{out:?}"
    );
    assert!(!d.path("a/.big.bin.hetch-split").exists());
    assert!(!d.path("a/.big.bin.hetch-split.64").exists());

    // Not a directory: bad usage.
    hetch(&args!["clean", d.path("a/keep.txt")], &[]).expect_code(2);
}

/// A complete copy on a file system mounted read-only since: running the copy again
/// skips everything and succeeds; a directory whose mode changed at the source since
/// fails by name (a failure the receiver met after the files, now reported too).
#[test]
fn a_read_only_complete_copy_is_skipped_and_directory_failures_are_named() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempdir();
    let src = tree_with(&t.path().join("src"), 4, 0);
    let dst = t.path().join("dst");
    hetch(&args!["cp", "-q", &src.root, &dst], &[]).ok();
    let Some(_ro) = Mount::read_only(&dst) else {
        return;
    };
    let out = hetch(&args!["cp", "--json", &src.root, &dst], &[]);
    out.ok();
    assert_eq!(out.json().skipped, 4, "{out:?}");

    std::fs::set_permissions(src.path("d1"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = hetch(&args!["cp", &src.root, &dst], &[]);
    out.expect_code(3);
    let d1 = dst.join("d1").display().to_string(); // copied as dst
    let lines = out.stderr_lines();
    assert_eq!(lines.len(), 2, "{out:?}");
    assert!(
        lines[0].contains(&d1) && lines[0].contains("Read-only"),
        "{out:?}"
    );
}
