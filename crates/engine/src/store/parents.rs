//! Directory handles of a destination tree, kept for the session: the entries of one
//! directory (thousands of small files) are created, checked and named through one
//! handle of their parent instead of resolving the parent again for each step of each
//! file (an `openat2` and a `close` every time).
//!
//! A handle is resolved the way `Dir::parent` resolves it (below the destination, no
//! symlink followed) and stays valid for what it was: the directory it opened. A local
//! user who renames that directory elsewhere meanwhile moves later entries with it, as
//! they would within the lifetime of any one file's handle; such a user can move the
//! finished files there anyway.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hetch_storage::confined::Dir;
use hetch_storage::StorageError;

/// Directories kept at most; beyond, the cache starts again (a tree walked in order
/// needs only the few it is in).
const KEPT: usize = 256;

/// Parent directory handles by path relative to the destination.
#[derive(Default)]
pub(crate) struct Parents {
    kept: Mutex<HashMap<PathBuf, Dir>>,
}

impl Parents {
    /// The parent directory of `rel` below `base` and `rel`'s last name, as
    /// [`Dir::parent`] gives them.
    pub fn of(&self, base: &Dir, rel: &Path) -> Result<(Dir, OsString), StorageError> {
        let up = rel.parent().unwrap_or(Path::new(""));
        let name = rel.file_name();
        if up.as_os_str().is_empty() || name.is_none() {
            return base.parent(rel);
        }
        if let Some(d) = self.kept.lock().expect("parents lock").get(up) {
            return Ok((d.clone(), name.expect("checked").to_os_string()));
        }
        let (dir, name) = base.parent(rel)?;
        let mut kept = self.kept.lock().expect("parents lock");
        if kept.len() >= KEPT {
            kept.clear();
        }
        kept.insert(up.to_path_buf(), dir.clone());
        Ok((dir, name))
    }

    /// Forgets directory `rel` and everything below it (it is being removed).
    pub fn forget(&self, rel: &Path) {
        self.kept
            .lock()
            .expect("parents lock")
            .retain(|p, _| !p.starts_with(rel));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn a_kept_parent_is_the_directory_it_opened_not_what_its_path_became() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("d")).unwrap();
        let base = Dir::open(t.path()).unwrap();
        let parents = Parents::default();
        let (d, name) = parents.of(&base, Path::new("d/a")).unwrap();
        assert_eq!(name, "a");
        // A local user moves the directory away and plants a symlink leading out.
        std::fs::rename(t.path().join("d"), t.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(outside.path(), t.path().join("d")).unwrap();
        let (again, _) = parents.of(&base, Path::new("d/b")).unwrap();
        again.mkdir(OsStr::new("b"), 0o700).unwrap();
        drop(d);
        assert!(
            t.path().join("moved/b").is_dir(),
            "written through the kept handle"
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        // Forgotten, the path is resolved again, and the symlink is refused.
        parents.forget(Path::new("d"));
        let err = parents.of(&base, Path::new("d/c")).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
    }
}
