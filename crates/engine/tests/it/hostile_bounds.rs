//! Numbers from a hostile peer are bounded before they size anything: huge announced
//! sizes, block indexes and offsets either work at a small cost or end the session
//! with a protocol error naming the peer; nothing allocates by them, nothing panics.

use crate::common::*;
use crate::hostile;
use hetch_proto::{DataHeader, Frame, Piece, PlanAction, Seal};
use hostile::{FakeSink, FakeSource, PEER};

/// Peak memory any of these tests may reach: far below what the announced numbers
/// would cost if anything were sized by them (hundreds of GiB). The peak measured is
/// the whole test process's, shared with the binary's other modules (the conformance
/// suite's copies among them): a full run peaks near 250 MB, well below the ceiling.
const RSS_CEILING: u64 = 1 << 30;

/// The `Send` ranges a plan frame gives file `id`.
fn ranges_for(f: &Frame, id: u64) -> Vec<(u64, u64)> {
    let Frame::Plan(items) = f else {
        panic!("expected a plan, got {f:?}")
    };
    items
        .iter()
        .filter(|i| i.id == id)
        .flat_map(|i| match &i.action {
            PlanAction::Send(r) => r.clone(),
            PlanAction::Skip => Vec::new(),
        })
        .collect()
}

/// Reads frames until file `id`'s `FileDone`; its error, if any.
pub(crate) async fn file_done(s: &mut FakeSource, id: u64) -> Option<String> {
    loop {
        match s.recv().await {
            Some(Frame::FileDone { file, error, .. }) if file == id => return error,
            Some(Frame::Error(e)) => panic!("session ended: {}", e.message),
            Some(_) => continue,
            None => panic!("stream ended before file {id} was done"),
        }
    }
}

/// Ends the entries, checks the sink's summary counts `files` written and `failed`
/// failed, and that the session ends cleanly.
pub(crate) async fn finish(mut s: FakeSource, files: u64, failed: u64) {
    s.send(Frame::EndOfEntries).await;
    loop {
        match s.recv().await.expect("a summary") {
            Frame::Finished(sum) => {
                assert_eq!((sum.files, sum.failed), (files, failed));
                break;
            }
            Frame::Error(e) => panic!("{}", e.message),
            _ => {}
        }
    }
    s.end().await.expect("the session ends cleanly");
}

pub(crate) fn assert_protocol_error(message: &str, about: &str) {
    assert!(
        message.contains(PEER) && message.contains("broke the protocol"),
        "not a protocol error naming the peer: {message}"
    );
    assert!(
        message.contains(about),
        "{message:?} does not mention {about:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_of_2_pow_63_bytes_is_planned_as_one_range_and_the_session_goes_on() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let mut s = FakeSource::start(opts(), dest(&out, 1));
    let huge = i64::MAX as u64;
    s.send(Frame::Entries(vec![
        hostile::dir(0, "top"),
        hostile::file(1, "top/small", 5),
        hostile::file(2, "top/huge", huge),
        hostile::file(3, "top/impossible", u64::MAX),
    ]))
    .await;
    let plan = s.recv().await.unwrap();
    assert_eq!(ranges_for(&plan, 1), vec![(0, 1)]);
    // One range for the whole file: nothing per block, whatever the size.
    assert_eq!(ranges_for(&plan, 2), vec![(0, huge.div_ceil(s.bs))]);
    // Larger than any file can be: refused for itself alone.
    let err = file_done(&mut s, 3)
        .await
        .expect("an impossible size fails");
    assert!(err.contains("beyond the largest possible file"), "{err}");
    s.send_block(1, 0, 5, b"hello").await;
    assert_eq!(file_done(&mut s, 1).await, None);
    s.send(Frame::FileError {
        file: 2,
        message: "gave up".into(),
    })
    .await;
    assert!(file_done(&mut s, 2).await.is_some());
    finish(s, 1, 2).await;
    assert_eq!(std::fs::read(out.join("small")).unwrap(), b"hello");
    assert!(hostile::peak_rss() < RSS_CEILING);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_beyond_a_huge_file_ends_the_session() {
    let t = tempfile::tempdir().unwrap();
    let mut s = FakeSource::start(opts(), dest(&t.path().join("out"), 1));
    let huge = i64::MAX as u64;
    s.send(Frame::Entries(vec![hostile::file(1, "huge", huge)]))
        .await;
    let _plan = s.recv().await.unwrap();
    let blocks = huge.div_ceil(s.bs);
    s.send_raw_block(1, blocks, [0; 32], &vec![0; s.bs as usize])
        .await;
    let e = s.expect_error().await;
    assert_protocol_error(&e, &format!("block {blocks} beyond the end"));
    assert!(s.end().await.is_err());
    assert!(hostile::peak_rss() < RSS_CEILING);
}

/// A source that announces more files than the sink keeps open at once (without
/// finishing any) ends the session with a protocol error before the sink keeps state
/// for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_open_files_than_the_sink_keeps_end_the_session() {
    let t = tempfile::tempdir().unwrap();
    let mut s = FakeSource::start(opts(), dest(&t.path().join("out"), 1));
    let max = hetch_engine::MAX_OPEN_FILES as u64;
    let mut id = 0;
    while id <= max {
        let batch: Vec<_> = (id..(id + 1024).min(max + 1))
            .map(|i| hostile::file(i, &format!("f{i}"), 5))
            .collect();
        id += batch.len() as u64;
        s.send(Frame::Entries(batch)).await;
    }
    let e = s.expect_error().await;
    assert_protocol_error(&e, &format!("more than {max}"));
    assert!(s.end().await.is_err());
    assert!(hostile::peak_rss() < RSS_CEILING);
}

/// Starts a session with one growing file (id 1, announced at one block) and waits
/// for its plan.
/// A seal of file 1 at `size`, naming `rewritten` blocks and `tail` digests.
fn seal(size: u64, rewritten: Vec<u64>, tail: Vec<(u64, [u8; 32])>) -> Frame {
    Frame::Seal(Seal {
        file: 1,
        size,
        mtime_sec: 0,
        mtime_nsec: 0,
        digest: vec![0; 32],
        rewritten,
        tail,
    })
}

async fn growing_session(out: &std::path::Path) -> FakeSource {
    let mut s = FakeSource::start(opts(), dest(out, 1));
    let bs = s.bs;
    s.send(Frame::Entries(vec![hostile::growing(1, "grows", bs)]))
        .await;
    let plan = s.recv().await.unwrap();
    assert_eq!(ranges_for(&plan, 1), Vec::new(), "nothing is full yet");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growing_file_block_indexes_are_bounded_by_the_largest_offset() {
    let t = tempfile::tempdir().unwrap();
    let mut s = growing_session(&t.path().join("out")).await;
    let bs = s.bs;
    let block = vec![7u8; bs as usize];
    // 2^42 blocks in: a legal offset (the file system may refuse it, for this file
    // only); nothing is sized by the index.
    let far = 1u64 << 42;
    let digest = hetch_integrity::block_digest(u64::MAX, bs, far, &block);
    s.send_raw_block(1, far, digest, &block).await;
    // The largest index a u64 offset allows is beyond the largest file: the peer is
    // lying, and the session ends.
    let top = u64::MAX / bs;
    s.send_raw_block(1, top, [0; 32], &block).await;
    let e = s.expect_error().await;
    assert_protocol_error(&e, &format!("block {top} beyond the end of any file"));
    assert!(s.end().await.is_err());
    assert!(hostile::peak_rss() < RSS_CEILING);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_covers_and_seals_with_impossible_numbers_end_the_session() {
    let t = tempfile::tempdir().unwrap();
    let data = b"0123456789".to_vec();
    let digest = *blake3::hash(&data).as_bytes();
    let cases: Vec<(Frame, &str)> = vec![
        (
            // offset + len overflows u64 (refused by the decoder already).
            Frame::Piece(Piece {
                file: 1,
                offset: u64::MAX - 3,
                digest,
                data: data.clone(),
            }),
            "piece",
        ),
        (
            // Crosses into the next block.
            Frame::Piece(Piece {
                file: 1,
                offset: (64 << 10) - 3,
                digest,
                data: data.clone(),
            }),
            "crosses a block",
        ),
        (
            // Beyond the largest file, within u64.
            Frame::Piece(Piece {
                file: 1,
                offset: 1 << 63,
                digest,
                data: data.clone(),
            }),
            "piece at",
        ),
        (
            Frame::Cover {
                file: 1,
                block: u64::MAX,
                digest: [0; 32],
            },
            "cover of block",
        ),
        (seal(100, vec![u64::MAX], Vec::new()), "names block"),
        (
            seal(100, Vec::new(), vec![(1 << 40, [0; 32])]),
            "names block",
        ),
        (
            seal(u64::MAX, Vec::new(), Vec::new()),
            "beyond the largest file size",
        ),
    ];
    for (i, (frame, about)) in cases.into_iter().enumerate() {
        let mut s = growing_session(&t.path().join(format!("out{i}"))).await;
        s.send(frame).await;
        let e = s.expect_error().await;
        assert_protocol_error(&e, about);
        assert!(s.end().await.is_err(), "case {i}");
    }
    assert!(hostile::peak_rss() < RSS_CEILING);
}

/// A real source with one small file; the test plans its only block and reads it.
async fn source_session(t: &std::path::Path) -> (FakeSink, u64) {
    let f = t.join("f");
    std::fs::write(&f, bytes(1, 1000)).unwrap();
    let mut s = FakeSink::start(opts(), vec![f]);
    let id = match s.ctl.recv().await.expect("entries") {
        Frame::Entries(e) => e[0].id,
        other => panic!("expected entries, got {other:?}"),
    };
    s.ctl
        .send(Frame::Plan(vec![hetch_proto::PlanItem {
            id,
            action: PlanAction::Send(vec![(0, 1)]),
        }]))
        .await;
    let (h, _) = s.recv_block().await.expect("the planned block");
    assert_eq!((h.file, h.block), (id, 0));
    (s, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_beyond_the_file_ends_the_session_at_the_source() {
    let t = tempfile::tempdir().unwrap();
    for block in [u64::MAX, 1] {
        let dir = t.path().join(block.to_string());
        std::fs::create_dir(&dir).unwrap();
        let (mut s, id) = source_session(&dir).await;
        s.ctl.send(Frame::Resend { file: id, block }).await;
        let e = s.ctl.expect_error().await;
        assert_protocol_error(&e, &format!("resend of block {block}"));
        let err = s.result().await.expect_err("the source gives up");
        assert!(err.to_string().contains("resend of block"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_plan_ranges_end_the_session_at_the_source() {
    let t = tempfile::tempdir().unwrap();
    let (mut s, id) = source_session(t.path()).await;
    // The same block asked for again and again would queue unbounded work.
    let again = vec![(0, 1); 1000];
    s.ctl
        .send(Frame::Plan(vec![hetch_proto::PlanItem {
            id,
            action: PlanAction::Send(again),
        }]))
        .await;
    let e = s.ctl.expect_error().await;
    assert_protocol_error(&e, "bad block range 0..1");
    assert!(s.result().await.is_err());
}

/// A session into `out` with one file of one block of text announced and planned: the
/// session, the block's bytes, and the block compressed.
async fn one_text_block(out: &std::path::Path) -> (FakeSource, Vec<u8>, Vec<u8>) {
    let mut s = FakeSource::start(opts(), dest(out, 1));
    let bs = s.bs;
    let data: Vec<u8> = (0..bs).map(|i| b"hetch,"[i as usize % 6]).collect();
    s.send(Frame::Entries(vec![hostile::file(1, "f", bs)]))
        .await;
    let _plan = s.recv().await.unwrap();
    let packed = zstd::bulk::compress(&data, 3).unwrap();
    (s, data, packed)
}

/// A compressed block of file 1 (a file of `len` bytes), declaring `raw_len`.
fn packed_header(len: u64, bs: u64, block: u64, bytes: &[u8], raw_len: u32) -> DataHeader {
    DataHeader {
        file: 1,
        block,
        digest: hetch_integrity::block_digest(len, bs, block, bytes),
        zero: false,
        compressed: true,
        raw_len,
        sparse: false,
        patch: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_blocks_that_lie_about_their_length_end_the_session() {
    // The block inflates to more than it declares, to less, past the session's block
    // size (a "zip bomb"), or is not zstd at all: each ends the session with a protocol
    // error naming the peer, allocates nothing by the payload's claims and leaves
    // nothing under the file's final name.
    let bomb = zstd::bulk::compress(&vec![0u8; 64 << 20], 1).unwrap();
    for case in ["longer", "shorter", "bomb", "garbage"] {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("out");
        let (mut s, data, packed) = one_text_block(&out).await;
        let bs = s.bs;
        let (payload, raw_len, about) = match case {
            "longer" => (packed, bs as u32 - 1, "inflate"),
            "shorter" => (
                zstd::bulk::compress(&data[1..], 3).unwrap(),
                bs as u32,
                "inflates to",
            ),
            "bomb" => (bomb.clone(), 64 << 20, "longer than the session's"),
            _ => (
                b"definitely not zstd".to_vec(),
                bs as u32,
                "does not inflate",
            ),
        };
        let h = packed_header(bs, bs, 0, &data, raw_len);
        s.send_header(&h, &payload).await;
        let e = s.expect_error().await;
        assert_protocol_error(&e, about);
        assert!(s.end().await.is_err(), "{case}");
        assert!(!out.is_file(), "{case}: a final name was written");
    }
    assert!(hostile::peak_rss() < RSS_CEILING);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_compressed_block_is_written_and_checked() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let (mut s, data, packed) = one_text_block(&out).await;
    let bs = s.bs;
    s.send_header(&packed_header(bs, bs, 0, &data, bs as u32), &packed)
        .await;
    assert_eq!(file_done(&mut s, 1).await, None);
    finish(s, 1, 0).await;
    assert_eq!(std::fs::read(&out).unwrap(), data);
}
