//! What a peer can make the other side do with names and modes: names are printed
//! escaped (no terminal escape sequence or newline from a peer reaches stderr raw),
//! messages from a server name paths relative to its root, and setuid, setgid and
//! sticky bits are only kept when the receiver was asked to (a server: when both it
//! and the client ask).

use crate::util;

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use util::*;

/// A file name holding an escape sequence (red text) and a newline.
const HOSTILE_NAME: &[u8] = b"bad\x1b[31m\nname";
/// How it must appear on stderr.
const ESCAPED: &str = "bad\\x1b[31m\\nname";

fn hostile_name() -> &'static Path {
    Path::new(std::ffi::OsStr::from_bytes(HOSTILE_NAME))
}

/// Asserts that stderr names the file escaped and holds no raw ESC byte.
#[track_caller]
fn assert_escaped(out: &Out) {
    assert!(!out.stderr.contains('\x1b'), "raw ESC on stderr\n{out:?}");
    let line = out
        .stderr_lines()
        .into_iter()
        .find(|l| l.contains(ESCAPED))
        .unwrap_or_else(|| panic!("no line names {ESCAPED}\n{out:?}"));
    assert!(line.contains("--no-clobber"), "{line}");
}

/// Source and destination trees where the hostile name exists on both sides, differing.
fn conflicting(src: &Path, dst: &Path) {
    for (dir, len) in [(src, 100usize), (dst, 200)] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(hostile_name()), vec![7u8; len]).unwrap();
    }
}

#[test]
fn a_hostile_name_that_fails_is_printed_escaped_in_a_local_copy() {
    let t = tempdir();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    conflicting(&src, &dst);
    let out = hetch(
        &args!["cp", "-q", "--no-clobber", src.join(hostile_name()), &dst],
        &[],
    );
    out.expect_code(3);
    assert_escaped(&out);
}

#[test]
fn a_pushed_hostile_name_that_fails_is_printed_escaped_and_relative_to_the_root() {
    let t = tempdir();
    let src = t.path().join("src");
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    conflicting(&src, &srv.root);
    let out = srv.cp(&args![
        "--no-clobber",
        src.join(hostile_name()),
        srv.url("")
    ]);
    out.expect_code(3);
    assert_escaped(&out);
    // The server's message names the file below its root, not where the root is.
    let root = std::fs::canonicalize(&srv.root).unwrap();
    let root = root.to_string_lossy();
    assert!(!out.stderr.contains(root.as_ref()), "{root} shown\n{out:?}");
    assert!(!srv.log().contains('\x1b'), "raw ESC in the server log");
}

/// A tree with a setuid file, a setgid file and a sticky directory.
fn special_tree(src: &Path) {
    let tree = Tree::new(src);
    tree.dir("sticky")
        .file("sticky/suid", 5000, 1)
        .file("sticky/sgid", 3000, 2);
    tree.mode("sticky/suid", 0o4755)
        .mode("sticky/sgid", 0o2750)
        .mode("sticky", 0o1777);
    // The test is only meaningful if the source really has the bits.
    assert_eq!(mode(&src.join("sticky/suid")) & 0o7000, 0o4000);
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// Special bits of the copies of `special_tree` under `dst`.
fn special_bits(dst: &Path) -> [u32; 3] {
    ["sticky", "sticky/suid", "sticky/sgid"].map(|r| mode(&dst.join(r)) & 0o7000)
}

#[test]
fn special_modes_are_stripped_in_a_local_copy_unless_asked_for() {
    let t = tempdir();
    let src = t.path().join("src");
    special_tree(&src);
    let plain = t.path().join("plain");
    hetch(&args!["cp", "-q", &src, &plain], &[]).ok();
    assert_eq!(special_bits(&plain), [0; 3]);
    // The permission bits themselves are kept.
    assert_eq!(mode(&plain.join("sticky/suid")), 0o755);
    let kept = t.path().join("kept");
    hetch(
        &args!["cp", "-q", "--preserve-special-modes", &src, &kept],
        &[],
    )
    .ok();
    assert_eq!(special_bits(&kept), [0o1000, 0o4000, 0o2000]);
}

#[test]
fn a_server_keeps_special_modes_only_when_it_and_the_client_both_ask() {
    let t = tempdir();
    let src = t.path().join("src");
    special_tree(&src);
    let strict = Server::start(&t.path().join("root1"), &t.path().join("state1"));
    strict.cp(&args![&src, strict.url("a")]).ok();
    assert_eq!(special_bits(&strict.root.join("a")), [0; 3]);
    // The client's wish alone is not enough.
    strict
        .cp(&args!["--preserve-special-modes", &src, strict.url("b")])
        .ok();
    assert_eq!(special_bits(&strict.root.join("b")), [0; 3]);

    let open = Server::start_with(
        &t.path().join("root2"),
        &t.path().join("state2"),
        &["--preserve-special-modes"],
        &[],
    );
    open.cp(&args![&src, open.url("c")]).ok();
    assert_eq!(special_bits(&open.root.join("c")), [0; 3]);
    open.cp(&args!["--preserve-special-modes", &src, open.url("d")])
        .ok();
    assert_eq!(special_bits(&open.root.join("d")), [0o1000, 0o4000, 0o2000]);
    // Nothing changes owners: the copies belong to the server's user (this one).
    let me = std::fs::metadata(t.path()).unwrap().uid();
    assert_eq!(
        std::fs::metadata(open.root.join("d/sticky/suid"))
            .unwrap()
            .uid(),
        me
    );
}
