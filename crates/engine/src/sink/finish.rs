//! A block that passed its check: journal it, count it, feed the whole-file digest,
//! and finish the file after its last block (size, metadata, digest, rename, manifest).

use hetch_integrity::{self as integrity, Digest};
use hetch_proto::{Frame, ManifestEntry};
use hetch_storage::StorageError;

use super::{FileState, IncomingFile, SinkShared};
use crate::progress::Progress;
use crate::store::Place;

/// Where a done block's bytes came from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Received in this session (journal it, count its bytes).
    Received,
    /// In the part file from an earlier run, journaled then, read back and checked
    /// now (see `recheck.rs`).
    Journaled,
}

/// Records block `block` of file `id` as done; `data` are its bytes (as checked), and
/// `how` where they came from. Returns the `FileDone` frame when this was the file's
/// last block.
pub(crate) fn block_done(
    sh: &SinkShared,
    id: u64,
    inc: &IncomingFile,
    block: u64,
    digest: &Digest,
    data: &[u8],
    how: Arrival,
) -> Result<Option<Frame>, StorageError> {
    let bs = sh.opts.block_size;
    let (whole, expected) = {
        let mut st = inc.state.lock().expect("file lock");
        if st.failed || st.ledger.is_done(block) {
            return Ok(None);
        }
        let growing = inc.growing();
        match &mut st.streamed {
            // The final size, and so the shape of the digest tree, is not known yet.
            Some(s) if growing => super::growing::keep_digest(s, block, *digest),
            _ if sh.opts.checksum.merges_blocks() => {
                let _ = st.digest.add(block, *digest);
            }
            _ => {}
        }
        st.ledger.done(block);
        match how {
            Arrival::Received => Progress::add(&sh.progress.bytes, data.len() as u64),
            Arrival::Journaled => {
                Progress::add(&sh.progress.reverified, 1);
                Progress::add(&sh.progress.skipped_bytes, data.len() as u64);
            }
        }
        feed_ordered(&mut st, inc, bs, block, data)?;
        if growing {
            super::growing::made_durable(sh, id);
        }
        if st.ledger.remaining() > 0 {
            drop(st);
            if how == Arrival::Received {
                // Outside the file's lock: the store may sync before it records.
                inc.out.record(block, digest, data.len() as u64)?;
            }
            return Ok(None);
        }
        let whole = whole_digest(sh, &mut st);
        let expected = st.streamed.as_mut().and_then(|s| s.expected.take());
        (whole, expected)
    };
    if let Some(expected) = expected {
        return finish_streamed(sh, id, inc, whole, expected).map(Some);
    }
    finish_file(sh, id, inc, whole).map(Some)
}

/// Feeds the in-order digest with every done block from its cursor on; blocks done
/// before their turn are read back from the part file (usually from the page cache).
fn feed_ordered(
    st: &mut FileState,
    inc: &IncomingFile,
    bs: u64,
    block: u64,
    data: &[u8],
) -> Result<(), StorageError> {
    let Some(mut o) = st.ordered.take() else {
        return Ok(());
    };
    let mut scratch = Vec::new();
    let mut result = Ok(());
    while o.next < inc.blocks() && st.ledger.is_done(o.next) {
        if o.next == block {
            o.hasher.update(data);
        } else {
            let len = integrity::block_len(inc.size(), bs, o.next) as usize;
            scratch.resize(len, 0);
            if let Err(e) = inc.out.read_back(o.next * bs, &mut scratch) {
                result = Err(e);
                break;
            }
            o.hasher.update(&scratch);
        }
        o.next += 1;
    }
    st.ordered = Some(o);
    result
}

/// The whole-file digest of a file whose blocks are all done.
fn whole_digest(sh: &SinkShared, st: &mut FileState) -> Option<Vec<u8>> {
    if sh.opts.checksum.merges_blocks() {
        let d = std::mem::replace(
            &mut st.digest,
            integrity::FileDigest::new(0, sh.opts.block_size),
        );
        return d.finish().ok().map(|d| d.to_vec());
    }
    st.ordered.take().map(|o| o.hasher.finish())
}

/// Commits a complete file; reports it (with its digest when asked).
pub(crate) fn finish_file(
    sh: &SinkShared,
    id: u64,
    inc: &IncomingFile,
    whole: Option<Vec<u8>>,
) -> Result<Frame, StorageError> {
    let xattr: Option<[u8; 32]> = match (&whole, sh.opts.checksum.merges_blocks()) {
        (Some(w), true) => w.as_slice().try_into().ok(),
        _ => None,
    };
    // A streamed file's data are durable before it counts as done, like every block
    // of it before (its lag is measured up to durable).
    let fsync = sh.opts.fsync || inc.streamed;
    let meta = inc
        .state
        .lock()
        .expect("file lock")
        .streamed
        .as_ref()
        .and_then(|s| s.final_meta)
        .unwrap_or(inc.meta);
    inc.out.commit(inc.size(), meta, xattr.as_ref(), fsync)?;
    let whole = whole_or_stored(sh, &inc.place, whole);
    sh.files.lock().expect("files lock").remove(&id);
    Progress::add(&sh.progress.files, 1);
    sh.ended(id);
    Ok(Frame::FileDone {
        file: id,
        error: None,
        digest: manifest_entry(sh, &inc.place, whole),
    })
}

/// The whole-file digest of a committed file: `whole` when the blocks gave it, else
/// (a store that could not feed it in order) read from the store, when the session
/// wants digests. A file that cannot be read back just goes without one.
pub(crate) fn whole_or_stored(
    sh: &SinkShared,
    place: &Place,
    whole: Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    if whole.is_some() || !sh.opts.file_digests {
        return whole;
    }
    sh.store
        .digest(&place.rel, sh.opts.checksum, sh.opts.block_size)
        .ok()
}

/// Finishes a streamed (once growing) file: its whole-file digest must equal the one
/// the source computed from the final contents when it sealed the file. A difference
/// means the data changed at the source in a way the block checks could not see (for
/// example a part file resumed from another version of it): the file is dropped, not
/// renamed into place.
pub(crate) fn finish_streamed(
    sh: &SinkShared,
    id: u64,
    inc: &IncomingFile,
    whole: Option<Vec<u8>>,
    expected: Vec<u8>,
) -> Result<Frame, StorageError> {
    let whole = match whole {
        Some(w) => w,
        None => inc.out.digest(sh.opts.checksum, sh.opts.block_size)?,
    };
    if !expected.is_empty() && whole != expected {
        let message = format!(
            "{}: the copy's {} digest {} differs from the source's final digest {}; the file changed at the source in a way hetch could not follow; not written",
            inc.place.shown.display(),
            sh.opts.checksum,
            integrity::to_hex(&whole),
            integrity::to_hex(&expected),
        );
        return Ok(sh
            .fail_file(id, message.clone())
            .unwrap_or_else(|| sh.failure(id, message)));
    }
    finish_file(sh, id, inc, Some(whole))
}

/// The manifest entry of a finished or skipped file, when the session asked for
/// digests; also written to this side's manifest, if it keeps one.
pub(crate) fn manifest_entry(
    sh: &SinkShared,
    place: &Place,
    digest: Option<Vec<u8>>,
) -> Option<ManifestEntry> {
    if !sh.opts.file_digests {
        return None;
    }
    let digest = digest?;
    let path = sh.store.manifest_path(place);
    if let Some(m) = &sh.opts.manifest {
        m.add(&digest, &path);
    }
    Some(ManifestEntry { digest, path })
}
