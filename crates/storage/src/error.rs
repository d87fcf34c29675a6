//! The storage error type: every variant names the path concerned.

use std::io;
use std::path::PathBuf;

/// An error from the file system, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An I/O error on a path.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A path that is not allowed (escapes the root, malformed).
    #[error("{path}: {reason}")]
    Refused {
        /// The path as given.
        path: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The entry is another writer's for now (a file whose range writer still has it
    /// open): the same request later may go through.
    #[error("{path}: {reason}")]
    Busy {
        /// The path as given.
        path: String,
        /// Whose it is.
        reason: &'static str,
    },
    /// The destination has something of the wrong type where an entry must go.
    #[error("{}: {reason}", path.display())]
    WrongType {
        /// The path.
        path: PathBuf,
        /// E.g. "is a file where a directory is needed".
        reason: std::borrow::Cow<'static, str>,
    },
    /// An error from a storage service (an object store), as its one line.
    #[error("{message}")]
    Service {
        /// What went wrong, naming the object or prefix.
        message: String,
        /// It concerns the whole store (credentials, a missing bucket), not one entry.
        whole_store: bool,
    },
}

impl StorageError {
    /// Wraps an `io::Error` with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        StorageError::Io {
            path: path.into(),
            source,
        }
    }

    /// `path` holds an entry of type `found` where a `needed` ("directory", "file",
    /// "symlink") must go: "is a symlink where a directory is needed". The type is
    /// named as it is, so a planted symlink is never reported as a file.
    pub fn found_where_needed(
        path: impl Into<PathBuf>,
        found: std::fs::FileType,
        needed: &str,
    ) -> Self {
        StorageError::WrongType {
            path: path.into(),
            reason: format!("is {} where a {needed} is needed", kind_name(found)).into(),
        }
    }

    /// True when the error is "not found" (of the path or one of its parents).
    pub fn is_not_found(&self) -> bool {
        matches!(self, StorageError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// True when the error is "no space left on device" (or over quota).
    pub fn is_no_space(&self) -> bool {
        matches!(self.errno(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
    }

    /// The OS error number, for an I/O error.
    pub fn errno(&self) -> Option<i32> {
        match self {
            StorageError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// True when the error is a property of the whole file system rather than of one
    /// file: it is read-only (`EROFS`), full (`ENOSPC`) or the user is over quota
    /// (`EDQUOT`). No other file written there can succeed either (a smaller file might
    /// still fit a nearly full disk, but filling it to the last byte helps no one), so
    /// a receiver stops the session instead of failing every file in turn.
    pub fn is_file_system_wide(&self) -> bool {
        if let StorageError::Service { whole_store, .. } = self {
            return *whole_store;
        }
        matches!(
            self.errno(),
            Some(libc::EROFS) | Some(libc::ENOSPC) | Some(libc::EDQUOT)
        )
    }

    /// True for "permission denied" and "operation not permitted" (`EACCES`, `EPERM`):
    /// a property of one directory or file, which a receiver treats as fatal only in
    /// the destination directory itself (where every entry is created).
    pub fn is_permission(&self) -> bool {
        matches!(self.errno(), Some(libc::EACCES) | Some(libc::EPERM))
    }

    /// The cause in a few lower-case words, without the OS's "(os error N)": for
    /// one-line messages. `None` for errors that carry their own reason.
    pub fn short_cause(&self) -> Option<String> {
        let StorageError::Io { source, .. } = self else {
            return None;
        };
        Some(match source.raw_os_error() {
            Some(libc::EROFS) => "read-only file system".into(),
            Some(libc::ENOSPC) => "no space left on device".into(),
            Some(libc::EDQUOT) => "disk quota exceeded".into(),
            Some(libc::EACCES) => "permission denied".into(),
            Some(libc::EPERM) => "operation not permitted".into(),
            _ => source.to_string(),
        })
    }
}

/// Adds a path to `io::Result`s.
pub(crate) trait IoContext<T> {
    /// Attaches `path` to the error.
    fn at(self, path: &std::path::Path) -> Result<T, StorageError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T, StorageError> {
        self.map_err(|e| StorageError::io(path, e))
    }
}

/// The kind of a directory entry with an article, for messages: "a directory", "a
/// symlink", "a file" or "a special file" (a FIFO, socket or device).
pub fn kind_name(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symlink"
    } else if ft.is_file() {
        "a file"
    } else {
        "a special file"
    }
}
