//! A copy as `rsync -aHAX --delete` makes it, through the `hetch` binary: entries that
//! changed type are replaced (locally, pushed and pulled), a plain copy replaces an
//! empty directory only, `--max-delete` counts what a replaced directory held, a
//! mode-only change is applied without a copy, and `--checksum-skip` brings mtimes in
//! step; dry runs list each of these and change nothing. Sparse files keep their holes
//! (as `rsync -S` and `cp --sparse=auto` do).

use crate::util;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use util::*;

/// Replaces what is at `path` (file, link or tree) with nothing.
fn remove(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(md) if md.is_dir() => std::fs::remove_dir_all(path).unwrap(),
        Ok(_) => std::fs::remove_file(path).unwrap(),
        Err(_) => {}
    }
}

/// A source tree, then the same tree with four entries of another type: a file that
/// became a directory, a directory (with contents) that became a symlink, a symlink
/// that became a file, an empty directory that became a file.
fn changed_types(src: &Path) {
    Tree::new(src)
        .file("f", 1000, 1)
        .file("d/x", 2000, 2)
        .file("d/sub/y", 100, 3)
        .symlink("l", "f")
        .dir("e")
        .file("keep", 500, 4);
}

fn change_types(src: &Path) {
    for name in ["f", "d", "l", "e"] {
        remove(&src.join(name));
    }
    Tree::new(src)
        .file("f/inner", 300, 5)
        .symlink("d", "keep")
        .file("l", 400, 6)
        .file("e", 10, 7);
}

/// Lines of a command's stderr that start with `prefix`, sorted.
fn lines_starting(out: &Out, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = out
        .stderr_lines()
        .into_iter()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

#[test]
fn sync_replaces_entries_that_changed_type_and_still_deletes_extras() {
    let t = tempdir();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    changed_types(&src);
    hetch(&args!["sync", "-q", &src, &dst], &[]).ok();
    change_types(&src);
    std::fs::write(dst.join("extra"), b"x").unwrap();
    let shown = |rel: &str| dst.join(rel).display().to_string();

    // The dry run lists what the run will do, and does nothing.
    let before = snapshot(&dst);
    let dry = hetch(&args!["sync", "--dry-run", &src, &dst], &[]);
    dry.ok();
    assert_same_snapshot(&before, &snapshot(&dst), "after the dry run");
    let want_replaced: Vec<String> = ["d", "e", "f", "l"]
        .iter()
        .map(|r| format!("would replace {}", shown(r)))
        .collect();
    assert_eq!(
        lines_starting(&dry, "would replace "),
        want_replaced,
        "{dry:?}"
    );
    let gone = ["d", "d/sub", "d/sub/y", "d/x", "e", "extra"];
    let want_deleted: Vec<String> = gone
        .iter()
        .map(|r| format!("would delete {}", shown(r)))
        .collect();
    assert_eq!(
        lines_starting(&dry, "would delete "),
        want_deleted,
        "{dry:?}"
    );
    let copy = format!("would copy {}", shown("f/inner"));
    assert!(dry.stderr_lines().contains(&copy.as_str()), "{dry:?}");

    // The run replaces them, deletes the extra, and the next run has nothing to do.
    let out = hetch(&args!["sync", "--json", &src, &dst], &[]);
    out.ok();
    let want_deleted: Vec<String> = gone
        .iter()
        .map(|r| format!("deleted {}", shown(r)))
        .collect();
    assert_eq!(lines_starting(&out, "deleted "), want_deleted, "{out:?}");
    assert_eq!(out.json_value()["deleted"], 6, "{out:?}");
    assert_same_tree(&src, &dst);
    let again = hetch(&args!["sync", "--json", &src, &dst], &[]);
    again.ok();
    assert_eq!(again.json_value()["files"], 0, "{again:?}");
    assert!(lines_starting(&again, "deleted ").is_empty(), "{again:?}");
}

#[test]
fn entries_that_changed_type_are_replaced_when_pushed_and_pulled() {
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let src = t.path().join("src");
    changed_types(&src);
    srv.cp(&args!["--delete", &src, srv.url("pushed")]).ok();
    changed_types(&srv.root.join("offered"));
    let here = t.path().join("pulled");
    srv.cp(&args!["--delete", srv.url("offered"), &here]).ok();

    change_types(&src);
    change_types(&srv.root.join("offered"));
    srv.cp(&args!["--delete", &src, srv.url("pushed")]).ok();
    assert_same_tree(&src, &srv.root.join("pushed"));
    srv.cp(&args!["--delete", srv.url("offered"), &here]).ok();
    assert_same_tree(&srv.root.join("offered"), &here);
}

#[test]
fn a_plain_copy_replaces_an_empty_directory_but_not_a_full_one() {
    let t = tempdir();
    // Copied into `out`, as `out/src`.
    let (src, out_dir) = (t.path().join("src"), t.path().join("out"));
    let dst = out_dir.join("src");
    Tree::new(&src)
        .file("full", 100, 1)
        .file("empty", 200, 2)
        .file("was_file/in", 300, 3);
    Tree::new(&dst)
        .file("full/mine", 50, 4)
        .dir("empty")
        .file("was_file", 60, 5);
    let out = hetch(&args!["cp", "-q", &src, &out_dir], &[]);
    out.expect_code(3);
    let full = dst.join("full");
    let line = format!("{}: is a directory that is not empty", full.display());
    assert!(
        out.stderr_lines().iter().any(|l| l.contains(&line)),
        "{out:?}"
    );
    assert!(full.join("mine").is_file(), "a full directory is kept");
    assert_eq!(std::fs::read(dst.join("empty")).unwrap().len(), 200);
    assert_eq!(std::fs::read(dst.join("was_file/in")).unwrap().len(), 300);
    // `--no-clobber` replaces nothing of another type.
    remove(&dst);
    Tree::new(&dst).dir("empty");
    let out = hetch(&args!["cp", "-q", "--no-clobber", &src, &out_dir], &[]);
    out.expect_code(3);
    assert!(dst.join("empty").is_dir(), "{out:?}");
}

#[test]
fn max_delete_counts_what_a_replaced_directory_held() {
    let t = tempdir();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    Tree::new(&src).file("d/a", 10, 1).file("d/b", 10, 2);
    hetch(&args!["sync", "-q", &src, &dst], &[]).ok();
    remove(&src.join("d"));
    Tree::new(&src).file("d", 30, 3);
    let out = hetch(&args!["sync", "-q", "--max-delete", "2", &src, &dst], &[]);
    out.expect_code(3);
    let line = format!(
        "{}: is a directory; replacing it deletes 3 entries",
        dst.join("d").display()
    );
    assert!(
        out.stderr_lines().iter().any(|l| l.contains(&line)),
        "{out:?}"
    );
    assert!(dst.join("d/a").is_file());
    hetch(&args!["sync", "-q", "--max-delete", "3", &src, &dst], &[]).ok();
    assert_same_tree(&src, &dst);
}

#[test]
fn a_mode_only_change_is_applied_without_copying_and_listed_by_the_dry_run() {
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let (src, local) = (t.path().join("src"), t.path().join("local"));
    Tree::new(&src).file("f", 5000, 1).file("g", 10, 2);
    hetch(&args!["cp", "-q", &src, &local], &[]).ok();
    srv.cp(&args![&src, srv.url("remote")]).ok();
    // chmod leaves the mtime alone: size and mtime say "same file".
    std::fs::set_permissions(src.join("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let remote = srv.root.join("remote");
    for (dest, at) in [
        (local.clone().into_os_string(), local.clone()),
        (srv.url("remote").into(), remote.clone()),
    ] {
        let md = std::fs::metadata(at.join("f")).unwrap();
        let dry = srv.cp(&args!["--dry-run", "--json", &src, &dest]);
        dry.ok();
        assert!(
            dry.stderr_lines()
                .iter()
                .any(|l| l.starts_with("would update the metadata of ") && l.ends_with("/f")),
            "{dry:?}"
        );
        assert_eq!(std::fs::metadata(at.join("f")).unwrap().mode(), md.mode());
        let out = srv.cp(&args!["--json", &src, &dest]);
        out.ok();
        assert_eq!(out.json_value()["files"], 0, "not copied again: {out:?}");
        assert_same_tree(&src, &at);
        assert_eq!(std::fs::metadata(at.join("f")).unwrap().ino(), md.ino());
    }
}

#[test]
fn checksum_skip_brings_the_mtime_of_equal_files_in_step() {
    let t = tempdir();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    Tree::new(&src).file("f", 3000, 1);
    hetch(&args!["cp", "-q", &src, &dst], &[]).ok();
    // Same contents, a new mtime at the source.
    let when = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 5);
    let f = std::fs::File::options()
        .write(true)
        .open(src.join("f"))
        .unwrap();
    f.set_modified(when).unwrap();
    let ino = std::fs::metadata(dst.join("f")).unwrap().ino();
    let out = hetch(&args!["cp", "--json", "--checksum-skip", &src, &dst], &[]);
    out.ok();
    assert_eq!(out.json_value()["files"], 0, "{out:?}");
    assert_same_tree(&src, &dst);
    assert_eq!(std::fs::metadata(dst.join("f")).unwrap().ino(), ino);
    // So a plain run finds the copy current.
    let plain = hetch(&args!["cp", "--json", &src, &dst], &[]);
    plain.ok();
    assert_eq!(plain.json_value()["files"], 0, "{plain:?}");
}

/// A FIFO, a socket and a character device (as `/dev/null` is: 1, 3) at `src`, with
/// odd modes and mtimes (the suite runs as root, as CI does).
fn specials(src: &Path) {
    Tree::new(src).file("plain", 100, 1);
    for (name, kind, dev) in [
        ("fifo", libc::S_IFIFO, 0),
        ("null", libc::S_IFCHR, libc::makedev(1, 3)),
    ] {
        let path =
            std::ffi::CString::new(src.join(name).into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mknod only reads it.
        let r = unsafe { libc::mknod(path.as_ptr(), kind | 0o640, dev) };
        assert_eq!(r, 0, "mknod {name}: {}", std::io::Error::last_os_error());
    }
    drop(std::os::unix::net::UnixListener::bind(src.join("socket")).unwrap());
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_600_000_000, 7);
    for name in ["fifo", "null", "socket"] {
        std::fs::set_permissions(src.join(name), std::fs::Permissions::from_mode(0o604)).unwrap();
        set_mtime_nofollow(&src.join(name), old);
    }
}

/// Sets the mtime of `path` without opening it (a FIFO would block an open).
fn set_mtime_nofollow(path: &Path, when: std::time::SystemTime) {
    let d = when.duration_since(std::time::UNIX_EPOCH).unwrap();
    let t = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid path and two valid timespecs.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            path.as_ptr(),
            [t, t].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(r, 0, "utimensat: {}", std::io::Error::last_os_error());
}

#[test]
fn specials_and_devices_are_recreated_with_d_locally_pushed_and_pulled() {
    let t = tempdir();
    let srv = Server::start_with(
        &t.path().join("root"),
        &t.path().join("state"),
        &["--devices"],
        &[],
    );
    let src = t.path().join("src");
    specials(&src);
    specials(&srv.root.join("offered"));
    let runs = srv.three_ways(t.path(), &src, &["-D", "--json"]);
    for (args, at, from) in &runs {
        let out = srv.cp(args);
        out.ok();
        assert_eq!(out.json_value()["warnings"], 0, "{out:?}");
        assert_same_tree(from, at);
        // Again: the same special files are there, nothing is made anew.
        let again = srv.cp(args);
        again.ok();
        assert_eq!(again.json_value()["files"], 0, "{again:?}");
        assert_same_tree(from, at);
    }
}

#[test]
fn a_server_makes_and_offers_devices_only_when_started_with_devices() {
    use std::os::unix::fs::FileTypeExt;
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let src = t.path().join("src");
    specials(&src);
    specials(&srv.root.join("offered"));
    let back = t.path().join("back");
    for (args, at) in [
        (
            args!["-D", &src, srv.url("pushed")],
            srv.root.join("pushed"),
        ),
        (args!["-D", srv.url("offered"), &back], back.clone()),
    ] {
        let out = srv.cp(&args);
        out.ok();
        assert!(
            std::fs::symlink_metadata(at.join("null")).is_err(),
            "{out:?}"
        );
        let fifo = std::fs::symlink_metadata(at.join("fifo")).unwrap();
        assert!(fifo.file_type().is_fifo(), "{out:?}");
        let socket = std::fs::symlink_metadata(at.join("socket")).unwrap();
        assert!(socket.file_type().is_socket(), "{out:?}");
    }
}

/// Runs `hetch ARGS` as user `nobody` (the suite runs as root).
fn hetch_as_nobody(args: &[std::ffi::OsString]) -> Out {
    let mut full = Vec::from(args![
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        BIN
    ]);
    full.extend(args.iter().cloned());
    let out = std::process::Command::new("setpriv")
        .args(&full)
        .env("HOME", "/nonexistent")
        .env_remove("HETCH_TOKEN")
        .output()
        .expect("run setpriv");
    Out {
        cmd: format!("setpriv {full:?}"),
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Hands `path` and everything under it to `nobody`.
fn give_to_nobody(path: &Path) {
    let st = std::process::Command::new("chown")
        .args(["-R", "nobody:nogroup"])
        .arg(path)
        .status()
        .expect("chown");
    assert!(st.success());
}

#[test]
fn as_a_user_a_changed_file_in_a_read_only_directory_is_replaced_and_the_mode_kept() {
    let t = tempdir();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A directory of nobody's own, where it makes the copy.
    let w = t.path().join("w");
    std::fs::create_dir(&w).unwrap();
    give_to_nobody(&w);
    let (src, dst) = (w.join("src"), w.join("dst"));
    Tree::new(&src)
        .file("ro/f", 1000, 1)
        .file("ro/big", 5 << 20, 2);
    give_to_nobody(&src);
    std::fs::set_permissions(src.join("ro"), std::fs::Permissions::from_mode(0o555)).unwrap();
    hetch_as_nobody(&args!["sync", "-q", &src, &dst]).ok();
    assert_same_tree(&src, &dst);
    // Both change at the source (as their owner could, through a writable copy).
    std::fs::set_permissions(src.join("ro"), std::fs::Permissions::from_mode(0o755)).unwrap();
    Tree::new(&src)
        .file("ro/f", 1200, 3)
        .file("ro/big", 6 << 20, 4);
    give_to_nobody(&src);
    std::fs::set_permissions(src.join("ro"), std::fs::Permissions::from_mode(0o555)).unwrap();
    let out = hetch_as_nobody(&args!["sync", "-q", &src, &dst]);
    out.ok();
    assert_same_tree(&src, &dst);
    // A single file into it: the directory, not part of the copy, keeps its mode.
    Tree::new(t.path()).file("single", 300, 5);
    give_to_nobody(&t.path().join("single"));
    let out = hetch_as_nobody(&args![
        "cp",
        "-q",
        t.path().join("single"),
        dst.join("ro/f")
    ]);
    out.ok();
    assert_eq!(std::fs::read(dst.join("ro/f")).unwrap().len(), 300);
    let mode = std::fs::metadata(dst.join("ro")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o555);
}

/// The inode of `path`.
fn ino(path: &Path) -> u64 {
    std::fs::symlink_metadata(path).unwrap().ino()
}

#[test]
fn hard_links_are_kept_with_h_locally_pushed_and_pulled() {
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let linked = |root: &Path| {
        Tree::new(root)
            .file("a", 3000, 1)
            .file("lone", 10, 2)
            .dir("d");
        std::fs::hard_link(root.join("a"), root.join("b")).unwrap();
        std::fs::hard_link(root.join("a"), root.join("d/c")).unwrap();
    };
    let src = t.path().join("src");
    linked(&src);
    linked(&srv.root.join("offered"));
    let runs = srv.three_ways(t.path(), &src, &["-H", "--json"]);
    for (args, at, from) in &runs {
        let out = srv.cp(args);
        out.ok();
        assert_eq!(out.json_value()["bytes"], 3010, "sent once: {out:?}");
        assert_same_tree(from, at);
        assert_eq!(ino(&at.join("a")), ino(&at.join("b")), "{out:?}");
        assert_eq!(ino(&at.join("a")), ino(&at.join("d/c")), "{out:?}");
        assert_ne!(ino(&at.join("a")), ino(&at.join("lone")));
        let again = srv.cp(args);
        again.ok();
        assert_eq!(again.json_value()["files"], 0, "{again:?}");
    }
    // Without -H, each name is a file of its own.
    let plain = t.path().join("plain");
    hetch(&args!["cp", "-q", &src, &plain], &[]).ok();
    assert_ne!(ino(&plain.join("a")), ino(&plain.join("b")));
}

const MIB: u64 = 1 << 20;
/// Length of the sparse test files: six blocks of the default 4 MiB.
const SPARSE_LEN: u64 = 24 * MIB;
/// At most this much is allocated for a sparse test file's 24 KiB of data, at either
/// end: a few pages, far below the 4 MiB block that holds each piece of data.
const SPARSE_HELD: u64 = 256 << 10;

/// Two sparse files of [`SPARSE_LEN`] with 8 KiB of data at three offsets (one at the
/// start of a block's second MiB, one in the middle of a block and off the page grid),
/// one ending in data (its last 8 KiB), one in a hole; and a file that is not sparse,
/// with zeros written inside it (a run of pages, not a whole block). False where the
/// file system keeps no holes.
fn sparse_files(root: &Path) -> bool {
    use std::os::unix::fs::FileExt;
    std::fs::create_dir_all(root).unwrap();
    let make = |name: &str, last: u64| {
        let f = std::fs::File::create(root.join(name)).unwrap();
        f.set_len(SPARSE_LEN).unwrap();
        for (i, at) in [MIB, 9 * MIB + 4096 + 100, last].into_iter().enumerate() {
            f.write_all_at(&random_bytes(8192, 30 + i as u64), at)
                .unwrap();
        }
    };
    make("ends_in_data", SPARSE_LEN - 8192);
    make("ends_in_hole", 20 * MIB);
    let mut full = random_bytes((8 * MIB + 3) as usize, 40);
    full[(5 * MIB) as usize..(5 * MIB + 64 * 1024) as usize].fill(0);
    std::fs::write(root.join("full"), &full).unwrap();
    allocated(&root.join("ends_in_hole")) < MIB
}

#[test]
fn sparse_files_keep_their_holes_locally_pushed_and_pulled() {
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let src = t.path().join("src");
    if !sparse_files(&src) || !sparse_files(&srv.root.join("offered")) {
        eprintln!("SKIPPED: the file system under {src:?} keeps no holes");
        return;
    }
    let runs = srv.three_ways(t.path(), &src, &[]);
    for (args, at, from) in &runs {
        // Read back from the destination (the default `--verify written`) per block
        // and per file: the holes read as the zeros sent.
        for schedule in ["block", "file"] {
            remove(at);
            let mut args = args.to_vec();
            args.extend(args!["--verify-schedule", schedule]);
            let out = srv.cp(&args);
            out.ok();
            assert_same_tree(from, at);
            for name in ["ends_in_data", "ends_in_hole"] {
                let held = allocated(&at.join(name));
                assert_eq!(std::fs::metadata(at.join(name)).unwrap().len(), SPARSE_LEN);
                assert!(
                    held <= SPARSE_HELD,
                    "{at:?}/{name}: {held} bytes allocated for 24 KiB of data ({schedule})"
                );
            }
            // A file without holes is written whole, zeros and all.
            let full = at.join("full");
            let len = std::fs::metadata(&full).unwrap().len();
            assert!(allocated(&full) >= len, "{full:?} has holes ({schedule})");
        }
    }
}
