//! Listing source operands lazily, in a stable order, without following symlinks.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{IoContext, StorageError};

/// What a source entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    /// A regular file of this size.
    File {
        /// Size in bytes when listed.
        size: u64,
    },
    /// A directory.
    Dir,
    /// A symbolic link with this target.
    Symlink {
        /// The target bytes, as stored.
        target: Vec<u8>,
    },
    /// A FIFO, socket or device: listed so that it can be skipped with a notice.
    Special(Special),
}

/// A special file's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// A named pipe.
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device with this device number.
    CharDevice(u64),
    /// A block device with this device number.
    BlockDevice(u64),
}

impl Special {
    /// The special file of `st_mode` type bits `ifmt` and device number `rdev`, if
    /// `ifmt` is one.
    pub fn of_mode(ifmt: u32, rdev: u64) -> Option<Special> {
        match ifmt {
            libc::S_IFIFO => Some(Special::Fifo),
            libc::S_IFSOCK => Some(Special::Socket),
            libc::S_IFCHR => Some(Special::CharDevice(rdev)),
            libc::S_IFBLK => Some(Special::BlockDevice(rdev)),
            _ => None,
        }
    }

    /// Its `st_mode` type bits and device number, as `mknod` takes them.
    pub fn mode_and_rdev(self) -> (u32, u64) {
        match self {
            Special::Fifo => (libc::S_IFIFO, 0),
            Special::Socket => (libc::S_IFSOCK, 0),
            Special::CharDevice(rdev) => (libc::S_IFCHR, rdev),
            Special::BlockDevice(rdev) => (libc::S_IFBLK, rdev),
        }
    }

    /// A device (not a FIFO or socket).
    pub fn is_device(self) -> bool {
        matches!(self, Special::CharDevice(_) | Special::BlockDevice(_))
    }

    /// What it is, with an article ("a fifo").
    pub fn name(self) -> &'static str {
        match self {
            Special::Fifo => "a fifo",
            Special::Socket => "a socket",
            Special::CharDevice(_) => "a character device",
            Special::BlockDevice(_) => "a block device",
        }
    }
}

/// One item found under a source operand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceEntry {
    /// Wire path: the operand's own name, then the path inside it, `/`-separated.
    pub rel: Vec<u8>,
    /// Where to read it.
    pub abs: PathBuf,
    /// What it is.
    pub kind: SourceKind,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, seconds.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
    /// Status-change time, seconds: also changes when an entry is renamed into place,
    /// which is how a followed tree finds new entries.
    pub ctime_sec: i64,
    /// Status-change time, nanoseconds part.
    pub ctime_nsec: u32,
    /// Device and inode: a followed file replaced under its name gets another.
    pub id: (u64, u64),
    /// Names the inode has (hard links kept with `--hard-links`).
    pub nlink: u64,
    /// A regular file with fewer bytes allocated than its size: it may have holes,
    /// which the reader then looks for (see [`crate::holes`]).
    pub sparse: bool,
}

impl SourceEntry {
    /// An entry of a source that is not a local file system (an object store, memory):
    /// no inode, and no status-change time apart from its mtime.
    pub fn unlinked(
        rel: Vec<u8>,
        shown: PathBuf,
        kind: SourceKind,
        mode: u32,
        mtime: (i64, u32),
    ) -> Self {
        SourceEntry {
            rel,
            abs: shown,
            kind,
            mode,
            mtime_sec: mtime.0,
            mtime_nsec: mtime.1,
            ctime_sec: mtime.0,
            ctime_nsec: mtime.1,
            id: (0, 0),
            nlink: 1,
            sparse: false,
        }
    }
}

/// What a listing saw of a regular file, to tell whether the file read later is still
/// that file, unchanged: another inode (replaced under its name), another size, mtime
/// or ctime (written, truncated, renamed over: unlinking changes the old inode's ctime)
/// all differ. A write within the file system's timestamp granularity of the listing
/// keeps both times and is not seen; nothing short of a snapshot sees that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// Device and inode.
    pub id: (u64, u64),
    /// Size in bytes.
    pub size: u64,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, u32),
    /// Status-change time (seconds, nanoseconds).
    pub ctime: (i64, u32),
}

impl Identity {
    /// The identity of a listed regular file; `None` for other kinds.
    pub fn of_entry(se: &SourceEntry) -> Option<Self> {
        match se.kind {
            SourceKind::File { size } => Some(Identity {
                id: se.id,
                size,
                mtime: (se.mtime_sec, se.mtime_nsec),
                ctime: (se.ctime_sec, se.ctime_nsec),
            }),
            _ => None,
        }
    }

    /// The identity of a file as `fstat`/`stat` describe it now.
    pub fn of_metadata(md: &std::fs::Metadata) -> Self {
        Identity {
            id: (md.dev(), md.ino()),
            size: md.len(),
            mtime: (md.mtime(), md.mtime_nsec() as u32),
            ctime: (md.ctime(), md.ctime_nsec() as u32),
        }
    }
}

/// The name a source operand gets at the destination (`cp -r` uses its last component;
/// `.` and `..` are resolved first).
pub fn operand_name(operand: &Path) -> Result<OsString, StorageError> {
    if let Some(name) = operand.file_name() {
        return Ok(name.to_os_string());
    }
    let canon = operand.canonicalize().at(operand)?;
    canon
        .file_name()
        .map(|n| n.to_os_string())
        .ok_or_else(|| StorageError::Refused {
            path: operand.display().to_string(),
            reason: "cannot copy the file system root as a whole; name a directory under it",
        })
}

/// Opens a file that a listing found as a regular file, for reading. A symlink put in
/// its place since (by a local user racing a server that serves a pull) is not
/// followed: links are sent as links, never read through.
pub fn open_listed(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Lists `operand` and, if it is a directory, everything under it (directories before
/// their contents, names sorted). Errors on single entries are yielded in place so the
/// caller can report them and go on.
pub fn walk(
    operand: &Path,
) -> Result<impl Iterator<Item = Result<SourceEntry, StorageError>>, StorageError> {
    listing(operand, None)
}

/// Lists `operand` as [`walk`] does, reaching it from directory `within` (a path the
/// operator named, followed as it is) with no symlink on the way out of `within`:
/// where a local user swaps a directory between `within` and the operand for a link
/// to someone else's tree, the walk fails instead of listing what the link points to.
/// An operand that is not below `within` is refused.
pub fn walk_within(
    within: &Path,
    operand: &Path,
) -> Result<impl Iterator<Item = Result<SourceEntry, StorageError>>, StorageError> {
    listing(operand, Anchor::of(within, operand)?)
}

fn listing(
    operand: &Path,
    anchor: Option<Anchor>,
) -> Result<crate::listing::Listing, StorageError> {
    let top = operand_name(operand)?.as_bytes().to_vec();
    // Fail early, with the operand's name, when it does not exist at all.
    match &anchor {
        Some(a) => {
            if a.parent.stat(Path::new(&a.name))?.is_none() {
                let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
                return Err(StorageError::io(operand, missing));
            }
        }
        None => {
            std::fs::symlink_metadata(operand).at(operand)?;
        }
    }
    Ok(crate::listing::Listing::new(
        operand.to_path_buf(),
        top,
        anchor,
    ))
}

/// Describes `path` as [`entry`] does, reached from `within` as [`walk_within`] says.
pub fn entry_within(within: &Path, path: &Path, rel: Vec<u8>) -> Result<SourceEntry, StorageError> {
    match Anchor::of(within, path)? {
        Some(anchor) => anchor.describe(path, rel),
        None => entry(path, rel),
    }
}

/// An operand reached from a confining directory: the handle of its parent, opened
/// below that directory with no symlink leading out of it, and its own name.
pub(crate) struct Anchor {
    pub(crate) parent: crate::confined::Dir,
    pub(crate) name: OsString,
}

impl Anchor {
    /// Where `operand` is reached from `within`; `None` when it is `within` itself.
    fn of(within: &Path, operand: &Path) -> Result<Option<Anchor>, StorageError> {
        let refused = |reason| StorageError::Refused {
            path: operand.display().to_string(),
            reason,
        };
        let inside = operand
            .strip_prefix(within)
            .map_err(|_| refused("lies outside the directory reads are confined to"))?;
        if inside
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(refused(
                "not a plain path below the directory reads are confined to",
            ));
        }
        let (Some(name), Some(up)) = (inside.file_name(), inside.parent()) else {
            return Ok(None);
        };
        let parent =
            crate::confined::Dir::open(within)?.subdir(up, crate::confined::Links::Beneath)?;
        Ok(Some(Anchor {
            parent,
            name: name.to_os_string(),
        }))
    }

    /// The operand as an entry (`abs` and `rel` as given), not followed if a link.
    pub(crate) fn describe(&self, abs: &Path, rel: Vec<u8>) -> Result<SourceEntry, StorageError> {
        crate::listing::describe(self.parent.fd(), &self.name, abs.to_path_buf(), rel)
    }
}

/// Describes one path (lstat, no following).
pub fn entry(path: &Path, rel: Vec<u8>) -> Result<SourceEntry, StorageError> {
    let md = std::fs::symlink_metadata(path).at(path)?;
    let target = match md.file_type().is_symlink() {
        true => Some(std::fs::read_link(path).at(path)?.into_os_string()),
        false => None,
    };
    describe(path, rel, &md, target)
}

/// A local operand whose entries are described one by one, each looked up below it
/// with no symlink followed on the way: how a listing made elsewhere (a service's
/// planner) is read back on another node. The operand's directory is opened once, for
/// all its entries.
pub struct EntriesBelow {
    operand: PathBuf,
    top: OsString,
    /// How the operand is reached from a confining directory ([`EntriesBelow::within`]).
    anchor: Option<Anchor>,
    /// Opened on the first entry inside the operand (a file operand has none).
    dir: Option<crate::confined::Dir>,
}

impl EntriesBelow {
    /// The entries of `operand`.
    pub fn new(operand: &Path) -> Result<Self, StorageError> {
        Ok(EntriesBelow {
            operand: operand.to_path_buf(),
            top: operand_name(operand)?,
            anchor: None,
            dir: None,
        })
    }

    /// The entries of `operand`, reached from `within` as [`walk_within`] says.
    pub fn within(within: &Path, operand: &Path) -> Result<Self, StorageError> {
        Ok(EntriesBelow {
            anchor: Anchor::of(within, operand)?,
            ..EntriesBelow::new(operand)?
        })
    }

    /// Describes entry `rel` (a wire path: the operand's own name, then the path
    /// inside it). A path that is not below the operand is refused.
    pub fn entry(&mut self, rel: &[u8]) -> Result<SourceEntry, StorageError> {
        let Some((dir, inside)) = self.below(rel)? else {
            return match &self.anchor {
                Some(anchor) => anchor.describe(&self.operand, rel.to_vec()),
                None => entry(&self.operand, rel.to_vec()),
            };
        };
        let abs = self.operand.join(inside);
        let md = dir.stat(inside)?.ok_or_else(|| StorageError::Io {
            path: abs.clone(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })?;
        let target = match md.file_type().is_symlink() {
            true => {
                let (parent, name) = dir.parent(inside)?;
                Some(parent.read_link(&name)?)
            }
            false => None,
        };
        describe(&abs, rel.to_vec(), &md, target)
    }

    /// Opens entry `rel` (as [`EntriesBelow::entry`] finds it) for reading; a symlink
    /// is not followed, not even as the last name.
    pub fn open(&mut self, rel: &[u8]) -> Result<std::fs::File, StorageError> {
        use std::os::unix::fs::OpenOptionsExt;
        let read = crate::confined::OpenHow::READ;
        match (self.below(rel)?, &self.anchor) {
            (Some((dir, inside)), _) => dir.open_file(inside, read),
            (None, Some(anchor)) => anchor.parent.open_file(Path::new(&anchor.name), read),
            (None, None) => std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&self.operand)
                .at(&self.operand),
        }
    }

    /// The operand's directory and the path inside it of entry `rel`; `None` for the
    /// operand itself. Refuses what is not below the operand.
    fn below<'a>(
        &mut self,
        rel: &'a [u8],
    ) -> Result<Option<(crate::confined::Dir, &'a Path)>, StorageError> {
        let refused = |reason| StorageError::Refused {
            path: String::from_utf8_lossy(rel).into_owned(),
            reason,
        };
        let inside = match rel.strip_prefix(self.top.as_bytes()) {
            Some([]) => return Ok(None),
            Some([b'/', inside @ ..]) => inside,
            _ => return Err(refused("not an entry of this operand")),
        };
        let names_ok = inside
            .split(|&b| b == b'/')
            .all(|n| !n.is_empty() && n != b"." && n != b".." && !n.contains(&0));
        if !names_ok {
            return Err(refused("not a path below the operand"));
        }
        let dir = match (&mut self.dir, &self.anchor) {
            (Some(d), _) => d,
            (empty, Some(anchor)) => {
                let links = crate::confined::Links::Refuse;
                empty.insert(anchor.parent.subdir(Path::new(&anchor.name), links)?)
            }
            (empty, None) => empty.insert(crate::confined::Dir::open(&self.operand)?),
        };
        // A handle shared with the one kept (reference-counted).
        Ok(Some((
            dir.clone(),
            Path::new(std::ffi::OsStr::from_bytes(inside)),
        )))
    }
}

/// An entry whose type bits name no type Linux has.
pub(crate) fn unknown_type(path: &Path) -> StorageError {
    StorageError::Refused {
        path: path.display().to_string(),
        reason: "is of an unknown file type; not copied",
    }
}

/// An entry from its metadata (and a symlink's target).
fn describe(
    path: &Path,
    rel: Vec<u8>,
    md: &std::fs::Metadata,
    target: Option<OsString>,
) -> Result<SourceEntry, StorageError> {
    let ft = md.file_type();
    let kind = if ft.is_file() {
        SourceKind::File { size: md.len() }
    } else if ft.is_dir() {
        SourceKind::Dir
    } else if let (true, Some(target)) = (ft.is_symlink(), target) {
        SourceKind::Symlink {
            target: target.as_bytes().to_vec(),
        }
    } else if let Some(special) = Special::of_mode(md.mode() & libc::S_IFMT, md.rdev()) {
        SourceKind::Special(special)
    } else {
        return Err(unknown_type(path));
    };
    Ok(SourceEntry {
        rel,
        abs: path.to_path_buf(),
        kind,
        mode: md.mode() & 0o7777,
        mtime_sec: md.mtime(),
        mtime_nsec: md.mtime_nsec() as u32,
        ctime_sec: md.ctime(),
        ctime_nsec: md.ctime_nsec() as u32,
        id: (md.dev(), md.ino()),
        nlink: md.nlink(),
        sparse: ft.is_file() && crate::holes::looks_sparse(md.blocks(), md.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_tree_in_order_with_operand_name_first() {
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        std::fs::create_dir_all(top.join("b/c")).unwrap();
        std::fs::write(top.join("a.txt"), b"hello").unwrap();
        std::fs::write(top.join("b/c/d"), b"").unwrap();
        std::os::unix::fs::symlink("../a.txt", top.join("b/link")).unwrap();
        let got: Vec<_> = walk(&top).unwrap().map(|e| e.unwrap()).collect();
        let rels: Vec<_> = got
            .iter()
            .map(|e| String::from_utf8(e.rel.clone()).unwrap())
            .collect();
        assert_eq!(
            rels,
            [
                "top",
                "top/a.txt",
                "top/b",
                "top/b/c",
                "top/b/c/d",
                "top/b/link"
            ]
        );
        assert_eq!(got[1].kind, SourceKind::File { size: 5 });
        assert_eq!(got[0].kind, SourceKind::Dir);
        assert_eq!(
            got[5].kind,
            SourceKind::Symlink {
                target: b"../a.txt".to_vec()
            }
        );
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_mid_walk_is_not_listed_through() {
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        std::fs::create_dir_all(top.join("a")).unwrap();
        std::fs::create_dir_all(top.join("z")).unwrap();
        std::fs::write(top.join("z/inside"), b"x").unwrap();
        std::fs::create_dir_all(t.path().join("outside")).unwrap();
        std::fs::write(t.path().join("outside/secret"), b"s").unwrap();
        let mut walk = walk(&top).unwrap();
        // The top and `a` are listed; then a local user swaps `z` for a symlink.
        assert_eq!(walk.next().unwrap().unwrap().rel, b"top");
        assert_eq!(walk.next().unwrap().unwrap().rel, b"top/a");
        std::fs::rename(top.join("z"), t.path().join("z-moved")).unwrap();
        std::os::unix::fs::symlink(t.path().join("outside"), top.join("z")).unwrap();
        let rest: Vec<_> = walk.filter_map(Result::ok).collect();
        assert_eq!(rest.len(), 1, "{rest:?}");
        assert!(
            matches!(rest[0].kind, SourceKind::Symlink { .. }),
            "{rest:?}"
        );
    }

    #[test]
    fn an_entry_gone_before_it_is_described_is_an_error_in_place() {
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        std::fs::create_dir_all(top.join("a")).unwrap();
        std::fs::write(top.join("b"), b"x").unwrap();
        // A directory that is not there any more when it is opened.
        let mut walk = walk(&top).unwrap();
        walk.next();
        let _ = std::fs::remove_dir(top.join("a"));
        let items: Vec<_> = walk.collect();
        assert_eq!(items.len(), 2, "{items:?}");
        let err = items[0].as_ref().unwrap_err().to_string();
        assert!(err.contains("top/a"), "{err}");
        assert_eq!(items[1].as_ref().unwrap().rel, b"top/b");
    }

    #[test]
    fn missing_operand_names_the_path() {
        let err = walk(Path::new("/nonexistent/hetch-x")).err().unwrap();
        assert!(err.to_string().contains("/nonexistent/hetch-x"), "{err}");
    }

    #[test]
    fn entries_below_an_operand_are_read_back_without_following_symlinks() {
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        std::fs::create_dir_all(top.join("a/b")).unwrap();
        std::fs::write(top.join("a/b/f"), b"hello").unwrap();
        std::fs::create_dir_all(t.path().join("outside")).unwrap();
        std::fs::write(t.path().join("outside/secret"), b"x").unwrap();
        std::os::unix::fs::symlink("../outside", top.join("a/hop")).unwrap();
        let walked: Vec<_> = walk(&top).unwrap().map(|e| e.unwrap()).collect();
        let mut below = EntriesBelow::new(&top).unwrap();
        for w in &walked {
            let again = below.entry(&w.rel).unwrap();
            assert_eq!(&again, w, "{}", String::from_utf8_lossy(&w.rel));
        }
        // Through a symlink, outside, above, or another operand's name: refused.
        for bad in [
            &b"top/a/hop/secret"[..],
            b"top/../outside/secret",
            b"top/a//b",
            b"other/a",
            b"topx/a",
            b"top/",
        ] {
            let e = below.entry(bad);
            assert!(
                e.is_err() && below.open(bad).is_err(),
                "{} was let through",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(below.entry(b"top/a/missing").unwrap_err().is_not_found());
        // What entry() finds, open() opens: the same file, the operand itself too.
        use std::os::unix::fs::MetadataExt;
        for w in walked
            .iter()
            .filter(|w| matches!(w.kind, SourceKind::File { .. }))
        {
            let md = below.open(&w.rel).unwrap().metadata().unwrap();
            assert_eq!(md.ino(), std::fs::metadata(&w.abs).unwrap().ino());
        }
        // A symlink is not opened, as an entry or as the operand itself.
        assert!(below.open(b"top/a/hop").is_err());
        let link = t.path().join("link");
        std::os::unix::fs::symlink(top.join("a/b/f"), &link).unwrap();
        assert!(EntriesBelow::new(&link).unwrap().open(b"link").is_err());
    }

    /// A tree `base/mine/data` (one file), a link `base/linked` to `mine` (staying
    /// below `base`), and another user's `theirs/data` outside `base`.
    fn two_users() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("base");
        std::fs::create_dir_all(base.join("mine/data")).unwrap();
        std::fs::write(base.join("mine/data/f"), b"mine").unwrap();
        std::os::unix::fs::symlink("mine", base.join("linked")).unwrap();
        std::fs::create_dir_all(t.path().join("theirs/data")).unwrap();
        std::fs::write(t.path().join("theirs/data/secret"), b"theirs").unwrap();
        (t, base)
    }

    /// `base/mine` swapped for a link to the other user's directory, as a local user
    /// racing a worker between its check of the path and its reads would.
    fn swap_mine_for_theirs(base: &Path) {
        std::fs::rename(base.join("mine"), base.join("mine.old")).unwrap();
        std::os::unix::fs::symlink(base.join("../theirs"), base.join("mine")).unwrap();
    }

    fn names(it: impl Iterator<Item = Result<SourceEntry, StorageError>>) -> Vec<String> {
        it.map(|e| String::from_utf8(e.unwrap().rel).unwrap())
            .collect()
    }

    #[test]
    fn a_walk_within_a_directory_lists_what_lies_below_it_even_through_links_that_stay() {
        let (_t, base) = two_users();
        let walked = names(walk_within(&base, &base.join("mine/data")).unwrap());
        assert_eq!(walked, ["data", "data/f"]);
        let linked = names(walk_within(&base, &base.join("linked/data")).unwrap());
        assert_eq!(linked, walked);
        // The confining directory itself, and a file operand.
        assert_eq!(names(walk_within(&base, &base).unwrap()).len(), 5);
        let file = walk_within(&base, &base.join("mine/data/f")).unwrap();
        assert_eq!(names(file), ["f"]);
        let e = entry_within(&base, &base.join("mine/data/f"), b"f".to_vec()).unwrap();
        assert_eq!(e.kind, SourceKind::File { size: 4 });
        let missing = walk_within(&base, &base.join("mine/none")).err().unwrap();
        assert!(missing.is_not_found(), "{missing}");
    }

    #[test]
    fn a_parent_swapped_for_a_link_out_of_the_confining_directory_is_not_listed_or_read() {
        let (t, base) = two_users();
        swap_mine_for_theirs(&base);
        let operand = base.join("mine/data");
        // By its path, the walk would list the other user's file ...
        assert_eq!(names(walk(&operand).unwrap()), ["data", "data/secret"]);
        // ... within `base` it is refused, whichever way the operand is read.
        let refused = |e: StorageError| {
            let shown = e.to_string();
            assert!(matches!(e, StorageError::Refused { .. }), "{shown}");
        };
        refused(walk_within(&base, &operand).err().unwrap());
        let secret = operand.join("secret");
        refused(entry_within(&base, &secret, b"data/secret".to_vec()).unwrap_err());
        refused(EntriesBelow::within(&base, &operand).err().unwrap());
        // Outside `base`, or not a plain path below it: refused before anything is opened.
        refused(
            walk_within(&base, &t.path().join("theirs/data"))
                .err()
                .unwrap(),
        );
        refused(
            walk_within(&base, &base.join("mine.old/../../theirs"))
                .err()
                .unwrap(),
        );
    }

    #[test]
    fn entries_read_back_within_a_directory_are_refused_once_a_parent_leads_out() {
        let (_t, base) = two_users();
        let operand = base.join("mine/data");
        let mut below = EntriesBelow::within(&base, &operand).unwrap();
        assert_eq!(
            below.entry(b"data/f").unwrap().kind,
            SourceKind::File { size: 4 }
        );
        let mut file = EntriesBelow::within(&base, &operand.join("f")).unwrap();
        assert_eq!(file.entry(b"f").unwrap().kind, SourceKind::File { size: 4 });
        let mut read = String::new();
        use std::io::Read;
        file.open(b"f").unwrap().read_to_string(&mut read).unwrap();
        assert_eq!(read, "mine");
        // Made before the swap, read after it: the operand's own entry and a file
        // operand are looked up again through the parent's handle, which stays put.
        let mut made_before = EntriesBelow::within(&base, &operand.join("f")).unwrap();
        swap_mine_for_theirs(&base);
        assert_eq!(
            made_before.entry(b"f").unwrap().kind,
            SourceKind::File { size: 4 }
        );
        assert!(EntriesBelow::within(&base, &operand).is_err());
        // (Without a confining directory, the other user's file is found.)
        assert!(EntriesBelow::new(&operand)
            .unwrap()
            .entry(b"data/secret")
            .is_ok());
    }
}
