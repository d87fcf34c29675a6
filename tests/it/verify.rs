//! End-to-end integrity through the `hetch` binary and a real `hetch serve`: manifests
//! that `b3sum -c`, `md5sum -c` and `sha256sum -c` accept; bits flipped on the wire (by a
//! proxy, with data encryption off) and in the destination's storage are caught and
//! repaired; `hetch verify` lists every difference between two trees, local or remote;
//! `--checksum-skip` replaces a file that the quick check would skip.

use crate::util;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use util::*;

fn tree(root: &Path) -> Tree {
    let t = Tree::new(root);
    t.file("big.bin", (9 << 20) + 123, 71)
        .file("a/mid.bin", 3 << 20, 72)
        .bytes("a/empty", b"")
        .bytes("ünï ✓.txt", b"unicode name")
        .file("a/b/c/small", 4097, 73)
        .symlink("link", "big.bin");
    t
}

/// Whether `tool --version` runs.
fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn manifests_of_a_push_are_checked_by_b3sum_md5sum_and_sha256sum() {
    let t = tempdir();
    let src = t.path().join("data");
    tree(&src);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    for (algo, tool) in [
        ("blake3", "b3sum"),
        ("md5", "md5sum"),
        ("sha256", "sha256sum"),
    ] {
        let manifest = t.path().join(format!("{algo}.manifest"));
        let dest = format!("copy-{algo}");
        srv.cp(&args![
            "--checksum",
            algo,
            "--manifest",
            &manifest,
            "--block-size",
            "1M",
            &src,
            srv.url(&dest)
        ])
        .ok();
        assert_same_tree(&src, &srv.root.join(&dest));
        let text = std::fs::read_to_string(&manifest).unwrap();
        assert_eq!(
            text.lines().count(),
            5,
            "one line per regular file:\n{text}"
        );
        assert!(
            text.contains("  a/b/c/small\n"),
            "paths relative to DST:\n{text}"
        );
        if !have(tool) {
            util::skipped(format_args!("{tool} -c: {tool} is not installed"));
            continue;
        }
        let check = Command::new(tool)
            .arg("-c")
            .arg(&manifest)
            .current_dir(srv.root.join(&dest))
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{tool} -c failed:\n{}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
    }
    assert_no_temp_files(t.path());
}

#[test]
fn manifest_of_a_pull_lists_files_under_the_destination() {
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    tree(&srv.root.join("data"));
    let into = t.path().join("into");
    std::fs::create_dir(&into).unwrap();
    let manifest = t.path().join("m");
    srv.cp(&args!["--manifest", &manifest, srv.url("data"), &into])
        .ok();
    let text = std::fs::read_to_string(&manifest).unwrap();
    // Copied *into* an existing directory: paths start with the operand's name.
    assert!(text.contains("  data/a/mid.bin\n"), "{text}");
    for line in text.lines() {
        let (hex, rel) = line.split_once("  ").unwrap();
        let data = std::fs::read(into.join(rel)).unwrap();
        assert_eq!(hex, blake3::hash(&data).to_hex().as_str(), "{rel}");
    }
}

/// A TCP proxy that flips one bit at byte `at` of every connection, in both directions.
struct FlipProxy {
    addr: String,
    flips: Arc<AtomicU64>,
}

impl FlipProxy {
    fn start(upstream: String, at: u64) -> FlipProxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let flips = Arc::new(AtomicU64::new(0));
        let f = flips.clone();
        std::thread::spawn(move || {
            for client in l.incoming() {
                let Ok(client) = client else { break };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    break;
                };
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let f = f.clone();
                    std::thread::spawn(move || pump(from, to, at, &f));
                }
            }
        });
        FlipProxy { addr, flips }
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, at: u64, flips: &AtomicU64) {
    let mut buf = vec![0u8; 64 << 10];
    let mut offset = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if (offset..offset + n as u64).contains(&at) {
            buf[(at - offset) as usize] ^= 0x10;
            flips.fetch_add(1, SeqCst);
        }
        offset += n as u64;
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// With data encryption off, a flipped bit on the wire reaches the receiver: its block
/// fails the digest check and is sent again; the copy is identical. One megabyte into a
/// data stream is inside the first 4 MiB block's payload (never in a frame header), and
/// the control stream carries far less.
#[test]
fn bits_flipped_in_flight_are_detected_and_repaired_push_and_pull() {
    let t = tempdir();
    let src = t.path().join("data");
    Tree::new(&src).file("big.bin", 32 << 20, 81);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let proxy = FlipProxy::start(srv.addr.clone(), 1 << 20);
    let url = |p: &str| format!("hetch://{}/{p}", proxy.addr);
    for verify in ["written", "received"] {
        let dest = format!("pushed-{verify}");
        let out = srv.cp(&args![
            "--json",
            "--no-encrypt",
            "--verify",
            verify,
            &src,
            url(&dest)
        ]);
        out.ok();
        assert!(proxy.flips.load(SeqCst) >= 1, "the proxy flipped nothing");
        let s = out.json();
        assert!(s.retried_blocks >= 1, "no block was re-sent\n{out:?}");
        assert_same_tree(&src, &srv.root.join(&dest));
    }
    let before = proxy.flips.load(SeqCst);
    let pulled = t.path().join("pulled");
    let out = srv.cp(&args![
        "--json",
        "--no-encrypt",
        url("pushed-written"),
        &pulled
    ]);
    out.ok();
    assert!(
        proxy.flips.load(SeqCst) > before,
        "the proxy flipped nothing"
    );
    assert!(out.json().retried_blocks >= 1, "{out:?}");
    assert_same_tree(&src, &pulled);
}

/// The server's storage damages the first blocks after they are written (test hook);
/// the read-back check catches each and the client sends them again.
#[test]
fn blocks_damaged_in_the_servers_storage_are_repaired() {
    let t = tempdir();
    let src = t.path().join("data");
    tree(&src);
    let srv = Server::start_with(
        &t.path().join("root"),
        &t.path().join("state"),
        &[],
        &[("HETCH_FAULT_CORRUPT_WRITTEN", "3")],
    );
    for schedule in ["block", "file", "sequential"] {
        let dest = format!("copy-{schedule}");
        let out = srv.cp(&args![
            "--json",
            "--block-size",
            "1M",
            "--verify-schedule",
            schedule,
            &src,
            srv.url(&dest)
        ]);
        out.ok();
        assert_eq!(out.json().retried_blocks, 3, "{schedule}: {out:?}");
        assert_same_tree(&src, &srv.root.join(&dest));
    }
    // `--verify none` reads nothing back: the damage stays (this is what the check buys).
    let out = srv.cp(&args![
        "--json",
        "--verify",
        "none",
        &src,
        srv.url("unchecked")
    ]);
    out.ok();
    assert_eq!(out.json().retried_blocks, 0);
}

#[test]
fn verify_lists_every_difference_local_push_and_pull() {
    let t = tempdir();
    let src = t.path().join("data");
    tree(&src);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    srv.cp(&args![&src, srv.url("copy")]).ok();
    let local = t.path().join("local-copy");
    hetch(&args!["cp", "-q", &src, &local], &[]).ok();

    let verify = |a: &[std::ffi::OsString]| {
        let mut full = Vec::from(args!["verify", "-q", "--fingerprint", &srv.fingerprint]);
        full.extend_from_slice(a);
        hetch(&full, &[("HETCH_TOKEN", srv.token.as_str())])
    };
    verify(&args![&src, &local]).ok();
    verify(&args![&src, srv.url("copy")]).ok();
    verify(&args![srv.url("copy"), &local]).ok();

    // Damage both copies the same way.
    for root in [local.clone(), srv.root.join("copy")] {
        let f = root.join("a/mid.bin");
        let mut data = std::fs::read(&f).unwrap();
        data[12345] ^= 4;
        std::fs::write(&f, data).unwrap();
        std::fs::remove_file(root.join("a/b/c/small")).unwrap();
        std::fs::write(root.join("stray"), b"extra").unwrap();
    }
    let forward = [
        "mid.bin: content differs (blake3 source ",
        "small: missing at the destination",
        "stray: not in the source",
    ];
    // Compared the other way round, the missing file is an extra one and vice versa.
    let backward = [
        "mid.bin: content differs (md5 source ",
        "small: not in the source",
        "stray: missing at the destination",
    ];
    for (out, expected) in [
        (verify(&args![&src, &local]), forward),
        (verify(&args![&src, srv.url("copy")]), forward),
        (
            verify(&args!["--checksum", "md5", srv.url("copy"), &src]),
            backward,
        ),
    ] {
        out.expect_code(3);
        let err = &out.stderr;
        for needle in expected {
            assert!(err.contains(needle), "{needle:?} not reported:\n{err}");
        }
        let lines = err.lines().filter(|l| l.starts_with("hetch: differs: "));
        assert_eq!(lines.count(), 3, "{err}");
    }
}

#[test]
fn checksum_skip_replaces_what_the_quick_check_would_keep() {
    let t = tempdir();
    let src = t.path().join("data");
    tree(&src);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    srv.cp(&args![&src, srv.url("copy")]).ok();
    let victim = srv.root.join("copy/a/mid.bin");
    let md = std::fs::metadata(&victim).unwrap();
    let mut data = std::fs::read(&victim).unwrap();
    data[0] ^= 1;
    std::fs::write(&victim, &data).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&victim)
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_modified(md.modified().unwrap()))
        .unwrap();
    let quick = srv.cp(&args!["--json", &src, srv.url("copy")]);
    assert_eq!(quick.json().bytes, 0, "{quick:?}");
    let out = srv.cp(&args!["--json", "--checksum-skip", &src, srv.url("copy")]);
    let s = out.json();
    assert_eq!((s.files, s.bytes), (1, 3 << 20), "{out:?}");
    assert_same_tree(&src, &srv.root.join("copy"));
}

#[test]
fn bad_integrity_flags_are_usage_errors() {
    let t = tempdir();
    let out = hetch(
        &args!["cp", "--checksum", "sha1", t.path(), t.path().join("x")],
        &[],
    );
    out.expect_code(2);
    assert!(out.stderr.contains("unknown checksum 'sha1'"), "{out:?}");
    let out = hetch(
        &args!["cp", "--verify", "maybe", t.path(), t.path().join("x")],
        &[],
    );
    out.expect_code(2);
    let out = hetch(
        &args![
            "cp",
            "--checksum-skip",
            "--verify",
            "none",
            t.path(),
            t.path().join("x")
        ],
        &[],
    );
    out.expect_code(2);
    assert!(!t.path().join("x").exists());
}
