//! Source files that change while they are copied (issue 14, M6): rewritten in place or
//! renamed over mid-copy. Such a file fails with "changed while being read" (exit code
//! 3) and nothing torn appears at the destination, not even a part file; with
//! `--retry-changed` it is sent again and the copy holds the new content.
//!
//! The copies are slowed down with `--rate-limit` and a small `--buffer-memory` (so the
//! source cannot read far ahead of what is sent); the tests wait for the destination's
//! part file to appear before changing the source, never for fixed times.

use crate::util;

use std::io::Write;
use std::path::{Path, PathBuf};

use util::*;

/// Large enough that the copy is still reading when the part file appears.
const SIZE: u64 = 8 << 20;
/// 64 KiB blocks, about 4 s at 2 MB/s; the source holds a few blocks at most.
const SLOW: [&str; 6] = [
    "--block-size",
    "64K",
    "--buffer-memory",
    "256K",
    "--rate-limit",
    "2M",
];

/// Waits for the part file of `dst` (the copy has begun) while `running` runs.
fn wait_for_part(dst: &Path, running: &mut Running) {
    let part = part_of(dst);
    wait_for("the part file", || {
        assert!(!running.exited(), "`{}` ended too soon", running.cmd);
        part.exists()
    });
}

/// Rewrites `path` in place (same inode) with other content.
fn rewrite_in_place(path: &Path, seed: u64) -> Vec<u8> {
    let new = random_bytes(SIZE as usize, seed);
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all(&new).unwrap();
    new
}

/// Puts a new file with other content in place of `path` (another inode).
fn rename_over(path: &Path, seed: u64) -> Vec<u8> {
    let new = random_bytes(SIZE as usize, seed);
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, &new).unwrap();
    std::fs::rename(&tmp, path).unwrap();
    new
}

/// The copy failed as changed: exit code 3, a message naming the file, no torn file
/// under the final name (absent, or one complete version) and no part file.
fn assert_failed_as_changed(out: &Out, src: &Path, dst: &Path, versions: &[&[u8]]) {
    out.expect_code(3);
    let name = src.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        out.stderr_lines()
            .iter()
            .any(|l| l.contains(&name) && l.contains("changed while being read")),
        "no line names the file as changed\n{out:?}"
    );
    if let Ok(got) = std::fs::read(dst) {
        assert!(
            versions.contains(&got.as_slice()),
            "a torn copy appeared under the final name\n{out:?}"
        );
    }
    assert!(!part_of(dst).exists(), "the part file was left\n{out:?}");
}

fn source(t: &Path) -> (PathBuf, Vec<u8>) {
    let dir = t.join("src");
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("big.bin");
    let old = random_bytes(SIZE as usize, 1);
    std::fs::write(&f, &old).unwrap();
    (f, old)
}

#[test]
fn a_source_rewritten_in_place_mid_copy_fails_as_changed() {
    let t = tempdir();
    let (src, old) = source(t.path());
    let dst = t.path().join("big.bin");
    let mut cp = spawn(
        &args!["cp", SLOW[0], SLOW[1], SLOW[2], SLOW[3], SLOW[4], SLOW[5], &src, &dst],
        &[],
    );
    wait_for_part(&dst, &mut cp);
    let new = rewrite_in_place(&src, 2);
    let out = cp.wait();
    assert_failed_as_changed(&out, &src, &dst, &[&old, &new]);
}

#[test]
fn a_source_renamed_over_mid_push_fails_as_changed() {
    let t = tempdir();
    let (src, old) = source(t.path());
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let dst = srv.root.join("big.bin");
    let mut cmd = SLOW.map(std::ffi::OsString::from).to_vec();
    cmd.extend(args![&src, srv.url("big.bin")]);
    let mut cp = srv.spawn_cp(&cmd, &[]);
    wait_for_part(&dst, &mut cp);
    let new = rename_over(&src, 3);
    let out = cp.wait();
    assert_failed_as_changed(&out, &src, &dst, &[&old, &new]);
}

#[test]
fn with_retry_changed_a_source_rewritten_mid_copy_is_sent_again() {
    let t = tempdir();
    let (src, _) = source(t.path());
    let dst = t.path().join("big.bin");
    let mut cp = spawn(
        &args![
            "cp",
            "--retry-changed",
            SLOW[0],
            SLOW[1],
            SLOW[2],
            SLOW[3],
            SLOW[4],
            SLOW[5],
            &src,
            &dst
        ],
        &[],
    );
    wait_for_part(&dst, &mut cp);
    let new = rewrite_in_place(&src, 4);
    let out = cp.wait();
    out.ok();
    assert!(out.stderr.contains("sending it again"), "{out:?}");
    assert!(
        std::fs::read(&dst).unwrap() == new,
        "the copy is not the new content"
    );
    assert!(!part_of(&dst).exists());
}

/// A pull: the server is the source, and the client's `--retry-changed` travels to it.
#[test]
fn with_retry_changed_a_source_renamed_over_mid_pull_is_sent_again() {
    let t = tempdir();
    let (src, _) = source(t.path());
    let srv = Server::start(&t.path().join("src"), &t.path().join("state"));
    let local = t.path().join("local");
    std::fs::create_dir(&local).unwrap();
    let dst = local.join("big.bin");
    let mut cmd = SLOW.map(std::ffi::OsString::from).to_vec();
    cmd.extend(args!["--retry-changed", srv.url("big.bin"), &dst]);
    let mut cp = srv.spawn_cp(&cmd, &[]);
    wait_for_part(&dst, &mut cp);
    let new = rename_over(&src, 5);
    let out = cp.wait();
    out.ok();
    assert!(
        std::fs::read(&dst).unwrap() == new,
        "the copy is not the new content"
    );
    assert!(!part_of(&dst).exists());
}
