//! Writing received blocks: checking the received bytes first (`--verify received`),
//! then handing each written block to the read-back check (`--verify written`) or
//! straight to `finish::block_done` (`received`, `none`). Patches of a block under
//! repair go to [`repair`], and the block they make whole is stored like any other.

use std::sync::Arc;

use hetch_integrity::to_hex;
use hetch_proto::{DataHeader, Frame, Schedule, Verify};
use hetch_storage::StorageError;
use tokio::sync::mpsc;

use super::batch::take_batch;
use super::finish::{block_done, Arrival};
use super::ledger::{Checked, Refused};
use super::repair::{self, Patched};
use super::verify::Job;
use super::{IncomingFile, SinkShared};
use crate::error::EngineError;
use crate::pool::PooledBuf;
use crate::progress::Progress;

/// Takes blocks off the queue and handles them on a blocking thread, as many as are
/// waiting at once (see [`super::batch`]).
pub(crate) async fn writer(
    sh: Arc<SinkShared>,
    rx: async_channel::Receiver<(DataHeader, Option<PooledBuf>)>,
    ctl: mpsc::Sender<Frame>,
) -> Result<(), EngineError> {
    while let Ok(first) = rx.recv().await {
        let batch = take_batch(first, &rx, |(_, p)| p.as_ref().map_or(0, |b| b.len()));
        let s = sh.clone();
        let replies = tokio::task::spawn_blocking(move || {
            let mut replies = Vec::new();
            for (h, payload) in batch {
                replies.extend(handle_block(&s, &h, payload)?);
            }
            Ok::<_, EngineError>(replies)
        })
        .await
        .expect("write task panicked")?;
        for frame in replies {
            if !sh.reply(&ctl, frame).await {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Handles one block; returns the frame to send back, if any.
fn handle_block(
    sh: &SinkShared,
    h: &DataHeader,
    payload: Option<PooledBuf>,
) -> Result<Option<Frame>, EngineError> {
    let bs = sh.opts.block_size;
    let protocol = |what: String| EngineError::Unexpected {
        peer: sh.peer.clone(),
        what,
    };
    // No file has this block, whether or not this one is still known here.
    if h.block > crate::store::MAX_FILE_SIZE / bs {
        return Err(protocol(format!(
            "block {} beyond the end of any file (file {})",
            h.block, h.file
        )));
    }
    let Some(inc) = sh.files.lock().expect("files lock").get(&h.file).cloned() else {
        return Ok(None); // the file failed meanwhile: drop its late blocks
    };
    if let Some(p) = h.patch {
        let data = payload.as_deref().unwrap_or_default();
        return match repair::patch(sh, &inc, h, p, data)? {
            Patched::Reply(reply) => Ok(reply),
            Patched::Whole { digest, data } => {
                let whole = DataHeader {
                    digest,
                    patch: None,
                    ..*h
                };
                accept(sh, &whole, &inc, None, Some(&data))
            }
        };
    }
    sh.repairs.arrived_whole(h.file, h.block);
    let data: &[u8] = match &payload {
        Some(b) => &b[..],
        None if (h.raw_len as usize) <= sh.zeros().len() => &sh.zeros()[..h.raw_len as usize],
        None => return Err(protocol("zero block longer than the block size".into())),
    };
    let admitted = inc.event(|c| c.admit(h.block, data.len() as u64));
    let shown = inc.place.shown.display();
    match admitted {
        Ok(()) => {}
        Err(Refused::Beyond { block }) => {
            return Err(protocol(format!("block {block} beyond the end of {shown}")))
        }
        Err(Refused::Length { block, got, want }) => {
            return Err(protocol(format!(
                "block {block} of {shown} has {got} bytes, expected {want}"
            )))
        }
    }
    if sh.opts.verify == Verify::Received {
        let digest = sh.gate.run(|| inc.block_digest(h.block, data));
        if digest != h.digest {
            Progress::add(&sh.progress.damaged_on_arrival, 1);
            return Ok(mismatch(
                sh, h.file, h.block, &inc, &h.digest, &digest, data,
            ));
        }
    }
    accept(sh, h, &inc, payload, None)
}

/// Stores a block that passed its check on arrival (or needs none): the bytes of
/// `payload` (a zero block when `None`), or those a repair put together (`repaired`).
/// Then reads it back (`--verify written`) or counts it done.
fn accept(
    sh: &SinkShared,
    h: &DataHeader,
    inc: &IncomingFile,
    payload: Option<PooledBuf>,
    repaired: Option<&[u8]>,
) -> Result<Option<Frame>, EngineError> {
    let zero = payload.is_none() && repaired.is_none();
    let data: &[u8] = match (&payload, repaired) {
        (_, Some(r)) => r,
        (Some(b), None) => &b[..],
        (None, None) => &sh.zeros()[..h.raw_len as usize],
    };
    sh.wait_for_backlog();
    let outcome = match store(sh, h, inc, data, zero) {
        Err(e) => Err(e),
        Ok(false) => Ok(None),
        Ok(true) => match (sh.opts.verify, sh.opts.schedule) {
            (Verify::Written, Schedule::Block) => {
                let job = Job::Block {
                    file: h.file,
                    block: h.block,
                    digest: h.digest,
                    buf: payload,
                };
                let _ = sh.verify.0.try_send(job);
                Ok(None)
            }
            (Verify::Written, _) => {
                if inc.event(|c| c.written(h.block, h.digest)) {
                    sh.file_written(h.file);
                }
                Ok(None)
            }
            _ => block_done(sh, h.file, inc, h.block, &h.digest, data, Arrival::Received),
        },
    };
    match outcome {
        Ok(reply) => Ok(reply),
        Err(e) => sh.file_error(h.file, inc, e),
    }
}

/// A block failed its check with bytes `data`: repaired a patch at a time (see
/// [`repair`]), asked for whole again, or the file given up on after `max_retries`
/// failures of the same block. `None` when the file has failed already.
pub(crate) fn mismatch(
    sh: &SinkShared,
    file: u64,
    block: u64,
    inc: &IncomingFile,
    expected: &[u8; 32],
    got: &[u8; 32],
    data: &[u8],
) -> Option<Frame> {
    let bs = sh.opts.block_size;
    // No copy can be kept (the copies held are all taken): the block is asked for whole
    // again, and that failure is not counted against it. On a link that damages most
    // whole blocks, counted, it would use up the block's checks while it waits its
    // turn for a repair; the repairs held end (whole, or failed by their own rounds)
    // and make room.
    if !sh.repairs.has_room(file, block, bs, data.len()) {
        Progress::add(&sh.progress.retried_blocks, 1);
        return Some(Frame::Resend { file, block });
    }
    let checked = inc.event(|c| c.failed_check(block));
    if let Checked::GiveUp { tries } = checked {
        return sh.fail_file(
            file,
            check_failed_message(sh, inc, block, tries, expected, got),
        );
    }
    Progress::add(&sh.progress.retried_blocks, 1);
    sh.repairs
        .start(file, block, bs, expected, data.into())
        .or(Some(Frame::Resend { file, block }))
}

/// Why a file is given up on: block `block` failed its check `tries` times, the last
/// time with digest `got` instead of `expected`.
pub(crate) fn check_failed_message(
    sh: &SinkShared,
    inc: &IncomingFile,
    block: u64,
    tries: u32,
    expected: &[u8; 32],
    got: &[u8; 32],
) -> String {
    let offset = block * sh.opts.block_size;
    let n = sh.opts.checksum.digest_len();
    format!(
        "{}: block {block} at offset {offset} failed its {} check {tries} times (expected {}, got {}); file not written",
        inc.place.shown.display(),
        sh.opts.checksum,
        to_hex(&expected[..n]),
        to_hex(&got[..n]),
    )
}

/// Puts a block into the store. Returns false for a duplicate that was not put.
fn store(
    sh: &SinkShared,
    h: &DataHeader,
    inc: &IncomingFile,
    data: &[u8],
    zero: bool,
) -> Result<bool, StorageError> {
    if !inc.claim(h.block, &sh.stopped) {
        return Ok(false); // a duplicate, a failed file, or the session stops
    }
    let offset = h.block * sh.opts.block_size;
    if zero {
        return inc
            .out
            .put_zeros(offset, data.len() as u64, data)
            .map(|()| true);
    }
    match h.sparse {
        true => inc.out.put_sparse(offset, data)?,
        false => inc.out.put(offset, data)?,
    }
    if !data.is_empty() && sh.corrupt_left.fire() {
        // Test-only fault hook: damage the stored block before it is read back.
        inc.out.put(offset, &[data[0] ^ 0x01])?;
    }
    Ok(true)
}
