//! One large file moved in block ranges, each range by whichever node takes it (the
//! workers of a transfer service, all reading the source and writing the destination
//! on storage they share), into a store that takes ranges from several writers
//! ([`Store::open_range`], [`Store::commit_ranges`]).
//!
//! A range is read from the source block by block, each block hashed as it is read
//! (BLAKE3, with the digests the whole-file merge takes), put, read back and checked
//! where the store can and `--verify written` asks, and recorded; at its end the
//! source must still be the version it started from. The commit, once every range is
//! done, merges the ranges' recorded digests into the whole-file BLAKE3, so the file
//! is checked as a whole without being read again, and renames it once.
//!
//! As a push does, the copy gets setuid, setgid and sticky bits only where asked
//! for ([`RangeSource::preserve_special_modes`], [`kept_mode`]).
//!
//! Blocking: call from a blocking thread.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use hetch_integrity::{block_digest, block_len, Digest};
use hetch_storage::part::FinalMeta;
use hetch_storage::StorageError;

use crate::options::{Algorithm, Verify};
use crate::sink::core::{FileCore, Setup};
use crate::sink::ledger::{Checked, Refused};
use crate::store::{FileSpec, Place, Size, Store};
use crate::{RateLimiter, StopSignal};

/// A local source file of a split transfer, as it was when opened.
pub struct RangeSource {
    file: File,
    shown: PathBuf,
    size: u64,
    /// As the source has it (what [`RangeSource::check_unchanged`] compares).
    meta: FinalMeta,
    /// Whether its copy keeps setuid, setgid and sticky bits.
    special_modes: bool,
}

/// The mode bits a copy keeps of `mode`: setuid, setgid and sticky only with
/// `preserve_special_modes` (both ends asked for them), so that a receiver running
/// as root never creates setuid files or setgid directories a peer chose.
pub fn kept_mode(mode: u32, preserve_special_modes: bool) -> u32 {
    if preserve_special_modes {
        mode & 0o7777
    } else {
        mode & 0o777
    }
}

/// What moving a range did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RangeOutcome {
    /// Bytes read from the source and written.
    pub bytes: u64,
    /// Blocks an earlier attempt at the range recorded, read back intact and kept.
    pub kept: u64,
}

impl RangeSource {
    /// The open regular file `file`, shown as `shown` in messages.
    pub fn new(file: File, shown: &Path) -> Result<RangeSource, StorageError> {
        let md = file.metadata().map_err(|e| StorageError::io(shown, e))?;
        if !md.is_file() {
            return Err(StorageError::Refused {
                path: shown.display().to_string(),
                reason: "not a regular file",
            });
        }
        Ok(RangeSource {
            file,
            shown: shown.to_path_buf(),
            size: md.len(),
            meta: meta_of(&md),
            special_modes: false,
        })
    }

    /// Whether its copy keeps the source's setuid, setgid and sticky bits (without,
    /// the default, they are dropped, as a push without `--preserve-special-modes`
    /// drops them).
    pub fn preserve_special_modes(mut self, yes: bool) -> RangeSource {
        self.special_modes = yes;
        self
    }

    /// Its size when it was opened.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The file as a store receives it with blocks of `block_size`.
    pub fn spec(&self, block_size: u64, verify: Verify) -> FileSpec {
        FileSpec {
            size: Size::Known(self.size),
            block_size,
            meta: self.meta(),
            checksum: Algorithm::Blake3,
            read_back_follows: verify == Verify::Written,
        }
    }

    /// Its mode (as its copy gets it: see [`RangeSource::preserve_special_modes`])
    /// and mtime when it was opened.
    pub fn meta(&self) -> FinalMeta {
        FinalMeta {
            mode: kept_mode(self.meta.mode, self.special_modes),
            ..self.meta
        }
    }

    /// Refuses a source that is no longer the version it was when opened.
    pub fn check_unchanged(&self) -> Result<(), StorageError> {
        let md = self
            .file
            .metadata()
            .map_err(|e| StorageError::io(&self.shown, e))?;
        if md.len() != self.size || meta_of(&md) != self.meta {
            return Err(StorageError::Refused {
                path: self.shown.display().to_string(),
                reason: "changed while it was being read",
            });
        }
        Ok(())
    }
}

fn meta_of(md: &std::fs::Metadata) -> FinalMeta {
    FinalMeta {
        mode: md.mode() & 0o7777,
        mtime_sec: md.mtime(),
        mtime_nsec: md.mtime_nsec() as u32,
    }
}

/// How a range goes: what paces it, and how often a block may fail its check.
#[derive(Debug, Clone, Copy)]
pub struct RangeControl<'a> {
    /// Once raised, the range stops between blocks.
    pub stop: Option<&'a StopSignal>,
    /// Each block read from the source passes through it first.
    pub rate: Option<&'a RateLimiter>,
    /// Counts the bytes moved as each block is recorded (for metrics to read while the
    /// range runs).
    pub progress: Option<&'a crate::Progress>,
    /// Failed checks of one block (it is read and written again each time) before
    /// the range fails.
    pub max_retries: u32,
}

impl Default for RangeControl<'_> {
    fn default() -> Self {
        RangeControl {
            stop: None,
            rate: None,
            progress: None,
            max_retries: crate::Options::default().max_retries,
        }
    }
}

/// What became of a block handed to a [`RangeSink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// It is stored (or on its way), and counts.
    Done,
    /// It failed its check and is to be read and taken again.
    Again,
}

/// Where the blocks of a range go as they are read from the source: a store on this
/// machine ([`RangeWriter`]), or a server that writes them into its own.
pub trait RangeSink {
    /// Whether block `i` (`len` bytes) is there already, recorded by an earlier
    /// attempt and intact, so that it is neither read nor sent again.
    fn keeps(&mut self, i: u64, len: usize) -> Result<bool, StorageError>;
    /// Takes block `i` as the source read it, with its digest (computed as it was read).
    fn take(&mut self, i: u64, data: &[u8], digest: &Digest) -> Result<Taken, StorageError>;
}

/// A block header a range writer refuses: the peer sent what no honest one sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeRefused {
    /// Outside the range, beyond the file, or done already.
    NotAskedFor(u64),
    /// Not the length the file's size gives that block.
    Length {
        /// The block.
        block: u64,
        /// The length sent.
        got: u64,
        /// The block's length.
        want: u64,
    },
}

impl std::fmt::Display for RangeRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RangeRefused::NotAskedFor(b) => write!(f, "block {b} not asked for"),
            RangeRefused::Length { block, got, want } => {
                write!(f, "block {block} of {got} bytes, expected {want}")
            }
        }
    }
}

/// A range of a file open for writing in a store: each block put, read back and
/// checked where the store can and `--verify written` asks, then recorded. Its state
/// is the receive core every sink uses ([`FileCore`]), over the range's blocks: a
/// block that fails its check is asked for again up to `max_retries` times.
pub struct RangeWriter {
    out: std::sync::Arc<dyn crate::store::StoreFile>,
    core: FileCore,
    /// What an earlier attempt recorded, to read back and keep.
    recorded: std::collections::BTreeMap<u64, Digest>,
    can_read_back: bool,
    read_back: bool,
    block_size: u64,
    range: Range<u64>,
    shown: PathBuf,
    back: Vec<u8>,
}

impl RangeWriter {
    /// Opens blocks `blocks` of the file `spec` describes at `place` in `store`; a
    /// block may fail its check `max_retries` times before the range fails.
    pub fn open(
        store: &dyn Store,
        place: &Place,
        spec: &FileSpec,
        blocks: Range<u64>,
        verify: Verify,
        max_retries: u32,
    ) -> Result<RangeWriter, StorageError> {
        let opened = store.open_range(place, spec, blocks.clone())?;
        let can_read_back = store.capabilities().read_back;
        let setup = Setup {
            size: spec.size,
            block_size: spec.block_size,
            checksum: spec.checksum,
            max_retries,
            ordered: false,
            meta: spec.meta,
        };
        Ok(RangeWriter {
            out: opened.file,
            core: FileCore::range(setup, blocks.clone()),
            recorded: opened.recorded.unwrap_or_default().into_iter().collect(),
            can_read_back,
            read_back: verify == Verify::Written && can_read_back,
            block_size: spec.block_size,
            range: blocks,
            shown: place.shown.clone(),
            back: Vec::new(),
        })
    }

    /// Checks a block header from a peer: a block of the range not done yet, of the
    /// length the file gives it.
    pub fn admit(&self, block: u64, len: u64) -> Result<(), RangeRefused> {
        if !self.range.contains(&block) || !self.core.wants(block) {
            return Err(RangeRefused::NotAskedFor(block));
        }
        self.core.admit(block, len).map_err(|r| match r {
            Refused::Beyond { block } => RangeRefused::NotAskedFor(block),
            Refused::Length { block, got, want } => RangeRefused::Length { block, got, want },
        })
    }

    /// Checks block `i` as it arrived from a peer against `digest` (what the peer
    /// computed as it read it): `false` when it differs, and it is to be asked for
    /// again (an error once it failed `max_retries` times).
    pub fn arrived_intact(
        &mut self,
        i: u64,
        data: &[u8],
        digest: &Digest,
    ) -> Result<bool, StorageError> {
        if self.core.block_digest(i, data) == *digest {
            return Ok(true);
        }
        self.failed_check(i, "arrived damaged").map(|_| false)
    }

    /// Keeps the blocks an earlier attempt recorded in the range that read back
    /// intact; returns how many. O(blocks recorded), whatever the range.
    pub fn keep_intact(&mut self) -> Result<u64, StorageError> {
        let recorded: Vec<u64> = self
            .recorded
            .range(self.range.clone())
            .map(|(&i, _)| i)
            .collect();
        let mut kept = 0;
        for i in recorded {
            let len = self.core.block_len(i) as usize;
            kept += u64::from(self.keeps(i, len)?);
        }
        Ok(kept)
    }

    /// The blocks of the range still to take, as ranges.
    pub fn missing(&self) -> Vec<(u64, u64)> {
        self.core.missing(self.range.end)
    }

    /// Blocks of the range still to take.
    pub fn remaining(&self) -> u64 {
        self.core.remaining()
    }

    /// Block `i` failed its check (`how`): asked for again, or the range fails.
    fn failed_check(&mut self, i: u64, how: &str) -> Result<Taken, StorageError> {
        match self.core.failed_check(i) {
            Checked::Resend => Ok(Taken::Again),
            Checked::GiveUp { tries } => Err(StorageError::io(
                &self.shown,
                std::io::Error::other(format!("block {i} {how} {tries} times")),
            )),
        }
    }

    /// Makes the range durable and recorded, to be committed with the others (the
    /// file keeps its temporary name).
    pub fn finish(&self, meta: FinalMeta) -> Result<(), StorageError> {
        self.out
            .commit(self.core.size().digest_len(), meta, None, true)
    }

    /// Keeps what this attempt recorded, for the next one to take up.
    pub fn keep_for_retry(&self) {
        let _ = self.out.sync();
    }

    /// Reads block `i` (`len` bytes) back into `self.back` and hashes it.
    fn read_back(&mut self, i: u64, len: usize) -> Result<Digest, StorageError> {
        self.back.resize(len, 0);
        self.out.read_back(i * self.block_size, &mut self.back)?;
        Ok(self.core.block_digest(i, &self.back))
    }
}

impl RangeSink for RangeWriter {
    fn keeps(&mut self, i: u64, len: usize) -> Result<bool, StorageError> {
        let Some(&want) = self.recorded.get(&i) else {
            return Ok(false);
        };
        if !self.can_read_back || !self.core.wants(i) {
            return Ok(false);
        }
        Ok(self.read_back(i, len)? == want && self.core.taken_up(i, want))
    }

    fn take(&mut self, i: u64, data: &[u8], digest: &Digest) -> Result<Taken, StorageError> {
        if !self.core.claim(i, false) {
            return Ok(Taken::Done); // done already: nothing to store
        }
        let offset = i * self.block_size;
        let len = data.len();
        if crate::session::is_zero(data) {
            self.out.put_zeros(offset, len as u64, data)?;
        } else {
            self.out.put(offset, data)?;
        }
        if self.read_back {
            self.out.prefetch(offset, len as u64);
            if self.read_back(i, len)? != *digest {
                return self.failed_check(i, "read back differs");
            }
        }
        let never = &mut |_: u64, _: &mut [u8]| Ok(());
        self.core.done(i, *digest, data, never)?;
        self.out.record(i, digest, len as u64)?;
        Ok(Taken::Done)
    }
}

/// Whether `data` is all zeros (such a block travels as its length only).
pub fn is_zero(data: &[u8]) -> bool {
    crate::session::is_zero(data)
}

/// Reads blocks `blocks` of `src` (cut into `block_size` blocks), hashing each, into
/// `sink`, paced by `control`; blocks the sink keeps are not read, and a block the
/// sink takes [`Taken::Again`] is read again. `shown` names the destination when the
/// range is stopped. At the end the source must still be the version it was when
/// opened.
pub fn read_range(
    src: &RangeSource,
    block_size: u64,
    blocks: Range<u64>,
    control: RangeControl<'_>,
    sink: &mut dyn RangeSink,
    shown: &Path,
) -> Result<RangeOutcome, StorageError> {
    let mut data = vec![0u8; block_size as usize];
    let mut done = RangeOutcome::default();
    let stopped = || control.stop.is_some_and(StopSignal::is_raised);
    let stop_error = || StorageError::Refused {
        path: shown.display().to_string(),
        reason: "stopped",
    };
    for i in blocks {
        let len = block_len(src.size, block_size, i) as usize;
        if sink.keeps(i, len)? {
            done.kept += 1;
            continue;
        }
        loop {
            if stopped() {
                return Err(stop_error());
            }
            // A long wait for the rate ends when the range is stopped (its lease may
            // be running out), and nothing is written after it.
            if let Some(rate) = control.rate {
                if !rate.acquire_blocking_unless(len, stopped) {
                    return Err(stop_error());
                }
            }
            src.file
                .read_exact_at(&mut data[..len], i * block_size)
                .map_err(|e| StorageError::io(&src.shown, e))?;
            let digest = block_digest(src.size, block_size, i, &data[..len]);
            let taken = sink.take(i, &data[..len], &digest)?;
            done.bytes += len as u64;
            if let Some(p) = control.progress {
                crate::Progress::add(&p.bytes, len as u64);
            }
            if taken == Taken::Done {
                break;
            }
        }
    }
    src.check_unchanged()?;
    Ok(done)
}

/// Moves blocks `blocks` of `src` (cut into `block_size` blocks) into `store` at
/// `place`, checking each block as `verify` says (a block that fails is read and
/// written again, up to `control.max_retries` times), paced by `control`. Blocks an
/// earlier attempt recorded are read back and kept when intact.
pub fn copy_range(
    store: &dyn Store,
    place: &Place,
    src: &RangeSource,
    block_size: u64,
    blocks: Range<u64>,
    verify: Verify,
    control: RangeControl<'_>,
) -> Result<RangeOutcome, StorageError> {
    let spec = src.spec(block_size, verify);
    let retries = control.max_retries;
    let mut w = RangeWriter::open(store, place, &spec, blocks.clone(), verify, retries)?;
    let result = read_range(src, block_size, blocks, control, &mut w, &place.shown)
        .and_then(|done| w.finish(src.meta()).map(|()| done));
    if result.is_err() {
        w.keep_for_retry();
    }
    result
}

/// Gives `src`'s copy at `place` its final name once every range of it is recorded
/// (see [`Store::commit_ranges`]): returns the whole-file BLAKE3 merged from the
/// ranges' checked block digests.
pub fn commit_ranges(
    store: &dyn Store,
    place: &Place,
    src: &RangeSource,
    block_size: u64,
) -> Result<Digest, StorageError> {
    src.check_unchanged()?;
    store.commit_ranges(place, &src.spec(block_size, Verify::Written), true)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;

    use super::*;
    use crate::store::posix::PosixStore;
    use crate::DestSpec;

    const BS: u64 = 4096;

    /// Moves `src` into `dest/` in two ranges and commits it; returns the copy's mode.
    fn copied_mode(src: &Path, dest: &Path, preserve: bool) -> u32 {
        let open = || {
            let file = File::open(src).unwrap();
            RangeSource::new(file, src)
                .unwrap()
                .preserve_special_modes(preserve)
        };
        let store: Arc<dyn Store> = Arc::new(PosixStore::new(DestSpec {
            path: dest.to_path_buf(),
            sources: 1,
            trailing_slash: true,
            confine_to: None,
            as_operand: false,
        }));
        store.resolve(b"f", true).unwrap();
        let place = store.place(b"f").unwrap();
        let v = Verify::Written;
        for r in [2..3, 0..2] {
            copy_range(&*store, &place, &open(), BS, r, v, Default::default()).unwrap();
        }
        commit_ranges(&*store, &place, &open(), BS).unwrap();
        std::fs::metadata(dest.join("f"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    /// A setuid source file committed from ranges is not setuid unless asked for,
    /// as a push without `--preserve-special-modes` would copy it.
    #[test]
    fn special_mode_bits_are_kept_only_when_asked_for() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("f");
        std::fs::write(&src, vec![7u8; (2 * BS + 5) as usize]).unwrap();
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o4755)).unwrap();
        assert_eq!(copied_mode(&src, &t.path().join("plain"), false), 0o755);
        assert_eq!(copied_mode(&src, &t.path().join("kept"), true), 0o4755);
        assert_eq!(kept_mode(0o107_777, false), 0o777);
        assert_eq!(kept_mode(0o103_750, true), 0o3750);
    }
}
