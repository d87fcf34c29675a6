//! The receiver's per-file record of verified blocks.
//!
//! One journal per partly received multi-block file, next to its part file. It starts
//! with a header naming what is being received (block size, the source file's size and
//! mtime, checksum algorithm); then one fixed-size record per block that was written
//! and whose digest matched (after the read-back, when the destination is verified as
//! written): `index u64 | digest [32] | crc32c u32`. Records are appended with single
//! `write` calls on an `O_APPEND` file, so concurrent writers never interleave, and a
//! record torn by `kill -9` fails its CRC and is ignored. The same record serves the
//! wire check (digests), resume (which blocks are done) and later read-back checks.
//! The sink appends records in batches, each after an `fdatasync` of the part file, so
//! that a host crash cannot keep a record whose block never reached the disk; a resume
//! reads journaled blocks back and checks them all the same (unless told to trust the
//! journal).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use crate::confined::{Dir, OpenHow};
use crate::error::{IoContext, StorageError};

const MAGIC: &[u8; 8] = b"HETCHJ1\0";
const HEADER_LEN: usize = 8 + 8 + 8 + 8 + 4 + 4;
const RECORD_LEN: usize = 8 + 32 + 4;

/// What a journal is about; a journal whose header differs is stale and discarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalHeader {
    /// Block size of the transfer.
    pub block_size: u64,
    /// Size of the source file.
    pub file_size: u64,
    /// Source mtime, seconds.
    pub mtime_sec: i64,
    /// Source mtime, nanoseconds.
    pub mtime_nsec: u32,
    /// Which checksum algorithm the recorded digests are (0 = BLAKE3, so journals
    /// written before the field existed still match).
    pub checksum: u8,
}

impl JournalHeader {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8..16].copy_from_slice(&self.block_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.file_size.to_le_bytes());
        b[24..32].copy_from_slice(&self.mtime_sec.to_le_bytes());
        b[32..36].copy_from_slice(&self.mtime_nsec.to_le_bytes());
        b[36] = self.checksum;
        b
    }
}

/// An open journal to which verified blocks are appended.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
}

fn how(flags: OFlags) -> OpenHow {
    OpenHow { flags, mode: 0o600 }
}

impl Journal {
    /// Creates a fresh journal `name` in `dir` (replacing any old one).
    pub fn create(dir: &Dir, name: &OsStr, header: &JournalHeader) -> Result<Self, StorageError> {
        let path = dir.path().join(name);
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC;
        let mut file = crate::part::open_held(dir, name, how(flags))?;
        file.write_all(&header.encode()).at(&path)?;
        // Reopen in append mode so that concurrent appends never interleave (held
        // before the first handle lets go).
        let journal = Self::open_append(dir, name)?;
        drop(file);
        Ok(journal)
    }

    /// Opens the journal for appending, held against clean-ups (see
    /// [`crate::leftovers`]).
    fn open_append(dir: &Dir, name: &OsStr) -> Result<Self, StorageError> {
        let file = crate::part::open_held(dir, name, how(OFlags::WRONLY | OFlags::APPEND))?;
        Ok(Journal {
            file,
            path: dir.path().join(name),
        })
    }

    /// Opens journal `name` in `dir` if its header matches, calling `each(index,
    /// digest)` for every intact record. Returns `Ok(None)` if there is no journal or
    /// it is stale (then it has been removed). A torn last record is cut off.
    pub fn resume(
        dir: &Dir,
        name: &OsStr,
        header: &JournalHeader,
        mut each: impl FnMut(u64, [u8; 32]),
    ) -> Result<Option<Self>, StorageError> {
        let path = dir.path().join(name);
        let mut file = match dir.open_file(Path::new(name), OpenHow::READ) {
            Ok(f) => f,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        // Held while it is read, until the appending handle holds it too: a clean-up
        // must not remove the records this resume trusts. Gone meanwhile: no journal.
        if !crate::leftovers::hold(dir, name, &file)? {
            return Ok(None);
        }
        let mut head = [0u8; HEADER_LEN];
        if file.read_exact(&mut head).is_err() || head != header.encode() {
            drop(file);
            dir.remove_file(name)?;
            return Ok(None);
        }
        let mut reader = std::io::BufReader::new(file);
        let mut good = HEADER_LEN as u64;
        let mut rec = [0u8; RECORD_LEN];
        while reader.read_exact(&mut rec).is_ok() {
            let crc = u32::from_le_bytes(rec[40..44].try_into().expect("4 bytes"));
            if crc32c::crc32c(&rec[..40]) != crc {
                break;
            }
            let index = u64::from_le_bytes(rec[..8].try_into().expect("8 bytes"));
            let digest: [u8; 32] = rec[8..40].try_into().expect("32 bytes");
            each(index, digest);
            good += RECORD_LEN as u64;
        }
        let file = reader.into_inner();
        if file.metadata().at(&path)?.len() != good {
            // Cut a torn record so that new appends start on a record boundary.
            dir.open_file(Path::new(name), how(OFlags::WRONLY))?
                .set_len(good)
                .at(&path)?;
        }
        let journal = Self::open_append(dir, name)?;
        drop(file);
        Ok(Some(journal))
    }

    /// Records that block `index` is written and matched `digest`.
    pub fn append(&self, index: u64, digest: &[u8; 32]) -> Result<(), StorageError> {
        self.append_all(&[(index, *digest)])
    }

    /// Records several blocks in one `write` (the caller made their data durable
    /// first: a record must never name a block the disk may not have).
    pub fn append_all(&self, blocks: &[(u64, [u8; 32])]) -> Result<(), StorageError> {
        let mut out = Vec::with_capacity(blocks.len() * RECORD_LEN);
        for (index, digest) in blocks {
            let mut rec = [0u8; RECORD_LEN];
            rec[..8].copy_from_slice(&index.to_le_bytes());
            rec[8..40].copy_from_slice(digest);
            let crc = crc32c::crc32c(&rec[..40]);
            rec[40..].copy_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(&rec);
        }
        (&self.file).write_all(&out).at(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    fn at(t: &tempfile::TempDir) -> (Dir, &'static OsStr) {
        (Dir::open(t.path()).unwrap(), OsStr::new("j"))
    }

    const H: JournalHeader = JournalHeader {
        block_size: 4096,
        file_size: 10_000,
        mtime_sec: 5,
        mtime_nsec: 6,
        checksum: 0,
    };

    #[test]
    fn records_survive_reopen_and_torn_tail_is_cut() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("j");
        let (d, n) = at(&t);
        let j = Journal::create(&d, n, &H).unwrap();
        j.append_all(&[(2, [2; 32]), (0, [9; 32])]).unwrap();
        drop(j);
        // A torn third record.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(&[1, 0, 0]).unwrap();
        let mut seen = vec![];
        let j = Journal::resume(&d, n, &H, |i, d| seen.push((i, d[0])))
            .unwrap()
            .unwrap();
        assert_eq!(seen, [(2, 2), (0, 9)]);
        j.append(1, &[1; 32]).unwrap();
        let mut seen = vec![];
        Journal::resume(&d, n, &H, |i, _| seen.push(i))
            .unwrap()
            .unwrap();
        assert_eq!(seen, [2, 0, 1]);
    }

    #[test]
    fn stale_journal_is_discarded() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("j");
        let (d, n) = at(&t);
        Journal::create(&d, n, &H)
            .unwrap()
            .append(0, &[0; 32])
            .unwrap();
        let other = JournalHeader { file_size: 1, ..H };
        let other_algorithm = JournalHeader { checksum: 3, ..H };
        assert_ne!(other_algorithm.encode(), H.encode());
        assert!(
            Journal::resume(&d, n, &other, |_, _| panic!("stale record used"))
                .unwrap()
                .is_none()
        );
        assert!(!p.exists());
    }

    #[test]
    fn corrupted_record_stops_the_replay() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("j");
        let (d, n) = at(&t);
        let j = Journal::create(&d, n, &H).unwrap();
        j.append(0, &[0; 32]).unwrap();
        j.append(1, &[1; 32]).unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[HEADER_LEN + RECORD_LEN + 10] ^= 0xff;
        std::fs::write(&p, bytes).unwrap();
        let mut seen = vec![];
        Journal::resume(&d, n, &H, |i, _| seen.push(i))
            .unwrap()
            .unwrap();
        assert_eq!(seen, [0]);
    }
}
