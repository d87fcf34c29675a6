//! The read-back check of `--verify written`: a written block is read back from the
//! destination storage (bypassing the page cache where the file system allows, see
//! [`PartFile::prepare_read_back`]), hashed, and compared with the source's digest. It runs on
//! `--hash-threads` verifiers, overlapping with the transfer and writing of later
//! blocks. The schedule decides what a verifier is handed: each block as soon as it is
//! written (block), or a whole file once all its blocks are written (file, sequential).

use std::sync::Arc;

use hetch_integrity::Digest;
use hetch_proto::{Frame, Schedule};
use hetch_storage::StorageError;
use tokio::sync::mpsc;

use super::batch::{take_batch, MAX_BYTES};
use super::finish::{block_done, Arrival};
use super::write::mismatch;
use super::{IncomingFile, SinkShared};
use crate::error::EngineError;
use crate::pool::{Pages, PooledBuf};

/// Work for a verifier.
pub(crate) enum Job {
    /// One written block; `buf` is its receive buffer, reused for the read-back.
    Block {
        file: u64,
        block: u64,
        digest: Digest,
        buf: Option<PooledBuf>,
    },
    /// Every written, unchecked block of a file, in order.
    File(u64),
}

/// Runs jobs until the finisher closes the queue.
pub(crate) async fn verifier(
    sh: Arc<SinkShared>,
    ctl: mpsc::Sender<Frame>,
) -> Result<(), EngineError> {
    while let Ok(first) = sh.verify.1.recv().await {
        // Whole files go one at a time; written blocks as many as are waiting.
        let batch = match first {
            Job::File(_) => vec![first],
            Job::Block { .. } => take_batch(first, &sh.verify.1, |job| match job {
                Job::Block { buf, .. } => buf.as_ref().map_or(0, |b| b.len()),
                Job::File(_) => MAX_BYTES,
            }),
        };
        let s = sh.clone();
        let counted = batch
            .iter()
            .filter(|job| matches!(job, Job::File(_)) && sh.opts.schedule == Schedule::File)
            .count();
        let replies = tokio::task::spawn_blocking(move || run_batch(&s, batch))
            .await
            .expect("verify task panicked");
        for _ in 0..counted {
            sh.file_checked();
        }
        let replies = replies?;
        for frame in replies {
            if !sh.reply(&ctl, frame).await {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Runs a batch of jobs: the read-backs of all its written blocks are started first,
/// so that the device reads them together while the first ones are hashed.
fn run_batch(sh: &SinkShared, batch: Vec<Job>) -> Result<Vec<Frame>, EngineError> {
    if batch.len() > 1 {
        for job in &batch {
            if let Job::Block { file, block, .. } = job {
                if let Some(inc) = lookup(sh, *file) {
                    prefetch(&inc, sh.opts.block_size, *block);
                }
            }
        }
    }
    let many = batch.len() > 1;
    let mut replies = Vec::new();
    for job in batch {
        let prefetched = many && matches!(job, Job::Block { .. });
        replies.extend(run(sh, job, prefetched)?);
    }
    Ok(replies)
}

/// Runs one job; `prefetched`: the read-back of its first block was started already.
fn run(sh: &SinkShared, job: Job, prefetched: bool) -> Result<Vec<Frame>, EngineError> {
    let mut replies = Vec::new();
    let (file, blocks, mut buf) = match job {
        Job::Block {
            file,
            block,
            digest,
            buf,
        } => (file, vec![(block, digest)], buf),
        Job::File(file) => {
            let Some(inc) = lookup(sh, file) else {
                return Ok(replies);
            };
            let written = inc.event(|c| c.take_written());
            (file, written, None)
        }
    };
    let Some(inc) = lookup(sh, file) else {
        return Ok(replies); // finished or failed meanwhile
    };
    let mut scratch = Pages::new();
    let bs = sh.opts.block_size;
    let prepare = |i: usize| {
        if let Some(&(block, _)) = blocks.get(i) {
            prefetch(&inc, bs, block);
        }
    };
    if !prefetched {
        prepare(0);
    }
    for (i, &(block, expected)) in blocks.iter().enumerate() {
        // The device reads the next block while this one is hashed.
        prepare(i + 1);
        let outcome = inc
            .read_back(block, buf.as_deref_mut(), &mut scratch, &sh.gate)
            .and_then(|back| {
                let how = Arrival::Received;
                checked(sh, file, &inc, block, &expected, back, how)
            });
        match outcome {
            Ok(Some(frame)) => {
                let failed = matches!(&frame, Frame::FileDone { error: Some(_), .. });
                replies.push(frame);
                if failed {
                    break;
                }
            }
            Ok(None) => {}
            Err(e) => {
                replies.extend(sh.file_error(file, &inc, e)?);
                break;
            }
        }
        buf = None; // a receive buffer serves its own block only
    }
    Ok(replies)
}

/// Asks the store to have block `block` ready to read back.
pub(super) fn prefetch(inc: &IncomingFile, bs: u64, block: u64) {
    let len = inc.size().block_len(bs, block);
    inc.out.prefetch(block * bs, len);
}

pub(super) fn lookup(sh: &SinkShared, file: u64) -> Option<Arc<IncomingFile>> {
    sh.files.lock().expect("files lock").get(&file).cloned()
}

/// Acts on a block read back (see [`IncomingFile::read_back`]): done when its bytes
/// have the digest `expected`, asked for again (or the file failed) when not,
/// nothing when it is no longer wanted.
pub(super) fn checked(
    sh: &SinkShared,
    file: u64,
    inc: &IncomingFile,
    block: u64,
    expected: &Digest,
    back: Option<(&[u8], Digest)>,
    how: Arrival,
) -> Result<Option<Frame>, StorageError> {
    match back {
        None => Ok(None),
        Some((data, got)) if got == *expected => {
            block_done(sh, file, inc, block, expected, data, how)
        }
        Some((_, got)) => Ok(mismatch(sh, file, block, inc, expected, &got)),
    }
}
