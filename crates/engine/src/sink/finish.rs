//! A block that passed its check: journal it, count it, feed the whole-file digest,
//! and finish the file after its last block (size, metadata, digest, rename, manifest).

use hetch_integrity::{self as integrity, Digest};
use hetch_proto::{Frame, ManifestEntry};
use hetch_storage::StorageError;

use super::core::{Complete, Done};
use super::{IncomingFile, SinkShared};
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
    let done = inc.done(block, *digest, data)?;
    if done == Done::Ignored {
        return Ok(None);
    }
    match how {
        Arrival::Received => Progress::add(&sh.progress.bytes, data.len() as u64),
        Arrival::Journaled => {
            Progress::add(&sh.progress.reverified, 1);
            Progress::add(&sh.progress.skipped_bytes, data.len() as u64);
        }
    }
    match done {
        Done::Last(complete) => finish(sh, id, inc, complete).map(Some),
        _ => {
            if done == (Done::More { durable: true }) {
                super::growing::made_durable(sh, id);
            }
            if how == Arrival::Received {
                // Outside the file's lock: the store may sync before it records.
                inc.out.record(block, digest, data.len() as u64)?;
            }
            Ok(None)
        }
    }
}

/// Commits a file whose blocks are all done; a once-growing file only when its
/// whole-file digest is the one the source sealed it with.
pub(crate) fn finish(
    sh: &SinkShared,
    id: u64,
    inc: &IncomingFile,
    complete: Complete,
) -> Result<Frame, StorageError> {
    match complete.expected.clone() {
        Some(expected) => finish_streamed(sh, id, inc, complete, expected),
        None => finish_file(sh, id, inc, complete),
    }
}

/// Commits a complete file; reports it (with its digest when asked).
fn finish_file(
    sh: &SinkShared,
    id: u64,
    inc: &IncomingFile,
    complete: Complete,
) -> Result<Frame, StorageError> {
    // A streamed file's data are durable before it counts as done, like every block
    // of it before (its lag is measured up to durable).
    let fsync = sh.opts.fsync || inc.streamed;
    let whole = commit(sh, &*inc.out, &inc.place, complete, fsync)?;
    sh.files.lock().expect("files lock").remove(&id);
    Progress::add(&sh.progress.files, 1);
    sh.ended(id);
    Ok(Frame::FileDone {
        file: id,
        error: None,
        digest: manifest_entry(sh, &inc.place, whole),
    })
}

/// Gives a complete file its final name, size and metadata (and its BLAKE3 as an
/// attribute, where the blocks gave it); returns its whole-file digest, when the
/// session wants it.
pub(crate) fn commit(
    sh: &SinkShared,
    out: &dyn crate::store::StoreFile,
    place: &Place,
    complete: Complete,
    fsync: bool,
) -> Result<Option<Vec<u8>>, StorageError> {
    let xattr: Option<[u8; 32]> = match (&complete.whole, sh.opts.checksum.merges_blocks()) {
        (Some(w), true) => w.as_slice().try_into().ok(),
        _ => None,
    };
    out.commit(complete.size, complete.meta, xattr.as_ref(), fsync)?;
    Ok(whole_or_stored(sh, place, complete.whole))
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
fn finish_streamed(
    sh: &SinkShared,
    id: u64,
    inc: &IncomingFile,
    mut complete: Complete,
    expected: Vec<u8>,
) -> Result<Frame, StorageError> {
    let whole = match complete.whole.take() {
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
    complete.whole = Some(whole);
    finish_file(sh, id, inc, complete)
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
