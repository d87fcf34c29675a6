//! Read-backs of many files of a directory tree at once (see
//! [`hetch_storage::uring`]): the blocks of files that read back directly (small files
//! with one read each, large ones written directly) are submitted together; the others
//! are read one at a time as [`StoreFile::read_back`] reads them.

use std::sync::MutexGuard;

use hetch_storage::uring::{self, Read};
use hetch_storage::StorageError;

use super::posix::PosixFile;
use super::{BatchRead, StoreFile};

/// Reads back `reads` (files of a [`super::posix::PosixStore`]), one result each.
pub(super) fn batch(reads: &mut [BatchRead<'_>]) -> Vec<Result<(), StorageError>> {
    let files: Vec<&dyn StoreFile> = reads.iter().map(|r| r.file).collect();
    let mut results: Vec<Option<Result<(), StorageError>>> = reads.iter().map(|_| None).collect();
    {
        // Each file held against its own writes while the descriptor reads directly.
        // Taken without waiting: a file a writer holds (or that comes twice) is read
        // the usual way below, so no two threads can wait on each other's files.
        let mut held: Vec<(usize, MutexGuard<'_, ()>, _)> = Vec::new();
        for (i, file) in files.iter().enumerate() {
            let Some(f) = file.as_any().and_then(|a| a.downcast_ref::<PosixFile>()) else {
                continue;
            };
            // Small files read back with one direct read; large ones are written
            // directly, all but a last partial page, and read back directly too.
            if !f.direct_read_back() && !f.direct_io() {
                continue;
            }
            let Ok(part) = f.part() else {
                continue; // read_back reports why
            };
            if let Some(guard) = f.try_hold_writes() {
                held.push((i, guard, part));
            }
        }
        let mut direct: Vec<Read<'_>> = Vec::with_capacity(held.len());
        let mut next = held.iter().peekable();
        for (i, r) in reads.iter_mut().enumerate() {
            if let Some((_, _, part)) = next.next_if(|(j, _, _)| *j == i) {
                direct.push(Read {
                    file: part.file(),
                    offset: r.offset,
                    buf: &mut *r.buf,
                });
            }
        }
        let outcome = uring::read_direct(&mut direct);
        for ((i, _, part), got) in held.iter().zip(outcome) {
            results[*i] = match got {
                Ok(true) => Some(Ok(())),
                Ok(false) => None,
                Err(e) => Some(Err(StorageError::io(part.path(), e))),
            };
        }
    }
    reads
        .iter_mut()
        .zip(results)
        .map(|(r, done)| done.unwrap_or_else(|| r.file.read_back(r.offset, r.buf)))
        .collect()
}
