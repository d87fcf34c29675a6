//! Ranges of one file sent to a real `hetch serve` (`hetch_session::range`), as the
//! workers of a transfer service send them to the nodes of a `hetch://` destination:
//! assembled into one part file from ranges sent in any order, nothing under the final
//! name before the commit, a range sent again sends only what the server lacks, a
//! commit run again finds the file done; and what a token holder may not do with it.

use crate::util;

use std::path::Path;
use std::sync::Arc;

use hetch_engine::ranges::RangeSource;
use hetch_proto::{Op, RangeStep};
use hetch_session::client::ClientConfig;
use hetch_session::range::{commit_ranges, push_range, range_request, RangePacing};
use util::*;

const BS: u64 = 64 << 10;

fn config(s: &Server, token: &str) -> ClientConfig {
    ClientConfig {
        token: token.as_bytes().to_vec(),
        fingerprint: Some(s.fingerprint.parse().unwrap()),
        known_hosts: None,
        socket: Default::default(),
        timeout: std::time::Duration::from_secs(20),
        opened: Default::default(),
        autotune: None,
        reuse: None,
    }
}

/// The session request for step `step` of `src`, placed at `path` below `dest/`.
fn request(dest: &str, path: &str, src: &Path, step: RangeStep) -> hetch_proto::SessionRequest {
    let source = RangeSource::new(std::fs::File::open(src).unwrap(), src).unwrap();
    let range = range_request(dest.as_bytes(), 1, b"run", path.as_bytes(), &source, step);
    let opts = hetch_engine::Options {
        block_size: BS,
        ..Default::default()
    };
    hetch_session::session_request(
        Op::Range(Box::new(range)),
        &opts,
        1,
        true,
        None,
        Default::default(),
    )
}

fn source(src: &Path) -> Arc<RangeSource> {
    Arc::new(RangeSource::new(std::fs::File::open(src).unwrap(), src).unwrap())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Sends blocks `blocks` of `src` as `run/sub/big.bin` into `dest/` at `s`.
fn send(
    s: &Server,
    token: &str,
    dest: &str,
    src: &Path,
    blocks: std::ops::Range<u64>,
) -> anyhow::Result<hetch_engine::ranges::RangeOutcome> {
    send_paced(s, token, dest, src, blocks, RangePacing::default())
}

/// [`send`], paced by `pacing`.
fn send_paced(
    s: &Server,
    token: &str,
    dest: &str,
    src: &Path,
    blocks: std::ops::Range<u64>,
    pacing: RangePacing,
) -> anyhow::Result<hetch_engine::ranges::RangeOutcome> {
    let step = RangeStep::Blocks {
        first: blocks.start,
        end: blocks.end,
    };
    let req = request(dest, "run/sub/big.bin", src, step);
    let cfg = config(s, token);
    runtime().block_on(push_range(&s.addr, &cfg, req, source(src), pacing))
}

fn commit(s: &Server, token: &str, dest: &str, src: &Path) -> anyhow::Result<()> {
    let step = RangeStep::Commit {
        parent: Some((0o750, 1_600_000_000, 7)),
    };
    let req = request(dest, "run/sub/big.bin", src, step);
    runtime().block_on(commit_ranges(&s.addr, &config(s, token), req))
}

#[test]
fn ranges_sent_in_any_order_are_assembled_committed_once_and_resumed() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let s = Server::start(&root, &t.path().join("state"));
    let src = t.path().join("big.bin");
    let mut data = random_bytes((40 * BS - 7) as usize, 3);
    data[(5 * BS) as usize..(6 * BS) as usize].fill(0); // travels as its length
    std::fs::write(&src, &data).unwrap();
    let fin = root.join("copy/run/sub/big.bin");

    let a = send(&s, &s.token, "copy", &src, 27..40).unwrap();
    assert_eq!(a.bytes, 13 * BS - 7);
    send(&s, &s.token, "copy", &src, 0..13).unwrap();
    let e = commit(&s, &s.token, "copy", &src).unwrap_err().to_string();
    assert!(
        e.contains("14 of its 40 blocks") && e.contains(&s.addr),
        "{e}"
    );
    // The file is named as its client knows it, below the server's root: where that
    // root is on the node is none of the client's (nor the job's owner's) business.
    assert!(e.contains(": copy/run/sub/big.bin: "), "{e}");
    assert!(!e.contains(&*root.to_string_lossy()), "{e}");
    assert!(!fin.exists(), "a final name before every range was there");

    send(&s, &s.token, "copy", &src, 13..27).unwrap();
    // Sent again: the server reads back what it recorded and asks for nothing.
    let again = send(&s, &s.token, "copy", &src, 0..13).unwrap();
    assert_eq!((again.bytes, again.kept), (0, 13));
    commit(&s, &s.token, "copy", &src).unwrap();
    assert_eq!(std::fs::read(&fin).unwrap(), data);
    // The parent directory got the mode and mtime the commit carried.
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let parent = std::fs::metadata(fin.parent().unwrap()).unwrap();
    assert_eq!(parent.permissions().mode() & 0o7777, 0o750);
    assert_eq!((parent.mtime(), parent.mtime_nsec()), (1_600_000_000, 7));
    let src_md = std::fs::metadata(&src).unwrap();
    let fin_md = std::fs::metadata(&fin).unwrap();
    assert_eq!(fin_md.mtime(), src_md.mtime());
    // A commit run again (its worker lost before it reported) finds the file done.
    commit(&s, &s.token, "copy", &src).unwrap();
    assert_eq!(std::fs::read(&fin).unwrap(), data);
    assert_no_temp_files(&root);
    assert!(s.log().contains("range done"), "{}", s.log());
}

#[test]
fn a_token_holder_cannot_write_ranges_outside_the_root_or_past_the_file() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let outside = t.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("hop")).unwrap();
    let s = Server::start(&root, &t.path().join("state"));
    let src = t.path().join("big.bin");
    std::fs::write(&src, random_bytes((4 * BS) as usize, 5)).unwrap();
    let one_line = |e: anyhow::Error| {
        let e = format!("{e:#}");
        assert!(!e.contains('\n'), "{e}");
        e
    };

    // Blocks past the end of the file the request describes.
    let e = one_line(send(&s, &s.token, "copy", &src, 3..9).unwrap_err());
    assert!(e.contains("blocks 3..9") && e.contains(&s.addr), "{e}");
    // A destination through a symlink out of the root, and one above it.
    for dest in ["hop", "hop/x", "../outside"] {
        let e = one_line(send(&s, &s.token, dest, &src, 0..4).unwrap_err());
        assert!(e.contains(&s.addr), "{dest}: {e}");
    }
    // A wrong token.
    let e = one_line(send(&s, "not-the-token-of-this-server", "copy", &src, 0..4).unwrap_err());
    assert!(e.contains("authentication failed"), "{e}");
    // A path that climbs out is refused before it is sent.
    let step = RangeStep::Blocks { first: 0, end: 4 };
    let req = request("copy", "run/../../x", &src, step);
    let cfg = config(&s, &s.token);
    let r = runtime().block_on(push_range(
        &s.addr,
        &cfg,
        req,
        source(&src),
        Default::default(),
    ));
    assert!(r.is_err());
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    assert!(!root.join("x").exists());
    assert_no_temp_files(&root);
}

/// Asks `s` to commit `src` placed at `path` below `dest/`, giving its parent
/// directory `parent` (mode) as the source's.
fn commit_at(s: &Server, dest: &str, path: &str, src: &Path, parent: Option<u32>) -> String {
    let step = RangeStep::Commit {
        parent: parent.map(|mode| (mode, 1_600_000_000, 7)),
    };
    let req = request(dest, path, src, step);
    let r = runtime().block_on(commit_ranges(&s.addr, &config(s, &s.token), req));
    r.map_or_else(|e| format!("{e:#}"), |()| String::new())
}

/// A commit neither gives setuid, setgid or sticky bits (to the file or its parent)
/// that the server was not started to keep, nor changes the mode of any directory but
/// the file's own parent below the destination: not the destination, not the root.
#[test]
fn a_commit_keeps_no_special_bits_and_touches_only_the_files_own_parent() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir_all(root.join("copy")).unwrap();
    let s = Server::start(&root, &t.path().join("state"));
    let src = t.path().join("big.bin");
    std::fs::write(&src, random_bytes((3 * BS) as usize, 9)).unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;

    // Special bits dropped: the server has no --preserve-special-modes.
    send(&s, &s.token, "copy", &src, 0..3).unwrap();
    assert_eq!(
        commit_at(&s, "copy", "run/sub/big.bin", &src, Some(0o3750)),
        ""
    );
    assert_eq!(mode(&root.join("copy/run/sub/big.bin")), 0o755);
    assert_eq!(mode(&root.join("copy/run/sub")), 0o750);

    // A file directly in the destination (the root, or a directory in it): a commit
    // that carries a parent's mode is refused, in one line, and changes no mode.
    let (root_mode, copy_mode) = (mode(&root), mode(&root.join("copy")));
    for dest in ["", "copy"] {
        let step = RangeStep::Blocks { first: 0, end: 3 };
        let req = request(dest, "big.bin", &src, step);
        let cfg = config(&s, &s.token);
        let pushed = push_range(&s.addr, &cfg, req, source(&src), RangePacing::default());
        runtime().block_on(pushed).unwrap();
        let e = commit_at(&s, dest, "big.bin", &src, Some(0o777));
        assert!(
            e.contains("big.bin") && e.contains("parent") && e.contains(&s.addr),
            "{dest:?}: {e}"
        );
        assert!(!e.contains('\n'), "{e}");
        assert_eq!(
            (mode(&root), mode(&root.join("copy"))),
            (root_mode, copy_mode)
        );
        // Without a parent's mode the same file commits.
        assert_eq!(commit_at(&s, dest, "big.bin", &src, None), "", "{dest:?}");
    }
    assert_eq!(mode(&root.join("big.bin")), 0o755);
    assert_eq!(
        (mode(&root), mode(&root.join("copy"))),
        (root_mode, copy_mode)
    );
    assert_no_temp_files(&root);
}

/// A range whose rate share holds its blocks back longer than the node's stall
/// timeout (64 KiB blocks at 20 KiB/s: more than 3 s apart, against a stall timeout
/// of 2 s) goes through: its client says it is there between blocks. The node bounds
/// a range's silence by its stall timeout (a silent client's session would hold the
/// file's part file, and refuse its commit, for as long), so without the keep-alives
/// this range would be dropped as stalled.
#[test]
fn a_range_held_back_by_its_rate_outlasts_the_nodes_stall_timeout() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let s = Server::start_with(
        &root,
        &t.path().join("state"),
        &["--stall-timeout", "2s"],
        &[],
    );
    let src = t.path().join("big.bin");
    std::fs::write(&src, random_bytes((3 * BS) as usize, 9)).unwrap();
    let pacing = RangePacing {
        rate: Some(Arc::new(hetch_engine::RateLimiter::adjustable(20 << 10))),
        ..Default::default()
    };
    let sent = send_paced(&s, &s.token, "copy", &src, 0..3, pacing).unwrap();
    assert_eq!(sent.bytes, 3 * BS);
    commit(&s, &s.token, "copy", &src).unwrap();
    assert_eq!(
        std::fs::read(root.join("copy/run/sub/big.bin")).unwrap(),
        std::fs::read(&src).unwrap()
    );
    assert!(!s.log().contains("stopped answering"), "{}", s.log());
}
