//! Repairing a damaged block a patch at a time, each end against a scripted peer: the
//! sink asks with its copy's patch hashes and takes exactly the patches that fit, the
//! source answers with exactly the patches that differ; patches or repairs that do not
//! fit the block end the session with a protocol error naming the peer.

use crate::common::*;
use crate::hostile;
use crate::hostile_bounds::{assert_protocol_error, file_done, finish};
use hetch_engine::Options;
use hetch_proto::{DataHeader, Frame, Patch, PlanAction, MIN_PATCH};
use hostile::{FakeSink, FakeSource};

fn hash(b: &[u8]) -> [u8; 32] {
    *blake3::hash(b).as_bytes()
}

/// A patch of block 0 of file 1 answering the first round: `bytes` at `at`, one of
/// `count`, with the hash of `honest` (the bytes a source read).
fn patch(at: usize, count: u32, bytes: &[u8], honest: &[u8]) -> (DataHeader, Vec<u8>) {
    patch_in(1, at, count, bytes, honest)
}

/// [`patch`] answering round `round`.
fn patch_in(
    round: u32,
    at: usize,
    count: u32,
    bytes: &[u8],
    honest: &[u8],
) -> (DataHeader, Vec<u8>) {
    let h = DataHeader {
        file: 1,
        block: 0,
        digest: hash(honest),
        zero: false,
        compressed: false,
        raw_len: 0,
        sparse: false,
        patch: Some(Patch {
            at: at as u32,
            count,
            round,
        }),
    };
    (h, bytes.to_vec())
}

/// A sink into `out` with blocks of `bs`, file 1 (one block) announced and planned,
/// and the block sent with one byte at `damage` flipped: the session, the block's
/// true bytes, and the sink's repair request (patch length and hashes).
async fn damaged(
    out: &std::path::Path,
    bs: u64,
    damage: usize,
) -> (FakeSource, Vec<u8>, usize, Vec<[u8; 32]>) {
    let o = Options {
        block_size: bs,
        buffer_memory: 8 << 20,
        ..opts()
    };
    let mut s = FakeSource::start(o, dest(out, 1));
    let data = bytes(7, bs as usize);
    s.send(Frame::Entries(vec![hostile::file(1, "f", bs)]))
        .await;
    let _plan = s.recv().await.unwrap();
    let mut sent = data.clone();
    sent[damage] ^= 0x20;
    s.send_raw_block(1, 0, hetch_integrity::block_digest(bs, bs, 0, &data), &sent)
        .await;
    loop {
        match s.recv().await.expect("a repair") {
            Frame::Repair {
                file: 1,
                block: 0,
                round: 1,
                patch_len,
                digests,
            } => return (s, data, patch_len as usize, digests),
            Frame::Error(e) => panic!("{}", e.message),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sink_asks_with_its_copys_patches_and_one_patch_makes_the_block_whole() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let (mut s, data, len, digests) = damaged(&out, 64 << 10, 5000).await;
    assert_eq!((len, digests.len()), (MIN_PATCH as usize, 16));
    for (i, d) in digests.iter().enumerate() {
        let ours = &data[i * len..(i + 1) * len];
        assert_eq!(
            *d == hash(ours),
            i != 1,
            "patch {i}: only the damaged one differs"
        );
    }
    let (h, p) = patch(len, 1, &data[len..2 * len], &data[len..2 * len]);
    s.send_header(&h, &p).await;
    assert_eq!(file_done(&mut s, 1).await, None);
    finish(s, 1, 0).await;
    assert_eq!(std::fs::read(&out).unwrap(), data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_whose_patches_arrive_damaged_asks_again_in_smaller_patches() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let (mut s, data, len, _) = damaged(&out, 1 << 20, 100).await;
    assert_eq!(len, 16 << 10);
    // The patch arrives damaged too (its bytes are not what its hash says): nothing
    // is taken, and the next round cuts the copy finer.
    let mut bad = data[..len].to_vec();
    bad[7] ^= 1;
    let (h, p) = patch(0, 1, &bad, &data[..len]);
    s.send_header(&h, &p).await;
    let again = loop {
        match s.recv().await.expect("another repair") {
            Frame::Repair {
                round,
                patch_len,
                digests,
                ..
            } => break (round, patch_len as usize, digests),
            Frame::Error(e) => panic!("{}", e.message),
            _ => {}
        }
    };
    assert_eq!((again.0, again.1), (2, 8 << 10));
    assert_eq!(again.2.len(), 128);
    assert_ne!(
        again.2[0],
        hash(&data[..8 << 10]),
        "the damage is still there"
    );
    // The first round's answer again, late (sent again after its stream was lost):
    // let go, though its bytes are right.
    let (h, p) = patch(0, 1, &data[..len], &data[..len]);
    s.send_header(&h, &p).await;
    let (h, p) = patch_in(2, 0, 1, &data[..8 << 10], &data[..8 << 10]);
    s.send_header(&h, &p).await;
    assert_eq!(file_done(&mut s, 1).await, None);
    finish(s, 1, 0).await;
    assert_eq!(std::fs::read(&out).unwrap(), data);
}

/// An answer sent again whole after its data stream was lost repeats the patches that
/// did arrive: each counts once towards the round's end, and an intact copy of one
/// that arrived damaged still fixes it. (Counted twice, the two damaged copies of
/// patch 1 would end the round with nothing fixed, and the sink would ask a second
/// round instead of finishing the file.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_sent_again_counts_each_patch_once() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let (mut s, data, len, _) = damaged(&out, 64 << 10, 5000).await;
    // An answer of two patches: 1 (damaged in the sink's copy) and 2.
    let one = &data[len..2 * len];
    let two = &data[2 * len..3 * len];
    let mut bad = one.to_vec();
    bad[0] ^= 1;
    for bytes in [&bad[..], &bad[..], one] {
        let (h, p) = patch(len, 2, bytes, one);
        s.send_header(&h, &p).await;
    }
    let (h, p) = patch(2 * len, 2, two, two);
    s.send_header(&h, &p).await;
    assert_eq!(file_done(&mut s, 1).await, None);
    finish(s, 1, 0).await;
    assert_eq!(std::fs::read(&out).unwrap(), data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_that_do_not_fit_the_repair_end_the_session() {
    for case in [
        "off the grid",
        "too short",
        "past the block",
        "count changes",
    ] {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("out");
        let (mut s, data, len, _) = damaged(&out, 1 << 20, 5000).await;
        let m = MIN_PATCH as usize;
        let frames = match case {
            "off the grid" => vec![patch(m, 1, &data[m..m + len], &data[m..m + len])],
            "too short" => vec![patch(len, 1, &data[..len - 1], &data[..len - 1])],
            "past the block" => vec![patch(1 << 20, 1, &data[..len], &data[..len])],
            _ => vec![
                patch(0, 3, &data[..len], &data[..len]),
                patch(len, 2, &data[len..2 * len], &data[len..2 * len]),
            ],
        };
        for (h, p) in frames {
            s.send_header(&h, &p).await;
        }
        let e = s.expect_error().await;
        assert_protocol_error(&e, "patch");
        assert!(s.end().await.is_err(), "{case}");
        assert!(!out.exists(), "{case}: a final name was written");
    }
}

/// A real source with one file of one 64 KiB block, planned and sent once.
async fn source(t: &std::path::Path) -> (FakeSink, u64, Vec<u8>) {
    let f = t.join("f");
    let data = bytes(3, 64 << 10);
    std::fs::write(&f, &data).unwrap();
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
    assert!(h.patch.is_none());
    (s, id, data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_sends_only_the_patches_that_differ() {
    let t = tempfile::tempdir().unwrap();
    let (mut s, id, data) = source(t.path()).await;
    let len = MIN_PATCH as usize;
    let mut digests: Vec<[u8; 32]> = data.chunks(len).map(hash).collect();
    digests[3] = [0; 32];
    digests[9] = [1; 32];
    s.ctl
        .send(Frame::Repair {
            file: id,
            block: 0,
            round: 7,
            patch_len: len as u32,
            digests,
        })
        .await;
    for at in [3, 9] {
        let (h, n) = s.recv_block().await.expect("a patch");
        assert_eq!(
            h.patch,
            Some(Patch {
                at: (at * len) as u32,
                count: 2,
                round: 7,
            })
        );
        assert_eq!((h.file, h.block, n), (id, 0, len));
        assert_eq!(h.digest, hash(&data[at * len..(at + 1) * len]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_that_does_not_fit_the_block_ends_the_session_at_the_source() {
    let t = tempfile::tempdir().unwrap();
    for (block, n) in [(0u64, 3usize), (1, 16), (u64::MAX, 1)] {
        let dir = t.path().join(format!("{block}-{n}"));
        std::fs::create_dir(&dir).unwrap();
        let (mut s, id, _) = source(&dir).await;
        s.ctl
            .send(Frame::Repair {
                file: id,
                block,
                round: 1,
                patch_len: MIN_PATCH,
                digests: vec![[0; 32]; n],
            })
            .await;
        let e = s.ctl.expect_error().await;
        assert_protocol_error(&e, &format!("repair of block {block}"));
        assert!(s.result().await.is_err());
    }
}

/// A data stream breaks in the middle of a block's payload: the sink keeps what came
/// as a damaged copy, says the stream was lost with that block torn (so the source
/// does not send it whole again) and asks for its repair; its patches arrive on the
/// stream's next connection, and the block is whole. (A link that breaks a connection
/// every megabyte or two never carries a big block whole; this way every part of it
/// that crossed is kept.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_a_lost_stream_cut_short_is_repaired_from_what_arrived() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let bs = 64u64 << 10;
    let o = Options {
        block_size: bs,
        ..opts()
    };
    let mut s = FakeSource::start_rejoining(o, dest(&out, 1));
    let data = bytes(9, bs as usize);
    s.send(Frame::Entries(vec![hostile::file(1, "f", bs)]))
        .await;
    let _plan = s.recv().await.unwrap();
    let h = DataHeader {
        file: 1,
        block: 0,
        digest: hetch_integrity::block_digest(bs, bs, 0, &data),
        zero: false,
        compressed: false,
        raw_len: 0,
        sparse: false,
        patch: None,
    };
    // The frame's header and 20 KiB of its 64 KiB, then the connection is gone.
    let mut torn = hetch_proto::encode_data_prefix(&h, data.len()).to_vec();
    torn.extend_from_slice(&data[..20 << 10]);
    s.break_stream(&torn).await;
    let (mut lost, mut repair) = (None, None);
    while lost.is_none() || repair.is_none() {
        match s.recv().await.expect("the sink's word on the loss") {
            f @ Frame::StreamLost { .. } => lost = Some(f),
            Frame::Repair {
                file: 1,
                block: 0,
                round: 1,
                patch_len,
                digests,
            } => repair = Some((patch_len as usize, digests)),
            Frame::Error(e) => panic!("{}", e.message),
            _ => {}
        }
    }
    let lost = lost.unwrap();
    assert_eq!(
        lost,
        Frame::StreamLost {
            index: 0,
            generation: 0,
            frames: 0,
            torn: true
        }
    );
    let (len, digests) = repair.unwrap();
    assert_eq!((len, digests.len()), (MIN_PATCH as usize, 16));
    let differ: Vec<usize> = (0..16)
        .filter(|i| digests[*i] != hash(&data[i * len..(i + 1) * len]))
        .collect();
    assert_eq!(differ, (5..16).collect::<Vec<_>>(), "what arrived is kept");
    assert_eq!(s.rejoined().await, (0, 1));
    for i in differ {
        let p = &data[i * len..(i + 1) * len];
        let (h, p) = patch(i * len, 11, p, p);
        s.send_header(&h, &p).await;
    }
    assert_eq!(file_done(&mut s, 1).await, None);
    finish(s, 1, 0).await;
    assert_eq!(std::fs::read(&out).unwrap(), data);
}
