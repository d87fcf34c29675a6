//! The engine end to end on one machine: a real tree copied through in-memory pipes.

use std::sync::Arc;

use crate::common::*;
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

/// A large file read cold and written with `--verify written`: its bytes pass through
/// no page cache on either side (read, written and read back directly), except the
/// last page of the destination, which is not a whole one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_large_file_moves_past_the_page_cache_at_both_ends() {
    use hetch_storage::direct::{cached_pages, reopen, ALIGN};
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("big");
    let data = bytes(3, (3 << 20) + 100);
    std::fs::write(&src, &data).unwrap();
    let f = std::fs::File::open(&src).unwrap();
    f.sync_all().unwrap();
    hetch_storage::meta::drop_cached_range(&f, 0, data.len() as u64);
    if reopen(&f, false).is_none() || cached_pages(&f, 0, 1).is_none() {
        eprintln!(
            "SKIPPED: no direct I/O or no cachestat(2) under {:?}",
            t.path()
        );
        return;
    }
    let out = t.path().join("copy");
    let o = Options {
        verify: hetch_proto::Verify::Written,
        ..opts()
    };
    let r = copy_local(o, vec![src.clone()], dest(&out, 1), 2, Arc::default())
        .await
        .unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let len = data.len() as u64;
    let source_cached = cached_pages(&f, 0, len);
    assert_eq!(
        source_cached,
        Some(0),
        "the source was read through the cache"
    );
    // Before the destination is read here for the comparison, which fills the cache.
    let g = std::fs::File::open(&out).unwrap();
    let whole = len / ALIGN as u64 * ALIGN as u64;
    let dest_cached = cached_pages(&g, 0, whole);
    assert_eq!(dest_cached, Some(0), "the copy went through the cache");
    assert!(std::fs::read(&out).unwrap() == data, "the copy differs");
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

/// A worker's share of a listing made elsewhere: only the named entries go, in two
/// sessions into one destination directory, each finding the parents the other made;
/// an entry reached through a symlink or outside the operand fails alone, by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_entries_of_an_operand_go_and_nothing_else() {
    use hetch_engine::{copy_between, Destination, Operand};
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("run");
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    std::fs::write(src.join("a/one"), bytes(1, 5000)).unwrap();
    std::fs::write(src.join("a/b/two"), bytes(2, 70_000)).unwrap();
    std::fs::write(src.join("left-out"), b"not listed").unwrap();
    std::fs::create_dir_all(t.path().join("outside")).unwrap();
    std::fs::write(t.path().join("outside/secret"), b"secret").unwrap();
    std::os::unix::fs::symlink("../outside", src.join("hop")).unwrap();
    let out = t.path().join("out");
    let mut into = dest(&out, 1);
    into.trailing_slash = true;
    let share = |entries: &[&str]| Operand::Entries {
        operand: src.clone(),
        entries: entries.iter().map(|e| e.as_bytes().to_vec()).collect(),
    };
    let first = share(&["run", "run/a", "run/a/one"]);
    let r = copy_between(
        opts(),
        vec![first],
        Destination::Local(into.clone()),
        2,
        Arc::default(),
    )
    .await
    .unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let second = share(&["run/a/b", "run/a/b/two", "run/hop/secret", "other/x"]);
    let r = copy_between(
        opts(),
        vec![second],
        Destination::Local(into),
        2,
        Arc::default(),
    )
    .await
    .unwrap();
    assert_eq!(r.errors.len(), 2, "{:?}", r.errors);
    assert!(
        r.errors.iter().any(|e| e.contains("run/hop/secret")),
        "{:?}",
        r.errors
    );
    assert!(
        r.errors.iter().any(|e| e.contains("other/x")),
        "{:?}",
        r.errors
    );
    assert_eq!(
        std::fs::read(out.join("run/a/one")).unwrap(),
        bytes(1, 5000)
    );
    assert_eq!(
        std::fs::read(out.join("run/a/b/two")).unwrap(),
        bytes(2, 70_000)
    );
    assert!(!out.join("run/left-out").exists(), "not listed, not copied");
    assert!(!out.join("run/hop").exists());
}

/// A session of chosen entries (a service's unit of files, with its parent
/// directories) leaves alone what else its directories hold, leftovers of interrupted
/// transfers too: removing them took reading every name of the directory for each
/// unit. A copy of the whole tree still removes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chosen_entries_leave_the_leftovers_of_their_directories_alone() {
    use hetch_engine::{copy_between, Destination, Operand};
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("run");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("a/one"), bytes(1, 5000)).unwrap();
    let out = t.path().join("out");
    std::fs::create_dir_all(out.join("run/a")).unwrap();
    let stale = out.join("run/a/.gone.hetch-part");
    std::fs::write(&stale, b"an interrupted transfer's part file").unwrap();
    let mut into = dest(&out, 1);
    into.trailing_slash = true;
    let chosen = Operand::Entries {
        operand: src.clone(),
        entries: ["run", "run/a", "run/a/one"]
            .iter()
            .map(|e| e.as_bytes().to_vec())
            .collect(),
    };
    let o = Options {
        chosen_entries: true,
        ..opts()
    };
    let into_dir = Destination::Local(into.clone());
    let r = copy_between(o, vec![chosen], into_dir, 2, Arc::default())
        .await
        .unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(
        std::fs::read(out.join("run/a/one")).unwrap(),
        bytes(1, 5000)
    );
    assert!(
        stale.exists(),
        "a session of chosen entries removed a leftover"
    );
    let whole = Operand::Local(src.clone());
    let r = copy_between(
        opts(),
        vec![whole],
        Destination::Local(into),
        2,
        Arc::default(),
    )
    .await
    .unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(!stale.exists(), "a copy of the whole tree kept a leftover");
}

/// `base/mine/data/f`, and another user's `theirs/data/secret` beside `base`; then
/// `base/mine` swapped for a link to `theirs`, as a local user racing a worker
/// between its check of a path and its reads would.
fn mine_swapped_for_theirs(t: &std::path::Path) -> std::path::PathBuf {
    let base = t.join("base");
    std::fs::create_dir_all(base.join("mine/data")).unwrap();
    std::fs::write(base.join("mine/data/f"), b"mine").unwrap();
    std::fs::create_dir_all(t.join("theirs/data")).unwrap();
    std::fs::write(t.join("theirs/data/secret"), b"theirs").unwrap();
    std::fs::rename(base.join("mine"), base.join("mine.old")).unwrap();
    std::os::unix::fs::symlink(t.join("theirs"), base.join("mine")).unwrap();
    base.canonicalize().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_read_within_a_directory_are_not_read_through_a_link_swapped_onto_their_path() {
    use hetch_engine::{copy_between, Destination, Operand};
    let t = tempfile::tempdir().unwrap();
    let base = mine_swapped_for_theirs(t.path());
    let operand = base.join("mine/data");
    let entries = vec![b"data".to_vec(), b"data/secret".to_vec()];
    let confined = Options {
        read_within: vec![base.clone()],
        ..opts()
    };
    let cases = [
        (
            "walked, confined",
            Operand::Local(operand.clone()),
            &confined,
        ),
        ("walked", Operand::Local(operand.clone()), &opts()),
        (
            "entries, confined",
            Operand::Entries {
                operand: operand.clone(),
                entries: entries.clone(),
            },
            &confined,
        ),
        (
            "entries",
            Operand::Entries {
                operand: operand.clone(),
                entries,
            },
            &opts(),
        ),
    ];
    for (i, (case, op, o)) in cases.into_iter().enumerate() {
        let out = t.path().join(format!("out{i}"));
        let dst = Destination::Local(dest(&out, 1));
        let r = copy_between(o.clone(), vec![op], dst, 2, Arc::default())
            .await
            .unwrap();
        // (`cp -r` names a copy into a new directory after it.)
        let read = out.join("secret").exists() || out.join("data/secret").exists();
        if o.read_within.is_empty() {
            // Unconfined, the path leads where the link points: what the case guards.
            assert!(read, "{case}: {:?}", r.errors);
            continue;
        }
        assert!(!read, "{case}: the other user's file was copied");
        let e = r.errors.join("\n");
        assert!(e.contains("refusing to follow a symlink"), "{case}: {e}");
        assert!(
            !e.contains("secret"),
            "{case}: an error names the other user's file: {e}"
        );
    }
}

/// A byte stream that counts the bytes written into it.
struct Counted {
    inner: hetch_engine::BoxStream,
    written: Arc<std::sync::atomic::AtomicU64>,
}

impl tokio::io::AsyncRead for Counted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Counted {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = r {
            self.written
                .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        }
        r
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Copies `file` to `out` between the two ends of `pair` in this process; the bytes
/// written into the data streams' pipes (both ends, both directions).
async fn data_stream_bytes(
    pair: (hetch_engine::Transport, hetch_engine::Transport),
    file: &std::path::Path,
    out: &std::path::Path,
) -> u64 {
    use hetch_engine::{run_sink, run_source};
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = |mut t: hetch_engine::Transport| {
        t.data = std::mem::take(&mut t.data)
            .into_iter()
            .map(|inner| {
                let written = written.clone();
                Box::new(Counted { inner, written }) as hetch_engine::BoxStream
            })
            .collect();
        t
    };
    let (src, dst) = (count(pair.0), count(pair.1));
    let sink = tokio::spawn(run_sink(opts(), dest(out, 1), dst, Arc::default()));
    let r = run_source(opts(), vec![file.to_path_buf()], src, Arc::default())
        .await
        .unwrap();
    sink.await.unwrap().unwrap();
    assert_eq!(r.summary.failed, 0, "{:?}", r.errors);
    assert_eq!(std::fs::read(out).unwrap(), std::fs::read(file).unwrap());
    written.load(std::sync::atomic::Ordering::Relaxed)
}

/// In one process the blocks go from source to sink by reference: nothing of a 2 MiB
/// file passes through the data streams' byte pipes, which carry every byte of it
/// (and the frames around them) between the ends of a plain in-memory pair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_copies_hand_blocks_over_by_reference() {
    use hetch_engine::Transport;
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("f");
    std::fs::write(&file, bytes(11, 2 << 20)).unwrap();
    let peers = ("sink", "source");
    let piped = Transport::in_memory_pair(2, 1 << 20, peers);
    let through_pipes = data_stream_bytes(piped, &file, &t.path().join("piped")).await;
    assert!(through_pipes > 2 << 20, "{through_pipes}");
    let handed = Transport::in_process_pair(2, 1 << 20, peers);
    let through_pipes = data_stream_bytes(handed, &file, &t.path().join("handed")).await;
    assert_eq!(through_pipes, 0);
}
