//! `hetch watch` through the binary: files that appear and grow under a directory are
//! shipped while it runs; it survives a restart of itself and of the server without
//! sending verified data again; --include/--exclude and --remove-source.
//!
//! The tests wait for conditions (files renamed into place, counters), never for fixed
//! times.

use crate::util;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use util::*;

fn writer(files: &[PathBuf], size: &str, rate: &str) -> Running {
    let mut a: Vec<OsString> = args!["bench", "write", "--size", size, "--rate", rate].into();
    a.extend(files.iter().map(OsString::from));
    spawn(&a, &[])
}

/// Stops a watch with SIGINT and returns its output.
fn interrupt(mut w: Running) -> Out {
    let pid = w.child.id() as i32;
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let _ = w.exited();
    w.wait()
}

/// The last counters line of a `--json` watch.
fn counters(out: &Out) -> serde_json::Value {
    let line = out.stdout.lines().rev().find(|l| !l.trim().is_empty());
    serde_json::from_str(line.unwrap_or_else(|| panic!("no counters\n{out:?}"))).unwrap()
}

fn same(a: &Path, b: &Path) -> bool {
    b.exists()
        && std::fs::metadata(a).map(|m| m.len()).ok() == std::fs::metadata(b).map(|m| m.len()).ok()
        && hash_file(a) == hash_file(b)
}

/// Files written into the watched tree, a directory created later and a file renamed
/// in are all shipped; excluded ones are not; one line per file on stderr.
#[test]
fn watch_ships_what_appears_and_grows() {
    let t = tempdir();
    let dir = t.path().join("instrument");
    std::fs::create_dir(&dir).unwrap();
    let dst = t.path().join("dst");
    let w = spawn(
        &args![
            "watch",
            "--idle",
            "1s",
            "--rescan",
            "200ms",
            "--exclude",
            "*.tmp",
            "--json",
            "--stats-interval",
            "3600s",
            &dir,
            with_slash(&dst)
        ],
        &[],
    );
    let files = vec![dir.join("a.raw"), dir.join("run2/b.raw")];
    writer(&files, "6M", "12M").wait().ok();
    Tree::new(t.path().join("staging")).file("c.raw", 100_000, 3);
    std::fs::rename(t.path().join("staging/c.raw"), dir.join("c.raw")).unwrap();
    std::fs::write(dir.join("scratch.tmp"), b"not for shipping").unwrap();
    let copies = |n: &str| dst.join("instrument").join(n);
    wait_for("every file at the destination", || {
        same(&dir.join("a.raw"), &copies("a.raw"))
            && same(&dir.join("run2/b.raw"), &copies("run2/b.raw"))
            && same(&dir.join("c.raw"), &copies("c.raw"))
    });
    let out = interrupt(w);
    out.ok();
    assert!(!copies("scratch.tmp").exists());
    let c = counters(&out);
    assert_eq!(c["files"], 3, "{c}");
    assert_eq!(c["failed"], 0, "{c}");
    for f in ["a.raw", "run2/b.raw", "c.raw"] {
        assert!(
            out.stderr
                .contains(&format!("done {}", dir.join(f).display())),
            "{out:?}"
        );
    }
}

/// `watch -q` prints nothing while all goes well (issue 40): no line per file shipped or
/// removed, no counters; the file is shipped all the same. `--remove-source` makes the
/// test wait for the moment after the file's line would have been printed.
#[test]
fn watch_quiet_prints_nothing_on_success() {
    let t = tempdir();
    let dir = t.path().join("instrument");
    std::fs::create_dir(&dir).unwrap();
    let src = dir.join("a.raw");
    std::fs::write(&src, b"one file, shipped quietly").unwrap();
    let dst = t.path().join("dst");
    let w = spawn(
        &args![
            "watch",
            "-q",
            "--remove-source",
            "--idle",
            "1s",
            "--rescan",
            "200ms",
            "--stats-interval",
            "1s",
            &dir,
            with_slash(&dst)
        ],
        &[],
    );
    let copy = dst.join("instrument/a.raw");
    wait_for("the file shipped and its source removed", || {
        !src.exists() && copy.exists()
    });
    let out = interrupt(w);
    out.ok();
    assert_eq!(std::fs::read(&copy).unwrap(), b"one file, shipped quietly");
    assert_eq!(out.stderr, "", "{out:?}");
    assert_eq!(out.stdout, "", "{out:?}");
}

/// `watch` killed mid-stream and started again resumes; the server restarted under a
/// running watch is reconnected to by itself. Neither sends everything again.
#[test]
fn watch_survives_restarts_of_itself_and_of_the_server() {
    let t = tempdir();
    let dir = t.path().join("det");
    std::fs::create_dir(&dir).unwrap();
    let (root, state) = (t.path().join("root"), t.path().join("state"));
    let mut server = Server::start(&root, &state);
    let watch = |s: &Server| {
        s.spawn_watch(&args![
            "--idle",
            "2s",
            "--block-size",
            "1M",
            "--json",
            "--stats-interval",
            "3600s",
            &dir,
            s.url("in/")
        ])
    };
    let file = dir.join("big.raw");
    let copy = root.join("in/det/big.raw");
    let wr = writer(std::slice::from_ref(&file), "32M", "8M");
    // Restart of the watch itself.
    let mut w = watch(&server);
    wait_for("some of the file at the server", || {
        std::fs::metadata(root.join("in/det/.big.raw.hetch-journal"))
            .is_ok_and(|m| m.len() > 40 + 4 * 44)
    });
    w.kill9();
    let _ = w.wait();
    let w = watch(&server);
    // Restart of the server under the running watch, on the same address.
    wait_for("more of the file at the server", || {
        std::fs::metadata(root.join("in/det/.big.raw.hetch-journal"))
            .is_ok_and(|m| m.len() > 40 + 12 * 44)
    });
    let addr = server.addr.clone();
    server.kill9();
    let _server = Server::start_with(&root, &state, &["--listen", &addr], &[]);
    wr.wait().ok();
    wait_for("the whole file at the server", || same(&file, &copy));
    let out = interrupt(w);
    out.ok();
    let c = counters(&out);
    assert!(c["reconnects"].as_u64().unwrap() >= 1, "{c}");
    assert!(
        c["bytes"].as_u64().unwrap() < 32 << 20,
        "everything was sent again: {c}"
    );
    assert!(out.stderr.contains("starting again"), "{out:?}");
}

/// --remove-source deletes a source file only once its copy is verified, including a
/// file that was already at the destination; refused with --verify none.
#[test]
fn remove_source_deletes_only_verified_files() {
    let t = tempdir();
    let dir = t.path().join("spool");
    let dst = t.path().join("dst");
    Tree::new(&dir)
        .file("new.dat", 3 << 20, 1)
        .file("there.dat", 200_000, 2);
    Tree::new(dst.join("spool")).file("there.dat", 200_000, 2);
    let expected = t.path().join("expected");
    Tree::new(&expected);
    for name in ["new.dat", "there.dat"] {
        std::fs::copy(dir.join(name), expected.join(name)).unwrap();
    }
    let w = spawn(
        &args![
            "watch",
            "--idle",
            "1s",
            "--remove-source",
            "--json",
            &dir,
            with_slash(&dst)
        ],
        &[],
    );
    wait_for("both sources removed", || {
        !dir.join("new.dat").exists() && !dir.join("there.dat").exists()
    });
    let out = interrupt(w);
    out.ok();
    for name in ["new.dat", "there.dat"] {
        assert_eq!(
            hash_file(&expected.join(name)),
            hash_file(&dst.join("spool").join(name))
        );
    }
    let out = hetch(
        &args![
            "watch",
            "--remove-source",
            "--verify",
            "none",
            &dir,
            with_slash(&dst)
        ],
        &[],
    );
    out.expect_code(2);
    out.one_line_naming(&["--remove-source"]);
}
