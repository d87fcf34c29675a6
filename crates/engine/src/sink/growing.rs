//! Growing files at the sink: blocks that arrive before the file's size is known,
//! pieces of blocks that are not full yet, durable-prefix acknowledgements (what the
//! source measures lag with), and the seal that fixes the final size.
//!
//! Until its `Seal`, a growing file has the size [`GROWING`]: every block is full and
//! every block digest is a non-root BLAKE3 chaining value. The source only sends block
//! `i` once the file has grown past it (see [`full_blocks`]), so both stay true in the
//! final file, and the digests kept here merge into its whole-file hash at the end.

use std::collections::BTreeSet;
use std::sync::Arc;

use hetch_integrity::{self as integrity, Digest, FileDigest};
use hetch_proto::{Frame, PlanAction, PlanItem, Seal};
use hetch_storage::StorageError;
use tokio::sync::mpsc;

use super::{IncomingFile, SinkShared, Streamed};
use crate::error::EngineError;

/// Blocks of a growing file of `size` bytes that may be sent before its end is known:
/// the full blocks, except a lone first block (a file of exactly one block has its
/// root hash, not a chaining value, as block digest).
pub(crate) fn full_blocks(size: u64, bs: u64) -> u64 {
    if size > bs {
        size / bs
    } else {
        0
    }
}

/// Remembers the digest of a done block of a growing file.
pub(crate) fn keep_digest(s: &mut Streamed, block: u64, digest: Digest) {
    s.digests.insert(block, digest);
}

/// Blocks or pieces of growing file `id` became done: queue it for a durable ack.
pub(crate) fn made_durable(sh: &SinkShared, id: u64) {
    if let Some(tx) = sh.durable.lock().expect("durable lock").as_ref() {
        let _ = tx.send(id);
    }
}

/// Makes newly done data of growing files durable (one `fdatasync` per file for all
/// that arrived meanwhile) and tells the source how far each file is durable.
pub(crate) async fn durability(
    sh: Arc<SinkShared>,
    mut rx: mpsc::UnboundedReceiver<u64>,
    ctl: mpsc::Sender<Frame>,
) -> Result<(), EngineError> {
    while let Some(first) = rx.recv().await {
        let mut ids = BTreeSet::from([first]);
        while let Ok(more) = rx.try_recv() {
            ids.insert(more);
        }
        let s = sh.clone();
        let frames = tokio::task::spawn_blocking(move || {
            ids.into_iter()
                .filter_map(|id| durable_frame(&s, id))
                .collect::<Vec<_>>()
        })
        .await
        .expect("durability task panicked");
        for f in frames {
            if !sh.reply(&ctl, f).await {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Syncs file `id` and returns its durable prefix as a `Durable` frame (or the failure
/// of the sync).
fn durable_frame(sh: &SinkShared, id: u64) -> Option<Frame> {
    let inc = sh.files.lock().expect("files lock").get(&id).cloned()?;
    let bs = sh.opts.block_size;
    {
        let mut st = inc.state.lock().expect("file lock");
        if st.failed {
            return None;
        }
        let from = st.streamed.as_ref()?.durable_blocks;
        let cursor = st.ledger.first_missing_from(from);
        let s = st.streamed.as_mut()?;
        s.durable_blocks = cursor;
        // Pieces of blocks now done no longer count.
        s.pieces = s.pieces.split_off(&cursor);
    }
    // Offsets are read again after the sync: whatever was done before it is durable.
    if let Err(e) = inc.out.sync() {
        return sh.fail_file(id, e.to_string());
    }
    let st = inc.state.lock().expect("file lock");
    let s = st.streamed.as_ref()?;
    let offset = durable_offset(s, bs).min(inc.size());
    Some(Frame::Durable { file: id, offset })
}

/// What a seal leaves to do after the control reader's quick part.
pub(crate) struct SealRest {
    file: u64,
    inc: Arc<IncomingFile>,
    /// Tail blocks the pieces cover, with the source's digests: to read back.
    tail: Vec<(u64, Digest)>,
}

/// The source sealed a growing file: fix its size, take back rewritten blocks, and
/// answer with the blocks still needed. Reading back the tail blocks that pieces hold,
/// and finishing the file, are left to [`seal_rest`], off the control reader.
pub(crate) fn seal(
    sh: &SinkShared,
    seal: Seal,
) -> Result<(Vec<Frame>, Option<SealRest>), EngineError> {
    let Some(inc) = sh
        .files
        .lock()
        .expect("files lock")
        .get(&seal.file)
        .cloned()
    else {
        return Ok((Vec::new(), None)); // failed or abandoned meanwhile
    };
    let bs = sh.opts.block_size;
    let protocol = |what: String| EngineError::Unexpected {
        peer: sh.peer.clone(),
        what,
    };
    if !inc.growing() {
        return Err(protocol(format!(
            "seal of {}, which is not growing",
            inc.place.shown.display()
        )));
    }
    if seal.size > super::MAX_FILE_SIZE {
        return Err(protocol(format!(
            "seal of {} at {} bytes, beyond the largest file size",
            inc.place.shown.display(),
            seal.size
        )));
    }
    let blocks = integrity::block_count(seal.size, bs);
    let named = seal
        .rewritten
        .iter()
        .chain(seal.tail.iter().map(|(b, _)| b));
    if let Some(b) = named.copied().find(|&b| b >= blocks) {
        return Err(protocol(format!(
            "seal of {} names block {b}, beyond its {blocks} blocks",
            inc.place.shown.display()
        )));
    }
    let (ranges, tail) = {
        let mut st = inc.state.lock().expect("file lock");
        if st.failed {
            return Ok((Vec::new(), None));
        }
        let mut s = st.streamed.take().expect("a growing file is streamed");
        for &b in &seal.rewritten {
            st.ledger.undo(b);
            s.stored.remove(b);
            s.digests.remove(&b);
        }
        // Blocks beyond the end (from a part file of a longer version) do not count.
        st.ledger.seal(seal.size);
        let _ = s.digests.split_off(&blocks);
        // Every done block has its digest (journaled or received): O(blocks held).
        let mut digest = FileDigest::new(seal.size, bs);
        for (&i, d) in &s.digests {
            if st.ledger.is_done(i) {
                let _ = digest.add(i, *d);
            }
        }
        st.digest = digest;
        s.expected = Some(seal.digest);
        s.final_meta = Some(hetch_storage::part::FinalMeta {
            mtime_sec: seal.mtime_sec,
            mtime_nsec: seal.mtime_nsec,
            ..inc.meta
        });
        let pieces = std::mem::take(&mut s.pieces);
        s.digests = Default::default();
        st.streamed = Some(s);
        inc.seal(seal.size, bs);
        let tail: Vec<(u64, Digest)> = seal
            .tail
            .iter()
            .filter(|&&(b, _)| {
                let covered = pieces.get(&b).copied().unwrap_or(0);
                b < blocks
                    && !st.ledger.is_done(b)
                    && covered >= b * bs + integrity::block_len(seal.size, bs, b)
            })
            .copied()
            .collect();
        let held: Vec<u64> = tail.iter().map(|(b, _)| *b).collect();
        (
            without(super::plan::missing_ranges(&st, blocks), &held),
            tail,
        )
    };
    let frames = if ranges.is_empty() {
        Vec::new()
    } else {
        vec![Frame::Plan(vec![PlanItem {
            id: seal.file,
            action: PlanAction::Send(ranges),
        }])]
    };
    // Nothing to send: the tail (if any) is read back, then the file finished, there.
    let rest = SealRest {
        file: seal.file,
        inc,
        tail,
    };
    let rest = (frames.is_empty() || !rest.tail.is_empty()).then_some(rest);
    Ok((frames, rest))
}

/// Block ranges minus the blocks in `skip` (split where needed).
fn without(ranges: Vec<(u64, u64)>, skip: &[u64]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for (mut start, end) in ranges {
        let mut cuts: Vec<u64> = skip
            .iter()
            .copied()
            .filter(|b| (start..end).contains(b))
            .collect();
        cuts.sort_unstable();
        for c in cuts {
            if c > start {
                out.push((start, c));
            }
            start = c + 1;
        }
        if start < end {
            out.push((start, end));
        }
    }
    out
}

/// The slow part of a seal: reads back the tail blocks pieces hold and counts those
/// that match like any received block (the last one finishes the file); asks for the
/// others; finishes a file that needed nothing at all.
pub(crate) fn seal_rest(sh: &SinkShared, rest: SealRest) -> Result<Vec<Frame>, EngineError> {
    let SealRest { file, inc, tail } = rest;
    if tail.is_empty() {
        // Every block arrived already (a resumed file): finish it now.
        return finish_now(sh, file, &inc).map(|f| f.into_iter().collect());
    }
    let mut ask = Vec::new();
    let mut replies = Vec::new();
    for (b, d) in tail {
        let outcome = held_block(sh, &inc, b, &d).and_then(|held| match held {
            Some(data) => super::finish::block_done(
                sh,
                file,
                &inc,
                b,
                &d,
                &data,
                super::finish::Arrival::Received,
            ),
            None => {
                ask.push((b, b + 1));
                Ok(None)
            }
        });
        match outcome {
            Ok(reply) => replies.extend(reply),
            Err(e) => return Ok(sh.file_error(file, &inc, e)?.into_iter().collect()),
        }
    }
    if !ask.is_empty() {
        replies.push(Frame::Plan(vec![PlanItem {
            id: file,
            action: PlanAction::Send(ask),
        }]));
    }
    Ok(replies)
}

/// Reads block `block` back from the part file; its bytes when they have digest
/// `expected` (the pieces that wrote it hold the block the source sealed or covered),
/// `None` when they differ or nothing was written.
fn held_block(
    sh: &SinkShared,
    inc: &IncomingFile,
    block: u64,
    expected: &Digest,
) -> Result<Option<Vec<u8>>, StorageError> {
    let bs = sh.opts.block_size;
    if inc.state.lock().expect("file lock").failed {
        return Ok(None);
    }
    let mut data = vec![0; integrity::block_len(inc.size(), bs, block) as usize];
    inc.out.read_back(block * bs, &mut data)?;
    let algo = sh.opts.checksum;
    let got = sh
        .gate
        .run(|| algo.block_digest(inc.size(), bs, block, &data));
    Ok((got == *expected).then_some(data))
}

/// Finishes a sealed file whose blocks are all done.
fn finish_now(sh: &SinkShared, id: u64, inc: &IncomingFile) -> Result<Option<Frame>, EngineError> {
    let (whole, expected) = {
        let mut st = inc.state.lock().expect("file lock");
        let whole = if sh.opts.checksum.merges_blocks() {
            let d = std::mem::replace(&mut st.digest, FileDigest::new(0, sh.opts.block_size));
            d.finish().ok().map(|d| d.to_vec())
        } else {
            None
        };
        let expected = st.streamed.as_mut().and_then(|s| s.expected.take());
        (whole, expected)
    };
    let expected = expected.unwrap_or_default();
    match super::finish::finish_streamed(sh, id, inc, whole, expected) {
        Ok(f) => Ok(Some(f)),
        Err(e) => sh.file_error(id, inc, e),
    }
}

/// The source dropped a file (truncated or replaced there; it comes again under a new
/// id): discard what arrived, without counting a failure.
pub(crate) fn abandon(sh: &SinkShared, id: u64) -> Option<Frame> {
    let inc = sh.files.lock().expect("files lock").remove(&id)?;
    {
        inc.state.lock().expect("file lock").failed = true;
    }
    inc.out.abort();
    sh.ended(id);
    Some(Frame::FileDone {
        file: id,
        error: None,
        digest: None,
    })
}

/// Writes a piece of a block that is not full yet, checks it, and queues the file for
/// a durable ack. Pieces never touch a block once its full copy was written: the full
/// block is what counts, and a late piece must not overwrite it.
pub(crate) fn piece(sh: &SinkShared, p: hetch_proto::Piece) -> Result<Option<Frame>, EngineError> {
    let Some(inc) = sh.files.lock().expect("files lock").get(&p.file).cloned() else {
        return Ok(None);
    };
    let bs = sh.opts.block_size;
    let block = p.offset / bs;
    // Checked: a hostile offset near u64::MAX must not wrap into a small one.
    let end = p.offset.checked_add(p.data.len() as u64);
    let in_block = end.is_some_and(|end| end <= block.saturating_add(1).saturating_mul(bs));
    if !inc.growing() || block >= inc.blocks() || !in_block {
        return Err(EngineError::Unexpected {
            peer: sh.peer.clone(),
            what: format!(
                "piece at {} ({} bytes) of {} crosses a block, lies beyond the largest file size, or the file is not growing",
                p.offset,
                p.data.len(),
                inc.place.shown.display()
            ),
        });
    }
    if piece_digest(&p.data) != p.digest {
        // Pieces travel on the TLS control stream; a bad one is a broken peer.
        return Err(EngineError::Unexpected {
            peer: sh.peer.clone(),
            what: format!(
                "piece at {} of {} does not match its digest",
                p.offset,
                inc.place.shown.display()
            ),
        });
    }
    let r = write_piece(sh, &inc, block, p.offset, &p.data);
    match r {
        Ok(true) => {
            made_durable(sh, p.file);
            Ok(None)
        }
        Ok(false) => Ok(None),
        Err(e) => sh.file_error(p.file, &inc, e),
    }
}

/// Writes and reads back a piece; false when it was not needed.
fn write_piece(
    sh: &SinkShared,
    inc: &IncomingFile,
    block: u64,
    offset: u64,
    data: &[u8],
) -> Result<bool, StorageError> {
    let _one_writer = inc.write_lock.lock().expect("write lock");
    {
        let st = inc.state.lock().expect("file lock");
        if st.failed || st.ledger.is_done(block) {
            return Ok(false);
        }
        let stored = st
            .streamed
            .as_ref()
            .is_some_and(|s| s.stored.contains(block));
        if stored {
            return Ok(false);
        }
    }
    inc.out.put(offset, data)?;
    let mut back = vec![0; data.len()];
    inc.out.read_back(offset, &mut back)?;
    if back != data {
        return Err(StorageError::Refused {
            path: inc.place.shown.display().to_string(),
            reason: "a piece read back differs from what was written",
        });
    }
    let bs = sh.opts.block_size;
    let mut st = inc.state.lock().expect("file lock");
    if let Some(s) = &mut st.streamed {
        // Pieces of a block come in order on the control stream, the first one at
        // the block's start, each next one where the last ended.
        add_piece(s, bs, offset, data.len() as u64);
    }
    Ok(true)
}

/// The source says pieces cover block `block` of growing file `id` completely, and
/// its digest is `digest`: read the block back and count it done, or ask for it.
pub(crate) fn cover(
    sh: &SinkShared,
    id: u64,
    block: u64,
    digest: Digest,
) -> Result<Option<Frame>, EngineError> {
    let Some(inc) = sh.files.lock().expect("files lock").get(&id).cloned() else {
        return Ok(None);
    };
    let bs = sh.opts.block_size;
    if block >= inc.blocks() {
        return Err(EngineError::Unexpected {
            peer: sh.peer.clone(),
            what: format!(
                "cover of block {block} of {}, beyond its {} blocks",
                inc.place.shown.display(),
                inc.blocks()
            ),
        });
    }
    let len = integrity::block_len(inc.size(), bs, block);
    let resend = Some(Frame::Resend { file: id, block });
    // No piece may land in the block while it is read back and counted.
    let _one_writer = inc.write_lock.lock().expect("write lock");
    {
        let mut st = inc.state.lock().expect("file lock");
        if st.failed || st.ledger.is_done(block) || !inc.growing() {
            return Ok(None);
        }
        let Some(s) = &mut st.streamed else {
            return Ok(None);
        };
        let covered = s.pieces.get(&block).copied().unwrap_or(0) >= block * bs + len;
        if !covered || s.stored.contains(block) {
            return Ok(resend);
        }
        // Like a full copy written: pieces leave it alone from now on.
        s.stored.insert(block);
    }
    let outcome = match held_block(sh, &inc, block, &digest) {
        Ok(Some(data)) => super::finish::block_done(
            sh,
            id,
            &inc,
            block,
            &digest,
            &data,
            super::finish::Arrival::Received,
        ),
        Ok(None) => {
            let mut st = inc.state.lock().expect("file lock");
            if let Some(s) = &mut st.streamed {
                s.stored.remove(block);
            }
            crate::progress::Progress::add(&sh.progress.retried_blocks, 1);
            return Ok(resend);
        }
        Err(e) => Err(e),
    };
    match outcome {
        Ok(reply) => Ok(reply),
        Err(e) => sh.file_error(id, &inc, e),
    }
}

/// The durable prefix: the done blocks, then what pieces cover of the next block.
fn durable_offset(s: &Streamed, bs: u64) -> u64 {
    let pieces = s.pieces.get(&s.durable_blocks).copied().unwrap_or(0);
    s.durable_blocks.saturating_mul(bs).max(pieces)
}

/// Records a piece `offset..offset+len` (within one block) as written.
fn add_piece(s: &mut Streamed, bs: u64, offset: u64, len: u64) {
    let block = offset / bs;
    let start = block * bs;
    let end = s.pieces.get(&block).copied().unwrap_or(start);
    if offset == start || offset == end {
        s.pieces.insert(block, end.max(offset + len));
    }
}

/// The check value of a piece: BLAKE3 of its bytes, whatever the session's algorithm
/// (pieces are temporary; the full block's digest is what is recorded).
pub fn piece_digest(data: &[u8]) -> Digest {
    *blake3::hash(data).as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_blocks_leave_a_lone_first_block_and_the_tail() {
        let bs = 1024;
        assert_eq!(full_blocks(0, bs), 0);
        assert_eq!(full_blocks(1024, bs), 0, "could stay a one-block file");
        assert_eq!(full_blocks(1025, bs), 1);
        assert_eq!(full_blocks(2048, bs), 2, "a full last block is final");
        assert_eq!(full_blocks(3000, bs), 2);
    }

    #[test]
    fn pieces_count_once_the_blocks_before_them_are_done() {
        let bs = 1024;
        // Pieces of block 3 arrive while blocks 0..2 are done and block 2 is not.
        let mut s = Streamed {
            durable_blocks: 2,
            ..Streamed::default()
        };
        add_piece(&mut s, bs, 3 * bs, 100);
        add_piece(&mut s, bs, 3 * bs + 100, 50);
        add_piece(&mut s, bs, 3 * bs + 500, 10); // not contiguous: ignored
        assert_eq!(durable_offset(&s, bs), 2 * bs);
        // Block 2 is done: the prefix runs on through the pieces of block 3.
        s.durable_blocks = 3;
        assert_eq!(durable_offset(&s, bs), 3 * bs + 150);
        s.durable_blocks = 4;
        assert_eq!(durable_offset(&s, bs), 4 * bs);
    }

    #[test]
    fn ranges_without_held_blocks_stay_merged() {
        assert_eq!(without(vec![(0, 10)], &[]), vec![(0, 10)]);
        assert_eq!(without(vec![(0, 10)], &[9]), vec![(0, 9)]);
        assert_eq!(without(vec![(0, 10)], &[0, 4]), vec![(1, 4), (5, 10)]);
        assert_eq!(without(vec![(3, 4), (7, 9)], &[3, 8]), vec![(7, 8)]);
    }

    #[test]
    fn growing_size_makes_every_block_full() {
        let bs = 4096;
        assert_eq!(integrity::block_len(super::super::GROWING, bs, 12345), bs);
    }
}
