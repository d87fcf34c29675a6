//! The engine end to end on one machine: a real tree copied through in-memory pipes.

mod common;

use std::sync::Arc;

use common::*;
use hetch_engine::{copy_local, Options, Progress};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_a_mixed_tree_and_skips_it_the_second_time() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    make_tree(&src);
    let out = t.path().join("out");
    let p = Arc::new(Progress::default());
    let r = copy_local(opts(), vec![src.clone()], dest(&out, 1), 3, p)
        .await
        .unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_same_tree(&src, &out);
    assert_eq!(r.summary.failed, 0);
    // The second run finds everything in place.
    let p = Arc::new(Progress::default());
    let r = copy_local(opts(), vec![src.clone()], dest(&out, 1), 3, p.clone())
        .await
        .unwrap();
    assert_eq!(r.summary.bytes, 0, "nothing should be re-sent");
    assert!(r.summary.skipped >= 8);
    assert_same_tree(&src, &out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_blocks_are_sent_again() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    make_tree(&src);
    let out = t.path().join("out");
    let o = Options {
        corrupt_blocks: 5,
        ..opts()
    };
    let r = copy_local(o, vec![src.clone()], dest(&out, 1), 2, Arc::default())
        .await
        .unwrap();
    assert_eq!(r.summary.retried_blocks, 5);
    assert_same_tree(&src, &out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrepairable_corruption_fails_the_file_and_leaves_no_final_name() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("f");
    std::fs::write(&src, bytes(9, 10_000)).unwrap();
    let out = t.path().join("g");
    let o = Options {
        corrupt_blocks: 100,
        max_retries: 2,
        ..opts()
    };
    let r = copy_local(o, vec![src], dest(&out, 1), 1, Arc::default())
        .await
        .unwrap();
    assert_eq!(r.summary.failed, 1);
    assert!(
        r.errors[0].contains("failed its blake3 check"),
        "{:?}",
        r.errors
    );
    assert!(!out.exists());
    assert!(
        std::fs::read_dir(t.path()).unwrap().count() == 1,
        "leftovers in destination"
    );
}
