//! A file moved in block ranges by several writers into a directory tree (the POSIX
//! store's [`Store::open_range`](super::Store::open_range) and
//! [`Store::commit_ranges`](super::Store::commit_ranges)).
//!
//! Every writer of a range opens the one shared part file `.NAME.hetch-split` without
//! truncating it and writes only its own blocks (ranges are whole blocks, so writers
//! never overlap), and records its verified blocks in a journal of its own,
//! `.NAME.hetch-split.FIRST`, after the part file's `fdatasync`, as the usual journal
//! does. A range redone after its writer vanished writes the same blocks again and
//! takes up what its journal recorded. The commit reads every range journal whose
//! header names the same source version, checks that their records cover every block
//! (two records of one block must agree), merges the digests into the whole-file
//! BLAKE3, and renames the part file into place, once no writer holds it any more.
//! Between its ranges nobody holds the part file, so these names are not among the
//! temporary names that the automatic clean-up after a transfer removes.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hetch_integrity::{Algorithm, Digest, FileDigest};
use hetch_storage::confined::Dir;
use hetch_storage::journal::{Journal, JournalHeader};
use hetch_storage::part::{self, PartFile};
use hetch_storage::StorageError;

use super::writers::{self, Claim, TAKEN_OVER};
use super::{FileSpec, Opened, Place, StoreFile};

/// Records wait for this many bytes of their blocks before one `fdatasync` and one
/// append (as the whole-file journal's batches).
const RECORD_BATCH_BYTES: u64 = 16 << 20;

/// The journal header of every range of a file: the source version it was read from.
fn header(spec: &FileSpec) -> JournalHeader {
    JournalHeader {
        block_size: spec.block_size,
        file_size: spec.size.digest_len(),
        mtime_sec: spec.meta.mtime_sec,
        mtime_nsec: spec.meta.mtime_nsec,
        checksum: Algorithm::Blake3.id(),
    }
}

fn refused(place: &Place, reason: &'static str) -> StorageError {
    StorageError::Refused {
        path: place.shown.display().to_string(),
        reason,
    }
}

fn failed(place: &Place, message: String) -> StorageError {
    StorageError::io(&place.shown, std::io::Error::other(message))
}

/// What ranges are kept apart by in the writers' registry: the file's path and the
/// range's first block, joined by a byte no path holds.
fn range_key(rel: &Path, first: u64) -> PathBuf {
    let mut key = rel.as_os_str().to_os_string();
    key.push(format!("\0{first}"));
    PathBuf::from(key)
}

/// Opens range `blocks` of file `place` below `fs` (destination identified as `base`).
pub(super) fn open_range(
    fs: &Dir,
    base: (u64, u64),
    place: &Place,
    spec: &FileSpec,
    blocks: Range<u64>,
) -> Result<Opened, StorageError> {
    if spec.growing() || spec.checksum != Algorithm::Blake3 {
        return Err(refused(
            place,
            "only a complete file checked with BLAKE3 is moved in ranges",
        ));
    }
    if blocks.start >= blocks.end || blocks.end > spec.blocks() {
        return Err(refused(place, "block range outside the file"));
    }
    let claim = writers::claim(base, &range_key(&place.rel, blocks.start));
    let (dir, name) = fs.parent(&place.rel)?;
    // A file moved in ranges is large by definition: its blocks go past the page
    // cache, as a whole large file's do (see `PartFile::with_direct_io`).
    let part = PartFile::open_as(&dir, &name, part::split_name(&name), true)?.with_direct_io();
    let journal_name = part::range_journal_name(&name, blocks.start);
    let header = header(spec);
    let mut recorded = Vec::new();
    let resumed = Journal::resume(&dir, &journal_name, &header, |i, d| {
        if blocks.contains(&i) {
            recorded.push((i, d));
        }
    })?;
    let (journal, recorded) = match resumed {
        Some(j) => (j, Some(recorded)),
        None => (Journal::create(&dir, &journal_name, &header)?, None),
    };
    let file = RangeFile {
        shown: place.shown.clone(),
        dir,
        journal_name,
        read_back_follows: spec.read_back_follows,
        claim,
        part,
        journal,
        state: Mutex::default(),
    };
    Ok(Opened {
        file: Arc::new(file),
        recorded,
    })
}

/// One writer's range of a file moved in ranges.
struct RangeFile {
    shown: PathBuf,
    dir: Dir,
    journal_name: OsString,
    read_back_follows: bool,
    claim: Arc<Claim>,
    part: PartFile,
    journal: Journal,
    state: Mutex<RangeState>,
}

#[derive(Default)]
struct RangeState {
    /// Verified blocks waiting for the part file's next sync to be recorded.
    unjournaled: Vec<(u64, Digest)>,
    unjournaled_bytes: u64,
    /// Committed or aborted: nothing more is written.
    closed: bool,
}

impl RangeFile {
    fn hold(&self) -> Result<std::sync::RwLockReadGuard<'_, bool>, StorageError> {
        let guard = self.claim.hold().ok_or_else(|| StorageError::Refused {
            path: self.shown.display().to_string(),
            reason: TAKEN_OVER,
        })?;
        if self.state.lock().expect("range lock").closed {
            return Err(StorageError::Refused {
                path: self.shown.display().to_string(),
                reason: "range already finished or dropped",
            });
        }
        Ok(guard)
    }

    /// Makes the blocks waiting for a record durable and records them.
    fn flush_records(&self, all: bool) -> Result<(), StorageError> {
        let records = {
            let mut st = self.state.lock().expect("range lock");
            if st.unjournaled.is_empty() || (!all && st.unjournaled_bytes < RECORD_BATCH_BYTES) {
                return Ok(());
            }
            st.unjournaled_bytes = 0;
            std::mem::take(&mut st.unjournaled)
        };
        self.part.sync_data()?;
        self.journal.append_all(&records)
    }
}

impl StoreFile for RangeFile {
    fn put(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        let _held = self.hold()?;
        self.part.write_at(offset, data)?;
        if self.read_back_follows {
            self.part.start_writeback(offset, data.len() as u64);
        }
        Ok(())
    }

    fn put_zeros(&self, offset: u64, len: u64, zeros: &[u8]) -> Result<(), StorageError> {
        // The shared file may hold another version's bytes there: never a hole.
        self.put(offset, &zeros[..len as usize])
    }

    fn prefetch(&self, offset: u64, len: u64) {
        self.part.prepare_read_back(offset, len);
    }

    fn read_back(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        self.part.read_back(offset, buf)
    }

    fn record(&self, block: u64, digest: &Digest, len: u64) -> Result<(), StorageError> {
        let _held = self.hold()?;
        {
            let mut st = self.state.lock().expect("range lock");
            st.unjournaled.push((block, *digest));
            st.unjournaled_bytes += len;
        }
        self.flush_records(false)
    }

    fn sync(&self) -> Result<(), StorageError> {
        self.part.sync_data()
    }

    fn digest(&self, _algo: Algorithm, _block_size: u64) -> Result<Vec<u8>, StorageError> {
        Err(StorageError::Refused {
            path: self.shown.display().to_string(),
            reason: "one range has no whole-file digest",
        })
    }

    /// The range is complete: its blocks are made durable and recorded; the file
    /// keeps its temporary name until [`commit_ranges`].
    fn commit(
        &self,
        _size: u64,
        _meta: part::FinalMeta,
        _xattr: Option<&Digest>,
        _fsync: bool,
    ) -> Result<(), StorageError> {
        let _held = self.hold()?;
        self.flush_records(true)?;
        self.state.lock().expect("range lock").closed = true;
        Ok(())
    }

    fn abort(&self) {
        self.state.lock().expect("range lock").closed = true;
        // The journal belongs to the newer writer once it took over.
        if let Some(_held) = self.claim.hold() {
            let _ = self.dir.remove_file(&self.journal_name);
        }
    }
}

/// Commits file `place` below `fs` from its ranges' records (see the module's doc);
/// returns its whole-file digest, or `None` when an earlier commit did it already.
pub(super) fn commit_ranges(
    fs: &Dir,
    base: (u64, u64),
    place: &Place,
    spec: &FileSpec,
    fsync: bool,
) -> Result<Option<Digest>, StorageError> {
    // A whole-file writer of this very file in this process is done with it.
    let claim = writers::claim(base, &place.rel);
    let (dir, name) = fs.parent(&place.rel)?;
    let split = part::split_name(&name);
    if dir.stat(Path::new(&split))?.is_none() {
        // A commit run again after an earlier one gave the file its name (and was lost
        // before it could report) finds the file as that commit left it.
        return match is_committed(&dir, &name, spec)? {
            true => Ok(None),
            false => Err(refused(place, "none of its ranges was received")),
        };
    }
    let part = PartFile::open_as(&dir, &name, split, true)?;
    if !part.try_hold_alone()? {
        // Busy, not refused: the writer goes (its range ends, or the node drops its
        // silent session), and the commit then goes through (see the worker's
        // `commit_when_free`).
        return Err(StorageError::Busy {
            path: place.shown.display().to_string(),
            reason: "a writer of one of its ranges still has it open",
        });
    }
    let header = header(spec);
    let mut digests: BTreeMap<u64, Digest> = BTreeMap::new();
    let mut journals = Vec::new();
    let mut disagree = None;
    for n in dir.names()? {
        if part::range_of_journal(&name, &n).is_none() {
            continue;
        }
        // A journal of another source version is removed by the resume: it does not
        // count.
        let found = Journal::resume(&dir, &n, &header, |i, d| {
            if digests.get(&i).is_some_and(|have| *have != d) {
                disagree = Some(i);
            }
            digests.entry(i).or_insert(d);
        })?;
        if found.is_some() {
            journals.push(n);
        }
    }
    if let Some(block) = disagree {
        return Err(failed(
            place,
            format!("two of its ranges recorded different contents for block {block}"),
        ));
    }
    let mut whole = FileDigest::new(spec.size.digest_len(), spec.block_size);
    for (i, d) in digests.into_iter().filter(|(i, _)| *i < spec.blocks()) {
        whole
            .add(i, d)
            .map_err(|e| failed(place, format!("merging its ranges: {e}")))?;
    }
    let missing = whole.missing();
    let whole = whole.finish().map_err(|_| {
        failed(
            place,
            format!(
                "{missing} of its {} blocks were not recorded by any range",
                spec.blocks()
            ),
        )
    })?;
    let _held = claim.hold().ok_or_else(|| refused(place, TAKEN_OVER))?;
    part.set_len(spec.size.digest_len())?;
    part.finalize(spec.meta, Some(&whole), fsync, false)?;
    for n in journals {
        dir.remove_file(&n)?;
    }
    Ok(Some(whole))
}

/// Whether `name` in `dir` is a regular file of `spec`'s size and mtime: the commit's
/// result, with no part file or range journal left beside it.
fn is_committed(dir: &Dir, name: &OsString, spec: &FileSpec) -> Result<bool, StorageError> {
    use std::os::unix::fs::MetadataExt;
    let Some(md) = dir.stat(Path::new(name))? else {
        return Ok(false);
    };
    let journals = dir
        .names()?
        .iter()
        .any(|n| part::range_of_journal(name, n).is_some());
    Ok(md.is_file()
        && !journals
        && Some(md.len()) == spec.size.known()
        && md.mtime() == spec.meta.mtime_sec
        && md.mtime_nsec() as u32 == spec.meta.mtime_nsec)
}
