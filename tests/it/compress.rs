//! `--compress`: blocks cross the wire compressed with zstd where that pays, in pushes
//! and pulls through a real `hetch serve`; the copies are identical, `--json` reports
//! what crossed the wire, incompressible data goes as it is, and `auto` compresses
//! when the link (here a rate limit) is the bottleneck.

use crate::util;

use std::path::Path;

use util::*;

/// CSV-like lines: compresses about 4:1 with zstd.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 64);
    let mut i = seed;
    while v.len() < len {
        v.extend_from_slice(
            format!(
                "{i},2026-11-25T19:{:02}:{:02},sensor-{},{:.4},ok\n",
                i / 60 % 60,
                i % 60,
                i % 23,
                (i % 1000) as f64 / 7.0
            )
            .as_bytes(),
        );
        i += 1;
    }
    v.truncate(len);
    v
}

fn text_tree(root: &Path) {
    let t = Tree::new(root);
    t.bytes("log/a.csv", &text(3 << 20, 1))
        .bytes("log/b.csv", &text(200_000, 2))
        .bytes("small.csv", &text(1000, 3))
        .file("random.bin", 1 << 20, 4)
        .bytes("empty", b"");
}

/// The `compression` object of a `--json` summary: (compressed blocks, wire bytes,
/// ratio), and the summary's bytes.
#[track_caller]
fn compression(out: &Out) -> (u64, u64, f64, u64) {
    let line = out
        .stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let c = &v["compression"];
    (
        c["compressed_blocks"].as_u64().unwrap(),
        c["wire_bytes"].as_u64().unwrap(),
        c["ratio"].as_f64().unwrap(),
        v["bytes"].as_u64().unwrap(),
    )
}

#[test]
fn compressed_push_and_pull_are_identical_and_report_the_ratio() {
    let t = tempdir();
    let src = t.path().join("src");
    text_tree(&src);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    for verify in ["written", "received"] {
        let dest = format!("up-{verify}");
        let out = srv.cp(&args![
            "--json",
            "--compress",
            "zstd",
            "--verify",
            verify,
            "--block-size",
            BLOCK,
            &src,
            srv.url(&dest)
        ]);
        out.ok();
        assert_same_tree(&src, &srv.root.join(&dest));
        let (blocks, wire, ratio, bytes) = compression(&out);
        assert!(blocks > 0, "nothing compressed: {out:?}");
        // 1 MiB of random bytes goes as it is; the text shrinks about 4:1.
        assert!(
            wire < bytes / 2 && ratio > 2.0,
            "wire {wire} of {bytes}: {out:?}"
        );
    }
    // A pull: the server compresses, the client inflates (and counts what it got).
    let back = t.path().join("back");
    let out = srv.cp(&args![
        "--json",
        "--compress",
        "zstd:1",
        "--streams",
        "2",
        "--block-size",
        BLOCK,
        srv.url("up-written"),
        &back
    ]);
    out.ok();
    assert_same_tree(&src, &back);
    let (blocks, wire, ratio, bytes) = compression(&out);
    assert!(blocks > 0 && wire < bytes / 2 && ratio > 2.0, "{out:?}");
    assert_no_temp_files(t.path());
}

#[test]
fn incompressible_data_goes_as_it_is() {
    let t = tempdir();
    let src = t.path().join("rand");
    Tree::new(&src)
        .file("a.bin", 4 << 20, 7)
        .file("b.bin", 100_000, 8);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let out = srv.cp(&args![
        "--json",
        "--compress",
        "zstd:3",
        "--block-size",
        BLOCK,
        &src,
        srv.url("rand")
    ]);
    out.ok();
    assert_same_tree(&src, &srv.root.join("rand"));
    let (blocks, wire, ratio, bytes) = compression(&out);
    assert_eq!((blocks, wire, ratio), (0, bytes, 1.0), "{out:?}");
}

#[test]
fn auto_compresses_when_the_link_is_the_bottleneck() {
    // A rate limit makes the link the bottleneck: blocks queue for it, and this host
    // compresses text far faster than twice 8 MB/s.
    let t = tempdir();
    let src = t.path().join("src");
    Tree::new(&src).bytes("big.csv", &text(24 << 20, 9));
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let out = srv.cp(&args![
        "--json",
        "--compress",
        "auto",
        "--rate-limit",
        "8M",
        "--block-size",
        BLOCK,
        &src,
        srv.url("auto")
    ]);
    out.ok();
    assert_same_tree(&src, &srv.root.join("auto"));
    let (blocks, _, ratio, _) = compression(&out);
    assert!(blocks > 0 && ratio > 2.0, "{out:?}");
}

#[test]
fn bad_compress_values_are_refused_in_one_line() {
    let t = tempdir();
    for bad in ["zstd:0", "zstd:20", "zstd:x", "gzip"] {
        let out = hetch(
            &args!["cp", "--compress", bad, t.path(), t.path().join("x")],
            &[],
        );
        out.expect_code(2);
        assert!(out.stderr.contains(bad), "{bad}: {out:?}");
        assert!(!t.path().join("x").exists());
    }
}
