//! Each peer starts its real server on loopback and copies a small nested tree
//! byte-for-byte. Needs root (the servers run as root or drop from it) and the peers'
//! programs (bench/install-peers.sh); without them each test says SKIPPED and passes,
//! except where `HETCH_REQUIRE_ALL` is set (the full tier), where that is a failure.

use std::fs;
use std::path::{Path, PathBuf};

use hetch_bench::{peers, Place, ToolContext};

/// Says that peer test `what` cannot run here: a pass that says SKIPPED, or a failure
/// where `HETCH_REQUIRE_ALL` is set.
fn skipped(what: std::fmt::Arguments) {
    assert!(
        std::env::var_os("HETCH_REQUIRE_ALL").is_none(),
        "cannot run here, and HETCH_REQUIRE_ALL is set: {what}"
    );
    println!("SKIPPED {what}");
}

/// Runs peer `name` on loopback: start, copy a tree, compare, stop.
fn round_trip(name: &str) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skipped(format_args!("{name}: not running as root"));
    }
    let missing = peers::missing(name);
    if !missing.is_empty() {
        return skipped(format_args!(
            "{name}: not installed: {}",
            missing.join(", ")
        ));
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let dst = tmp.path().join("dst");
    make_tree(&src);
    fs::create_dir(&dst).unwrap();
    let scratch = tmp.path().join("scratch");
    fs::create_dir(&scratch).unwrap();
    let ctx = ToolContext {
        hetch: PathBuf::from("hetch"),
        client: Place::loopback(),
        server: Place::loopback(),
        scratch,
        streams: 4,
    };
    let mut tool = peers::make(name).unwrap();
    assert_eq!(tool.name(), name);
    assert!(!tool.version().starts_with("unknown"), "{}", tool.version());
    tool.start(&ctx).unwrap();
    let out = tool.copy(&ctx, &src, &dst, 0).output().unwrap();
    assert!(
        out.status.success(),
        "{name} copy failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    tool.stop();
    tool.stop(); // idempotent
    assert_eq!(
        listing(&dst),
        listing(&src),
        "{name}: destination tree differs"
    );
    for rel in listing(&src) {
        let (a, b) = (src.join(&rel), dst.join(&rel));
        if a.is_file() {
            assert!(
                fs::read(&a).unwrap() == fs::read(&b).unwrap(),
                "{name}: {rel} differs"
            );
        }
    }
}

/// A few files, a hidden one, an empty one, 1 MiB of varied bytes, nested two deep.
fn make_tree(root: &Path) {
    fs::create_dir_all(root.join("sub/deeper")).unwrap();
    fs::write(root.join("a.txt"), "hello\n").unwrap();
    fs::write(root.join(".hidden"), "dot file\n").unwrap();
    fs::write(root.join("sub/empty"), "").unwrap();
    fs::write(root.join("sub/b.txt"), "nested\n").unwrap();
    let big = root.join("sub/deeper/big.bin");
    hetch_testkit::data::write_random(&big, 1 << 20, 13);
}

/// Every path under `root`, relative, sorted, directories marked with a trailing `/`.
fn listing(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if path.is_dir() {
                out.push(format!("{rel}/"));
                walk(root, &path, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

#[test]
fn rsync_copies_tree() {
    round_trip("rsync");
}

#[test]
fn scp_copies_tree() {
    round_trip("scp");
}

#[test]
fn rclone_copies_tree() {
    round_trip("rclone");
}

#[test]
fn gridftp_copies_tree() {
    round_trip("gridftp");
}

#[test]
fn xrootd_copies_tree() {
    round_trip("xrootd");
}

#[test]
fn names_make_their_peers() {
    for name in peers::NAMES {
        let tool = peers::make(name).unwrap();
        assert_eq!(tool.name(), name);
        assert!(!tool.flags().is_empty());
        assert!(!peers::programs(name).is_empty());
    }
    assert!(peers::make("hetch").is_none());
}
