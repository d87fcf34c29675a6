//! Where the operands land in a local destination: what the path names, found on the
//! file system, under the `cp -r` rules of `hetch_store::placement`. A directory made
//! as the copy of a single operand is marked with the extended attribute
//! `user.hetch.top` (the operand's name).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use hetch_storage::{meta, StorageError};
use hetch_store::placement::{self, Found, Placement};
use hetch_store::StoreError;

/// The destination operand of a transfer, as the sink sees it.
#[derive(Debug, Clone)]
pub struct DestSpec {
    /// Destination path (for a server, already confined under its root).
    pub path: PathBuf,
    /// Number of source operands.
    pub sources: u32,
    /// Whether the operand was written with a trailing `/`.
    pub trailing_slash: bool,
    /// Entries may only be written inside this directory (a server's root); `None`
    /// confines them to the resolved destination base.
    pub confine_to: Option<PathBuf>,
    /// Take the destination as the copy of the single operand, whatever is there (as
    /// `diff -r SRC DST` does): used when comparing trees.
    pub as_operand: bool,
}

/// Creates the destination directory of `spec` and its missing parents; on a server,
/// through the root's handle, so that a symlink swapped into the path meanwhile cannot
/// make it create directories outside the root.
fn create_dir_all(spec: &DestSpec) -> Result<(), StorageError> {
    let p = &spec.path;
    match &spec.confine_to {
        Some(root) => {
            let rel = p.strip_prefix(root).map_err(|_| StorageError::Refused {
                path: p.display().to_string(),
                reason: "destination is not inside the served root",
            })?;
            hetch_storage::confined::Dir::open(root)?
                .create_dir_all(rel, hetch_storage::confined::Links::Beneath)
        }
        None => std::fs::create_dir_all(p).map_err(|e| StorageError::io(p, e)),
    }
}

/// The resolved mapping from wire paths to destination paths.
#[derive(Debug, Clone)]
pub(crate) struct DestMap {
    /// Directory the entries are placed in.
    pub base: PathBuf,
    /// When copying one operand *as* the destination: the name that replaces the
    /// operand's own first path component.
    pub rename_top: Option<OsString>,
}

impl DestMap {
    /// Applies the `cp -r` rules to `spec`, creating a `dir/` destination if `create`
    /// (not in a dry run); `top` is the name of the (first) source operand.
    pub fn resolve(spec: &DestSpec, top: &OsStr, create: bool) -> Result<DestMap, StoreError> {
        let p = &spec.path;
        if spec.as_operand {
            return Self::as_destination(p);
        }
        let found = match std::fs::metadata(p) {
            Ok(md) if md.is_dir() => Found::Dir {
                marked: spec.sources == 1 && Self::marked_as_copy_of(p, top),
            },
            Ok(_) => Found::NotDir,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Found::Nothing,
            Err(e) => return Err(StorageError::io(p, e).into()),
        };
        let into = DestMap {
            base: p.clone(),
            rename_top: None,
        };
        match placement::place(found, spec.sources, spec.trailing_slash, p)? {
            Placement::Into => Ok(into),
            Placement::CreateThenInto => {
                if create {
                    create_dir_all(spec)?;
                }
                Ok(into)
            }
            Placement::As => Self::as_destination(p),
        }
    }

    fn marked_as_copy_of(p: &Path, top: &OsStr) -> bool {
        meta::get_xattr(p, meta::TOP_XATTR).as_deref() == Some(top.as_bytes())
    }

    /// Marks a directory just created (open) as the copy of operand `top` (see module
    /// docs).
    pub fn mark_as_copy(dir: &std::fs::File, top: &OsStr) {
        meta::set_xattr_fd(dir, meta::TOP_XATTR, top.as_bytes());
    }

    fn as_destination(p: &Path) -> Result<DestMap, StoreError> {
        let name = p.file_name().ok_or_else(|| {
            StoreError::Destination(format!("{}: not a usable destination name", p.display()))
        })?;
        let parent = match p.parent() {
            Some(x) if !x.as_os_str().is_empty() => x.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !parent.is_dir() {
            return Err(StoreError::Destination(format!(
                "{}: parent directory {} does not exist",
                p.display(),
                parent.display()
            )));
        }
        Ok(DestMap {
            base: parent,
            rename_top: Some(name.to_os_string()),
        })
    }

    /// Destination of an entry whose wire path (already validated) is `rel`.
    #[cfg(test)]
    pub fn map(&self, rel: &Path) -> PathBuf {
        self.base.join(self.rel(rel))
    }

    /// Destination of an entry whose wire path (already validated) is `rel`, relative
    /// to [`DestMap::base`].
    pub fn rel(&self, rel: &Path) -> PathBuf {
        match &self.rename_top {
            None => rel.to_path_buf(),
            Some(name) => {
                let mut out = PathBuf::from(name);
                for c in rel.components().skip(1) {
                    if let Component::Normal(n) = c {
                        out.push(n);
                    }
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(p: &Path, sources: u32, slash: bool) -> DestSpec {
        DestSpec {
            path: p.to_path_buf(),
            sources,
            trailing_slash: slash,
            confine_to: None,
            as_operand: false,
        }
    }

    #[test]
    fn cp_semantics() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        // Existing directory: copy into.
        let m = DestMap::resolve(&spec(d, 2, false), OsStr::new("a"), true).unwrap();
        assert_eq!(m.map(Path::new("a/x")), d.join("a/x"));
        // Missing destination, one source: copy as.
        let m = DestMap::resolve(&spec(&d.join("new"), 1, false), OsStr::new("a"), true).unwrap();
        assert_eq!(m.map(Path::new("a/x")), d.join("new/x"));
        assert_eq!(m.map(Path::new("a")), d.join("new"));
        // Missing destination, several sources: refused unless it ends with '/'.
        assert!(DestMap::resolve(&spec(&d.join("n2"), 2, false), OsStr::new("a"), true).is_err());
        // A dry run creates nothing, and maps as the run would.
        let m = DestMap::resolve(&spec(&d.join("n3"), 2, true), OsStr::new("a"), false).unwrap();
        assert!(!d.join("n3").exists());
        assert_eq!(m.map(Path::new("a/x")), d.join("n3/a/x"));
        let m = DestMap::resolve(&spec(&d.join("n2"), 2, true), OsStr::new("a"), true).unwrap();
        assert!(d.join("n2").is_dir());
        assert_eq!(m.map(Path::new("a")), d.join("n2/a"));
        // Existing file: several sources refused; missing parent refused.
        std::fs::write(d.join("f"), b"x").unwrap();
        let e = DestMap::resolve(&spec(&d.join("f"), 2, false), OsStr::new("a"), true).unwrap_err();
        assert!(
            e.to_string()
                .contains("is a file where a directory is needed"),
            "{e}"
        );
        let e = DestMap::resolve(&spec(&d.join("no/such/x"), 1, false), OsStr::new("a"), true)
            .unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }

    #[test]
    fn marked_copy_is_copied_as_again() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("copy");
        std::fs::create_dir(&d).unwrap();
        DestMap::mark_as_copy(&std::fs::File::open(&d).unwrap(), OsStr::new("src"));
        let m = DestMap::resolve(&spec(&d, 1, false), OsStr::new("src"), true).unwrap();
        if meta::get_xattr(&d, meta::TOP_XATTR).is_some() {
            assert_eq!(m.map(Path::new("src/x")), d.join("x"));
        }
        // Another operand name is copied into it.
        let m = DestMap::resolve(&spec(&d, 1, false), OsStr::new("other"), true).unwrap();
        assert_eq!(m.map(Path::new("other/x")), d.join("other/x"));
    }
}
