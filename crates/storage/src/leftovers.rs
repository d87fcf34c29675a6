//! Leftover part files and journals: what an interrupted transfer left behind and no
//! later one claimed (its source was removed or renamed meanwhile).
//!
//! A receiver holds a shared `flock` on every part file and journal it has open
//! ([`hold`]), from the moment it opens them until they are renamed into place or
//! removed. A cleaner takes an exclusive lock without waiting, on a part file and its
//! journal together, and removes them only when it got both: so a second hetch writing
//! into the same directory never loses the files it is working on, however slowly it
//! writes, while what nobody holds is stale by definition. A writer that opened a name
//! just as a cleaner removed it finds, once its lock is granted, that the name no
//! longer leads to its file, and opens it again.
//!
//! On file systems without `flock` (some network file systems refuse it), writers go
//! on without the lock and cleaners remove nothing (they cannot tell).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation, OFlags};
use rustix::io::Errno;

use crate::confined::{Dir, Links, OpenHow};
use crate::error::StorageError;
use crate::part::{is_split_name, is_temporary_name, JOURNAL_SUFFIX, PART_SUFFIX, SPLIT_SUFFIX};

/// Takes a shared lock on `file`, just opened as `name` in `dir`, and checks that the
/// name still leads to it. False when a cleaner removed it meanwhile: open it again.
pub(crate) fn hold(dir: &Dir, name: &OsStr, file: &File) -> Result<bool, StorageError> {
    match flock(file, FlockOperation::LockShared) {
        Ok(()) => {}
        // No locks here: nothing can be cleaned either (see `try_exclusive`).
        Err(Errno::NOLCK) | Err(Errno::OPNOTSUPP) | Err(Errno::INVAL) => return Ok(true),
        Err(e) => return Err(StorageError::io(dir.path().join(name), e.into())),
    }
    let ours = file
        .metadata()
        .map_err(|e| StorageError::io(dir.path().join(name), e))?;
    Ok(dir
        .stat(Path::new(name))?
        .is_some_and(|md| md.dev() == ours.dev() && md.ino() == ours.ino()))
}

/// What became of a leftover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Removed.
    Removed,
    /// Would be removed (a dry run).
    Stale,
    /// A running transfer holds it: kept.
    InUse,
}

/// One leftover temporary file (a part file, a journal, or a symlink under a part
/// name).
#[derive(Debug, Clone)]
pub struct Leftover {
    /// Where it is.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// What became of it.
    pub outcome: Outcome,
}

/// How to clean.
#[derive(Debug, Clone, Copy, Default)]
pub struct Clean {
    /// Only report what would be removed.
    pub dry_run: bool,
    /// Also symlinks under a part name. A receiver creates a symlink under that name
    /// and renames it into place at once, so such a link is held by nobody and cannot
    /// be told from one being made right now: only an explicit `hetch clean` takes
    /// them, not the automatic clean-up after a transfer.
    pub symlinks: bool,
    /// Also the part files and range journals of files moved in ranges by several
    /// writers (`.NAME.hetch-split[.FIRST]`, a transfer service's large files).
    /// Between two ranges nobody holds them, so a clean while such a job runs would
    /// take what it still needs: only on request, where no such job runs (after a
    /// job was cancelled and will not be retried).
    pub split: bool,
}

/// Removes (or lists, see [`Clean`]) the leftovers in `dir` itself, not below it.
/// Each is reported to `each`; errors name the file.
pub fn clean_dir(dir: &Dir, how: Clean, each: &mut dyn FnMut(Result<Leftover, StorageError>)) {
    match dir.names() {
        Ok(names) => clean_names(dir, &names, how, each),
        Err(e) => each(Err(e)),
    }
}

/// [`clean_dir`] with the directory's names already read.
fn clean_names(
    dir: &Dir,
    names: &[OsString],
    how: Clean,
    each: &mut dyn FnMut(Result<Leftover, StorageError>),
) {
    // Part file and journal of one final name go together.
    let mut groups: BTreeMap<&[u8], Vec<OsString>> = BTreeMap::new();
    for n in names {
        if let Some(stem) = stem_of(n.as_bytes(), how.split) {
            groups.entry(stem).or_default().push(n.clone());
        }
    }
    for group in groups.values() {
        clean_group(dir, group, how, each);
    }
}

/// `x` for `.x.hetch-part` and `.x.hetch-journal`; with `split`, also for
/// `.x.hetch-split` and `.x.hetch-split.FIRST`.
fn stem_of(name: &[u8], split: bool) -> Option<&[u8]> {
    if split && is_split_name(name) {
        let inner = &name[1..];
        let end = inner
            .windows(SPLIT_SUFFIX.len())
            .rposition(|w| w == SPLIT_SUFFIX.as_bytes())?;
        return Some(&inner[..end]);
    }
    if !is_temporary_name(name) {
        return None;
    }
    let inner = &name[1..];
    inner
        .strip_suffix(PART_SUFFIX.as_bytes())
        .or_else(|| inner.strip_suffix(JOURNAL_SUFFIX.as_bytes()))
}

/// Cleans the temporary files of one final name: all of them, or none when any is
/// held by a running transfer.
fn clean_group(
    dir: &Dir,
    group: &[OsString],
    how: Clean,
    each: &mut dyn FnMut(Result<Leftover, StorageError>),
) {
    // Each file with the handle that holds it locked (none for a symlink).
    let mut held = Vec::new();
    let mut busy = false;
    for name in group {
        let path = dir.path().join(name);
        let md = match dir.stat(Path::new(name)) {
            Ok(Some(md)) => md,
            Ok(None) => continue, // gone meanwhile
            Err(e) => return each(Err(e)),
        };
        if md.file_type().is_symlink() && how.symlinks {
            held.push((name, None, md.len()));
            continue;
        }
        if !md.is_file() {
            continue; // not something hetch made: left alone
        }
        // Non-blocking: a FIFO planted under such a name must not hang the cleaner.
        let flags = OFlags::RDONLY | OFlags::NONBLOCK;
        let file = match dir.open_file(Path::new(name), OpenHow { flags, mode: 0 }) {
            Ok(f) => f,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return each(Err(e)),
        };
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            // Held by a transfer; or locks unsupported, and then it cannot be told.
            Err(Errno::WOULDBLOCK)
            | Err(Errno::NOLCK)
            | Err(Errno::OPNOTSUPP)
            | Err(Errno::INVAL) => busy = true,
            Err(e) => return each(Err(StorageError::io(&path, e.into()))),
        }
        held.push((name, Some(file), md.len()));
    }
    for (name, _lock, bytes) in &held {
        let path = dir.path().join(name);
        let outcome = if busy {
            Outcome::InUse
        } else if how.dry_run {
            Outcome::Stale
        } else {
            if let Err(e) = dir.remove_file(name) {
                each(Err(e));
                continue;
            }
            Outcome::Removed
        };
        each(Ok(Leftover {
            path,
            bytes: *bytes,
            outcome,
        }));
    }
    // The locks are released here, after the names are gone.
}

/// [`clean_dir`] on `root` and every directory below it. Directories are opened one
/// name at a time below their parent's handle with no symlink followed, so the clean
/// never leaves the tree; memory is one directory handle and its names per level.
pub fn clean_tree(root: &Path, how: Clean, each: &mut dyn FnMut(Result<Leftover, StorageError>)) {
    let mut stack = Vec::new();
    enter(Dir::open(root), how, &mut stack, each);
    while let Some((dir, names)) = stack.last_mut() {
        let Some(n) = names.next() else {
            stack.pop();
            continue;
        };
        let p = Path::new(&n);
        if dir.stat(p).is_ok_and(|md| md.is_some_and(|m| m.is_dir())) {
            let sub = dir.subdir(p, Links::Refuse);
            enter(sub, how, &mut stack, each);
        }
    }
}

/// A directory being cleaned, with the names in it still to look at.
type Level = (Dir, std::vec::IntoIter<OsString>);

/// Cleans a directory just opened (or reports why it could not be) and puts it on the
/// stack so that its subdirectories follow.
fn enter(
    opened: Result<Dir, StorageError>,
    how: Clean,
    stack: &mut Vec<Level>,
    each: &mut dyn FnMut(Result<Leftover, StorageError>),
) {
    let dir = match opened {
        Ok(d) => d,
        Err(e) => return each(Err(e)),
    };
    match dir.names() {
        Ok(names) => {
            clean_names(&dir, &names, how, each);
            stack.push((dir, names.into_iter()));
        }
        Err(e) => each(Err(e)),
    }
}

#[cfg(test)]
mod tests;
