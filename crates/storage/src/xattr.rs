//! Extended attributes of an open file or directory, read and written through its
//! descriptor: never by a path that could be swapped on the way.
//!
//! A descriptor opened with `O_PATH` (as a receiver reaches entries it may not read)
//! cannot take the `f*xattr` calls; it is reached through its `/proc/self/fd` link
//! instead, which names the object itself. Lengths are bounded by the caller's limit
//! before anything is allocated for a value.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Largest list of names the kernel gives (Linux's `XATTR_LIST_MAX`).
const MAX_LIST: usize = 64 << 10;

/// How the calls reach the object behind a descriptor.
#[derive(Clone, Copy)]
pub enum Handle<'a> {
    /// A descriptor opened for reading or writing: `flistxattr` and friends.
    Open(BorrowedFd<'a>),
    /// An `O_PATH` descriptor: the path calls on its `/proc/self/fd` link.
    Path(BorrowedFd<'a>),
}

impl Handle<'_> {
    fn proc_path(fd: BorrowedFd<'_>) -> CString {
        CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL")
    }
}

/// Converts a `-1` return into the error behind it.
fn checked(rc: isize) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// Whether an error only says that this file system (or this kind of file) keeps no
/// extended attributes: such an entry has none.
pub fn unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOTSUP) | Some(libc::ENOSYS))
}

/// The names of the attributes of `h`, of whatever namespace this process may see.
/// A file system without extended attributes has none.
pub fn names(h: Handle<'_>) -> io::Result<Vec<Vec<u8>>> {
    let mut buf = vec![0u8; MAX_LIST];
    // SAFETY: the buffer is valid for its length; the fd lives for the call; the path
    // is NUL-terminated.
    let rc = unsafe {
        match h {
            Handle::Open(fd) => {
                libc::flistxattr(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len())
            }
            Handle::Path(fd) => {
                let p = Handle::proc_path(fd);
                libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
            }
        }
    };
    let len = match checked(rc) {
        Ok(n) => n,
        Err(e) if unsupported(&e) => 0,
        Err(e) => return Err(e),
    };
    buf.truncate(len);
    Ok(buf
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// The value of attribute `name` of `h`, at most `max` bytes (longer is an error:
/// `E2BIG`); `None` when it is not there (any more).
pub fn get(h: Handle<'_>, name: &[u8], max: usize) -> io::Result<Option<Vec<u8>>> {
    let n = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut buf = vec![0u8; max];
    // SAFETY: as in `names`.
    let rc = unsafe {
        match h {
            Handle::Open(fd) => libc::fgetxattr(
                fd.as_raw_fd(),
                n.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            ),
            Handle::Path(fd) => {
                let p = Handle::proc_path(fd);
                libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
            }
        }
    };
    match checked(rc) {
        Ok(len) => {
            buf.truncate(len);
            Ok(Some(buf))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ERANGE) => {
            Err(io::Error::from_raw_os_error(libc::E2BIG))
        }
        Err(e) => Err(e),
    }
}

/// Sets attribute `name` of `h` to `value`.
pub fn set(h: Handle<'_>, name: &[u8], value: &[u8]) -> io::Result<()> {
    let n = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: as in `names`; `value` is valid for its length.
    let rc = unsafe {
        match h {
            Handle::Open(fd) => libc::fsetxattr(
                fd.as_raw_fd(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            ),
            Handle::Path(fd) => {
                let p = Handle::proc_path(fd);
                libc::setxattr(
                    p.as_ptr(),
                    n.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    0,
                )
            }
        }
    };
    checked(rc as isize).map(drop)
}

/// Removes attribute `name` of `h`; one that is already gone is not an error.
pub fn remove(h: Handle<'_>, name: &[u8]) -> io::Result<()> {
    let n = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: as in `names`.
    let rc = unsafe {
        match h {
            Handle::Open(fd) => libc::fremovexattr(fd.as_raw_fd(), n.as_ptr()),
            Handle::Path(fd) => {
                let p = Handle::proc_path(fd);
                libc::removexattr(p.as_ptr(), n.as_ptr())
            }
        }
    };
    match checked(rc as isize) {
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(()),
        r => r.map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn attributes_round_trip_through_open_and_path_handles() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        let f = std::fs::File::create(&p).unwrap();
        let open = Handle::Open(f.as_fd());
        if let Err(e) = set(open, b"user.a", b"one") {
            assert!(unsupported(&e), "{e}");
            return; // no user attributes on this file system
        }
        let path = rustix::fs::open(
            &p,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::NOFOLLOW,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let by_path = Handle::Path(path.as_fd());
        set(by_path, b"user.b", b"").unwrap();
        let mut got = names(by_path).unwrap();
        got.sort();
        assert_eq!(got, vec![b"user.a".to_vec(), b"user.b".to_vec()]);
        assert_eq!(get(open, b"user.a", 16).unwrap(), Some(b"one".to_vec()));
        assert_eq!(get(by_path, b"user.b", 16).unwrap(), Some(Vec::new()));
        assert_eq!(
            get(open, b"user.a", 2).unwrap_err().raw_os_error(),
            Some(libc::E2BIG),
            "a value longer than the limit is refused, not cut"
        );
        remove(by_path, b"user.a").unwrap();
        remove(open, b"user.a").unwrap();
        assert_eq!(get(open, b"user.a", 16).unwrap(), None);
    }
}
