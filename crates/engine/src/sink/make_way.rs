//! Replacing an entry of another type, as rsync does: a file or symlink where the
//! source now has a directory, a directory where it now has a file or symlink.
//!
//! A non-directory in the way is removed (a file or symlink replacing another
//! non-directory needs nothing: it is renamed over it). A directory in the way goes
//! only when what replaces it is being copied and its subtree is within what the
//! session may delete: in a mirroring session (`hetch sync`, `cp --delete`) the whole
//! subtree, unless the filter protects something in it, counted against
//! `--max-delete` and reported like the deletion phase's removals; in a plain copy
//! only an empty directory (`cp -a` refuses both, rsync without `--delete` removes
//! only an empty one). Everything goes through the store, so through handles confined
//! to the destination, children first. A top-level entry (what the user named) is
//! never replaced. A dry run looks at the same things and removes nothing: it lists
//! exactly what the run would remove, or fails the entry as the run would.

use std::sync::atomic::Ordering::SeqCst;

use hetch_proto::Frame;
use hetch_storage::StorageError;

use super::SinkShared;
use crate::store::{Kind, Place};

/// Clears the way at `at`, which holds an entry of kind `found`, for an entry of kind
/// `needed`; returns the change frames of what it removed (or would remove). `top_level`:
/// the entry is an operand itself.
pub(crate) fn make_way(
    sh: &SinkShared,
    at: &Place,
    found: Kind,
    needed: Kind,
    top_level: bool,
) -> Result<Vec<Frame>, StorageError> {
    let wanted = match needed {
        Kind::Dir => "directory",
        Kind::Symlink => "symlink",
        _ => "file",
    };
    if top_level {
        return Err(found.found_where(&at.shown, wanted));
    }
    if sh.opts.no_clobber {
        return Err(StorageError::WrongType {
            path: at.shown.clone(),
            reason: format!(
                "is {} where a {wanted} is needed; not replaced (--no-clobber)",
                found.name()
            )
            .into(),
        });
    }
    if found != Kind::Dir {
        if !sh.opts.dry_run {
            sh.store.remove(&at.rel, false)?;
        }
        return Ok(Vec::new());
    }
    let Some(del) = sh.opts.delete else {
        return replace_empty_dir(sh, at);
    };
    let Some(mut gone) = super::mirror::subtree(sh, &at.rel, del.delete_excluded)? else {
        return Err(StorageError::Refused {
            path: at.shown.display().to_string(),
            reason: "is a directory holding entries the filter excludes; not replaced",
        });
    };
    gone.push((at.rel.clone(), true));
    if sh.opts.dry_run {
        let mut listed = sh.would_make_way.lock().expect("would_make_way lock");
        listed.insert(at.rel.clone());
    }
    let count = gone.len() as u64;
    let before = sh.made_way.fetch_add(count, SeqCst);
    if let Some(max) = del.max_delete.filter(|max| before + count > *max) {
        sh.made_way.fetch_sub(count, SeqCst);
        let earlier = match before {
            0 => String::new(),
            n => format!(" after {n} for other replaced directories"),
        };
        let reason = format!(
            "is a directory; replacing it deletes {count} entries{earlier}, \
             more than --max-delete {max}; not replaced"
        );
        return Err(StorageError::WrongType {
            path: at.shown.clone(),
            reason: reason.into(),
        });
    }
    let base = sh.store.shown_base().unwrap_or_default();
    gone.into_iter()
        .map(|(rel, is_dir)| super::mirror::removed(sh, &base, rel, is_dir))
        .collect()
}

/// A plain copy: the directory goes only when it is empty.
fn replace_empty_dir(sh: &SinkShared, at: &Place) -> Result<Vec<Frame>, StorageError> {
    if !sh.store.list(&at.rel)?.is_empty() {
        return Err(StorageError::Refused {
            path: at.shown.display().to_string(),
            reason: "is a directory that is not empty where the source has a file or symlink; \
                     not replaced (`hetch sync` or `--delete` replaces it)",
        });
    }
    if !sh.opts.dry_run {
        sh.store.remove(&at.rel, true)?;
    }
    Ok(Vec::new())
}
