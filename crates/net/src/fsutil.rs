//! Crash-safe file creation for keys, certificates and tokens.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::NetError;

/// Creates `dir` (and parents) with mode 0700 when missing, because it holds secrets.
/// An existing directory keeps its mode: the operator may have chosen it.
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), NetError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| NetError::file(dir, format!("cannot create directory: {e}")))
}

/// Makes `dir` (and missing parents) mode 0700 for a service's state (key, token,
/// job database), and refuses an existing one that group or others may read, write
/// or enter, saying how to fix it: the files in it are only as private as the
/// directory, and a database of jobs names everyone's paths. Unlike
/// [`create_private_dir`], whose callers check each secret file instead.
pub fn private_state_dir(dir: &Path) -> Result<(), NetError> {
    create_private_dir(dir)?;
    let mode = fs::metadata(dir)
        .map_err(|e| NetError::file(dir, e))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(NetError::file(
            dir,
            format!(
                "state directory is accessible by group or others (mode {:03o}); run `chmod 700 {}`",
                mode & 0o777,
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// Whether `path` exists; errors other than "not found" (e.g. permission) are reported
/// rather than treated as absence, so a secret is never silently regenerated.
pub(crate) fn exists(path: &Path) -> Result<bool, NetError> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(NetError::file(path, e)),
    }
}

/// Refuses a secret file (key, token) that group or others may read or write: anyone
/// who can read it can impersonate its owner. The message says how to fix it.
pub(crate) fn check_private(path: &Path) -> Result<(), NetError> {
    let mode = fs::metadata(path)
        .map_err(|e| NetError::file(path, e))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(NetError::file(
            path,
            format!(
                "secret file is accessible by group or others (mode {:03o}); run `chmod 600 {}`",
                mode & 0o777,
                path.display()
            ),
        ));
    }
    Ok(())
}

/// Writes `contents` to `path` with `mode` so that a crash leaves either the old state
/// or the complete new file, never a partial one: the data goes to a temporary file in
/// the same directory, is fsynced, then moved into place, and the directory is fsynced.
///
/// With `replace == false` an existing `path` is kept and `Ok(false)` returned (two
/// processes starting at once agree on one file); otherwise `path` is replaced.
pub(crate) fn write_atomic(
    path: &Path,
    contents: &[u8],
    mode: u32,
    replace: bool,
) -> Result<bool, NetError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{:016x}",
        std::process::id(),
        rand::random::<u64>()
    ));
    let result = write_then_move(&tmp, path, contents, mode, replace);
    // The temporary name is gone after a rename; after a hard link (or a failure) it
    // still exists and must not be left behind.
    let _ = fs::remove_file(&tmp);
    let created = result.map_err(|e| NetError::file(path, format!("cannot write: {e}")))?;
    if created {
        // Make the new directory entry durable too.
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| NetError::file(dir, format!("cannot sync directory: {e}")))?;
    }
    Ok(created)
}

fn write_then_move(
    tmp: &Path,
    path: &Path,
    contents: &[u8],
    mode: u32,
    replace: bool,
) -> io::Result<bool> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(tmp)?;
    f.write_all(contents)?;
    f.sync_all()?;
    drop(f);
    if replace {
        fs::rename(tmp, path)?;
        return Ok(true);
    }
    // A hard link fails if the target exists, which makes create-if-absent atomic.
    match fs::hard_link(tmp, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        // Some file systems have no hard links: fall back to check-then-rename.
        Err(_) => {
            if path.exists() {
                Ok(false)
            } else {
                fs::rename(tmp, path)?;
                Ok(true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state directory is made 0700 (with its parents), kept when it is private,
    /// and refused in one line naming it and the fix when group or others reach it.
    #[test]
    fn a_state_directory_is_private_or_refused() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("a/state");
        private_state_dir(&dir).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        private_state_dir(&dir).unwrap();
        for loose in [0o755, 0o750, 0o701] {
            fs::set_permissions(&dir, fs::Permissions::from_mode(loose)).unwrap();
            let e = private_state_dir(&dir).unwrap_err().to_string();
            let fix = format!("chmod 700 {}", dir.display());
            assert!(
                e.starts_with(&dir.display().to_string()) && e.contains(&fix),
                "{e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
