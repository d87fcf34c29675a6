//! Checking, writing and journaling received blocks; finishing complete files.

use std::sync::Arc;

use hetch_integrity as integrity;
use hetch_proto::{DataHeader, Frame};
use hetch_storage::journal::{Journal, JournalHeader};
use hetch_storage::part::{self, PartFile};
use hetch_storage::StorageError;
use tokio::sync::mpsc;

use super::{IncomingFile, SinkShared};
use crate::error::EngineError;
use crate::pool::PooledBuf;
use crate::progress::Progress;

/// Takes blocks off the queue and handles each on a blocking thread.
pub(crate) async fn writer(
    sh: Arc<SinkShared>,
    rx: async_channel::Receiver<(DataHeader, Option<PooledBuf>)>,
    ctl: mpsc::Sender<Frame>,
) -> Result<(), EngineError> {
    while let Ok((h, payload)) = rx.recv().await {
        let s = sh.clone();
        let reply = tokio::task::spawn_blocking(move || handle_block(&s, &h, payload))
            .await
            .expect("write task panicked")?;
        if let Some(frame) = reply {
            if ctl.send(frame).await.is_err() {
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
    let Some(inc) = sh.files.lock().expect("files lock").get(&h.file).cloned() else {
        return Ok(None); // the file failed meanwhile: drop its late blocks
    };
    let bs = sh.opts.block_size;
    let protocol = |what: String| EngineError::Unexpected {
        peer: sh.peer.clone(),
        what,
    };
    if h.block >= inc.blocks {
        return Err(protocol(format!(
            "block {} beyond the end of {}",
            h.block,
            inc.final_path.display()
        )));
    }
    let want = integrity::block_len(inc.size, bs, h.block) as usize;
    let data: &[u8] = match &payload {
        Some(b) => &b[..],
        None if (h.zero_len as usize) <= sh.zeros().len() => &sh.zeros()[..h.zero_len as usize],
        None => return Err(protocol("zero block longer than the block size".into())),
    };
    if data.len() != want {
        return Err(protocol(format!(
            "block {} of {} has {} bytes, expected {want}",
            h.block,
            inc.final_path.display(),
            data.len()
        )));
    }
    let digest = integrity::block_digest(inc.size, bs, h.block, data);
    if digest != h.digest {
        return Ok(Some(mismatch(sh, h, &inc, &digest)));
    }
    match store(sh, h, &inc, data, payload.is_none(), &digest) {
        Ok(reply) => Ok(reply),
        Err(e) if e.is_no_space() => Err(e.into()),
        Err(e) => Ok(Some(sh.fail_file(h.file, e.to_string()))),
    }
}

fn mismatch(sh: &SinkShared, h: &DataHeader, inc: &IncomingFile, got: &[u8; 32]) -> Frame {
    let tries = {
        let mut st = inc.state.lock().expect("file lock");
        let n = st.retries.entry(h.block).or_insert(0);
        *n += 1;
        *n
    };
    if tries > sh.opts.max_retries {
        let offset = h.block * sh.opts.block_size;
        let message = format!(
            "{}: block {} at offset {offset} failed its check {tries} times (expected {}, got {}); file not written",
            inc.final_path.display(),
            h.block,
            hex(&h.digest),
            hex(got),
        );
        return sh.fail_file(h.file, message);
    }
    Progress::add(&sh.progress.retried_blocks, 1);
    Frame::Resend {
        file: h.file,
        block: h.block,
    }
}

fn hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes a verified block, journals it, and finishes the file after its last block.
fn store(
    sh: &SinkShared,
    h: &DataHeader,
    inc: &IncomingFile,
    data: &[u8],
    zero: bool,
    digest: &[u8; 32],
) -> Result<Option<Frame>, StorageError> {
    let bs = sh.opts.block_size;
    let part = {
        let mut st = inc.state.lock().expect("file lock");
        if st.is_done(h.block) {
            return Ok(None); // a duplicate (e.g. a resend that crossed a good copy)
        }
        if st.part.is_none() {
            // Not sized up front: writes that extend the file in (mostly) ascending
            // order are much cheaper on ext4 than filling a pre-sized sparse file. A
            // file whose zero blocks were skipped is sized when it is finished.
            st.part = Some(Arc::new(PartFile::open(&inc.final_path, inc.resumed)?));
        }
        if inc.blocks > 1 && st.journal.is_none() {
            let header = JournalHeader {
                block_size: bs,
                file_size: inc.size,
                mtime_sec: inc.meta.mtime_sec,
                mtime_nsec: inc.meta.mtime_nsec,
            };
            st.journal = Some(Journal::create(
                &part::journal_path(&inc.final_path),
                &header,
            )?);
        }
        st.part.clone().expect("opened above")
    };
    // A fresh part file is a hole: zero blocks need no write. A resumed one may hold
    // stale bytes there, so they are written.
    let hole = zero && !inc.resumed;
    if !hole {
        // One write at a time per file: concurrent writes to one file only queue on
        // the file system's inode lock; other files still write in parallel.
        let _one_writer = inc.write_lock.lock().expect("write lock");
        part.write_at(h.block * bs, data)?;
    }
    drop(part);
    let finished = {
        let mut st = inc.state.lock().expect("file lock");
        if let Some(j) = &st.journal {
            j.append(h.block, digest)?;
        }
        let _ = st.digest.add(h.block, *digest);
        st.mark_done(h.block);
        st.holes |= hole;
        st.remaining -= 1;
        Progress::add(&sh.progress.bytes, data.len() as u64);
        if st.remaining > 0 {
            return Ok(None);
        }
        let part = st.part.take().expect("part is open");
        let whole = std::mem::replace(&mut st.digest, integrity::FileDigest::new(0, bs))
            .finish()
            .ok();
        st.journal = None;
        (part, whole, st.holes)
    };
    let (part, whole, holes) = finished;
    if holes {
        part.set_len(inc.size)?;
    }
    let part = Arc::try_unwrap(part).map_err(|_| StorageError::Refused {
        path: inc.final_path.display().to_string(),
        reason: "internal error: part file still in use at finalize",
    })?;
    part.finalize(inc.meta, whole.as_ref(), sh.opts.fsync, inc.blocks > 1)?;
    sh.files.lock().expect("files lock").remove(&h.file);
    Progress::add(&sh.progress.files, 1);
    sh.settle();
    Ok(Some(Frame::FileDone {
        file: h.file,
        error: None,
    }))
}
