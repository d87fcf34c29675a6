//! The read-back check of `--verify written`: a written block is read back from the
//! destination storage (bypassing the page cache where the file system allows, see
//! [`PartFile::prepare_read_back`]), hashed, and compared with the source's digest. It runs on
//! `--hash-threads` verifiers, overlapping with the transfer and writing of later
//! blocks. The schedule decides what a verifier is handed: each block as soon as it is
//! written (block), or a whole file once all its blocks are written (file, sequential).
//! Written blocks waiting together are read back together
//! ([`crate::store::Store::read_back_batch`]): for small files, one wait for the device
//! per batch instead of one per file.

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
use crate::store::BatchRead;

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

/// Bytes a job holds while it is read back: its receive buffer, or (an all-zero or
/// sparse block, which came without one) the scratch of a block it is read into. A
/// block without a buffer counted as nothing let one batch take 64 of them and
/// allocate 256 MiB of scratch (copies of sparse files peaked near 1 GB).
fn job_bytes(job: &Job, block_size: u64) -> usize {
    match job {
        Job::Block { buf, .. } => buf.as_ref().map_or(block_size as usize, |b| b.len()),
        Job::File(_) => MAX_BYTES,
    }
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
            Job::Block { .. } => take_batch(first, &sh.verify.1, |job| {
                job_bytes(job, sh.opts.block_size)
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

/// Runs a batch of jobs: the store is told of all its written blocks first (it starts
/// writing them out), then reads them back together (see [`Store::read_back_batch`])
/// and they are hashed one by one.
///
/// [`Store::read_back_batch`]: crate::store::Store::read_back_batch
fn run_batch(sh: &SinkShared, batch: Vec<Job>) -> Result<Vec<Frame>, EngineError> {
    let mut blocks = Vec::with_capacity(batch.len());
    let mut files = Vec::new();
    for job in batch {
        match job {
            Job::File(file) => files.push(file),
            Job::Block {
                file,
                block,
                digest,
                buf,
            } => blocks.push((file, block, digest, buf)),
        }
    }
    let mut replies = together(sh, blocks)?;
    for file in files {
        replies.extend(run_file(sh, file)?);
    }
    Ok(replies)
}

/// A written block of a batch, with the space it is read back into.
struct Back {
    file: u64,
    inc: Arc<IncomingFile>,
    block: u64,
    digest: Digest,
    offset: u64,
    /// Its receive buffer, or scratch of its length.
    space: Space,
}

enum Space {
    Own(PooledBuf),
    Scratch(Pages),
}

impl Space {
    fn bytes(&mut self) -> &mut [u8] {
        match self {
            Space::Own(b) => b,
            Space::Scratch(p) => p,
        }
    }
}

/// Reads back the written blocks `jobs` (file, block, digest, receive buffer) in one
/// batch, then checks each.
fn together(
    sh: &SinkShared,
    jobs: Vec<(u64, u64, Digest, Option<PooledBuf>)>,
) -> Result<Vec<Frame>, EngineError> {
    let bs = sh.opts.block_size;
    let mut backs = Vec::with_capacity(jobs.len());
    for (file, block, digest, buf) in jobs {
        let Some(inc) = lookup(sh, file) else {
            continue; // finished or failed meanwhile
        };
        prefetch(&inc, bs, block);
        let Some((offset, len)) = inc.wanted_back(block) else {
            continue;
        };
        let space = match buf {
            Some(b) if b.len() == len => Space::Own(b),
            _ => {
                let mut p = Pages::new();
                p.resize(len);
                Space::Scratch(p)
            }
        };
        backs.push(Back {
            file,
            inc,
            block,
            digest,
            offset,
            space,
        });
    }
    let results = {
        let mut reads: Vec<BatchRead<'_>> = backs
            .iter_mut()
            .map(|b| BatchRead {
                file: &*b.inc.out,
                offset: b.offset,
                buf: b.space.bytes(),
            })
            .collect();
        sh.store.read_back_batch(&mut reads)
    };
    let mut replies = Vec::new();
    for (mut b, read) in backs.into_iter().zip(results) {
        let data = b.space.bytes();
        let outcome = read.and_then(|()| {
            let got = sh.gate.run(|| b.inc.block_digest(b.block, data));
            let back = Some((&data[..], got));
            checked(
                sh,
                b.file,
                &b.inc,
                b.block,
                &b.digest,
                back,
                Arrival::Received,
            )
        });
        match outcome {
            Ok(frame) => replies.extend(frame),
            Err(e) => replies.extend(sh.file_error(b.file, &b.inc, e)?),
        }
    }
    Ok(replies)
}

/// Reads back and checks every written, unchecked block of file `file`, in order.
fn run_file(sh: &SinkShared, file: u64) -> Result<Vec<Frame>, EngineError> {
    let mut replies = Vec::new();
    let Some(inc) = lookup(sh, file) else {
        return Ok(replies);
    };
    let blocks = inc.event(|c| c.take_written());
    let mut scratch = Pages::new();
    let bs = sh.opts.block_size;
    let prepare = |i: usize| {
        if let Some(&(block, _)) = blocks.get(i) {
            prefetch(&inc, bs, block);
        }
    };
    prepare(0);
    for (i, &(block, expected)) in blocks.iter().enumerate() {
        // The device reads the next block while this one is hashed.
        prepare(i + 1);
        let outcome = inc
            .read_back(block, &mut scratch, &sh.gate)
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
        Some((data, got)) => {
            if matches!(how, Arrival::Received) {
                crate::progress::Progress::add(&sh.progress.failed_read_back, 1);
            }
            Ok(mismatch(sh, file, block, inc, expected, &got, data))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_read_back_into_scratch_count_as_a_block_each() {
        let (tx, rx) = async_channel::unbounded();
        let zero = |block| Job::Block {
            file: 1,
            block,
            digest: [0; 32],
            buf: None,
        };
        for b in 1..100 {
            tx.try_send(zero(b)).unwrap();
        }
        let bs = 4 << 20;
        let batch = take_batch(zero(0), &rx, |j| job_bytes(j, bs));
        assert_eq!(batch.len(), 1, "a 4 MiB block of scratch fills a batch");
        let small = take_batch(zero(0), &rx, |j| job_bytes(j, 64 << 10));
        assert_eq!(
            small.len(),
            (MAX_BYTES / (64 << 10)),
            "64 KiB blocks: up to 1 MiB"
        );
    }
}
