//! Growing files at the sink: blocks that arrive before the file's size is known,
//! pieces of blocks that are not full yet, durable-prefix acknowledgements (what the
//! source measures lag with), and the seal that fixes the final size.
//!
//! Until its `Seal`, a growing file's size is [`crate::store::Size::Growing`]: every block is full
//! and every block digest is a non-root BLAKE3 chaining value. The source only sends block
//! `i` once the file has grown past it (see [`full_blocks`]), so both stay true in the
//! final file, and the digests kept here merge into its whole-file hash at the end.

use std::collections::BTreeSet;
use std::sync::Arc;

use hetch_integrity::Digest;
use hetch_proto::{Frame, PlanAction, PlanItem, Seal};
use hetch_storage::StorageError;
use tokio::sync::mpsc;

use super::core::{Cover, Hostile};
use super::finish::Arrival;
use super::verify::lookup;
use super::{IncomingFile, SinkShared};
use crate::error::EngineError;
use crate::pool::Pages;

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
    let inc = lookup(sh, id)?;
    if !inc.event(|c| c.advance_durable()) {
        return None;
    }
    // The offset is read again after the sync: whatever was done before it is durable.
    if let Err(e) = inc.out.sync() {
        return sh.fail_file(id, e.to_string());
    }
    let offset = inc.event(|c| c.durable_offset())?;
    Some(Frame::Durable { file: id, offset })
}

/// What a seal leaves to do after the control reader's quick part.
pub(crate) struct SealRest {
    file: u64,
    inc: Arc<IncomingFile>,
    /// Tail blocks the pieces cover, with the source's digests: to read back.
    tail: Vec<(u64, Digest)>,
}

/// A growing-file frame with numbers no honest source sends: the session ends on it.
fn hostile(sh: &SinkShared, inc: &IncomingFile, what: &str, h: Hostile) -> EngineError {
    let shown = inc.place.shown.display();
    let why = match h {
        Hostile::NotGrowing => "which is not growing".to_string(),
        Hostile::TooLarge => "beyond the largest file size".to_string(),
        Hostile::Beyond(b) => format!("names block {b}, beyond its blocks"),
        Hostile::BadPiece => {
            "crosses a block, lies beyond the largest file size, or the file is not growing"
                .to_string()
        }
    };
    EngineError::unexpected(&sh.peer, format!("{what} of {shown}: {why}"))
}

/// The source sealed a growing file: fix its size, take back rewritten blocks, and
/// answer with the blocks still needed. Reading back the tail blocks that pieces hold,
/// and finishing the file, are left to [`seal_rest`], off the control reader.
pub(crate) fn seal(
    sh: &SinkShared,
    seal: Seal,
) -> Result<(Vec<Frame>, Option<SealRest>), EngineError> {
    let Some(inc) = lookup(sh, seal.file) else {
        return Ok((Vec::new(), None)); // failed or abandoned meanwhile
    };
    let sealed = inc.event(|c| c.seal(&seal));
    let sealed = match sealed {
        Ok(Some(s)) => s,
        Ok(None) => return Ok((Vec::new(), None)),
        Err(h) => return Err(hostile(sh, &inc, "seal", h)),
    };
    let frames = if sealed.ask.is_empty() {
        Vec::new()
    } else {
        vec![Frame::Plan(vec![PlanItem {
            id: seal.file,
            action: PlanAction::Send(sealed.ask),
        }])]
    };
    // Nothing to send: the tail (if any) is read back, then the file finished, there.
    let rest = SealRest {
        file: seal.file,
        inc,
        tail: sealed.tail,
    };
    let rest = (frames.is_empty() || !rest.tail.is_empty()).then_some(rest);
    Ok((frames, rest))
}

/// The slow part of a seal: reads back the tail blocks pieces hold and counts those
/// that match like any received block (the last one finishes the file); asks for the
/// others; finishes a file that needed nothing at all.
pub(crate) fn seal_rest(sh: &SinkShared, rest: SealRest) -> Result<Vec<Frame>, EngineError> {
    let SealRest { file, inc, tail } = rest;
    if tail.is_empty() {
        // Every block arrived already (a resumed file): finish it now.
        let complete = inc.event(|c| c.complete());
        return match super::finish::finish(sh, file, &inc, complete) {
            Ok(f) => Ok(vec![f]),
            Err(e) => Ok(sh.file_error(file, &inc, e)?.into_iter().collect()),
        };
    }
    let mut ask = Vec::new();
    let mut replies = Vec::new();
    let mut scratch = Pages::new();
    for (b, d) in tail {
        match count_held(sh, file, &inc, b, &d, &mut scratch) {
            Ok(Held::Counted(reply)) => replies.extend(reply.map(|f| *f)),
            Ok(Held::Differs) => ask.push((b, b + 1)),
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

/// The source dropped a file (truncated or replaced there; it comes again under a new
/// id): discard what arrived, without counting a failure.
pub(crate) fn abandon(sh: &SinkShared, id: u64) -> Option<Frame> {
    let inc = sh.files.lock().expect("files lock").remove(&id)?;
    inc.drop_all();
    sh.ended(id);
    Some(Frame::FileDone {
        file: id,
        error: None,
        digest: None,
    })
}

/// Writes a piece of a block that is not full yet, checks it, and queues the file for
/// a durable ack (see [`super::core::FileCore::piece`]).
pub(crate) fn piece(sh: &SinkShared, p: hetch_proto::Piece) -> Result<Option<Frame>, EngineError> {
    let Some(inc) = lookup(sh, p.file) else {
        return Ok(None);
    };
    let len = p.data.len() as u64;
    if let Err(h) = inc.event(|c| c.piece(p.offset, len)) {
        let what = format!("piece at {} ({len} bytes)", p.offset);
        return Err(hostile(sh, &inc, &what, h));
    }
    if piece_digest(&p.data) != p.digest {
        // Pieces travel on the TLS control stream; a bad one is a broken peer.
        return Err(EngineError::unexpected(
            &sh.peer,
            format!(
                "piece at {} of {} does not match its digest",
                p.offset,
                inc.place.shown.display()
            ),
        ));
    }
    match write_piece(&inc, p.offset, &p.data) {
        Ok(true) => {
            made_durable(sh, p.file);
            Ok(None)
        }
        Ok(false) => Ok(None),
        Err(e) => sh.file_error(p.file, &inc, e),
    }
}

/// Writes and reads back a piece; false when it was not needed.
fn write_piece(inc: &IncomingFile, offset: u64, data: &[u8]) -> Result<bool, StorageError> {
    let _one_writer = inc.one_writer();
    if !inc
        .event(|c| c.piece(offset, data.len() as u64))
        .unwrap_or(false)
    {
        return Ok(false);
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
    inc.event(|c| c.piece_written(offset, data.len() as u64));
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
    let Some(inc) = lookup(sh, id) else {
        return Ok(None);
    };
    let resend = Some(Frame::Resend { file: id, block });
    // No piece may land in the block while it is read back and counted.
    let _one_writer = inc.one_writer();
    let cover = inc.event(|c| c.cover(block));
    match cover {
        Err(h) => return Err(hostile(sh, &inc, &format!("cover of block {block}"), h)),
        Ok(Cover::Gone) => return Ok(None),
        Ok(Cover::Resend) => return Ok(resend),
        Ok(Cover::ReadBack) => {}
    }
    match count_held(sh, id, &inc, block, &digest, &mut Pages::new()) {
        Ok(Held::Counted(reply)) => Ok(reply.map(|f| *f)),
        Ok(Held::Differs) => {
            inc.event(|c| c.uncover(block));
            crate::progress::Progress::add(&sh.progress.retried_blocks, 1);
            Ok(resend)
        }
        Err(e) => sh.file_error(id, &inc, e),
    }
}

/// What a block pieces wrote held.
enum Held {
    /// The source's block: counted like a received one (the file's report, if it
    /// was the last).
    Counted(Option<Box<Frame>>),
    /// Something else, or it is no longer wanted.
    Differs,
}

/// Reads back block `block` of file `id`, which pieces wrote, and counts it when it
/// has the digest `digest` the source sealed or covered it with.
fn count_held(
    sh: &SinkShared,
    id: u64,
    inc: &IncomingFile,
    block: u64,
    digest: &Digest,
    scratch: &mut Pages,
) -> Result<Held, StorageError> {
    match inc.read_back(block, scratch, &sh.gate)? {
        Some((data, got)) if got == *digest => {
            let reply =
                super::finish::block_done(sh, id, inc, block, digest, data, Arrival::Received)?;
            Ok(Held::Counted(reply.map(Box::new)))
        }
        _ => Ok(Held::Differs),
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
}
