//! Refusing a local copy onto or into itself (`cp a a`, `cp a a/sub`), which would
//! otherwise nest a copy of the tree inside the tree it is reading: `hetch cp` checks
//! its local operands, the transfer service a job's paths on its root. Only local
//! paths can be compared (by device and inode, whatever path reaches them): a server's
//! paths live on another machine. The one module of this crate that looks at files.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The identity of a file: device and inode, whatever path reaches it.
fn id_of(md: &std::fs::Metadata) -> (u64, u64) {
    (md.dev(), md.ino())
}

/// How a copy's destination meets its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlap {
    /// The copy would be written onto the source itself: at this path (the
    /// destination, or the entry of that name inside the destination directory).
    Same(PathBuf),
    /// The source is a directory, and the destination lies below it.
    Inside,
}

/// Whether copying `src` to `dest` would write onto `src` itself or inside it; `None`
/// when they are apart (or `src` cannot be looked at: the copy reports that itself).
pub fn overlap(src: &Path, dest: &Path) -> Option<Overlap> {
    let source = std::fs::symlink_metadata(src).ok()?;
    let id = id_of(&source);
    // The destination itself (followed: a link to a directory is copied into).
    if let Ok(md) = std::fs::metadata(dest) {
        if id_of(&md) == id {
            return Some(Overlap::Same(dest.to_path_buf()));
        }
        // Into an existing directory: where the copy would go.
        if md.is_dir() {
            let inside = dest.join(src.file_name()?);
            if std::fs::symlink_metadata(&inside).is_ok_and(|m| id_of(&m) == id) {
                return Some(Overlap::Same(inside));
            }
        }
    }
    if !source.is_dir() {
        return None;
    }
    // A destination below the source: every ancestor of where it would be made.
    let existing = deepest_existing(dest)?;
    let mut at = Some(existing.as_path());
    while let Some(p) = at {
        if std::fs::metadata(p).is_ok_and(|m| id_of(&m) == id) {
            return Some(Overlap::Inside);
        }
        at = p.parent();
    }
    None
}

/// The error line for copying `src` to `dest` when it would write onto `src` itself or
/// inside it (see [`overlap`]).
pub fn copy_into_itself(src: &Path, dest: &Path) -> Option<String> {
    let (s, d) = (src.display(), dest.display());
    Some(match overlap(src, dest)? {
        Overlap::Same(at) => format!("cannot copy {s} onto itself ({} is the same)", at.display()),
        Overlap::Inside => format!("cannot copy the directory {s} into itself ({d})"),
    })
}

/// The canonical path of the deepest part of `path` that exists (the destination
/// may not exist yet: its parent decides where it would be made).
fn deepest_existing(path: &Path) -> Option<PathBuf> {
    let mut p = path;
    loop {
        let here = if p.as_os_str().is_empty() {
            Path::new(".")
        } else {
            p
        };
        if let Ok(c) = std::fs::canonicalize(here) {
            return Some(c);
        }
        p = p.parent()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlaps_are_found_and_neighbours_pass() {
        let t = tempfile::tempdir().unwrap();
        let a = t.path().join("a");
        std::fs::create_dir_all(a.join("sub")).unwrap();
        std::fs::create_dir_all(t.path().join("b")).unwrap();
        assert!(copy_into_itself(&a, &a).is_some());
        assert!(copy_into_itself(&a, &a.join("sub")).is_some());
        assert!(copy_into_itself(&a, &a.join("new/deeper")).is_some());
        assert!(copy_into_itself(&a.join("sub"), &a).is_some());
        assert!(copy_into_itself(&a, &t.path().join("b")).is_none());
        assert!(copy_into_itself(&a, &t.path().join("a2")).is_none());
        assert!(copy_into_itself(&a.join("sub"), &t.path().join("b")).is_none());
    }
}
