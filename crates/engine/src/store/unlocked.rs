//! Directories made writable for the length of a session. As a user who is not root,
//! a changed file inside a directory its owner may not write (mode 0555: a source
//! directory copied with its mode) cannot get its part file there, nor be renamed into
//! place. As rsync does, such a directory, when this process owns it, is made
//! owner-writable until the session ends. A directory the session copies gets its
//! source's mode at the end anyway (`finish_dir` settles it); any other gets back the
//! mode it had (`restore`, when the session ends). Root needs none of this, and a
//! directory someone else owns is left as it is: the write fails, naming the file.

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hetch_storage::confined::Dir;
use hetch_storage::StorageError;

/// The directories a store unlocked, with the modes they had.
#[derive(Default)]
pub(super) struct Unlocked {
    modes: Mutex<HashMap<PathBuf, u32>>,
}

impl Unlocked {
    /// Makes directory `rel` below `fs` writable by its owner when this process owns
    /// it and it is not; returns whether it did (the caller then tries again).
    pub(super) fn unlock(&self, fs: &Dir, rel: &Path) -> Result<bool, StorageError> {
        let shown = fs.path().join(rel);
        let d = fs.open_dir(rel)?;
        let md = d.metadata().map_err(|e| StorageError::io(&shown, e))?;
        let mode = md.mode() & 0o7777;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if mode & 0o200 != 0 || md.uid() != me {
            return Ok(false);
        }
        let mut modes = self.modes.lock().expect("unlocked lock");
        d.set_permissions(std::fs::Permissions::from_mode(mode | 0o200))
            .map_err(|e| StorageError::io(&shown, e))?;
        modes.entry(rel.to_path_buf()).or_insert(mode);
        Ok(true)
    }

    /// Directory `rel` got its final mode from the session: nothing to restore.
    pub(super) fn settled(&self, rel: &Path) {
        self.modes.lock().expect("unlocked lock").remove(rel);
    }

    /// Gives every directory still unlocked its old mode back.
    pub(super) fn restore(&self, fs: &Dir) -> Result<(), StorageError> {
        let modes = std::mem::take(&mut *self.modes.lock().expect("unlocked lock"));
        let mut first_error = None;
        for (rel, mode) in modes {
            let shown = fs.path().join(&rel);
            let restored = fs.open_dir(&rel).and_then(|d| {
                d.set_permissions(std::fs::Permissions::from_mode(mode))
                    .map_err(|e| StorageError::io(&shown, e))
            });
            if let Err(e) = restored {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
