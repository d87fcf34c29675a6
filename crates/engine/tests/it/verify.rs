//! Verification modes and schedules end to end through the engine: every combination
//! copies a mixed tree exactly; blocks damaged in storage after they were written are
//! caught by the read-back and sent again; manifests hold the whole-file digests;
//! checksum-skip and compare-only sessions decide by digest.

use std::path::Path;
use std::sync::Arc;

use crate::common::*;
use hetch_engine::{
    copy_local, Algorithm, DestSpec, Manifest, Options, Progress, Schedule, Verify,
};
use hetch_integrity::to_hex;

async fn copy(o: Options, src: &Path, out: &Path) -> hetch_engine::Report {
    copy_local(o, vec![src.to_path_buf()], dest(out, 1), 2, Arc::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_schedule_and_algorithm_copies_exactly() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    make_tree(&src);
    let mut n = 0;
    for verify in [Verify::Written, Verify::Received, Verify::None] {
        for schedule in [Schedule::Block, Schedule::File, Schedule::Sequential] {
            for checksum in [Algorithm::Blake3, Algorithm::Md5] {
                n += 1;
                let out = t.path().join(format!("out{n}"));
                let o = Options {
                    verify,
                    schedule,
                    checksum,
                    hash_threads: 1 + n % 2,
                    ..opts()
                };
                let r = copy(o, &src, &out).await;
                assert!(
                    r.errors.is_empty(),
                    "{verify:?} {schedule:?}: {:?}",
                    r.errors
                );
                assert_same_tree(&src, &out);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_damaged_in_storage_are_caught_by_the_read_back_and_sent_again() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    make_tree(&src);
    for (i, schedule) in [Schedule::Block, Schedule::File, Schedule::Sequential]
        .into_iter()
        .enumerate()
    {
        let out = t.path().join(format!("out{i}"));
        let o = Options {
            schedule,
            corrupt_written: 4,
            ..opts()
        };
        let r = copy(o, &src, &out).await;
        assert!(r.errors.is_empty(), "{schedule:?}: {:?}", r.errors);
        assert_eq!(r.summary.retried_blocks, 4, "{schedule:?}");
        assert_same_tree(&src, &out);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_files_read_back_together_from_the_device_and_damage_among_them_is_caught() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    // Whole pages, tails, empty: each one block, read back in batches through the ring.
    let sizes = [16384, 1000, 4096, 5000, 0, 12345];
    let files = 300;
    for i in 0..files {
        let data = bytes(i as u64, sizes[i % sizes.len()]);
        std::fs::write(src.join(format!("f{i:03}")), data).unwrap();
    }
    let before = hetch_storage::uring::reads_submitted();
    let o = Options {
        corrupt_written: 5,
        // Which written blocks the damage lands on depends on timing: all five may hit
        // one file's block and its re-sends.
        max_retries: 8,
        hash_threads: 1,
        ..opts()
    };
    let r = copy(o, &src, &t.path().join("out")).await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.summary.retried_blocks, 5);
    assert_same_tree(&src, &t.path().join("out"));
    if hetch_storage::uring::available() {
        // Every non-empty file, and the five sent again (/tmp is not a tmpfs here; a
        // file system without direct I/O would read each the usual way).
        let read = hetch_storage::uring::reads_submitted() - before;
        assert!(read >= 250 + 5, "{read} reads through io_uring");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_reads_small_files_together_cold_or_cached_direct_or_not() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    // One block each (64 KiB blocks here): small files through the cache, and files
    // of 256 KiB or more read directly when cold (whole pages, and a tail).
    let sizes = [16384, 1000, 0, 5000, 64 << 10];
    for i in 0..200 {
        std::fs::write(
            src.join(format!("f{i:03}")),
            bytes(i, sizes[i as usize % 5]),
        )
        .unwrap();
    }
    let big = Options {
        block_size: 1 << 20,
        buffer_memory: 8 << 20,
        verify: Verify::Received, // only the source reads through the ring
        ..opts()
    };
    for (i, n) in [(0u64, 300 << 10), (1, (300 << 10) + 123), (2, 1 << 20)] {
        let path = src.join(format!("big{i}"));
        std::fs::write(&path, bytes(100 + i, n)).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        f.sync_all().unwrap();
        hetch_storage::meta::drop_cached_range(&f, 0, n as u64);
    }
    let before = hetch_storage::uring::reads_submitted();
    let r = copy(big, &src, &t.path().join("out")).await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_same_tree(&src, &t.path().join("out"));
    if hetch_storage::uring::available() {
        let read = hetch_storage::uring::reads_submitted() - before;
        assert!(read >= 160 + 3, "{read} reads through io_uring");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_damage_that_keeps_coming_back_fails_the_file_without_a_final_name() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("f");
    std::fs::write(&src, bytes(7, 200_000)).unwrap();
    let out = t.path().join("g");
    let o = Options {
        corrupt_written: 1000,
        max_retries: 2,
        ..opts()
    };
    let r = copy(o, &src, &out).await;
    assert_eq!(r.summary.failed, 1);
    assert!(
        r.errors[0].contains("failed its blake3 check 3 times") && r.errors[0].contains("g: block"),
        "{:?}",
        r.errors
    );
    assert!(!out.exists());
    assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 1, "leftovers");
}

/// Reads a manifest into (path, hex digest) pairs.
fn manifest_lines(p: &Path) -> Vec<(String, String)> {
    let mut v: Vec<_> = std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| {
            let (d, p) = l.split_once("  ").unwrap();
            (p.to_string(), d.to_string())
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_hold_whole_file_digests_relative_to_the_destination() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    make_tree(&src);
    for (i, algo) in [
        Algorithm::Blake3,
        Algorithm::Md5,
        Algorithm::Sha256,
        Algorithm::Crc32c,
    ]
    .into_iter()
    .enumerate()
    {
        for verify in [Verify::Written, Verify::None] {
            let out = t.path().join(format!("out-{i}-{verify:?}"));
            let mpath = t.path().join(format!("m-{i}-{verify:?}"));
            let m = Arc::new(Manifest::create(&mpath, algo).unwrap());
            let o = Options {
                checksum: algo,
                verify,
                file_digests: true,
                manifest: Some(m.clone()),
                ..opts()
            };
            let r = copy(o, &src, &out).await;
            assert!(r.errors.is_empty(), "{:?}", r.errors);
            m.commit().unwrap();
            let lines = manifest_lines(&mpath);
            // Regular files only (no symlinks, no directories).
            assert_eq!(lines.len(), 10, "{algo}: {lines:?}");
            for (rel, digest) in lines {
                let data = std::fs::read(out.join(&rel)).unwrap();
                assert_eq!(digest, to_hex(&algo.digest(&data)), "{algo} {rel}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipped_files_are_in_the_manifest_too() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    make_tree(&src);
    let out = t.path().join("out");
    copy(opts(), &src, &out).await;
    let mpath = t.path().join("MANIFEST");
    let m = Arc::new(Manifest::create(&mpath, hetch_integrity::Algorithm::Blake3).unwrap());
    let o = Options {
        file_digests: true,
        manifest: Some(m.clone()),
        ..opts()
    };
    let r = copy(o, &src, &out).await;
    m.commit().unwrap();
    assert_eq!(r.summary.bytes, 0);
    assert_eq!(manifest_lines(&mpath).len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checksum_skip_resends_a_file_whose_size_and_mtime_match_but_content_differs() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    make_tree(&src);
    let out = t.path().join("out");
    copy(opts(), &src, &out).await;
    // Same size, same mtime, different bytes: the quick check is fooled.
    let victim = out.join("a/odd");
    let md = std::fs::metadata(&victim).unwrap();
    let mut data = std::fs::read(&victim).unwrap();
    data[1000] ^= 0xff;
    std::fs::write(&victim, &data).unwrap();
    let times = std::fs::FileTimes::new().set_modified(md.modified().unwrap());
    std::fs::File::options()
        .write(true)
        .open(&victim)
        .unwrap()
        .set_times(times)
        .unwrap();

    let r = copy(opts(), &src, &out).await;
    assert_eq!(r.summary.bytes, 0, "the quick check skips it");
    let o = Options {
        checksum_skip: true,
        ..opts()
    };
    let r = copy(o, &src, &out).await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.summary.files, 1, "only the damaged file is sent");
    assert_eq!(r.summary.bytes, data.len() as u64);
    assert_same_tree(&src, &out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_only_lists_every_difference_and_writes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    make_tree(&src);
    let out = t.path().join("out");
    copy(opts(), &src, &out).await;
    let compare = |o: Options| {
        let spec = DestSpec {
            as_operand: true,
            ..dest(&out, 1)
        };
        let src = src.clone();
        async move {
            copy_local(o, vec![src], spec, 1, Arc::new(Progress::default()))
                .await
                .unwrap()
        }
    };
    let o = || Options {
        compare_only: true,
        ..opts()
    };
    let r = compare(o()).await;
    assert!(r.errors.is_empty(), "identical trees: {:?}", r.errors);

    let mut data = std::fs::read(out.join("small")).unwrap();
    data[0] ^= 1;
    std::fs::write(out.join("small"), &data).unwrap();
    std::fs::remove_file(out.join("a/exact")).unwrap();
    std::fs::write(out.join("zero"), b"now longer").unwrap();
    std::fs::create_dir(out.join("extra-dir")).unwrap();
    std::fs::write(out.join("extra-dir/inside"), b"x").unwrap();
    std::fs::remove_file(out.join("link")).unwrap();
    std::fs::write(out.join("link"), b"not a link").unwrap();
    let before = snapshot_names(&out);
    let r = compare(o()).await;
    let all = r.errors.join("\n");
    for needle in [
        "small: content differs (blake3 source",
        "a/exact: missing at the destination",
        "zero: size differs (source 0 bytes, destination 10)",
        "extra-dir: not in the source",
        "link: is a file where the source has a symlink",
    ] {
        assert!(all.contains(needle), "{needle} not in:\n{all}");
    }
    assert_eq!(r.errors.len(), 5, "one line per difference:\n{all}");
    assert_eq!(before, snapshot_names(&out), "compare wrote something");
}

fn snapshot_names(p: &Path) -> Vec<std::path::PathBuf> {
    let mut v = walk(p);
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_digests_are_exact_at_every_size_boundary() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let bs = opts().block_size as usize;
    let sizes = [
        0,
        1,
        1023,
        1024,
        1025,
        bs - 1,
        bs,
        bs + 1,
        2 * bs,
        5 * bs + 17,
    ];
    for (i, n) in sizes.iter().enumerate() {
        std::fs::write(src.join(format!("f{n}")), bytes(100 + i as u64, *n)).unwrap();
    }
    for algo in [
        Algorithm::Blake3,
        Algorithm::Md5,
        Algorithm::Sha256,
        Algorithm::Xxh3,
    ] {
        for verify in [Verify::Written, Verify::Received] {
            let out = t.path().join(format!("out-{algo}-{verify:?}"));
            let mpath = t.path().join(format!("m-{algo}-{verify:?}"));
            let m = Arc::new(Manifest::create(&mpath, algo).unwrap());
            let o = Options {
                checksum: algo,
                verify,
                file_digests: true,
                manifest: Some(m.clone()),
                ..opts()
            };
            copy(o, &src, &out).await;
            m.commit().unwrap();
            let lines = manifest_lines(&mpath);
            assert_eq!(lines.len(), sizes.len());
            for (rel, digest) in lines {
                let data = std::fs::read(src.join(&rel)).unwrap();
                assert_eq!(digest, to_hex(&algo.digest(&data)), "{algo} {rel}");
            }
        }
    }
}
