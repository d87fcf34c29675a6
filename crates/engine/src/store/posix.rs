//! A directory tree as a [`Store`]: each file is written as `.NAME.hetch-part` next to
//! its final name, with a journal `.NAME.hetch-journal` of verified blocks, and renamed
//! into place when complete. Every entry is reached through the destination
//! directory's handle with no symlink followed (`hetch_storage::confined`), so neither
//! a peer's names nor a local user's swaps can make a write land outside.

use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use hetch_integrity::{Algorithm, Digest};
use hetch_proto::{KeptXattrs, Xattr};
use hetch_storage::confined::{Dir, Links, OpenHow};
use hetch_storage::direct;
use hetch_storage::journal::{Journal, JournalHeader};
use hetch_storage::part::{self, FinalMeta, PartFile, JOURNAL_SUFFIX, PART_SUFFIX};
use hetch_storage::walk::Special;
use hetch_storage::{meta, StorageError};

use super::parents::Parents;
use super::sparse::{self, Part};
use super::unlocked::Unlocked;
use super::writers::{self, Claim, TAKEN_OVER};
use super::{
    BatchRead, Capabilities, FileSpec, Kind, Listed, Opened, Place, Present, Store, StoreFile,
};
use crate::dest::{DestMap, DestSpec};
use hetch_store::StoreError;

/// Journal records wait until this many bytes of their blocks are written, then the
/// part file is `fdatasync`ed and they are appended in one write: a record is only
/// ever written after its block is durable. 16 MiB is one sync per 4 default blocks,
/// on data the kernel is writing out anyway (a `--verify written` read-back already
/// waits for each block's write-out, so the sync mostly flushes the device's cache and
/// the file's extents); it bounds what an interruption costs a resume to 16 MiB per
/// file, and keeps the journal close behind the transfer. Time is no criterion: a
/// stalled transfer loses at most those bytes, and a finished file needs no records.
const JOURNAL_BATCH_BYTES: u64 = 16 << 20;
/// ... or this many records, so that small blocks do not make a long batch.
const JOURNAL_BATCH_RECORDS: usize = 256;

/// A part file's disk is reserved ahead of its writes by at least this much (see
/// `PosixFile::reserve`).
const RESERVE_STEP: u64 = 64 << 20;

/// A destination directory tree.
pub struct PosixStore {
    spec: DestSpec,
    /// Resolved when the first entry names the operand (see [`DestMap::resolve`]).
    map: OnceLock<DestMap>,
    /// The destination directory (`map.base`), opened when the map is resolved.
    fs: OnceLock<Dir>,
    /// Its device and inode: what files being written are known by (see `writers`).
    base_id: OnceLock<(u64, u64)>,
    /// Handles of the directories entries are placed in.
    parents: Arc<Parents>,
    /// Read-only directories made writable to replace a file in them.
    unlocked: Arc<Unlocked>,
    /// Bytes of attributes its files hold until their commits.
    held_xattrs: Arc<AtomicUsize>,
}

impl PosixStore {
    /// A store writing where `spec` says.
    pub fn new(spec: DestSpec) -> Self {
        PosixStore {
            spec,
            map: OnceLock::new(),
            fs: OnceLock::new(),
            base_id: OnceLock::new(),
            parents: Arc::default(),
            unlocked: Arc::default(),
            held_xattrs: Arc::default(),
        }
    }

    fn fs(&self) -> &Dir {
        self.fs.get().expect("destination resolved before use")
    }

    fn map(&self) -> &DestMap {
        self.map.get().expect("destination resolved before use")
    }

    /// Runs `f` on the attributes of the file or directory at `rel`, reached without
    /// following anything (an `O_PATH` handle: no permission on it is needed); `None`
    /// for other kinds, which keep no attributes hetch copies.
    fn with_attributes<T>(
        &self,
        rel: &Path,
        f: impl FnOnce(hetch_storage::xattr::Handle<'_>) -> std::io::Result<T>,
    ) -> Result<Option<T>, StorageError> {
        let (dir, name) = self.parents.of(self.fs(), rel)?;
        let (fd, ifmt) = dir.open_entry(&name)?;
        if ifmt != libc::S_IFREG && ifmt != libc::S_IFDIR {
            return Ok(None);
        }
        let h = hetch_storage::xattr::Handle::Path(fd.as_fd());
        f(h).map(Some)
            .map_err(|e| xattr_error(&self.fs().path().join(rel), e))
    }
}

fn present(md: &std::fs::Metadata) -> Present {
    Present {
        kind: Kind::of(md.file_type()),
        size: md.len(),
        mtime: (md.mtime(), md.mtime_nsec() as u32),
        mode: Some(md.mode() & 0o7777),
        kept_mtime: true,
    }
}

/// An empty directory standing in for a destination a dry run would create: made,
/// opened and removed at once, so every lookup in it finds nothing, a listing of it is
/// empty, and nothing can be created in it.
fn empty_stand_in() -> Result<Dir, StorageError> {
    use std::os::unix::fs::DirBuilderExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let p = std::env::temp_dir().join(format!(".hetch-dry-run-{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&p)
        .map_err(|e| StorageError::io(&p, e))?;
    let dir = Dir::open(&p);
    let _ = std::fs::remove_dir(&p);
    dir
}

impl Store for PosixStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ranges: true,
            xattrs: true,
            ..Capabilities::FILE_TREE
        }
    }

    fn resolve(&self, first_top: &[u8], create: bool) -> Result<(), StoreError> {
        if self.map.get().is_some() {
            return Ok(());
        }
        let map = DestMap::resolve(&self.spec, OsStr::from_bytes(first_top), create)?;
        let missing = matches!(std::fs::symlink_metadata(&map.base), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        let base = match &self.spec.confine_to {
            // A dry run of a copy into a directory it would create: nothing is there.
            _ if !create && missing => empty_stand_in()?,
            // A server's destination may lie behind the operator's symlinks, as long
            // as they stay inside the root.
            Some(root) => {
                let below = map
                    .base
                    .strip_prefix(root)
                    .map_err(|_| StorageError::Refused {
                        path: map.base.display().to_string(),
                        reason: "destination is not inside the served root",
                    })?;
                Dir::open(root)?.subdir(below, Links::Beneath)?
            }
            None => Dir::open(&map.base)?,
        };
        let _ = self.base_id.set(base.id()?);
        let _ = self.fs.set(base);
        let _ = self.map.set(map);
        Ok(())
    }

    fn place(&self, wire: &[u8]) -> Result<Place, StorageError> {
        let rel = hetch_storage::paths::rel_from_wire(wire)?;
        let map = self.map();
        let rel = map.rel(&rel);
        if part::name_is_reserved(&rel) {
            return Err(StorageError::Refused {
                path: map.base.join(&rel).display().to_string(),
                reason: "name is reserved for hetch's temporary files",
            });
        }
        Ok(Place {
            shown: map.base.join(&rel),
            rel,
        })
    }

    fn manifest_path(&self, place: &Place) -> Vec<u8> {
        // A bare relative destination ("out") has its entries under "./out".
        let final_path = place.shown.strip_prefix(".").unwrap_or(&place.shown);
        let dest = self.spec.path.strip_prefix(".").unwrap_or(&self.spec.path);
        let rel = final_path
            .strip_prefix(dest)
            .ok()
            .filter(|r| !r.as_os_str().is_empty())
            .or_else(|| final_path.strip_prefix(&self.map.get()?.base).ok())
            .map(|r| r.as_os_str().as_bytes().to_vec());
        rel.unwrap_or_else(|| {
            final_path
                .file_name()
                .unwrap_or_default()
                .as_bytes()
                .to_vec()
        })
    }

    fn stat(&self, rel: &Path) -> Result<Option<Present>, StorageError> {
        if rel.file_name().is_none() {
            return Ok(self.fs().stat(rel)?.as_ref().map(present)); // the base itself
        }
        let (dir, name) = match self.parents.of(self.fs(), rel) {
            Ok(found) => found,
            // Nor is its parent, or that is not a directory (yet: a dry run's entry below a
            // file the run would replace with a directory).
            Err(e) if e.is_not_found() || e.errno() == Some(libc::ENOTDIR) => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(dir.stat_name(&name)?.map(|st| Present {
            kind: Kind::of_mode(st.file_type()),
            size: st.size,
            mtime: st.mtime,
            mode: Some(st.mode & 0o7777),
            kept_mtime: true,
        }))
    }

    fn read_link(&self, rel: &Path) -> Result<OsString, StorageError> {
        let (parent, name) = self.fs().parent(rel)?;
        parent.read_link(&name)
    }

    fn digest(
        &self,
        rel: &Path,
        algo: Algorithm,
        block_size: u64,
    ) -> Result<Vec<u8>, StorageError> {
        let f = self.fs().open_file(rel, OpenHow::READ)?;
        let mut buf = Vec::new();
        crate::sum::sum_open_with(algo, &f, &self.fs().path().join(rel), block_size, &mut buf)
    }

    fn make_dir(&self, rel: &Path) -> Result<(), StorageError> {
        let (parent, name) = self.fs().parent(rel)?;
        parent.mkdir(&name, 0o700)
    }

    fn mark_copy(&self, rel: &Path, top: &[u8]) {
        if self.map().rename_top.is_none() {
            return; // copied into the destination, under its own name
        }
        if let Ok(dir) = self.fs().open_dir(rel) {
            DestMap::mark_as_copy(&dir, OsStr::from_bytes(top));
        }
    }

    fn finish_dir(&self, rel: &Path, fm: FinalMeta) -> Result<(), StorageError> {
        // Through the directory itself, opened with no symlink on the way: a
        // directory swapped for a link since it was made is not followed.
        let shown = self.fs().path().join(rel);
        let d = self.fs().open_dir(rel)?;
        let md = d.metadata().map_err(|e| StorageError::io(&shown, e))?;
        // Already right (a run that skipped everything): nothing to write, which also
        // spares a read-only copy an error.
        let same_time = md.mtime() == fm.mtime_sec && md.mtime_nsec() == fm.mtime_nsec as i64;
        if md.mode() & 0o7777 == fm.mode && same_time {
            return Ok(());
        }
        d.set_permissions(std::fs::Permissions::from_mode(fm.mode))
            .map_err(|e| StorageError::io(&shown, e))?;
        self.unlocked.settled(rel);
        meta::set_file_mtime(&d, &shown, fm.mtime_sec, fm.mtime_nsec)
    }

    fn refresh_meta(&self, rel: &Path, kind: Kind, fm: FinalMeta) -> Result<(), StorageError> {
        let (dir, name) = self.parents.of(self.fs(), rel)?;
        if kind != Kind::Symlink {
            dir.set_mode_nofollow(&name, fm.mode)?;
        }
        dir.set_times_nofollow(&name, fm.mtime_sec, fm.mtime_nsec)
    }

    fn xattrs(&self, rel: &Path, kept: KeptXattrs) -> Result<Vec<Xattr>, StorageError> {
        self.with_attributes(rel, |h| crate::xattrs::read(h, kept))
            .map(Option::unwrap_or_default)
    }

    fn set_xattrs(
        &self,
        rel: &Path,
        attrs: &[Xattr],
        kept: KeptXattrs,
    ) -> Result<bool, StorageError> {
        self.with_attributes(rel, |h| crate::xattrs::apply(h, attrs, kept))
            .map(|changed| changed.unwrap_or(false))
    }

    fn linked(&self, target: &Path, rel: &Path) -> Result<bool, StorageError> {
        let ino = |rel: &Path| -> Result<Option<u64>, StorageError> {
            let (dir, name) = self.parents.of(self.fs(), rel)?;
            Ok(dir
                .stat_name(&name)?
                .filter(|st| st.file_type() == libc::S_IFREG)
                .map(|st| st.ino))
        };
        Ok(matches!((ino(target)?, ino(rel)?), (Some(a), Some(b)) if a == b))
    }

    fn hard_link(&self, target: &Path, rel: &Path) -> Result<(), StorageError> {
        // Linked under the temporary name and renamed over whatever is there.
        let (from, from_name) = self.fs().parent(target)?;
        let (parent, name) = self.fs().parent(rel)?;
        let tmp = part::part_name(&name);
        parent.remove_file(&tmp)?;
        from.hard_link(&from_name, &parent, &tmp)?;
        let renamed = parent.rename(&tmp, &name);
        if renamed.is_err() {
            let _ = parent.remove_file(&tmp);
        }
        renamed
    }

    fn special_at(&self, rel: &Path) -> Result<Option<Special>, StorageError> {
        let (dir, name) = self.parents.of(self.fs(), rel)?;
        let st = dir.stat_name(&name)?;
        Ok(st.and_then(|st| Special::of_mode(st.file_type(), st.rdev)))
    }

    fn make_special(
        &self,
        rel: &Path,
        special: Special,
        fm: FinalMeta,
    ) -> Result<(), StorageError> {
        // Made under the temporary name, given its mode and times, and renamed over
        // whatever is there, as a symlink is.
        let (parent, name) = self.fs().parent(rel)?;
        let tmp = part::part_name(&name);
        parent.remove_file(&tmp)?;
        let (ifmt, rdev) = special.mode_and_rdev();
        parent.mknod(&tmp, ifmt, rdev)?;
        let made = parent
            .set_mode_nofollow(&tmp, fm.mode)
            .and_then(|()| parent.set_times_nofollow(&tmp, fm.mtime_sec, fm.mtime_nsec))
            .and_then(|()| parent.rename(&tmp, &name));
        if made.is_err() {
            let _ = parent.remove_file(&tmp);
        }
        made
    }

    fn make_symlink(&self, rel: &Path, target: &[u8], fm: FinalMeta) -> Result<(), StorageError> {
        // Created under the temporary name and renamed over: replacing is atomic.
        let (parent, name) = self.fs().parent(rel)?;
        let tmp = part::part_name(&name);
        parent.remove_file(&tmp)?;
        parent.symlink(OsStr::from_bytes(target), &tmp)?;
        parent.set_times_nofollow(&tmp, fm.mtime_sec, fm.mtime_nsec)?;
        parent.rename(&tmp, &name)
    }

    fn open(&self, place: &Place, spec: &FileSpec) -> Result<Opened, StorageError> {
        // Before the part file is looked at: an older writer of it is done with it.
        let base = *self.base_id.get().expect("destination resolved before use");
        let claim = writers::claim(base, &place.rel);
        let mut file = PosixFile {
            fs: self.fs().clone(),
            parents: self.parents.clone(),
            unlocked: self.unlocked.clone(),
            rel: place.rel.clone(),
            header: journal_header(spec),
            spec: *spec,
            resumed: false,
            claim,
            held_xattrs: self.held_xattrs.clone(),
            inner: Mutex::default(),
            written_end: AtomicU64::new(0),
            one_writer: Mutex::new(()),
        };
        let mut recorded = None;
        if spec.blocks() > 1 && self.fs().stat(&part::part_path(&place.rel))?.is_some() {
            let mut verified = Vec::new();
            let (dir, name) = self.fs().parent(&place.rel)?;
            let journal =
                Journal::resume(&dir, &part::journal_name(&name), &file.header, |i, d| {
                    if i < spec.blocks() {
                        verified.push((i, d))
                    }
                })?;
            if let Some(j) = journal {
                let inner = file.inner.get_mut().expect("part lock");
                inner.journal = Some(Arc::new(j));
                file.resumed = true;
                recorded = Some(verified);
            }
        }
        Ok(Opened {
            file: Arc::new(file),
            recorded,
        })
    }

    fn open_range(
        &self,
        place: &Place,
        spec: &FileSpec,
        blocks: std::ops::Range<u64>,
    ) -> Result<Opened, StorageError> {
        let base = *self.base_id.get().expect("destination resolved before use");
        super::split::open_range(self.fs(), base, place, spec, blocks)
    }

    fn commit_ranges(
        &self,
        place: &Place,
        spec: &FileSpec,
        fsync: bool,
    ) -> Result<Digest, StorageError> {
        let base = *self.base_id.get().expect("destination resolved before use");
        match super::split::commit_ranges(self.fs(), base, place, spec, fsync)? {
            Some(whole) => Ok(whole),
            // Committed before: its digest is that of the file as it is.
            None => self
                .digest(&place.rel, Algorithm::Blake3, spec.block_size)?
                .try_into()
                .map_err(|_| StorageError::io(&place.shown, std::io::Error::other("digest"))),
        }
    }

    fn clean_leftovers(&self, rel: &Path, warn: &mut dyn FnMut(StorageError)) {
        use hetch_storage::leftovers::{clean_dir, Clean};
        let Ok(dir) = self.fs().subdir(rel, Links::Refuse) else {
            return; // replaced meanwhile: not ours to look into
        };
        clean_dir(&dir, Clean::default(), &mut |r| {
            if let Err(e) = r {
                warn(e);
            }
        });
    }

    fn list(&self, rel: &Path) -> Result<Vec<Listed>, StorageError> {
        let dir = self.fs().subdir(rel, Links::Refuse)?;
        let mut out = Vec::new();
        for name in dir.names()? {
            // Gone since it was listed: nothing to do.
            let Some(md) = dir.stat(Path::new(&name))? else {
                continue;
            };
            let temporary_of = part::is_temporary_name(name.as_bytes()).then(|| final_name(&name));
            out.push(Listed {
                name,
                kind: Kind::of(md.file_type()),
                temporary_of,
            });
        }
        Ok(out)
    }

    fn remove(&self, rel: &Path, dir: bool) -> Result<(), StorageError> {
        let (parent, name) = self.fs().parent(rel)?;
        if dir {
            self.parents.forget(rel);
            parent.remove_dir(&name)
        } else {
            parent.remove_file(&name)
        }
    }

    fn read_back_batch(&self, reads: &mut [BatchRead<'_>]) -> Vec<Result<(), StorageError>> {
        super::read_back::batch(reads)
    }

    fn sync(&self) -> Result<(), StorageError> {
        match self.fs.get() {
            Some(fs) => {
                let restored = self.unlocked.restore(fs);
                fs.sync_fs()?;
                restored
            }
            None => Ok(()),
        }
    }

    fn shown_base(&self) -> Option<PathBuf> {
        self.fs.get().map(|d| d.path().to_path_buf())
    }
}

/// The file a part file or journal (`.NAME.hetch-part`) belongs to.
fn final_name(temporary: &OsStr) -> OsString {
    let b = temporary.as_bytes();
    let b = b.strip_prefix(b".").unwrap_or(b);
    let b = b
        .strip_suffix(PART_SUFFIX.as_bytes())
        .or_else(|| b.strip_suffix(JOURNAL_SUFFIX.as_bytes()))
        .unwrap_or(b);
    OsStr::from_bytes(b).to_os_string()
}

/// The journal header for a file: a growing file's journal names no size or mtime
/// (both change while it grows), so a restarted follower resumes it.
fn journal_header(spec: &FileSpec) -> JournalHeader {
    JournalHeader {
        block_size: spec.block_size,
        file_size: spec.size.digest_len(),
        mtime_sec: if spec.growing() {
            0
        } else {
            spec.meta.mtime_sec
        },
        mtime_nsec: if spec.growing() {
            0
        } else {
            spec.meta.mtime_nsec
        },
        checksum: spec.checksum.id(),
    }
}

/// A file being received into a directory tree.
pub(super) struct PosixFile {
    fs: Dir,
    parents: Arc<Parents>,
    unlocked: Arc<Unlocked>,
    rel: PathBuf,
    header: JournalHeader,
    spec: FileSpec,
    /// The part file holds verified blocks of an earlier run: keep its contents.
    resumed: bool,
    /// This writer's claim on the file (see [`writers`]): every operation that
    /// writes or removes holds it.
    claim: Arc<Claim>,
    /// The store's count of attribute bytes held (see `keep_xattrs`).
    held_xattrs: Arc<AtomicUsize>,
    inner: Mutex<Inner>,
    /// The end of the furthest block put: the part file's length, unless it was
    /// resumed or holes were left (then the file is sized at commit). An atomic, so
    /// that a put takes no lock for it.
    written_end: AtomicU64,
    /// One write at a time per file: concurrent writes to one file only queue on the
    /// file system's inode lock; other files still write in parallel.
    one_writer: Mutex<()>,
}

#[derive(Default)]
struct Inner {
    /// Opened on the first put: a file planned but not started holds no descriptor.
    part: Option<Arc<PartFile>>,
    journal: Option<Arc<Journal>>,
    /// Records waiting for the part file's next sync, and their blocks' bytes.
    unjournaled: Vec<(u64, Digest)>,
    unjournaled_bytes: u64,
    /// Some all-zero block was skipped rather than written: size the file at the end.
    holes: bool,
    /// The part file's disk is reserved up to here (see `PosixFile::reserve`).
    reserved: u64,
    /// Bytes put in this session.
    received: u64,
    /// Committed or aborted: nothing more is written.
    closed: bool,
    /// Renamed into place: an abort must not touch the names any more.
    committed: bool,
    /// Attributes the file gets at its commit (`--xattrs`, `--acls`).
    xattrs: Option<crate::xattrs::Held>,
}

/// An error reading or setting attributes of `path`, saying so.
fn xattr_error(path: &Path, e: std::io::Error) -> StorageError {
    let e = std::io::Error::new(e.kind(), format!("extended attributes: {e}"));
    StorageError::io(path, e)
}

impl PosixFile {
    fn shown(&self) -> PathBuf {
        self.fs.path().join(&self.rel)
    }

    /// Brings the kept attributes of the part file in step with `attrs`.
    fn apply_xattrs(
        &self,
        part: &PartFile,
        attrs: &[Xattr],
        kept: KeptXattrs,
    ) -> Result<(), StorageError> {
        let h = hetch_storage::xattr::Handle::Open(part.file().as_fd());
        crate::xattrs::apply(h, attrs, kept)
            .map(drop)
            .map_err(|e| xattr_error(&self.shown(), e))
    }

    /// Holds the claim for one operation; refused once a newer writer took over.
    fn hold(&self) -> Result<std::sync::RwLockReadGuard<'_, bool>, StorageError> {
        self.claim.hold().ok_or_else(|| StorageError::Refused {
            path: self.shown().display().to_string(),
            reason: TAKEN_OVER,
        })
    }

    /// The part file, opened (and its journal created) on first use.
    pub(super) fn part(&self) -> Result<Arc<PartFile>, StorageError> {
        let _held = self.hold()?;
        let mut inner = self.inner.lock().expect("part lock");
        if inner.closed {
            return Err(StorageError::Refused {
                path: self.shown().display().to_string(),
                reason: "file already finished or dropped",
            });
        }
        if inner.part.is_none() {
            let (dir, name) = self.parents.of(&self.fs, &self.rel)?;
            // Never sized as one sparse hole (`ftruncate`): on ext4, filling that is
            // much dearer than writes that extend the file or land in space reserved
            // for them (below). A file whose zero blocks were skipped is sized when it
            // is committed.
            let part = match self.create_part(&dir, &name) {
                // A read-only directory of ours: made writable for the session.
                Err(e) if e.errno() == Some(libc::EACCES) && self.unlock_parent()? => {
                    self.create_part(&dir, &name)?
                }
                made => made?,
            };
            let part = match self.direct_io() {
                true => part.with_direct_io(),
                false => part,
            };
            inner.part = Some(Arc::new(part));
        }
        let part = inner.part.clone().expect("opened above");
        if self.spec.blocks() > 1 && inner.journal.is_none() {
            inner.journal = Some(Arc::new(part.create_journal(&self.header)?));
        }
        Ok(part)
    }

    /// Creates (or, resuming, opens) the part file `name` in `dir`.
    fn create_part(&self, dir: &Dir, name: &OsStr) -> Result<PartFile, StorageError> {
        let anonymous = match self.single_block() {
            true => PartFile::open_anonymous(dir, name)?,
            false => None,
        };
        match anonymous {
            Some(p) => Ok(p),
            None => PartFile::open(dir, name, self.resumed),
        }
    }

    /// Makes the file's directory writable for the session, where it is ours and
    /// read-only (see `unlocked`); whether it did.
    fn unlock_parent(&self) -> Result<bool, StorageError> {
        let parent = self.rel.parent().unwrap_or(Path::new(""));
        self.unlocked.unlock(&self.fs, parent)
    }

    /// A file of one block at most, written afresh: it keeps no journal (nothing to
    /// resume), so its part file needs no name until it is done, and its one block
    /// is read back directly from the device once written.
    fn single_block(&self) -> bool {
        self.spec.blocks() <= 1 && !self.spec.growing() && !self.resumed
    }

    /// Whether this file is written and read back past the page cache (see
    /// `PartFile::with_direct_io`): a large one, not growing (a growing file is synced
    /// on its own schedule and read back in pieces, through the cache).
    pub(super) fn direct_io(&self) -> bool {
        let large = matches!(self.spec.size, super::Size::Known(n) if n >= direct::MIN_FILE);
        large && !self.spec.growing()
    }

    /// Whether this small file is written through the cache and read back with one
    /// direct read of its one block (into a buffer of its own), rather than through
    /// the cache after dropping its pages there: on small files the four calls of the
    /// latter cost more than the read. (A large file reads back directly anyway.)
    pub(super) fn direct_read_back(&self) -> bool {
        self.single_block() && !self.direct_io()
    }

    /// Reserves the part file's disk ahead of a put that ends at `end`, for a file of
    /// many blocks written at their writers' own offsets (see
    /// `PartFile::preallocate`). The reservation grows in steps bounded by what
    /// arrived: at most twice the bytes put, plus [`RESERVE_STEP`], never beyond the
    /// announced size. A size is the peer's word, so reserving it whole before the data
    /// came would let a client that sends one block hold any amount of disk in part
    /// files kept for resume. Nothing is reserved once a zero block was skipped (its
    /// hole would be filled by a later step), for resumed files (written already), or
    /// where the size is not known.
    fn reserve(&self, part: &PartFile, end: u64, len: u64) -> Result<(), StorageError> {
        let super::Size::Known(size) = self.spec.size else {
            return Ok(());
        };
        if self.single_block() || self.resumed {
            return Ok(());
        }
        let mut inner = self.inner.lock().expect("part lock");
        inner.received = inner.received.saturating_add(len);
        if inner.holes || end <= inner.reserved || inner.reserved >= size {
            return Ok(());
        }
        let target = inner
            .received
            .saturating_mul(2)
            .saturating_add(RESERVE_STEP)
            .min(size);
        if target <= inner.reserved {
            return Ok(());
        }
        let from = inner.reserved;
        inner.reserved = target;
        drop(inner);
        part.preallocate(from, target - from)
    }

    /// Holds the file against its own writes (as a direct read needs), if no write
    /// holds it now.
    pub(super) fn try_hold_writes(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        self.one_writer.try_lock().ok()
    }

    fn open_part(&self) -> Option<Arc<PartFile>> {
        self.inner.lock().expect("part lock").part.clone()
    }
}

impl StoreFile for PosixFile {
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn keep_xattrs(&self, attrs: Vec<Xattr>, kept: KeptXattrs) -> Result<(), StorageError> {
        if !kept.any() {
            return Ok(());
        }
        match crate::xattrs::Held::hold(attrs, kept, &self.held_xattrs) {
            Ok(held) => {
                self.inner.lock().expect("part lock").xattrs = Some(held);
                Ok(())
            }
            // Too many held already: set now. (Only an access ACL that takes away
            // the owner's write would then keep a later run from resuming this part
            // file as a user who is not root.)
            Err(attrs) => {
                let part = self.part()?;
                self.apply_xattrs(&part, &attrs, kept)
            }
        }
    }

    fn put(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        let part = self.part()?;
        let _one = self.one_writer.lock().expect("write lock");
        let _held = self.hold()?;
        self.reserve(&part, offset + data.len() as u64, data.len() as u64)?;
        part.write_at(offset, data)?;
        self.written_end
            .fetch_max(offset + data.len() as u64, Ordering::Relaxed);
        // A single-block file's writeback is started by its verifier's `prefetch`,
        // together with the other files of its batch.
        if self.spec.read_back_follows && !self.direct_read_back() {
            part.start_writeback(offset, data.len() as u64);
        }
        Ok(())
    }

    fn put_sparse(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        let part = self.part()?;
        let _one = self.one_writer.lock().expect("write lock");
        let _held = self.hold()?;
        let state = match self.resumed {
            true => Part::Resumed, // reserves nothing (see `reserve`)
            false => {
                let mut inner = self.inner.lock().expect("part lock");
                inner.received = inner.received.saturating_add(data.len() as u64);
                // Nothing more is reserved from here on: a reservation would fill the
                // holes left (as after a zero block); the file is sized at commit.
                inner.holes = true;
                Part::Fresh {
                    reserved: inner.reserved,
                }
            }
        };
        let writeback = self.spec.read_back_follows && !self.direct_read_back();
        sparse::put_runs(&part, offset, data, state, |at, len| {
            if writeback {
                part.start_writeback(at, len);
            }
        })?;
        self.written_end
            .fetch_max(offset + data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn put_zeros(&self, offset: u64, len: u64, zeros: &[u8]) -> Result<(), StorageError> {
        // A fresh part file is a hole there already; a resumed one may hold stale
        // bytes, so they are written.
        if self.resumed {
            return self.put(offset, &zeros[..len as usize]);
        }
        let part = self.part()?;
        // Reserved already (see `reserve`): given back, so that the file stays sparse.
        // From here on nothing more is reserved, so later holes stay holes too.
        part.punch_hole(offset, len);
        self.inner.lock().expect("part lock").holes = true;
        Ok(())
    }

    fn prefetch(&self, offset: u64, len: u64) {
        let Some(p) = self.open_part() else { return };
        if self.direct_read_back() {
            // Read directly (see `read_back`), which writes the range out first: start
            // that now. A verifier prefetches a batch of files before it reads any, so
            // their writes reach the device together (and merge there).
            p.start_writeback(offset, len);
        } else {
            p.prepare_read_back(offset, len);
        }
    }

    fn read_back(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        let part = self.part()?;
        if self.direct_read_back() {
            let _one = self.one_writer.lock().expect("write lock");
            if part.read_back_direct(offset, buf)? {
                return Ok(());
            }
            part.prepare_read_back(offset, buf.len() as u64);
        }
        part.read_back(offset, buf)
    }

    fn record(&self, block: u64, digest: &Digest, len: u64) -> Result<(), StorageError> {
        let batch = {
            let mut inner = self.inner.lock().expect("part lock");
            let Some(journal) = inner.journal.clone() else {
                return Ok(()); // one-block files keep no journal
            };
            if self.spec.growing() {
                // A growing file's durability task syncs it on its own schedule; its
                // records go at once (a resume reads them back anyway).
                drop(inner);
                let _held = self.hold()?;
                return journal.append(block, digest);
            }
            inner.unjournaled.push((block, *digest));
            inner.unjournaled_bytes += len;
            if inner.unjournaled_bytes < JOURNAL_BATCH_BYTES
                && inner.unjournaled.len() < JOURNAL_BATCH_RECORDS
            {
                return Ok(());
            }
            inner.unjournaled_bytes = 0;
            let records = std::mem::take(&mut inner.unjournaled);
            inner.part.clone().map(|p| (p, journal, records))
        };
        if let Some((part, journal, records)) = batch {
            // Outside the lock: other blocks go on being written meanwhile.
            let _held = self.hold()?;
            part.sync_data()?;
            journal.append_all(&records)?;
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), StorageError> {
        match self.open_part() {
            Some(p) => p.sync_data(),
            None => Ok(()),
        }
    }

    fn digest(&self, algo: Algorithm, block_size: u64) -> Result<Vec<u8>, StorageError> {
        let part = self.part()?;
        let mut buf = Vec::new();
        crate::sum::sum_open_with(algo, part.file(), part.path(), block_size, &mut buf)
    }

    fn commit(
        &self,
        size: u64,
        fm: FinalMeta,
        xattr: Option<&Digest>,
        fsync: bool,
    ) -> Result<(), StorageError> {
        let part = self.part()?;
        // Held to the rename: a newer writer takes over before or after, not during.
        let _held = self.hold()?;
        let holes = {
            let mut inner = self.inner.lock().expect("part lock");
            // Complete: its records no longer matter; it is renamed after its own sync.
            inner.journal = None;
            inner.unjournaled = Vec::new();
            inner.closed = true;
            inner.holes
        };
        // A fresh part file is as long as its furthest write; a resumed one may be
        // longer (an earlier run wrote more, of another version of the file).
        let len = match self.resumed {
            false => self.written_end.load(Ordering::Relaxed),
            true => part
                .file()
                .metadata()
                .map_err(|e| StorageError::io(part.path(), e))?
                .len(),
        };
        if holes || len != size {
            part.set_len(size)?;
        }
        let held = self.inner.lock().expect("part lock").xattrs.take();
        if let Some(held) = held {
            // Before the mode, which then sets an ACL's mask (see `crate::xattrs`).
            self.apply_xattrs(&part, &held.attrs, held.kept)?;
        }
        part.finalize(fm, xattr, fsync, self.spec.blocks() > 1)?;
        let mut inner = self.inner.lock().expect("part lock");
        inner.part = None;
        inner.committed = true;
        Ok(())
    }

    fn abort(&self) {
        {
            let mut inner = self.inner.lock().expect("part lock");
            if inner.committed {
                return;
            }
            inner.closed = true;
            inner.part = None;
            inner.journal = None;
        }
        // The names belong to the newer writer once it took over.
        let Some(_held) = self.claim.hold() else {
            return;
        };
        if let Ok((dir, name)) = self.parents.of(&self.fs, &self.rel) {
            part::discard(&dir, &name);
        }
    }
}
