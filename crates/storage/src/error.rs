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
    /// The destination has something of the wrong type where an entry must go.
    #[error("{}: {reason}", path.display())]
    WrongType {
        /// The path.
        path: PathBuf,
        /// E.g. "is a file where a directory is needed".
        reason: &'static str,
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

    /// True when the error is "not found" (of the path or one of its parents).
    pub fn is_not_found(&self) -> bool {
        matches!(self, StorageError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// True when the error is "no space left on device" (or over quota): fatal for a
    /// whole transfer rather than for one file.
    pub fn is_no_space(&self) -> bool {
        matches!(self, StorageError::Io { source, .. }
            if matches!(source.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)))
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
