//! The tree walk behind [`crate::walk::walk`], through directory descriptors.
//!
//! Each directory is opened with `O_NOFOLLOW` relative to its parent's descriptor and
//! its entries are described with `fstatat(AT_SYMLINK_NOFOLLOW)` and `readlinkat` on it,
//! so the walk never leaves the operand's tree: a directory that a local user swaps for
//! a symlink while a server lists it for a pull is seen as what it is (a symlink, sent
//! as a link) or fails, and the names, sizes and link targets of whatever the link
//! points to are never listed. Entries come in pre-order, names sorted bytewise at each
//! level; memory is the names of the directories on the current path, one descriptor
//! per level.

use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};

use crate::error::StorageError;
use crate::walk::{Anchor, SourceEntry, SourceKind};

/// A directory being listed.
struct Level {
    dir: OwnedFd,
    abs: PathBuf,
    rel: Vec<u8>,
    names: std::vec::IntoIter<OsString>,
}

/// Pre-order listing of an operand (see the module docs).
pub(crate) struct Listing {
    /// The operand itself (and how it is reached from a confining directory), until it
    /// is yielded.
    first: Option<(PathBuf, Vec<u8>, Option<Anchor>)>,
    /// Directories on the current path, innermost last.
    stack: Vec<Level>,
    /// A directory just yielded whose contents could not be read: the next item.
    pending: Option<StorageError>,
}

impl Listing {
    /// Lists `operand`, whose wire name is `top`, by its path or through `anchor`.
    pub(crate) fn new(operand: PathBuf, top: Vec<u8>, anchor: Option<Anchor>) -> Self {
        Listing {
            first: Some((operand, top, anchor)),
            stack: Vec::new(),
            pending: None,
        }
    }

    fn descend(&mut self, opened: Result<Level, StorageError>) {
        match opened {
            Ok(level) => self.stack.push(level),
            Err(e) => self.pending = Some(e),
        }
    }
}

/// Opens directory `abs`, reached as `name` in `at` (or by its path, for the operand),
/// and reads its names, sorted.
fn open_level(
    at: Option<BorrowedFd<'_>>,
    name: &Path,
    abs: PathBuf,
    rel: Vec<u8>,
) -> Result<Level, StorageError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fail = |e: rustix::io::Errno| StorageError::io(&abs, e.into());
    let dir = match at {
        Some(parent) => rfs::openat(parent, name, flags, Mode::empty()),
        None => rfs::open(name, flags, Mode::empty()),
    }
    .map_err(fail)?;
    let mut names = Vec::new();
    for item in rfs::Dir::read_from(&dir).map_err(fail)? {
        let n = item.map_err(fail)?.file_name().to_bytes().to_vec();
        if n != b"." && n != b".." {
            names.push(OsString::from_vec(n));
        }
    }
    names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(Level {
        dir,
        abs,
        rel,
        names: names.into_iter(),
    })
}

impl Iterator for Listing {
    type Item = Result<SourceEntry, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending.take() {
            return Some(Err(e));
        }
        if let Some((operand, top, anchor)) = self.first.take() {
            let se = match &anchor {
                Some(a) => a.describe(&operand, top),
                None => crate::walk::entry(&operand, top),
            };
            let se = match se {
                Ok(se) => se,
                Err(e) => return Some(Err(e)),
            };
            if se.kind == SourceKind::Dir {
                let (at, name) = match &anchor {
                    Some(a) => (Some(a.parent.fd()), Path::new(&a.name)),
                    None => (None, operand.as_path()),
                };
                self.descend(open_level(at, name, operand.clone(), se.rel.clone()));
            }
            return Some(Ok(se));
        }
        loop {
            let level = self.stack.last_mut()?;
            let Some(name) = level.names.next() else {
                self.stack.pop();
                continue;
            };
            let mut rel = level.rel.clone();
            rel.push(b'/');
            rel.extend_from_slice(name.as_bytes());
            let described = describe(level.dir.as_fd(), &name, level.abs.join(&name), rel);
            if let Ok(se) = &described {
                if se.kind == SourceKind::Dir {
                    let at = Some(level.dir.as_fd());
                    let opened = open_level(at, Path::new(&name), se.abs.clone(), se.rel.clone());
                    self.descend(opened);
                }
            }
            return Some(described);
        }
    }
}

/// Describes `name` in directory `dir` without following it.
pub(crate) fn describe(
    dir: BorrowedFd<'_>,
    name: &OsString,
    abs: PathBuf,
    rel: Vec<u8>,
) -> Result<SourceEntry, StorageError> {
    let st = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| StorageError::io(&abs, e.into()))?;
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => SourceKind::File {
            size: st.st_size as u64,
        },
        FileType::Directory => SourceKind::Dir,
        FileType::Symlink => {
            let target = rfs::readlinkat(dir, name, Vec::new())
                .map_err(|e| StorageError::io(&abs, e.into()))?;
            SourceKind::Symlink {
                target: target.into_bytes(),
            }
        }
        _ => match crate::walk::Special::of_mode(st.st_mode & libc::S_IFMT, st.st_rdev) {
            Some(special) => SourceKind::Special(special),
            None => return Err(crate::walk::unknown_type(&abs)),
        },
    };
    let sparse = matches!(kind, SourceKind::File { size }
        if crate::holes::looks_sparse(st.st_blocks as u64, size));
    Ok(SourceEntry {
        rel,
        abs,
        kind,
        mode: st.st_mode & 0o7777,
        mtime_sec: st.st_mtime as i64,
        mtime_nsec: st.st_mtime_nsec as u32,
        ctime_sec: st.st_ctime as i64,
        ctime_nsec: st.st_ctime_nsec as u32,
        id: (st.st_dev as u64, st.st_ino as u64),
        nlink: st.st_nlink as u64,
        sparse,
    })
}
