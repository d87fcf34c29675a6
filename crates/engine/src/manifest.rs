//! The `--manifest FILE` of a transfer: one line per file in the format of `b3sum`,
//! `md5sum` and `sha256sum` (see [`hetch_integrity::manifest_line`]), paths relative to the
//! destination directory.
//!
//! Lines go to a hidden temporary file next to FILE as files finish; [`Manifest::commit`]
//! renames it into place, so a manifest under its final name is always complete for
//! the files it lists. Memory stays one buffered writer, whatever the number of files.
//! Names `b3sum --check` cannot check are counted ([`Manifest::not_for_b3sum`]), so
//! that the copy can say so once.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hetch_integrity::Algorithm;
use hetch_storage::StorageError;

use crate::sum::manifest_line;

/// A manifest being written.
pub struct Manifest {
    path: PathBuf,
    tmp: PathBuf,
    algo: Algorithm,
    out: Mutex<Option<BufWriter<File>>>,
    failed: Mutex<Option<std::io::Error>>,
    /// How many names b3sum cannot check, and the first (escaped).
    not_for_b3sum: Mutex<(u64, Option<String>)>,
}

impl std::fmt::Debug for Manifest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Manifest({})", self.path.display())
    }
}

impl Manifest {
    /// Starts a manifest of digests by `algo` that will be named `path`.
    pub fn create(path: &Path, algo: Algorithm) -> Result<Self, StorageError> {
        let mut name = std::ffi::OsString::from(".");
        name.push(path.file_name().unwrap_or_default());
        name.push(".hetch-part");
        let tmp = path.with_file_name(name);
        // Named by the path the user gave: the temporary name would only puzzle.
        let file = File::create(&tmp).map_err(|e| StorageError::io(path, e))?;
        Ok(Manifest {
            path: path.to_path_buf(),
            tmp,
            algo,
            out: Mutex::new(Some(BufWriter::new(file))),
            failed: Mutex::new(None),
            not_for_b3sum: Mutex::new((0, None)),
        })
    }

    /// Adds one file (`rel`: `/`-separated path relative to the destination).
    pub fn add(&self, digest: &[u8], rel: &[u8]) {
        use std::{ffi::OsStr, os::unix::ffi::OsStrExt};
        if self.algo == Algorithm::Blake3 && !hetch_integrity::b3sum_checks(rel) {
            let mut n = self.not_for_b3sum.lock().expect("manifest lock");
            n.0 += 1;
            n.1.get_or_insert_with(|| hetch_proto::escape_bytes(rel));
        }
        let line = manifest_line(self.algo, digest, Path::new(OsStr::from_bytes(rel)));
        let mut out = self.out.lock().expect("manifest lock");
        if let Some(w) = out.as_mut() {
            if let Err(e) = w.write_all(&line) {
                *self.failed.lock().expect("manifest lock") = Some(e);
                *out = None;
            }
        }
    }

    /// Empties the manifest for a new session of the same run, which reports every
    /// file again (copied, or found in place with its digest): no file is listed twice.
    pub fn restart(&self) -> Result<(), StorageError> {
        let file = File::create(&self.tmp).map_err(|e| StorageError::io(&self.path, e))?;
        *self.out.lock().expect("manifest lock") = Some(BufWriter::new(file));
        *self.failed.lock().expect("manifest lock") = None;
        *self.not_for_b3sum.lock().expect("manifest lock") = (0, None);
        Ok(())
    }

    /// How many of the files listed have a name `b3sum --check` cannot check (see
    /// [`hetch_integrity::manifest_line`]), and the first of them (escaped).
    pub fn not_for_b3sum(&self) -> (u64, Option<String>) {
        self.not_for_b3sum.lock().expect("manifest lock").clone()
    }

    /// Flushes and renames the manifest into place.
    pub fn commit(&self) -> Result<(), StorageError> {
        let io = |e| StorageError::io(&self.path, e);
        if let Some(e) = self.failed.lock().expect("manifest lock").take() {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(io(e));
        }
        let Some(w) = self.out.lock().expect("manifest lock").take() else {
            return Ok(()); // committed already
        };
        let file = w.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&self.tmp, &self.path).map_err(io)
    }

    /// Removes the unfinished manifest (after a fatal error).
    pub fn abandon(&self) {
        self.out.lock().expect("manifest lock").take();
        let _ = std::fs::remove_file(&self.tmp);
    }
}
