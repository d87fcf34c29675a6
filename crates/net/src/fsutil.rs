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
