//! Where a sparse source file's holes are, one block at a time.
//!
//! A regular file whose allocated bytes fall short of its size ([`looks_sparse`], one
//! comparison on what the listing's `stat` returned anyway) may have holes; only then
//! does a reader ask, for each block it is about to read, whether the block lies in
//! data, in a hole, or across both ([`probe`]: two `lseek`s at most). Nothing is kept
//! per file: a map of a file's holes would grow with the file, this costs the same for
//! any size.

use std::fs::File;

use rustix::fs::{seek, SeekFrom};
use rustix::io::Errno;

/// Whether a regular file of `size` bytes with `blocks` 512-byte units allocated
/// (`st_blocks`) has fewer bytes on disk than it is long, as a file with holes does.
/// (Also a file a file system compresses, or one freshly written and not yet
/// allocated: [`probe`] then finds data everywhere, at the cost of its `lseek`s.)
pub fn looks_sparse(blocks: u64, size: u64) -> bool {
    blocks.saturating_mul(512) < size
}

/// What bytes `start..end` of a file are made of, as the file system tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// Data only (or the file system cannot tell: everything is data then).
    Data,
    /// A hole only: the range reads as zeros without being read.
    Hole,
    /// Data and at least one hole.
    Mixed,
}

/// What bytes `start..end` of `f` are made of (`SEEK_DATA` from `start`, then
/// `SEEK_HOLE`). Moves `f`'s file offset, which positional reads ignore. A file
/// system without hole support reports the whole file as data (so does an error);
/// a range at or past the end of the file is a hole (a file that shrank: the reader's
/// check after the read finds that).
pub fn probe(f: &File, start: u64, end: u64) -> Extent {
    let data = match seek(f, SeekFrom::Data(start)) {
        Ok(at) => at,
        // No data at or after `start`.
        Err(Errno::NXIO) => return Extent::Hole,
        Err(_) => return Extent::Data,
    };
    if data >= end {
        return Extent::Hole;
    }
    if data > start {
        return Extent::Mixed;
    }
    match seek(f, SeekFrom::Hole(start)) {
        Ok(hole) if hole < end => Extent::Mixed,
        _ => Extent::Data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileExt, MetadataExt};

    const MIB: u64 = 1 << 20;

    #[test]
    fn blocks_of_a_sparse_file_are_told_apart() {
        // On a disk: /tmp may be a tmpfs (which has holes too, but test the usual case).
        let target = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target");
        std::fs::create_dir_all(target).unwrap();
        let dir = tempfile::tempdir_in(target).unwrap();
        let path = dir.path().join("sparse");
        let f = File::create(&path).unwrap();
        // Data at 1 MiB (64 KiB of it) and in the last 64 KiB of 4 MiB.
        f.write_all_at(&[7; 64 << 10], MIB).unwrap();
        f.write_all_at(&[9; 64 << 10], 4 * MIB - (64 << 10))
            .unwrap();
        f.sync_all().unwrap();
        let md = f.metadata().unwrap();
        if !looks_sparse(md.blocks(), md.len()) || probe(&f, 0, MIB) != Extent::Hole {
            eprintln!("SKIPPED: no holes on the file system of {path:?}");
            return;
        }
        assert_eq!(probe(&f, 0, MIB), Extent::Hole);
        assert_eq!(probe(&f, 2 * MIB, 3 * MIB), Extent::Hole);
        assert_eq!(probe(&f, MIB, MIB + (64 << 10)), Extent::Data);
        assert_eq!(probe(&f, 0, 2 * MIB), Extent::Mixed, "hole then data");
        assert_eq!(probe(&f, MIB, 2 * MIB), Extent::Mixed, "data then hole");
        assert_eq!(probe(&f, 3 * MIB, 4 * MIB), Extent::Mixed);
        assert_eq!(probe(&f, 4 * MIB - (64 << 10), 4 * MIB), Extent::Data);
        assert_eq!(probe(&f, 4 * MIB, 5 * MIB), Extent::Hole, "past the end");
        // Ending in a hole: the last bytes are a hole up to the size.
        f.set_len(6 * MIB).unwrap();
        assert_eq!(probe(&f, 5 * MIB, 6 * MIB), Extent::Hole);
        assert_eq!(probe(&f, 4 * MIB - 1, 6 * MIB), Extent::Mixed);
    }

    #[test]
    fn a_written_file_does_not_look_sparse() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("full");
        std::fs::write(&path, vec![1; 256 << 10]).unwrap();
        let f = File::open(&path).unwrap();
        f.sync_all().unwrap();
        let md = f.metadata().unwrap();
        assert!(!looks_sparse(md.blocks(), md.len()));
        assert_eq!(probe(&f, 0, md.len()), Extent::Data);
        assert!(looks_sparse(0, 1));
        assert!(!looks_sparse(0, 0), "an empty file has nothing to skip");
    }
}
