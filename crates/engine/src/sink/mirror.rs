//! What the destination has and the source lacks: listed by compare-only sessions
//! (`hetch verify`), removed by mirroring ones (`hetch sync`, `cp --delete`).
//!
//! The sink remembers the destination path of every announced entry (`seen`, relative
//! to the destination directory), so memory grows with the number of entries, as
//! rsync's `--delete` does. Once every file has settled, the trees the operands map to
//! (the first components of what was seen) are listed through directory handles
//! ([`Dir::names`], `fstatat` without following): a symlink is an entry like any other,
//! never a way into another tree. Removal goes through the parent's handle too
//! (`unlinkat`, `AT_REMOVEDIR` for directories, children first), so nothing outside
//! the destination can be touched, whatever a peer announced or a local user swaps in.
//!
//! A mirroring sink removes nothing unless every file of the session succeeded, and
//! nothing at all if more than `max_delete` entries would go. Entries the filter
//! excludes are kept (unless `delete_excluded`), and so is a directory that still holds
//! one. Part files and journals of a file the source has are kept (they may belong to
//! a transfer running beside this one); those of a file it lacks are stale and removed.

use std::collections::{BTreeSet, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use hetch_proto::{Change, ChangeAction, DeleteRequest, Frame};
use hetch_storage::StorageError;

use super::SinkShared;
use crate::store::{Kind, Place};

/// An entry to report or remove, relative to the destination directory.
struct Extra {
    rel: PathBuf,
    is_dir: bool,
}

/// How the listing treats what it finds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Report the top of each extra subtree; look at no temporary file.
    Compare,
    /// Every extra entry, children before their directory; excluded ones protected.
    Mirror {
        /// Excluded entries go too.
        delete_excluded: bool,
    },
}

/// Compare-only sessions: destination entries under the compared tree that the source
/// did not announce, as failed-file frames.
pub(crate) fn compare_extras(sh: &SinkShared) -> Vec<Frame> {
    let seen = std::mem::take(&mut *sh.seen.lock().expect("seen lock"));
    let Some(base) = sh.store.shown_base() else {
        return Vec::new();
    };
    // A tree that cannot be listed was reported by the comparison itself.
    let extras = list_extras(sh, &seen, &HashSet::new(), Mode::Compare).unwrap_or_default();
    extras
        .into_iter()
        .map(|x| {
            let message = format!("{}: not in the source", base.join(&x.rel).display());
            sh.failure(u64::MAX, message)
        })
        .collect()
}

/// Mirroring sessions: removes (or, in a dry run, lists) the destination entries the
/// source lacks. Returns the frames for the source: one [`Frame::Change`] per entry,
/// and a failure line for each entry that could not be removed or for the reason
/// nothing was.
pub(crate) fn delete_extras(sh: &SinkShared) -> Vec<Frame> {
    let Some(del) = sh.opts.delete else {
        return Vec::new();
    };
    let seen = std::mem::take(&mut *sh.seen.lock().expect("seen lock"));
    let Some(base) = sh.store.shown_base() else {
        return Vec::new();
    };
    // A dry run listed what replaced directories held already: they are not entered.
    let replaced = std::mem::take(&mut *sh.would_make_way.lock().expect("would_make_way lock"));
    if let Some(why) = failures_stop(&sh.progress, sh.opts.dry_run) {
        return vec![sh.failure(u64::MAX, why)];
    }
    let mode = Mode::Mirror {
        delete_excluded: del.delete_excluded,
    };
    let extras = match list_extras(sh, &seen, &replaced, mode) {
        Ok(x) => x,
        Err(e) => {
            let why = format!("deletions skipped: {e}");
            return vec![sh.failure(u64::MAX, why)];
        }
    };
    drop(seen);
    // Directories replaced by files or symlinks took their subtrees with them.
    let made_way = sh.made_way.load(std::sync::atomic::Ordering::SeqCst) as usize;
    if let Some(why) = too_many(extras.len() + made_way, &del) {
        return vec![sh.failure(u64::MAX, why)];
    }
    extras
        .into_iter()
        .map(|x| {
            removed(sh, &base, x.rel, x.is_dir)
                .unwrap_or_else(|e| sh.failure(u64::MAX, format!("not deleted: {e}")))
        })
        .collect()
}

/// Removes entry `rel` below `base` (in a dry run, nothing) and reports it: the
/// change frame for the source, also logged.
pub(crate) fn removed(
    sh: &SinkShared,
    base: &Path,
    rel: PathBuf,
    is_dir: bool,
) -> Result<Frame, StorageError> {
    let action = match sh.opts.dry_run {
        true => ChangeAction::WouldDelete,
        false => {
            sh.store.remove(&rel, is_dir)?;
            ChangeAction::Deleted
        }
    };
    let place = Place {
        shown: base.join(&rel),
        rel,
    };
    let path = sh.store.manifest_path(&place);
    sh.progress.change(action, &path, 0);
    Ok(Frame::Change(Change {
        action,
        path,
        size: 0,
    }))
}

/// Why nothing may be deleted after the copies: some entry failed (a dry run lists
/// anyway).
pub(crate) fn failures_stop(progress: &crate::Progress, dry_run: bool) -> Option<String> {
    let failed = progress.failed.load(std::sync::atomic::Ordering::SeqCst);
    if failed == 0 || dry_run {
        return None;
    }
    let noun = if failed == 1 { "entry" } else { "entries" };
    Some(format!(
        "deletions skipped: {failed} {noun} failed, so nothing was deleted"
    ))
}

/// Why nothing may be deleted: more than `--max-delete` entries would be.
pub(crate) fn too_many(count: usize, del: &DeleteRequest) -> Option<String> {
    let max = del.max_delete?;
    (count as u64 > max).then(|| {
        format!("deletions skipped: {count} entries would be deleted, more than --max-delete {max}")
    })
}

/// Everything below directory `rel`, children before their directory, for a mirroring
/// session replacing it with an entry of another type (see `make_way`); `None` when
/// the filter protects something in it (unless `delete_excluded`).
pub(crate) fn subtree(
    sh: &SinkShared,
    rel: &Path,
    delete_excluded: bool,
) -> Result<Option<Vec<(PathBuf, bool)>>, StorageError> {
    let none = HashSet::new();
    let mode = Mode::Mirror { delete_excluded };
    let walk = Walk {
        sh,
        seen: &none,
        replaced: &none,
        mode,
    };
    let mut out = Vec::new();
    if !walk.dir(rel, true, &mut out)? {
        return Ok(None);
    }
    Ok(Some(out.into_iter().map(|x| (x.rel, x.is_dir)).collect()))
}

/// The extra entries below the trees the operands map to.
fn list_extras(
    sh: &SinkShared,
    seen: &HashSet<PathBuf>,
    replaced: &HashSet<PathBuf>,
    mode: Mode,
) -> Result<Vec<Extra>, StorageError> {
    let tops: BTreeSet<&OsStr> = seen.iter().filter_map(|p| p.iter().next()).collect();
    let mut out = Vec::new();
    for top in tops {
        let top = Path::new(top);
        // Only a real directory has entries to compare; a symlink is not entered. (A
        // store without directories lists the prefix, which may hold nothing.)
        if !sh.caps.directories || sh.store.stat(top)?.is_some_and(|p| p.kind == Kind::Dir) {
            let walk = Walk {
                sh,
                seen,
                replaced,
                mode,
            };
            walk.dir(top, false, &mut out)?;
        }
    }
    Ok(out)
}

struct Walk<'a> {
    sh: &'a SinkShared,
    seen: &'a HashSet<PathBuf>,
    /// Directories not to enter: a dry run's replaced ones (see `make_way`).
    replaced: &'a HashSet<PathBuf>,
    mode: Mode,
}

impl Walk<'_> {
    /// Lists directory `rel` (everything in it extra when `extra`); returns whether
    /// every entry in it is to go, so that the directory itself can go.
    fn dir(&self, rel: &Path, extra: bool, out: &mut Vec<Extra>) -> Result<bool, StorageError> {
        let mut all = true;
        for entry in self.sh.store.list(rel)? {
            let child = rel.join(&entry.name);
            let is_dir = entry.kind == Kind::Dir;
            let temporary = entry.temporary_of.is_some();
            let of_seen = |of: &std::ffi::OsString| self.seen.contains(&rel.join(of));
            let is_extra = extra
                || !(self.seen.contains(&child)
                    || entry.temporary_of.as_ref().is_some_and(of_seen));
            match self.mode {
                Mode::Compare => {
                    if temporary {
                        continue;
                    }
                    if is_extra {
                        out.push(Extra { rel: child, is_dir });
                    } else if is_dir {
                        self.dir(&child, false, out)?;
                    }
                }
                Mode::Mirror { delete_excluded } => {
                    if !is_extra {
                        all = false;
                        if is_dir && !self.replaced.contains(&child) {
                            self.dir(&child, false, out)?;
                        }
                        continue;
                    }
                    if !delete_excluded && self.excluded(&child, is_dir) {
                        all = false;
                        continue;
                    }
                    if is_dir && !self.dir(&child, true, out)? {
                        // It keeps an excluded entry, so it stays too.
                        all = false;
                        continue;
                    }
                    // A prefix of a store without directories goes with its objects.
                    if !is_dir || self.sh.caps.directories {
                        out.push(Extra { rel: child, is_dir });
                    }
                }
            }
        }
        Ok(all)
    }

    /// Whether the session's filter leaves `rel` out (so mirroring must not remove it).
    fn excluded(&self, rel: &Path, is_dir: bool) -> bool {
        match &self.sh.opts.filter {
            // The filter takes wire paths: the operand's name first, which it ignores.
            Some(f) => !f.accepts(rel.as_os_str().as_bytes(), is_dir),
            None => false,
        }
    }
}
