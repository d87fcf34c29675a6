//! The receiving side's "part" file: written under a hidden temporary name next to the
//! final one, with positional writes from any thread, and renamed into place only once
//! it is complete and checked. Nothing half-done ever carries the final name.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use crate::confined::{Dir, OpenHow};
use crate::direct::{aligned, ALIGN};
use crate::error::{IoContext, StorageError};
use crate::journal::{Journal, JournalHeader};
use crate::meta;

/// Suffix of part files: `.NAME.hetch-part`.
pub const PART_SUFFIX: &str = ".hetch-part";
/// Suffix of journals: `.NAME.hetch-journal`.
pub const JOURNAL_SUFFIX: &str = ".hetch-journal";
/// Suffix of the part file of a file moved in ranges by several writers,
/// `.NAME.hetch-split`; each range's journal is `.NAME.hetch-split.FIRST` (its first
/// block). Not [temporary names](is_temporary_name): between its ranges nobody holds
/// such a file, so the automatic clean-up after a transfer must not take it.
pub const SPLIT_SUFFIX: &str = ".hetch-split";

fn sibling(final_path: &Path, suffix: &str) -> PathBuf {
    final_path.with_file_name(sibling_name(
        final_path.file_name().unwrap_or_default(),
        suffix,
    ))
}

/// Where the part file of `final_path` lives.
pub fn part_path(final_path: &Path) -> PathBuf {
    sibling(final_path, PART_SUFFIX)
}

/// Where the block journal of `final_path` lives.
pub fn journal_path(final_path: &Path) -> PathBuf {
    sibling(final_path, JOURNAL_SUFFIX)
}

/// Whether a directory entry name is one of hetch's own temporary files.
pub fn is_temporary_name(name: &[u8]) -> bool {
    name.starts_with(b".")
        && (name.ends_with(PART_SUFFIX.as_bytes()) || name.ends_with(JOURNAL_SUFFIX.as_bytes()))
}

/// Metadata applied when a file is finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinalMeta {
    /// Permission bits.
    pub mode: u32,
    /// Modification time, seconds.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
}

/// The temporary name of the part file of `final_name`.
pub fn part_name(final_name: &OsStr) -> OsString {
    sibling_name(final_name, PART_SUFFIX)
}

/// The name of the journal of `final_name`.
pub fn journal_name(final_name: &OsStr) -> OsString {
    sibling_name(final_name, JOURNAL_SUFFIX)
}

/// The part file of `final_name` moved in ranges (see [`SPLIT_SUFFIX`]).
pub fn split_name(final_name: &OsStr) -> OsString {
    sibling_name(final_name, SPLIT_SUFFIX)
}

/// The journal of the range starting at block `first` of `final_name` moved in ranges.
pub fn range_journal_name(final_name: &OsStr, first: u64) -> OsString {
    let mut name = split_name(final_name);
    name.push(format!(".{first}"));
    name
}

/// The first block of the range whose journal is `name`, if `name` is one of
/// `final_name`'s range journals.
pub fn range_of_journal(final_name: &OsStr, name: &OsStr) -> Option<u64> {
    let split = split_name(final_name);
    let rest = name.as_bytes().strip_prefix(split.as_bytes())?;
    let digits = rest.strip_prefix(b".")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn sibling_name(final_name: &OsStr, suffix: &str) -> OsString {
    let mut name = OsString::from(".");
    name.push(final_name);
    name.push(suffix);
    name
}

/// A file being received. It lives in one directory, held open: the part file is
/// created, renamed over its final name and removed relative to that directory's
/// descriptor, so nothing that happens to the path of the directory meanwhile (a
/// symlink planted in its place) redirects the rename (see [`crate::confined`]).
#[derive(Debug)]
pub struct PartFile {
    file: File,
    dir: Dir,
    name: OsString,
    part: OsString,
    /// The part file's path, for messages.
    path: PathBuf,
    /// Made with [`PartFile::open_anonymous`]: no name until it is finalized.
    anonymous: bool,
    /// A second descriptor that reads and writes directly (see
    /// [`PartFile::with_direct_io`]).
    direct: Option<File>,
}

impl PartFile {
    /// Opens the part file for `name` in `dir`. With `keep`, existing contents are kept
    /// (resume); otherwise the file starts empty. Call [`PartFile::set_len`] unless the
    /// writes will cover the whole file. A symlink under the part file's name is not
    /// followed (it is an error). The file is held (see [`crate::leftovers`]) so that
    /// no clean-up removes it while it is open.
    pub fn open(dir: &Dir, name: &OsStr, keep: bool) -> Result<Self, StorageError> {
        Self::open_as(dir, name, part_name(name), keep)
    }

    /// [`PartFile::open`] under temporary name `part` instead of the usual one (the
    /// shared part file of a file moved in ranges, [`split_name`]).
    pub fn open_as(
        dir: &Dir,
        name: &OsStr,
        part: OsString,
        keep: bool,
    ) -> Result<Self, StorageError> {
        let mut flags = OFlags::RDWR | OFlags::CREATE;
        if !keep {
            flags |= OFlags::TRUNC;
        }
        let file = open_held(dir, &part, OpenHow { flags, mode: 0o600 })?;
        Ok(PartFile {
            file,
            path: dir.path().join(&part),
            dir: dir.clone(),
            name: name.to_os_string(),
            part,
            anonymous: false,
            direct: None,
        })
    }

    /// A new part file for `name` in `dir` that has no name at all until
    /// [`PartFile::finalize`] links it under `name` (`O_TMPFILE`): creating it adds no
    /// directory entry, finishing it adds one (instead of adding, renaming and
    /// removing one), nothing can clean it up while it is written, and an interruption
    /// leaves nothing behind. For a file that will not be resumed (it keeps no
    /// journal). `None` where the file system cannot: use [`PartFile::open`].
    pub fn open_anonymous(dir: &Dir, name: &OsStr) -> Result<Option<Self>, StorageError> {
        let Some(file) = dir.create_anonymous(0o600)? else {
            return Ok(None);
        };
        let part = part_name(name);
        Ok(Some(PartFile {
            file,
            path: dir.path().join(&part),
            dir: dir.clone(),
            name: name.to_os_string(),
            part,
            anonymous: true,
            direct: None,
        }))
    }

    /// This part file with its aligned blocks written and read back directly, past the
    /// page cache (`O_DIRECT`, see [`crate::direct`]), where the file system allows:
    /// for a large file, whose bytes the cache would only hold on their way to the
    /// device, at a cost in CPU and memory bandwidth that exceeds the copy's. A write
    /// or read that is not aligned (a file's last block) goes through the cache as
    /// before; the kernel keeps the two views of the file coherent.
    pub fn with_direct_io(mut self) -> Self {
        self.direct = crate::direct::reopen(&self.file, true);
        self
    }

    /// The direct descriptor, when a transfer at `offset` can use it.
    fn direct_at(&self, offset: u64) -> Option<&File> {
        self.direct
            .as_ref()
            .filter(|_| offset % crate::direct::ALIGN as u64 == 0)
    }

    /// Turns this handle's shared hold (see [`crate::leftovers`]) into an exclusive
    /// one, without waiting: false while another handle of the file still holds it
    /// (another writer of a file moved in ranges). True where the file system has no
    /// locks (nothing can be told there).
    pub fn try_hold_alone(&self) -> Result<bool, StorageError> {
        use rustix::fs::{flock, FlockOperation};
        use rustix::io::Errno;
        match flock(&self.file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(true),
            Err(Errno::WOULDBLOCK) => Ok(false),
            Err(Errno::NOLCK) | Err(Errno::OPNOTSUPP) | Err(Errno::INVAL) => Ok(true),
            Err(e) => Err(StorageError::io(&self.path, e.into())),
        }
    }

    /// Sizes the file (unwritten ranges read as zeros and take no space).
    pub fn set_len(&self, size: u64) -> Result<(), StorageError> {
        self.file.set_len(size).at(&self.path)
    }

    /// Reserves the disk under `len` bytes at `offset` (`fallocate`, which also
    /// extends the file to `offset + len` if it was shorter), for a file being written
    /// out of order: several writers filling one large file at their own offsets
    /// otherwise leave it in hundreds of extents (a 2 GiB file: 240 against `cp`'s 21),
    /// which costs its writeback, its read-back and the disk's discard when it is
    /// deleted. A full disk is an error; a file system without it (or one that
    /// refuses) is left alone.
    pub fn preallocate(&self, offset: u64, len: u64) -> Result<(), StorageError> {
        use rustix::fs::{fallocate, FallocateFlags};
        use rustix::io::Errno;
        match fallocate(&self.file, FallocateFlags::empty(), offset, len) {
            Ok(()) => Ok(()),
            Err(e @ (Errno::NOSPC | Errno::DQUOT | Errno::FBIG)) => {
                Err(StorageError::io(&self.path, e.into()))
            }
            Err(_) => Ok(()),
        }
    }

    /// Gives back the disk under `len` bytes at `offset`, which read as zeros after
    /// (an all-zero block of a preallocated file stays a hole). Advice only.
    pub fn punch_hole(&self, offset: u64, len: u64) {
        use rustix::fs::{fallocate, FallocateFlags};
        let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        let _ = fallocate(&self.file, flags, offset, len);
    }

    /// Flushes the data written so far to stable storage (`fdatasync`).
    pub fn sync_data(&self) -> Result<(), StorageError> {
        self.file.sync_data().at(&self.path)
    }

    /// The temporary path (for messages: the file is never reached by it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open part file (to read it whole, e.g. for a digest).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Writes all of `data` at `offset`: its whole pages directly when this part file
    /// does ([`PartFile::with_direct_io`]) and `data` is aligned, the rest (a file's
    /// last bytes) through the cache.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        let head = data.len() / ALIGN * ALIGN;
        let direct = self.direct_at(offset);
        let mut done = 0;
        if let Some(d) = direct.filter(|_| head > 0 && aligned(offset, head, data.as_ptr())) {
            match crate::direct::write_all_at(d, offset, &data[..head]) {
                Ok(()) => done = head,
                // Refused after all (a file system that opens but cannot write
                // directly): through the cache, which is always possible.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => return Err(StorageError::io(&self.path, e)),
            }
        }
        if done == data.len() {
            return Ok(());
        }
        let rest = &data[done..];
        self.file
            .write_all_at(rest, offset + done as u64)
            .at(&self.path)
    }

    /// Whether `len` bytes at `offset` from an aligned buffer are written directly,
    /// past the cache: nothing of them is left there to write out.
    fn writes_direct(&self, offset: u64, len: u64) -> bool {
        self.direct_at(offset).is_some() && len % ALIGN as u64 == 0
    }

    /// Starts writing `len` bytes at `offset` out to the device without waiting
    /// (`sync_file_range(WRITE)`), so that a later [`PartFile::prepare_read_back`] finds
    /// them on their way and the disk writes steadily instead of in one burst at the end.
    pub fn start_writeback(&self, offset: u64, len: u64) {
        if len > 0 && !self.writes_direct(offset, len) {
            meta::start_writeback(&self.file, offset, len);
        }
    }

    /// Makes the next [`PartFile::read_back`] of `len` bytes at `offset` come from the
    /// device rather than from the page cache that the write just filled: the range is
    /// written out and waited for (`sync_file_range`), its pages are dropped from the
    /// cache (`posix_fadvise(DONTNEED)`), and reading it back is started at once, in one
    /// large request (`WILLNEED`), so that a verifier can prepare the next block while
    /// it hashes this one. Where a file system ignores the advice (tmpfs), the read
    /// comes from memory. Advice only: errors are ignored.
    pub fn prepare_read_back(&self, offset: u64, len: u64) {
        // A range read back directly needs none of it (and read ahead into the cache
        // it would be read twice).
        if len > 0 && self.direct_at(offset).is_none() {
            meta::drop_cached_range(&self.file, offset, len);
            meta::advise_willneed(&self.file, offset, len);
        }
    }

    /// Reads `buf.len()` bytes at `offset`, for verification (see
    /// [`PartFile::prepare_read_back`]). Bytes past the current end of the file read as
    /// zeros: the file is sized when it is finished, and unwritten ranges are holes.
    pub fn read_back(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        // Direct reads come from the device even where some write went through the
        // cache (the kernel writes such a range out first): the whole pages into
        // `buf` where it is aligned, the rest (or all of an unaligned `buf`) through
        // an aligned buffer of their own.
        if let Some(d) = self.direct_at(offset) {
            match self.read_back_direct_with(d, offset, buf) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => return Err(StorageError::io(&self.path, e)),
            }
        }
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => {
                    buf[done..].fill(0);
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(StorageError::io(&self.path, e)),
            }
        }
        Ok(())
    }

    /// [`PartFile::read_back`] through the direct descriptor `d`; false if the file
    /// system refused.
    fn read_back_direct_with(
        &self,
        d: &File,
        offset: u64,
        buf: &mut [u8],
    ) -> std::io::Result<bool> {
        let head = match aligned(offset, 0, buf.as_ptr()) {
            true => buf.len() / ALIGN * ALIGN,
            false => 0,
        };
        if head > 0 {
            let n = crate::direct::read_at(d, offset, &mut buf[..head])?;
            if n < head {
                buf[n..].fill(0); // the file ends here
                return Ok(true);
            }
        }
        match head == buf.len() {
            true => Ok(true),
            false => crate::direct::read_bounced(d, offset + head as u64, &mut buf[head..]),
        }
    }

    /// Reads `buf.len()` bytes at `offset` straight from the device (`O_DIRECT`,
    /// which first writes out what the page cache holds of the range): one call instead
    /// of [`PartFile::prepare_read_back`] and [`PartFile::read_back`], for a file whose
    /// writes are over (the descriptor reads and writes directly meanwhile). Bytes past
    /// the end of the file read as zeros. `Ok(false)`: the file system or the
    /// alignment does not allow it, nothing was read; use the other two.
    pub fn read_back_direct(&self, offset: u64, buf: &mut [u8]) -> Result<bool, StorageError> {
        crate::direct::read_exact_at(&self.file, offset, buf).at(&self.path)
    }

    /// Applies mode and mtime, stores the digest, optionally flushes to stable storage,
    /// renames the file over its final name and, with `journaled`, removes its journal.
    /// Takes `&self`: another task may still hold the file for a moment (a growing
    /// file's durability `fdatasync`), which is harmless after the rename.
    pub fn finalize(
        &self,
        meta_: FinalMeta,
        digest: Option<&[u8; 32]>,
        fsync: bool,
        journaled: bool,
    ) -> Result<(), StorageError> {
        let p = &self.path;
        self.file
            .set_permissions(std::fs::Permissions::from_mode(meta_.mode))
            .at(p)?;
        if let Some(d) = digest {
            meta::store_digest(&self.file, d);
        }
        meta::set_file_mtime(&self.file, p, meta_.mtime_sec, meta_.mtime_nsec)?;
        if fsync {
            self.file.sync_data().at(p)?;
        }
        let named = self.anonymous && self.link_anonymous()?;
        match if named {
            Ok(())
        } else {
            self.dir.rename(&self.part, &self.name)
        } {
            Ok(()) => {}
            Err(StorageError::Io { source, .. }) if source.raw_os_error() == Some(libc::EISDIR) => {
                return Err(StorageError::WrongType {
                    path: self.dir.path().join(&self.name),
                    reason: "is a directory where a file is needed".into(),
                })
            }
            Err(e) => return Err(e),
        }
        if !journaled {
            return Ok(());
        }
        self.dir.remove_file(&journal_name(&self.name))
    }

    /// Names an anonymous part file: under its final name when that is free (true);
    /// otherwise (a file to replace, or whatever else is there) under the part name,
    /// to be renamed over it (false).
    fn link_anonymous(&self) -> Result<bool, StorageError> {
        match self.dir.link_anonymous(&self.file, &self.name) {
            Ok(()) => Ok(true),
            Err(StorageError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                self.dir.remove_file(&self.part)?;
                self.dir.link_anonymous(&self.file, &self.part)?;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Creates (replacing any old one) the journal of this file, next to it.
    pub fn create_journal(&self, header: &JournalHeader) -> Result<Journal, StorageError> {
        Journal::create(&self.dir, &journal_name(&self.name), header)
    }

    /// Removes the part file (and journal): used when a file cannot be completed and
    /// must not be resumed (e.g. its data could not be repaired).
    pub fn discard(self) {
        discard(&self.dir, &self.name);
    }
}

/// Opens (creating, with `how`) temporary file `name` in `dir` and holds it: again
/// when a clean-up removed it between the open and the lock.
pub(crate) fn open_held(dir: &Dir, name: &OsStr, how: OpenHow) -> Result<File, StorageError> {
    // Each retry means a cleaner removed the file just then; it will not keep doing so
    // to a file that is held, so a few rounds are plenty.
    for _ in 0..8 {
        let file = dir.open_file(Path::new(name), how)?;
        if crate::leftovers::hold(dir, name, &file)? {
            return Ok(file);
        }
    }
    Err(StorageError::Refused {
        path: dir.path().join(name).display().to_string(),
        reason: "removed again and again while being opened",
    })
}

/// Removes the part file and journal of `name` in `dir`, whoever still has them open
/// (their writes then go to unlinked files).
pub fn discard(dir: &Dir, name: &OsStr) {
    let _ = dir.remove_file(&part_name(name));
    let _ = dir.remove_file(&journal_name(name));
}

/// Whether a directory entry name is the part file or a range journal of a file moved
/// in ranges (see [`SPLIT_SUFFIX`]).
pub fn is_split_name(name: &[u8]) -> bool {
    if !name.starts_with(b".") {
        return false;
    }
    if name.ends_with(SPLIT_SUFFIX.as_bytes()) {
        return true;
    }
    let digits = name.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    let stem = &name[..name.len() - digits];
    digits > 0 && stem.ends_with(format!("{SPLIT_SUFFIX}.").as_bytes())
}

/// Whether `name` (a final file name) would collide with hetch's temporary names.
pub fn name_is_reserved(final_path: &Path) -> bool {
    final_path
        .file_name()
        .map(|n| is_temporary_name(n.as_bytes()) || is_split_name(n.as_bytes()))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn split_names_are_told_apart_and_reserved() {
        let f = OsStr::new("big.bin");
        assert_eq!(split_name(f), ".big.bin.hetch-split");
        let j = range_journal_name(f, 64);
        assert_eq!(j, ".big.bin.hetch-split.64");
        assert_eq!(range_of_journal(f, &j), Some(64));
        for other in [
            ".big.bin.hetch-split",
            ".big.bin.hetch-split.",
            ".big.bin.hetch-split.6x",
        ] {
            assert_eq!(range_of_journal(f, OsStr::new(other)), None, "{other}");
        }
        assert_eq!(range_of_journal(OsStr::new("big"), &j), None);
        for name in [".big.bin.hetch-split", ".big.bin.hetch-split.64"] {
            assert!(is_split_name(name.as_bytes()), "{name}");
            assert!(name_is_reserved(Path::new(name)), "{name}");
            assert!(!is_temporary_name(name.as_bytes()), "{name}");
        }
        for name in [
            "big.bin.hetch-split",
            ".big.hetch-split.x",
            ".a.hetch-split.",
            "big",
        ] {
            assert!(!is_split_name(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn a_part_file_with_direct_io_writes_aligned_blocks_past_the_cache_and_reads_the_device() {
        use crate::direct::tests::{aligned_slice, disk_tempdir};
        use crate::direct::{cached, ALIGN};
        let t = disk_tempdir();
        let dir = Dir::open(t.path()).unwrap();
        let p = PartFile::open(&dir, OsStr::new("f"), false)
            .unwrap()
            .with_direct_io();
        if p.direct.is_none() {
            eprintln!(
                "SKIPPED: no direct I/O on the file system of {:?}",
                t.path()
            );
            return;
        }
        // A block of whole pages and a tail: the pages go directly, the tail (not a
        // whole page) through the cache; so does a damaged byte written over a direct
        // block (as the fault tests do).
        let mut space = Vec::new();
        let block = aligned_slice(&mut space, 2 * ALIGN + 1000);
        block[..2 * ALIGN].fill(7);
        block[2 * ALIGN..].fill(9);
        p.write_at(0, block).unwrap();
        let pages_cached = cached(p.file(), 0, 2 * ALIGN as u64);
        assert!(!pages_cached, "the pages went through the cache");
        assert_eq!(p.file().metadata().unwrap().len(), 2 * ALIGN as u64 + 1000);
        p.write_at(5, &[8]).unwrap();
        p.prepare_read_back(0, 2 * ALIGN as u64);
        assert!(
            !cached(p.file(), ALIGN as u64, ALIGN as u64),
            "read ahead into the cache"
        );
        // Read back from the device, which the kernel first brings up to date: into an
        // aligned buffer, an unaligned one, and past the end (zeros).
        let mut back_space = Vec::new();
        let back = aligned_slice(&mut back_space, 2 * ALIGN);
        p.read_back(0, back).unwrap();
        assert_eq!(
            back[5], 8,
            "the byte written through the cache was not read"
        );
        assert!(back[..5].iter().chain(&back[6..]).all(|&b| b == 7));
        let mut odd = vec![0u8; 1001];
        p.read_back(2 * ALIGN as u64, &mut odd[1..]).unwrap();
        assert!(odd[1..].iter().all(|&b| b == 9));
        let mut past = vec![1u8; 3000];
        p.read_back(2 * ALIGN as u64, &mut past).unwrap();
        assert!(past[..1000].iter().all(|&b| b == 9));
        assert!(
            past[1000..].iter().all(|&b| b == 0),
            "past the end reads as zeros"
        );
    }

    #[test]
    fn a_preallocated_part_file_holds_its_space_until_a_hole_is_punched() {
        let t = tempfile::tempdir().unwrap();
        let dir = Dir::open(t.path()).unwrap();
        let p = PartFile::open(&dir, OsStr::new("f"), false).unwrap();
        p.preallocate(0, 8 << 20).unwrap();
        let md = p.file().metadata().unwrap();
        if md.blocks() * 512 < 8 << 20 {
            eprintln!(
                "SKIPPED: the file system of {:?} does not preallocate",
                t.path()
            );
            return;
        }
        assert_eq!(md.len(), 8 << 20);
        p.write_at(0, &[1; 4096]).unwrap();
        p.punch_hole(4 << 20, 4 << 20);
        let md = p.file().metadata().unwrap();
        assert_eq!(md.len(), 8 << 20);
        let mut back = vec![1; 4096];
        p.file().read_exact_at(&mut back, (8 << 20) - 4096).unwrap();
        assert!(back.iter().all(|&b| b == 0), "a hole reads as zeros");
        let held = md.blocks() * 512;
        assert!((4 << 20..8 << 20).contains(&held), "{held} bytes allocated");
    }

    #[test]
    fn a_full_disk_refuses_a_preallocation_with_the_part_files_name() {
        let t = tempfile::tempdir().unwrap();
        let dir = Dir::open(t.path()).unwrap();
        let p = PartFile::open(&dir, OsStr::new("f"), false).unwrap();
        // More than any disk here holds (and below the largest file size).
        let e = p.preallocate(0, 1 << 60).unwrap_err().to_string();
        assert!(e.contains(".f.hetch-part") || e.contains("hetch"), "{e}");
    }

    #[test]
    fn part_file_is_renamed_only_on_finalize() {
        let t = tempfile::tempdir().unwrap();
        let fin = t.path().join("data.bin");
        let dir = Dir::open(t.path()).unwrap();
        let part = PartFile::open(&dir, OsStr::new("data.bin"), false).unwrap();
        part.set_len(10).unwrap();
        part.write_at(5, b"world").unwrap();
        part.write_at(0, b"hello").unwrap();
        assert!(!fin.exists());
        assert!(part_path(&fin).exists());
        let m = FinalMeta {
            mode: 0o640,
            mtime_sec: 1_600_000_000,
            mtime_nsec: 123,
        };
        part.finalize(m, Some(&[7; 32]), true, false).unwrap();
        assert_eq!(std::fs::read(&fin).unwrap(), b"helloworld");
        let md = std::fs::metadata(&fin).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o640);
        assert_eq!((md.mtime(), md.mtime_nsec()), (1_600_000_000, 123));
        assert!(!part_path(&fin).exists());
    }

    #[test]
    fn an_anonymous_part_file_has_no_name_until_it_is_finalized() {
        let t = tempfile::tempdir().unwrap();
        let dir = Dir::open(t.path()).unwrap();
        let Some(part) = PartFile::open_anonymous(&dir, OsStr::new("new.bin")).unwrap() else {
            eprintln!("no O_TMPFILE on this file system; skipped");
            return;
        };
        part.write_at(0, b"fresh").unwrap();
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 0);
        let m = FinalMeta {
            mode: 0o640,
            mtime_sec: 1_600_000_000,
            mtime_nsec: 5,
        };
        part.finalize(m, None, false, false).unwrap();
        let fin = t.path().join("new.bin");
        assert_eq!(std::fs::read(&fin).unwrap(), b"fresh");
        let md = std::fs::metadata(&fin).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o640);
        assert_eq!((md.mtime(), md.mtime_nsec()), (1_600_000_000, 5));
        let names: Vec<_> = std::fs::read_dir(t.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "only the final name: {names:?}");
    }

    #[test]
    fn an_anonymous_part_file_replaces_a_file_or_a_symlink_without_following_it() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::fs::write(t.path().join("old.bin"), b"old contents").unwrap();
        std::os::unix::fs::symlink(&victim, t.path().join("link")).unwrap();
        let dir = Dir::open(t.path()).unwrap();
        let m = FinalMeta {
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
        };
        for name in ["old.bin", "link"] {
            let Some(part) = PartFile::open_anonymous(&dir, OsStr::new(name)).unwrap() else {
                return; // no O_TMPFILE here (see above)
            };
            part.write_at(0, b"new").unwrap();
            part.finalize(m, None, false, false).unwrap();
            let fin = t.path().join(name);
            assert!(std::fs::symlink_metadata(&fin).unwrap().is_file(), "{name}");
            assert_eq!(std::fs::read(&fin).unwrap(), b"new", "{name}");
            assert!(!part_path(&fin).exists(), "{name}: no part file left");
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        // A directory in the way is refused, as for a named part file.
        std::fs::create_dir(t.path().join("d")).unwrap();
        let part = PartFile::open_anonymous(&dir, OsStr::new("d"))
            .unwrap()
            .unwrap();
        let err = part.finalize(m, None, false, false).unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
    }

    #[test]
    fn finalize_over_directory_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let fin = t.path().join("d");
        std::fs::create_dir(&fin).unwrap();
        let dir = Dir::open(t.path()).unwrap();
        let part = PartFile::open(&dir, OsStr::new("d"), false).unwrap();
        let m = FinalMeta {
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
        };
        let err = part.finalize(m, None, false, false).unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
    }

    #[test]
    fn temporary_names_are_recognised() {
        assert!(is_temporary_name(b".x.hetch-part"));
        assert!(is_temporary_name(b".x.hetch-journal"));
        assert!(!is_temporary_name(b"x.hetch-part"));
    }
}
