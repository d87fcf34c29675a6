//! File metadata that `std` does not set: nanosecond mtimes (also on symlinks) and the
//! extended attribute where the receiver stores a finished file's digest.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::StorageError;

/// Name of the extended attribute holding a completed file's whole-file BLAKE3 digest.
pub const DIGEST_XATTR: &str = "user.hetch.blake3";
/// Name of the extended attribute marking a directory that a transfer created *as* the
/// copy of a source operand; its value is that operand's name.
pub const TOP_XATTR: &str = "user.hetch.top";

/// Sets extended attribute `name` on an open file or directory (best effort: file
/// systems without user attributes simply do not keep it).
pub fn set_xattr_fd(file: &File, name: &str, value: &[u8]) {
    let Ok(n) = CString::new(name) else {
        return;
    };
    // SAFETY: valid fd for the life of `file`; NUL-terminated name; `value` is valid
    // for its length.
    unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        );
    }
}

/// Reads extended attribute `name` of a path (at most 4 KiB), if present.
pub fn get_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let c = cstr(path).ok()?;
    let n = CString::new(name).ok()?;
    let mut buf = vec![0u8; 4096];
    // SAFETY: NUL-terminated strings and a buffer of the given length.
    let got =
        unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if got < 0 {
        return None;
    }
    buf.truncate(got as usize);
    Some(buf)
}

fn timespecs(sec: i64, nsec: u32) -> [libc::timespec; 2] {
    let t = libc::timespec {
        // Whatever width the libc gives tv_sec (`libc::time_t` is deprecated on musl,
        // which the release binaries use, as its width is to change).
        tv_sec: sec as _,
        tv_nsec: nsec as libc::c_long,
    };
    [t, t]
}

/// Sets access and modification time of an open file.
pub fn set_file_mtime(file: &File, path: &Path, sec: i64, nsec: u32) -> Result<(), StorageError> {
    let ts = timespecs(sec, nsec);
    // SAFETY: fd is valid for the life of `file`; `ts` points to two timespecs.
    let rc = unsafe { libc::futimens(file.as_raw_fd(), ts.as_ptr()) };
    check(rc, path)
}

/// Stores `digest` in [`DIGEST_XATTR`] on an open file. File systems without user
/// extended attributes are not an error: the digest is an optimisation for later checks.
pub fn store_digest(file: &File, digest: &[u8; 32]) {
    set_xattr_fd(file, DIGEST_XATTR, digest);
}

/// Reads [`DIGEST_XATTR`] from a path, if present.
pub fn load_digest(path: &Path) -> Option<[u8; 32]> {
    get_xattr(path, DIGEST_XATTR)?.try_into().ok()
}

fn cstr(path: &Path) -> Result<CString, StorageError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| StorageError::Refused {
        path: path.display().to_string(),
        reason: "path contains a NUL byte",
    })
}

fn check(rc: libc::c_int, path: &Path) -> Result<(), StorageError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(StorageError::io(path, std::io::Error::last_os_error()))
    }
}

/// Asks the kernel to start reading `len` bytes at `offset` into the page cache now
/// (`POSIX_FADV_WILLNEED`), so that disk reads overlap with hashing and sending.
/// Advice only: errors are ignored.
pub fn advise_willneed(file: &File, offset: u64, len: u64) {
    // SAFETY: valid fd for the life of `file`; the call only reads its arguments.
    unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_WILLNEED,
        );
    }
}

/// Writes out the dirty pages of a range, waits for them, and drops the range from the
/// page cache, so that the next read of it comes from the device. Advice only: errors
/// are ignored (the read then comes from the cache, which is still a correct read).
pub fn drop_cached_range(file: &File, offset: u64, len: u64) {
    let fd = file.as_raw_fd();
    // SAFETY: valid fd for the life of `file`; the calls only read their arguments.
    unsafe {
        libc::sync_file_range(
            fd,
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        );
        libc::posix_fadvise(
            fd,
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        );
    }
}

/// Starts writeback of a range without waiting for it. Advice only: errors are ignored.
pub fn start_writeback(file: &File, offset: u64, len: u64) {
    // SAFETY: valid fd for the life of `file`; the call only reads its arguments.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}
