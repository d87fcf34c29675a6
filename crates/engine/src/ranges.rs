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
//! Blocking: call from a blocking thread.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use hetch_integrity::{block_count, block_digest, block_len, Digest};
use hetch_storage::part::FinalMeta;
use hetch_storage::StorageError;

use crate::options::{Algorithm, Verify};
use crate::store::{FileSpec, Place, Store};
use crate::{RateLimiter, StopSignal};

/// A local source file of a split transfer, as it was when opened.
pub struct RangeSource {
    file: File,
    shown: PathBuf,
    size: u64,
    meta: FinalMeta,
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
        })
    }

    /// Its size when it was opened.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The file as a store receives it with blocks of `block_size`.
    pub fn spec(&self, block_size: u64, verify: Verify) -> FileSpec {
        FileSpec {
            size: self.size,
            blocks: block_count(self.size, block_size),
            block_size,
            meta: self.meta,
            checksum: Algorithm::Blake3,
            growing: false,
            read_back_follows: verify == Verify::Written,
        }
    }

    /// Refuses a source that is no longer the version it was when opened.
    fn check_unchanged(&self) -> Result<(), StorageError> {
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

/// What paces a range as it goes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RangeControl<'a> {
    /// Once raised, the range stops between blocks.
    pub stop: Option<&'a StopSignal>,
    /// Each block read from the source passes through it first.
    pub rate: Option<&'a RateLimiter>,
    /// Counts the bytes moved as each block is recorded (for metrics to read while the
    /// range runs).
    pub progress: Option<&'a crate::Progress>,
}

/// Moves blocks `blocks` of `src` (cut into `block_size` blocks) into `store` at
/// `place`, checking each block as `verify` says, paced by `control`. Blocks an
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
    let opened = store.open_range(place, &spec, blocks.clone())?;
    let out = opened.file;
    let recorded: std::collections::BTreeMap<u64, Digest> =
        opened.recorded.unwrap_or_default().into_iter().collect();
    let can_read_back = store.capabilities().read_back;
    let read_back = verify == Verify::Written && can_read_back;
    let mut data = vec![0u8; block_size as usize];
    let mut back = vec![0u8; if read_back { block_size as usize } else { 0 }];
    let zeros = vec![0u8; block_size as usize];
    let mut done = RangeOutcome::default();
    let stopped = || control.stop.is_some_and(StopSignal::is_raised);
    let stop_error = || StorageError::Refused {
        path: place.shown.display().to_string(),
        reason: "stopped",
    };
    let result = (|| {
        for i in blocks {
            if stopped() {
                return Err(stop_error());
            }
            let len = block_len(src.size, block_size, i) as usize;
            let offset = i * block_size;
            if let Some(want) = recorded.get(&i) {
                if can_read_back {
                    out.read_back(offset, &mut data[..len])?;
                    if block_digest(src.size, block_size, i, &data[..len]) == *want {
                        done.kept += 1;
                        continue;
                    }
                }
            }
            // A long wait for the rate ends when the range is stopped (its lease may
            // be running out), and nothing is written after it.
            if let Some(rate) = control.rate {
                if !rate.acquire_blocking_unless(len, stopped) {
                    return Err(stop_error());
                }
            }
            src.file
                .read_exact_at(&mut data[..len], offset)
                .map_err(|e| StorageError::io(&src.shown, e))?;
            let digest = block_digest(src.size, block_size, i, &data[..len]);
            if crate::session::is_zero(&data[..len]) {
                out.put_zeros(offset, len as u64, &zeros)?;
            } else {
                out.put(offset, &data[..len])?;
            }
            if read_back {
                out.prefetch(offset, len as u64);
                out.read_back(offset, &mut back[..len])?;
                if block_digest(src.size, block_size, i, &back[..len]) != digest {
                    return Err(StorageError::io(
                        &place.shown,
                        std::io::Error::other(format!("block {i} read back differs")),
                    ));
                }
            }
            out.record(i, &digest, len as u64)?;
            done.bytes += len as u64;
            if let Some(p) = control.progress {
                crate::Progress::add(&p.bytes, len as u64);
            }
        }
        src.check_unchanged()?;
        out.commit(src.size, src.meta, None, true)
    })();
    if result.is_err() {
        // What this attempt recorded stays: the next one takes it up.
        let _ = out.sync();
    }
    result.map(|()| done)
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
