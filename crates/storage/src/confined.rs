//! Receiving through directory handles: every name a peer sends is resolved below one
//! open directory, by the kernel, in the very lookup that is used.
//!
//! Checking a path and then using it (`canonicalize`, then `open`) leaves a window in
//! which the tree can change: a symlink announced after a file below it (`d/a/x`, then
//! `d/a -> /etc`), or a directory that a local user swaps for a symlink while a
//! transfer runs, would redirect the write. Here a [`Dir`] is an open directory and
//! every path below it is resolved with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`:
//! no component may be a symlink and nothing may lead above the directory. Entries are
//! then created, opened, renamed and removed relative to the descriptor of their
//! parent (`mkdirat`, `openat(O_NOFOLLOW)`, `renameat`, `unlinkat`), never by a path
//! from `/`, so a change of the tree after the lookup cannot redirect them either.
//!
//! Kernels without `openat2` (before 5.6) get the same rule from a walk, component by
//! component, each opened with `O_NOFOLLOW | O_DIRECTORY`.
//!
//! [`Links::Beneath`] is for the one place where symlinks are allowed: between a
//! server's root and the destination a client names, the operator's own tree may route
//! through links that stay inside the root (`RESOLVE_BENEATH` alone; without `openat2`,
//! the opened directory's real location is checked through `/proc/self/fd`).

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::error::StorageError;

/// How symlinks on a path below a [`Dir`] are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// No component may be a symlink: every path a peer names.
    Refuse,
    /// Symlinks are followed as long as they stay below the directory: an operator's
    /// tree between a server's root and a destination.
    Beneath,
}

/// Set once `openat2` turned out to be missing (or by tests, to exercise the walk).
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Whether this process can name a file through `/proc/self/fd` (see
/// [`Dir::link_anonymous`]); looked at once.
fn proc_fd_links() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| Path::new("/proc/self/fd").is_dir())
}

/// Test hook: resolve as on kernels without `openat2` (a component-by-component walk).
#[doc(hidden)]
pub fn force_component_walk(on: bool) {
    NO_OPENAT2.store(on, Relaxed);
}

/// An open directory below which names are resolved. Cloning shares the descriptor.
#[derive(Debug, Clone)]
pub struct Dir {
    fd: Arc<OwnedFd>,
    /// Where it was when opened, for messages only: never used to reach it again.
    shown: PathBuf,
}

/// What [`Dir::stat_name`] tells of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameStat {
    /// Type and permission bits (`st_mode`).
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Modification time: seconds and nanoseconds.
    pub mtime: (i64, u32),
    /// Device number (devices).
    pub rdev: u64,
    /// Inode number.
    pub ino: u64,
}

impl NameStat {
    /// The file type bits of `mode`, as `libc::S_IF*`.
    pub fn file_type(&self) -> u32 {
        self.mode & libc::S_IFMT
    }
}

/// Flags for opening a file below a [`Dir`] (`O_NOFOLLOW` and `O_CLOEXEC` are always
/// added).
#[derive(Debug, Clone, Copy)]
pub struct OpenHow {
    /// `O_RDONLY`, `O_WRONLY` or `O_RDWR`, plus `O_CREAT`, `O_TRUNC`, `O_APPEND`...
    pub flags: OFlags,
    /// Permission bits of a file this creates.
    pub mode: u32,
}

impl OpenHow {
    /// Read only.
    pub const READ: OpenHow = OpenHow {
        flags: OFlags::RDONLY,
        mode: 0,
    };
}

impl Dir {
    /// Opens a directory named by the operator (a server's root, a local destination):
    /// symlinks on this path are the operator's and are followed.
    pub fn open(path: &Path) -> Result<Dir, StorageError> {
        let fd = rfs::open(path, dir_flags(), Mode::empty())
            .map_err(|e| StorageError::io(path, e.into()))?;
        Ok(Dir {
            fd: Arc::new(fd),
            shown: path.to_path_buf(),
        })
    }

    /// Where this directory was when it was opened (for messages).
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// The directory `rel` below this one, resolved as `links` says.
    pub fn subdir(&self, rel: &Path, links: Links) -> Result<Dir, StorageError> {
        let fd = self
            .resolve(rel, dir_flags(), 0, links)
            .map_err(|e| self.error(rel, e))?;
        Ok(Dir {
            fd: Arc::new(fd),
            shown: self.shown.join(rel),
        })
    }

    /// Creates directory `rel` and any missing parents below this directory (mode
    /// 0777 less the umask, as `mkdir -p`), resolving each step as `links` says.
    pub fn create_dir_all(&self, rel: &Path, links: Links) -> Result<(), StorageError> {
        let mut have = PathBuf::new();
        for name in normal_names(rel).map_err(|e| self.error(rel, e))? {
            let next = have.join(name);
            match self.subdir(&next, links) {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {
                    let parent = self.subdir(&have, links)?;
                    match parent.mkdir(name, 0o777) {
                        Err(StorageError::Io { source, .. })
                            if source.kind() == io::ErrorKind::AlreadyExists => {}
                        r => r?,
                    }
                }
                Err(e) => return Err(e),
            }
            have = next;
        }
        Ok(())
    }

    /// The parent directory of `rel` (resolved with no symlink) and `rel`'s last name.
    pub fn parent(&self, rel: &Path) -> Result<(Dir, OsString), StorageError> {
        let name = rel
            .file_name()
            .ok_or_else(|| StorageError::Refused {
                path: self.shown.join(rel).display().to_string(),
                reason: "not a name below the destination",
            })?
            .to_os_string();
        let up = rel.parent().unwrap_or(Path::new(""));
        if up.as_os_str().is_empty() {
            return Ok((self.clone(), name));
        }
        // Errors name `rel` itself: the entry that could not be placed.
        let fd = self
            .resolve(up, dir_flags(), 0, Links::Refuse)
            .map_err(|e| self.error(rel, e))?;
        let dir = Dir {
            fd: Arc::new(fd),
            shown: self.shown.join(up),
        };
        Ok((dir, name))
    }

    /// `lstat` of `rel` (no component followed); `None` when it (or a parent) does not
    /// exist.
    pub fn stat(&self, rel: &Path) -> Result<Option<Metadata>, StorageError> {
        let flags = OFlags::PATH | OFlags::NOFOLLOW;
        match self.resolve(rel, flags, 0, Links::Refuse) {
            Ok(fd) => File::from(fd)
                .metadata()
                .map(Some)
                .map_err(|e| StorageError::io(self.shown.join(rel), e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.error(rel, e)),
        }
    }

    /// `lstat` of `name` (one component) in this directory, in one call; `None` when
    /// there is nothing by that name.
    pub fn stat_name(&self, name: &OsStr) -> Result<Option<NameStat>, StorageError> {
        let name = self.one(name)?;
        match rfs::statat(self.fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
            // The field types differ between architectures.
            #[allow(clippy::unnecessary_cast)]
            Ok(st) => Ok(Some(NameStat {
                mode: st.st_mode as u32,
                size: st.st_size as u64,
                mtime: (st.st_mtime as i64, st.st_mtime_nsec as u32),
                rdev: st.st_rdev as u64,
                ino: st.st_ino as u64,
            })),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(self.error(name, e.into())),
        }
    }

    /// Opens file `rel` below this directory; the last component is never followed.
    pub fn open_file(&self, rel: &Path, how: OpenHow) -> Result<File, StorageError> {
        self.resolve(rel, how.flags | OFlags::NOFOLLOW, how.mode, Links::Refuse)
            .map(File::from)
            .map_err(|e| self.error(rel, e))
    }

    /// Opens directory `rel` for reading (for its metadata, attributes or `syncfs`).
    pub fn open_dir(&self, rel: &Path) -> Result<File, StorageError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        self.open_file(rel, OpenHow { flags, mode: 0 })
    }

    /// Creates directory `name` (one component) with `mode`.
    pub fn mkdir(&self, name: &OsStr, mode: u32) -> Result<(), StorageError> {
        let name = self.one(name)?;
        rfs::mkdirat(self.fd(), name, Mode::from_raw_mode(mode))
            .map_err(|e| self.error(name, e.into()))
    }

    /// Creates special file `name` (one component): `ifmt` is its type
    /// (`libc::S_IFIFO`, `S_IFSOCK`, `S_IFCHR`, `S_IFBLK`), made with mode 0600 (the
    /// caller sets the real one), `rdev` its device number.
    pub fn mknod(&self, name: &OsStr, ifmt: u32, rdev: u64) -> Result<(), StorageError> {
        let name = self.one(name)?;
        let kind = rfs::FileType::from_raw_mode(ifmt);
        rfs::mknodat(self.fd(), name, kind, Mode::from_raw_mode(0o600), rdev)
            .map_err(|e| self.error(name, e.into()))
    }

    /// Gives file `name` (one component) of this directory a further name, `new_name`
    /// in directory `to` (`linkat`, not following a symlink).
    pub fn hard_link(&self, name: &OsStr, to: &Dir, new_name: &OsStr) -> Result<(), StorageError> {
        let (name, new_name) = (self.one(name)?, to.one(new_name)?);
        rfs::linkat(self.fd(), name, to.fd(), new_name, AtFlags::empty())
            .map_err(|e| to.error(new_name, e.into()))
    }

    /// Creates symlink `name` (one component) pointing to `target`.
    pub fn symlink(&self, target: &OsStr, name: &OsStr) -> Result<(), StorageError> {
        let name = self.one(name)?;
        rfs::symlinkat(target, self.fd(), name).map_err(|e| self.error(name, e.into()))
    }

    /// The target of symlink `name` (one component).
    pub fn read_link(&self, name: &OsStr) -> Result<OsString, StorageError> {
        let name = self.one(name)?;
        rfs::readlinkat(self.fd(), name, Vec::new())
            .map(|c| OsString::from_vec(c.into_bytes()))
            .map_err(|e| self.error(name, e.into()))
    }

    /// Renames `from` to `to`, both names in this directory (replacing `to`).
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> Result<(), StorageError> {
        let (from, to) = (self.one(from)?, self.one(to)?);
        rfs::renameat(self.fd(), from, self.fd(), to).map_err(|e| self.error(to, e.into()))
    }

    /// Creates a file with no name in this directory (`O_TMPFILE`), to be named with
    /// [`Dir::link_anonymous`] once complete. `None` where the file system or the
    /// kernel cannot (or names cannot be given through `/proc/self/fd`).
    pub fn create_anonymous(&self, mode: u32) -> Result<Option<File>, StorageError> {
        if !proc_fd_links() {
            return Ok(None);
        }
        let flags = OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC;
        match rfs::openat(self.fd(), ".", flags, Mode::from_raw_mode(mode)) {
            Ok(fd) => Ok(Some(File::from(fd))),
            // No O_TMPFILE here: older kernels (EISDIR) and file systems (EOPNOTSUPP).
            Err(Errno::OPNOTSUPP) | Err(Errno::ISDIR) | Err(Errno::INVAL) => Ok(None),
            Err(e) => Err(StorageError::io(&self.shown, e.into())),
        }
    }

    /// Gives `file`, made by [`Dir::create_anonymous`] on this directory, the name
    /// `name` (one component). Fails with `AlreadyExists` when something has that name
    /// (a symlink there is not followed): the caller then renames over it.
    pub fn link_anonymous(&self, file: &File, name: &OsStr) -> Result<(), StorageError> {
        let name = self.one(name)?;
        // Through the magic link of our own descriptor: linking with AT_EMPTY_PATH would
        // need CAP_DAC_READ_SEARCH.
        let own = format!("/proc/self/fd/{}", file.as_raw_fd());
        rfs::linkat(
            rfs::CWD,
            own.as_str(),
            self.fd(),
            name,
            AtFlags::SYMLINK_FOLLOW,
        )
        .map_err(|e| self.error(name, e.into()))
    }

    /// Removes file or symlink `name` (one component); a missing one is not an error.
    pub fn remove_file(&self, name: &OsStr) -> Result<(), StorageError> {
        let name = self.one(name)?;
        match rfs::unlinkat(self.fd(), name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(self.error(name, e.into())),
        }
    }

    /// Removes the empty directory `name` (one component) with `unlinkat(AT_REMOVEDIR)`:
    /// a symlink in its place is not followed (the call fails on it), so nothing outside
    /// this directory can be removed. A missing one is not an error.
    pub fn remove_dir(&self, name: &OsStr) -> Result<(), StorageError> {
        let name = self.one(name)?;
        match rfs::unlinkat(self.fd(), name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(self.error(name, e.into())),
        }
    }

    /// The names in this directory (not `.` and `..`), sorted bytewise: read from the
    /// descriptor itself, so a directory swapped for a symlink since it was opened is
    /// not listed through. Memory is the names of this one directory.
    pub fn names(&self) -> Result<Vec<OsString>, StorageError> {
        let fail = |e: Errno| StorageError::io(&self.shown, e.into());
        // A fresh descriptor: reading a directory moves its offset, which clones share.
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let own = rfs::openat(self.fd(), ".", flags, Mode::empty()).map_err(fail)?;
        let mut names = Vec::new();
        for item in rfs::Dir::read_from(&own).map_err(fail)? {
            let n = item.map_err(fail)?.file_name().to_bytes().to_vec();
            if n != b"." && n != b".." {
                names.push(OsString::from_vec(n));
            }
        }
        names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        Ok(names)
    }

    /// Sets access and modification time of `name` (one component) without following
    /// it (symlinks keep their own times).
    pub fn set_times_nofollow(
        &self,
        name: &OsStr,
        sec: i64,
        nsec: u32,
    ) -> Result<(), StorageError> {
        let name = self.one(name)?;
        let t = rfs::Timespec {
            tv_sec: sec,
            tv_nsec: nsec.into(),
        };
        let times = rfs::Timestamps {
            last_access: t,
            last_modification: t,
        };
        rfs::utimensat(self.fd(), name, &times, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| self.error(name, e.into()))
    }

    /// Sets the permission bits of `name` (one component) without following it: the
    /// entry is opened as a path (`O_PATH | O_NOFOLLOW`) and changed through its own
    /// descriptor's magic link, which names that very inode. A symlink there is
    /// refused (symlinks have no mode of their own on Linux).
    pub fn set_mode_nofollow(&self, name: &OsStr, mode: u32) -> Result<(), StorageError> {
        let (fd, ifmt) = self.open_entry(name)?;
        let name = self.one(name)?;
        let fail = |e: Errno| self.error(name, e.into());
        if ifmt == libc::S_IFLNK {
            return Err(fail(Errno::LOOP));
        }
        let mode = Mode::from_raw_mode(mode);
        if proc_fd_links() {
            let own = format!("/proc/self/fd/{}", fd.as_raw_fd());
            return rfs::chmod(own.as_str(), mode).map_err(fail);
        }
        // No /proc: a descriptor that can be changed, where the entry can be opened.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = rfs::openat(self.fd(), name, flags, Mode::empty()).map_err(fail)?;
        rfs::fchmod(&fd, mode).map_err(fail)
    }

    /// Opens entry `name` of this directory as an `O_PATH` handle, without following
    /// it, and gives its type (the `S_IFMT` bits): what is changed through the handle
    /// is that entry itself, whatever happens to the name meanwhile. The handle needs
    /// no permission on the entry; [`crate::xattr::Handle::Path`] reaches it.
    pub fn open_entry(&self, name: &OsStr) -> Result<(OwnedFd, u32), StorageError> {
        let name = self.one(name)?;
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fail = |e: Errno| self.error(name, e.into());
        let fd = rfs::openat(self.fd(), name, flags, Mode::empty()).map_err(fail)?;
        let st = rfs::fstat(&fd).map_err(fail)?;
        Ok((fd, st.st_mode as u32 & libc::S_IFMT))
    }

    /// Flushes the file system holding this directory to stable storage (`syncfs`).
    pub fn sync_fs(&self) -> Result<(), StorageError> {
        let f = self.open_dir(Path::new(""))?;
        rustix::fs::syncfs(&f).map_err(|e| StorageError::io(&self.shown, e.into()))
    }

    /// The directory's device and inode: which directory this is, however it was
    /// reached.
    pub fn id(&self) -> Result<(u64, u64), StorageError> {
        let st = rfs::fstat(self.fd()).map_err(|e| StorageError::io(&self.shown, e.into()))?;
        Ok((st.st_dev, st.st_ino))
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// `name` as a path, if it is exactly one normal component.
    fn one<'a>(&self, name: &'a OsStr) -> Result<&'a Path, StorageError> {
        let p = Path::new(name);
        let mut c = p.components();
        match (c.next(), c.next()) {
            (Some(Component::Normal(_)), None) => Ok(p),
            _ => Err(StorageError::Refused {
                path: self.shown.join(p).display().to_string(),
                reason: "not a single name",
            }),
        }
    }

    /// A lookup error as a storage error; a symlink where none may be, or a path that
    /// would lead out, is a refusal rather than an I/O error.
    fn error(&self, rel: &Path, e: io::Error) -> StorageError {
        let path = self.shown.join(rel);
        match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::EXDEV) => StorageError::Refused {
                path: path.display().to_string(),
                reason: "refusing to follow a symlink (or leave the destination) on this path",
            },
            _ => StorageError::io(path, e),
        }
    }

    /// Opens `rel` below this directory with `flags` as `links` says.
    fn resolve(&self, rel: &Path, flags: OFlags, mode: u32, links: Links) -> io::Result<OwnedFd> {
        let names = normal_names(rel)?;
        let flags = flags | OFlags::CLOEXEC;
        // openat2 refuses a mode without O_CREAT (open ignores it).
        let mode = if flags.contains(OFlags::CREATE) {
            Mode::from_raw_mode(mode)
        } else {
            Mode::empty()
        };
        if !NO_OPENAT2.load(Relaxed) {
            let mut how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
            if links == Links::Refuse {
                how |= ResolveFlags::NO_SYMLINKS;
            }
            let path = if names.is_empty() {
                Path::new(".")
            } else {
                rel
            };
            // EAGAIN: a rename elsewhere raced a `..` in a followed link; try again.
            for _ in 0..16 {
                match rfs::openat2(self.fd(), path, flags, mode, how) {
                    Err(Errno::AGAIN) => continue,
                    Err(Errno::NOSYS) => {
                        NO_OPENAT2.store(true, Relaxed);
                        break;
                    }
                    r => return r.map_err(Into::into),
                }
            }
            if !NO_OPENAT2.load(Relaxed) {
                return Err(Errno::AGAIN.into());
            }
        }
        match links {
            Links::Refuse => self.walk(&names, flags, mode),
            Links::Beneath => self.open_checked(rel, flags, mode),
        }
    }

    /// Without `openat2`: opens each directory on the way with `O_NOFOLLOW`, so that a
    /// symlink anywhere fails (`ELOOP`, as `RESOLVE_NO_SYMLINKS` does).
    fn walk(&self, names: &[&OsStr], flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        let Some((last, dirs)) = names.split_last() else {
            return Ok(rfs::openat(self.fd(), ".", flags, mode)?);
        };
        let mut cur: Option<OwnedFd> = None;
        for name in dirs {
            let at = cur.as_ref().map_or(self.fd(), |f| f.as_fd());
            let step = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let next = rfs::openat(at, *name, step, Mode::empty())
                .map_err(|e| symlink_as_eloop(at, name, e))?;
            cur = Some(next);
        }
        let at = cur.as_ref().map_or(self.fd(), |f| f.as_fd());
        // Only the last component may be a symlink, and only opened as one (O_PATH
        // with O_NOFOLLOW), as with openat2.
        let nofollow = flags | OFlags::NOFOLLOW;
        rfs::openat(at, *last, nofollow, mode).map_err(|e| {
            if flags.contains(OFlags::NOFOLLOW) {
                e.into()
            } else {
                symlink_as_eloop(at, last, e)
            }
        })
    }

    /// Without `openat2`, for [`Links::Beneath`]: opens following symlinks, then checks
    /// where the descriptor really is (its `/proc/self/fd` link) against this
    /// directory's real location. What is checked is the opened object itself, so a
    /// later change of the tree does not matter.
    fn open_checked(&self, rel: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        let fd = rfs::openat(self.fd(), rel_or_dot(rel), flags, mode)?;
        if real_location(fd.as_fd())?.starts_with(real_location(self.fd())?) {
            Ok(fd)
        } else {
            Err(Errno::XDEV.into())
        }
    }
}

/// Checks that an open file really lies below directory `root` (canonical): where the
/// descriptor is, not where its path led when it was opened, so a directory swapped
/// for a symlink on the way is caught. Needs `/proc`; without it the check fails.
pub fn check_below(file: &File, root: &Path) -> io::Result<()> {
    check_below_any(file, std::slice::from_ref(&root))
}

/// [`check_below`] for a file that may lie below any of `roots`.
pub fn check_below_any(file: &File, roots: &[impl AsRef<Path>]) -> io::Result<()> {
    let real = real_location(file.as_fd())?;
    if roots.iter().any(|r| real.starts_with(r)) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "refusing to read a file that lies outside the served root (a symlink on its path)",
        ))
    }
}

/// Flags of a directory handle: `O_PATH` needs no permission on the directory itself
/// and cannot be read from or written to; `*at` calls take it as their base.
fn dir_flags() -> OFlags {
    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC
}

fn rel_or_dot(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}

/// The names of a relative path; anything but plain names (`..`, `/`) is refused.
fn normal_names(rel: &Path) -> io::Result<Vec<&OsStr>> {
    rel.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(Errno::XDEV.into()),
        })
        .collect()
}

/// Turns `ENOTDIR` for a name that is a symlink into `ELOOP`, so that the walk reports
/// a symlink on the path the way `openat2` does.
fn symlink_as_eloop(at: BorrowedFd<'_>, name: &OsStr, e: Errno) -> io::Error {
    if e == Errno::NOTDIR || e == Errno::LOOP {
        if let Ok(st) = rfs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW) {
            if rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Symlink {
                return Errno::LOOP.into();
            }
        }
    }
    e.into()
}

/// Where an open descriptor really is, from `/proc/self/fd`.
fn real_location(fd: BorrowedFd<'_>) -> io::Result<PathBuf> {
    use std::os::fd::AsRawFd;
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let target = std::fs::read_link(&link)?;
    if target.as_os_str().as_bytes().ends_with(b" (deleted)") {
        return Err(Errno::NOENT.into());
    }
    Ok(target)
}

#[cfg(test)]
mod tests;
