//! Wire paths to local paths, confined under a root.
//!
//! A server serves one root directory. Client-supplied paths are relative; `..` and
//! absolute paths are refused outright, and a symlink inside the root that points
//! outside it is refused when a path would go through it. The receiving side goes
//! further: it reaches every entry through directory handles with no symlink followed
//! at all (see [`crate::confined`]).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::error::{IoContext, StorageError};

/// Turns a wire path (relative, `/`-separated bytes) into a relative `PathBuf`.
///
/// The empty path and `.` mean "the root itself" and give an empty path.
pub fn rel_from_wire(p: &[u8]) -> Result<PathBuf, StorageError> {
    let shown = String::from_utf8_lossy(p).into_owned();
    if p.contains(&0) {
        return Err(StorageError::Refused {
            path: shown,
            reason: "path contains a NUL byte",
        });
    }
    if p.first() == Some(&b'/') {
        return Err(StorageError::Refused {
            path: shown,
            reason: "absolute paths are not allowed; paths are relative to the server's root",
        });
    }
    let mut out = PathBuf::new();
    for part in p.split(|b| *b == b'/') {
        match part {
            b"" | b"." => continue,
            b".." => {
                return Err(StorageError::Refused {
                    path: shown,
                    reason: "path escapes the root ('..' is not allowed)",
                })
            }
            name => out.push(OsStr::from_bytes(name)),
        }
    }
    Ok(out)
}

/// The wire form of a relative path.
pub fn rel_to_wire(p: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for c in p.components() {
        if let Component::Normal(name) = c {
            if !out.is_empty() {
                out.push(b'/');
            }
            out.extend_from_slice(name.as_bytes());
        }
    }
    out
}

/// Canonical form of a server root (it must exist and be a directory).
pub fn canonical_root(root: &Path) -> Result<PathBuf, StorageError> {
    let canon = root.canonicalize().at(root)?;
    if !canon.is_dir() {
        return Err(StorageError::WrongType {
            path: root.to_path_buf(),
            reason: "is not a directory".into(),
        });
    }
    Ok(canon)
}

/// Resolves a client's wire path under `root` (already canonical).
///
/// With `follow_last`, a final symlink is resolved and must stay inside the root too
/// (used for destinations); without it, only the parent must (a source symlink is sent
/// as a link, not followed). Paths that do not exist yet are checked up to their
/// longest existing ancestor.
pub fn confine(root: &Path, wire: &[u8], follow_last: bool) -> Result<PathBuf, StorageError> {
    let rel = rel_from_wire(wire)?;
    let path = root.join(&rel);
    let probe = if follow_last || rel.as_os_str().is_empty() {
        path.clone()
    } else {
        path.parent().unwrap_or(root).to_path_buf()
    };
    if !inside(root, &probe)? {
        return Err(StorageError::Refused {
            path: String::from_utf8_lossy(wire).into_owned(),
            reason: "path leads out of the served root through a symlink",
        });
    }
    Ok(path)
}

/// Whether `path` (or, if it does not exist, its longest existing ancestor) resolves to
/// a place under `root` (canonical).
pub fn inside(root: &Path, path: &Path) -> Result<bool, StorageError> {
    let mut probe = path;
    loop {
        match probe.canonicalize() {
            Ok(c) => return Ok(c.starts_with(root)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match probe.parent() {
                Some(p) => probe = p,
                None => return Ok(false),
            },
            Err(e) => return Err(StorageError::io(probe, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_paths_are_checked() {
        assert_eq!(rel_from_wire(b"a/b").unwrap(), PathBuf::from("a/b"));
        assert_eq!(rel_from_wire(b"").unwrap(), PathBuf::new());
        assert_eq!(rel_from_wire(b"./a//b/").unwrap(), PathBuf::from("a/b"));
        assert!(rel_from_wire(b"/etc").is_err());
        assert!(rel_from_wire(b"a/../../x").is_err());
        assert!(rel_from_wire(b"a\0b").is_err());
        assert_eq!(rel_to_wire(Path::new("a/b/c")), b"a/b/c".to_vec());
    }

    #[test]
    fn symlinks_out_of_root_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
        std::os::unix::fs::symlink("d", root.join("in")).unwrap();
        let root = canonical_root(&root).unwrap();
        assert!(confine(&root, b"d/new", true).is_ok());
        assert!(confine(&root, b"in/x", true).is_ok());
        assert!(confine(&root, b"out/passwd", false).is_err());
        assert!(confine(&root, b"out", true).is_err());
        // Without following, the link itself may be sent as a link.
        assert!(confine(&root, b"out", false).is_ok());
    }
}
