//! The seam of a transfer: where a receiving session puts what it receives (a
//! [`Store`]), and where a sending session reads from when its operand is not a local
//! path (an [`origin::Origin`]).
//!
//! The engine's sink does everything that is the same whatever the
//! destination: the protocol, block accounting, checks, retries, resume decisions,
//! manifests, mirroring rules. A [`Store`] does what differs: how entries are looked
//! up, created and listed, and how one file's blocks become a finished file through a
//! [`StoreFile`] with the lifecycle *put* (blocks, in any order) → *read back* (where
//! the store can) → *record* (a block verified: journal it for resume) → *commit* (the
//! file appears under its name) or *abort* (nothing appears, nothing is left).
//!
//! Implementations: `hetch_engine::store::posix` (a directory tree: part file +
//! journal + rename, every path reached through handles confined to the
//! destination); a bucket prefix
//! in `hetch_object::store` (blocks gathered into the parts of a multipart upload,
//! completed on commit); a tree in memory, for tests, in `hetch_testkit`.
//!
//! The source side's seam is [`origin`]. Each store passes the conformance suite in
//! `hetch-engine`'s `tests/it/conformance.rs` for what its [`Capabilities`] claim.
//!
//! This crate is the seam alone, so that the backends (object stores, memory) depend
//! on it and not on the engine that drives them.
//!
//! Every method blocks: the sink calls them on blocking threads, batching the work of
//! one block or one planned batch into one call where it can.

pub mod origin;
pub mod placement;
mod size;

pub use size::{Size, MAX_FILE_SIZE};

use std::ffi::OsString;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hetch_integrity::{Algorithm, Digest};
use hetch_proto::{KeptXattrs, Xattr};
use hetch_storage::part::FinalMeta;
use hetch_storage::walk::Special;
use hetch_storage::StorageError;

/// What a store can do; the sink adapts to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Stored blocks can be read back to check them (`--verify written`); without it,
    /// blocks are checked as received.
    pub read_back: bool,
    /// Blocks may be put at any offset, and pieces of blocks too (growing files).
    pub random_access: bool,
    /// Directories exist as entries of their own (with mode and mtime).
    pub directories: bool,
    /// Symbolic links can be stored.
    pub symlinks: bool,
    /// Mode and mtime of files are kept to the nanosecond (size and mtime then decide
    /// whether a file is already there).
    pub mtime_nanos: bool,
    /// Blocks worth putting at once (a store whose puts wait on a far service wants
    /// many in flight); the sink runs at least this many writers.
    pub concurrent_puts: usize,
    /// Bytes a resume takes up at a time: recorded blocks come in runs of whole parts
    /// of this size (a block for a file system, a multipart part for S3).
    pub resume_unit: u64,
    /// One file can be written in block ranges by several writers, on this host or
    /// others sharing the storage ([`Store::open_range`], [`Store::commit_ranges`]).
    pub ranges: bool,
    /// Extended attributes and ACLs are kept ([`Store::set_xattrs`],
    /// [`StoreFile::keep_xattrs`]).
    pub xattrs: bool,
}

impl Capabilities {
    /// A tree of files as a POSIX file system keeps it: everything, block by block.
    pub const FILE_TREE: Capabilities = Capabilities {
        read_back: true,
        random_access: true,
        directories: true,
        symlinks: true,
        mtime_nanos: true,
        concurrent_puts: 1,
        resume_unit: 1,
        ranges: false,
        xattrs: false,
    };
}

/// The kind of an entry found at the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// Anything else (FIFO, socket, device).
    Other,
}

impl Kind {
    /// The kind of an entry whose `st_mode` type bits are `ifmt` (`libc::S_IF*`).
    pub fn of_mode(ifmt: u32) -> Kind {
        match ifmt {
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFREG => Kind::File,
            _ => Kind::Other,
        }
    }

    /// The kind of a file system entry of type `ft` (as `lstat` sees it).
    pub fn of(ft: std::fs::FileType) -> Kind {
        if ft.is_dir() {
            Kind::Dir
        } else if ft.is_symlink() {
            Kind::Symlink
        } else if ft.is_file() {
            Kind::File
        } else {
            Kind::Other
        }
    }

    /// The kind with an article, for messages ("a directory").
    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "a file",
            Kind::Dir => "a directory",
            Kind::Symlink => "a symlink",
            Kind::Other => "a special file",
        }
    }

    /// "PATH: is a symlink where a directory is needed".
    pub fn found_where(self, path: &Path, needed: &str) -> StorageError {
        StorageError::WrongType {
            path: path.to_path_buf(),
            reason: format!("is {} where a {needed} is needed", self.name()).into(),
        }
    }
}

/// An entry found at the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Present {
    /// What it is.
    pub kind: Kind,
    /// Its size in bytes (files).
    pub size: u64,
    /// Its mtime: seconds and nanoseconds.
    pub mtime: (i64, u32),
    /// Its permission bits (`0o7777`), where the store keeps a mode.
    pub mode: Option<u32>,
    /// `mtime` is the source's, kept by the copy. Otherwise it is when the store wrote
    /// the entry, and the entry counts as a current copy when that is not older than
    /// the source's mtime (as `aws s3 sync` decides).
    pub kept_mtime: bool,
}

impl Present {
    /// Whether this is a copy of a file of `size` bytes last modified at `mtime`, by
    /// size and mtime (the rule a transfer skips by). Its mode is not looked at: a
    /// copy whose mode alone differs gets the source's without being copied again
    /// ([`Present::stale_meta`]).
    pub fn is_copy_of(&self, size: u64, mtime: (i64, u32)) -> bool {
        self.kind == Kind::File
            && self.size == size
            && match self.kept_mtime {
                true => self.mtime == mtime,
                false => self.mtime.0 >= mtime.0,
            }
    }

    /// Whether an entry whose contents are current still needs `meta` applied
    /// ([`Store::refresh_meta`]): its mode differs, where the store keeps modes, or its
    /// mtime does, where the store keeps the source's (a contents check found it equal
    /// whatever its mtime, or a symlink's target matched).
    pub fn stale_meta(&self, meta: &FinalMeta, with_mode: bool) -> bool {
        let mode = with_mode && self.mode.is_some_and(|m| m & 0o7777 != meta.mode);
        mode || (self.kept_mtime && self.mtime != (meta.mtime_sec, meta.mtime_nsec))
    }
}

/// Where an entry goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Relative to the destination base (the directory the entries are placed in):
    /// how the store reaches it.
    pub rel: PathBuf,
    /// The same place for messages (a path, or a URL).
    pub shown: PathBuf,
}

/// A file about to be received.
#[derive(Debug, Clone, Copy)]
pub struct FileSpec {
    /// Its final size, or none yet while it grows.
    pub size: Size,
    /// The session's block size.
    pub block_size: u64,
    /// Mode and mtime to apply when it is committed.
    pub meta: FinalMeta,
    /// The session's block digest algorithm (what records hold).
    pub checksum: Algorithm,
    /// Every put block will be read back soon: start writing it out at once.
    pub read_back_follows: bool,
}

impl FileSpec {
    /// Its blocks (for a growing file: as many as the largest offset allows).
    pub fn blocks(&self) -> u64 {
        self.size.blocks(self.block_size)
    }

    /// Announced as growing: records are durable at once (its durability task syncs),
    /// and the resume state does not depend on size or mtime.
    pub fn growing(&self) -> bool {
        self.size.is_growing()
    }
}

/// A file opened for receiving.
pub struct Opened {
    /// The file's handle.
    pub file: Arc<dyn StoreFile>,
    /// Blocks an earlier, interrupted transfer of this very file recorded as verified
    /// (`None`: nothing to resume). They are in the store, but a resume reads them back
    /// before they count unless the user trusts the journal.
    pub recorded: Option<Vec<(u64, Digest)>>,
}

/// An entry of a listed directory.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Its name.
    pub name: OsString,
    /// What it is.
    pub kind: Kind,
    /// A temporary file of an unfinished transfer (a part file or journal), for the
    /// file named [`Listed::temporary_of`].
    pub temporary_of: Option<OsString>,
}

/// A destination: a directory tree, an object store prefix, memory.
pub trait Store: Send + Sync {
    /// What this store can do.
    fn capabilities(&self) -> Capabilities;

    /// Decides where entries go from the name of the first source operand (`cp -r`
    /// rules), creating what the rules create if `create` (a dry run creates nothing:
    /// a destination it would create is looked at as empty). Called once, before
    /// anything else.
    fn resolve(&self, first_top: &[u8], create: bool) -> Result<(), StoreError>;

    /// Where an entry with wire path `wire` (relative, validated by the caller) goes.
    fn place(&self, wire: &[u8]) -> Result<Place, StorageError>;

    /// The path of `place` for manifests and change lines: relative to the
    /// destination the user named, so that `cd DST && b3sum -c MANIFEST` works.
    fn manifest_path(&self, place: &Place) -> Vec<u8>;

    /// Hints that [`Store::stat`] will be asked next about the entries with these wire
    /// paths (a store that answers over a network looks them up at once). Called once
    /// per batch; a store that ignores it pays nothing.
    fn prefetch(&self, _wires: &[&[u8]]) {}

    /// What is at `rel` (not following a symlink), if anything.
    fn stat(&self, rel: &Path) -> Result<Option<Present>, StorageError>;

    /// The target of the symlink at `rel`.
    fn read_link(&self, rel: &Path) -> Result<OsString, StorageError>;

    /// The whole-file digest of the file at `rel`, as `algo` computes it with blocks
    /// of `block_size`.
    fn digest(&self, rel: &Path, algo: Algorithm, block_size: u64)
        -> Result<Vec<u8>, StorageError>;

    /// Creates directory `rel` (its parent exists), writable by its owner until
    /// [`Store::finish_dir`] applies its real mode.
    fn make_dir(&self, rel: &Path) -> Result<(), StorageError>;

    /// [`Store::make_dir`] where other writers of the same tree may make the same
    /// directory at the same moment (units of one service job each make the parent
    /// directories they need): a directory that is there once `make_dir` failed was
    /// made by one of them, and counts as made.
    fn make_shared_dir(&self, rel: &Path) -> Result<(), StorageError> {
        match self.make_dir(rel) {
            Err(_) if self.stat(rel)?.is_some_and(|p| p.kind == Kind::Dir) => Ok(()),
            r => r,
        }
    }

    /// Marks directory `rel`, created as the copy of operand `top`, so that the same
    /// command run again copies into it *as* that operand (see `hetch_engine::DestSpec`).
    fn mark_copy(&self, _rel: &Path, _top: &[u8]) {}

    /// Applies a directory's final mode and mtime (after its contents are done).
    fn finish_dir(&self, rel: &Path, meta: FinalMeta) -> Result<(), StorageError>;

    /// Applies `meta` to the existing entry at `rel`, of kind `kind`, without following
    /// it: the permission bits (not to a symlink, whose mode means nothing) and the
    /// mtime. For an entry whose contents are current and whose metadata alone changed
    /// (`chmod` at the source, a contents check that found equal files with other
    /// mtimes). A store that keeps neither has nothing to do.
    fn refresh_meta(&self, _rel: &Path, _kind: Kind, _meta: FinalMeta) -> Result<(), StorageError> {
        Ok(())
    }

    /// The attributes of the file or directory at `rel` that `kept` covers, sorted by
    /// name (none for other kinds). A store that keeps no attributes has none.
    fn xattrs(&self, _rel: &Path, _kept: KeptXattrs) -> Result<Vec<Xattr>, StorageError> {
        Ok(Vec::new())
    }

    /// Brings the attributes `kept` covers of the file or directory at `rel` in step
    /// with `attrs` (set what differs, remove what `attrs` lacks; other attributes
    /// are left alone); true if anything changed. A store that keeps no attributes
    /// has nothing to do.
    fn set_xattrs(
        &self,
        _rel: &Path,
        _attrs: &[Xattr],
        _kept: KeptXattrs,
    ) -> Result<bool, StorageError> {
        Ok(false)
    }

    /// The special file at `rel`, if that is what is there.
    fn special_at(&self, _rel: &Path) -> Result<Option<Special>, StorageError> {
        Ok(None)
    }

    /// Creates (atomically replacing whatever is there) special file `special` at
    /// `rel`, with `meta`. A store that cannot hold special files refuses.
    fn make_special(
        &self,
        rel: &Path,
        _special: Special,
        _meta: FinalMeta,
    ) -> Result<(), StorageError> {
        Err(StorageError::Refused {
            path: rel.display().to_string(),
            reason: "is a special file, which this destination cannot hold; not copied",
        })
    }

    /// Whether `rel` is already another name of the file at `target` (hard links).
    fn linked(&self, _target: &Path, _rel: &Path) -> Result<bool, StorageError> {
        Ok(false)
    }

    /// Makes `rel` another name of the file at `target` (atomically replacing whatever
    /// is at `rel`). A store without hard links refuses.
    fn hard_link(&self, _target: &Path, rel: &Path) -> Result<(), StorageError> {
        Err(StorageError::Refused {
            path: rel.display().to_string(),
            reason: "is a hard link, which this destination cannot hold; not linked",
        })
    }

    /// Creates (atomically replacing whatever is there) a symlink at `rel`.
    fn make_symlink(&self, rel: &Path, target: &[u8], meta: FinalMeta) -> Result<(), StorageError>;

    /// Opens file `rel` for receiving: takes up what an earlier transfer of the same
    /// file left (its recorded blocks), or starts afresh. Nothing needs to be created
    /// before the first block is put.
    fn open(&self, place: &Place, spec: &FileSpec) -> Result<Opened, StorageError>;

    /// Opens blocks `blocks` of file `place` for receiving as one of several writers
    /// of its ranges (a large file moved by several nodes; see
    /// [`Capabilities::ranges`]). Nothing is truncated, and this range's verified
    /// blocks are recorded apart from the other ranges'. [`StoreFile::commit`] makes
    /// the range durable and recorded, and the file keeps its temporary name;
    /// [`StoreFile::abort`] drops this range's records only. [`Opened::recorded`]
    /// holds what an earlier attempt at this range recorded.
    fn open_range(
        &self,
        place: &Place,
        _spec: &FileSpec,
        _blocks: Range<u64>,
    ) -> Result<Opened, StorageError> {
        Err(no_ranges(place))
    }

    /// Gives file `place`, received in ranges, its final name once their records
    /// cover every block of `spec`: the recorded digests (BLAKE3) are merged into the
    /// whole-file digest, which is returned (and kept where the store keeps one); the
    /// file is sized, given `spec.meta`, made durable first with `fsync`, and renamed,
    /// and the ranges' records are removed. Records made for another version of the
    /// source (another size or mtime) do not count. Refused while another writer
    /// still has the file open.
    fn commit_ranges(
        &self,
        place: &Place,
        _spec: &FileSpec,
        _fsync: bool,
    ) -> Result<Digest, StorageError> {
        Err(no_ranges(place))
    }

    /// Removes leftovers of interrupted transfers in directory `rel` that no transfer
    /// holds, reporting each problem to `warn`.
    fn clean_leftovers(&self, _rel: &Path, _warn: &mut dyn FnMut(StorageError)) {}

    /// The entries of directory `rel` (not following symlinks).
    fn list(&self, rel: &Path) -> Result<Vec<Listed>, StorageError>;

    /// Removes the entry at `rel` (an empty directory when `dir`).
    fn remove(&self, rel: &Path, dir: bool) -> Result<(), StorageError>;

    /// Reads back each of `reads` as [`StoreFile::read_back`] does, one result per
    /// read. A store that can submit many reads at once (the device then reads them
    /// together, and the caller waits once) does so; by default they are read one
    /// after the other. Only where [`Capabilities::read_back`].
    fn read_back_batch(&self, reads: &mut [BatchRead<'_>]) -> Vec<Result<(), StorageError>> {
        reads
            .iter_mut()
            .map(|r| r.file.read_back(r.offset, r.buf))
            .collect()
    }

    /// Makes everything committed durable (once, at the end of a session).
    fn sync(&self) -> Result<(), StorageError>;

    /// The destination base for messages, once resolved.
    fn shown_base(&self) -> Option<PathBuf>;
}

/// The refusal of a store without [`Capabilities::ranges`].
fn no_ranges(place: &Place) -> StorageError {
    StorageError::Refused {
        path: place.shown.display().to_string(),
        reason: "this destination does not take a file in ranges from several writers",
    }
}

/// One read of [`Store::read_back_batch`]: `buf.len()` bytes at `offset` of `file`.
pub struct BatchRead<'a> {
    /// A file the same store opened.
    pub file: &'a dyn StoreFile,
    /// Where the read starts.
    pub offset: u64,
    /// Where the bytes go.
    pub buf: &'a mut [u8],
}

/// One file on its way into a store.
pub trait StoreFile: Send + Sync {
    /// The file as its store's own type, for a store that handles files of a batch
    /// together ([`Store::read_back_batch`]); `None` for the others.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// Puts `data` at `offset`: a whole block (`offset` = block × block size), or a
    /// piece of one where the store has [`Capabilities::random_access`].
    fn put(&self, offset: u64, data: &[u8]) -> Result<(), StorageError>;

    /// Puts a whole block as [`StoreFile::put`] does, one whose source file has holes
    /// in it (see `hetch_proto::DataHeader::sparse`): the store may leave the block's
    /// all-zero pages unwritten, as holes, so long as they read back as zeros. Stores
    /// without holes put the block.
    fn put_sparse(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        self.put(offset, data)
    }

    /// Block `len` bytes at `offset` is all zeros: the store may leave a hole.
    fn put_zeros(&self, offset: u64, len: u64, zeros: &[u8]) -> Result<(), StorageError>;

    /// The attributes the file gets (at its commit, before its mode, or at once where
    /// the store holds no more of them): those `kept` covers are brought in step with
    /// `attrs` (see [`Store::set_xattrs`]). A store that keeps no attributes ignores
    /// them.
    fn keep_xattrs(&self, _attrs: Vec<Xattr>, _kept: KeptXattrs) -> Result<(), StorageError> {
        Ok(())
    }

    /// Hints that `len` bytes at `offset` will be read back next (read-back stores).
    fn prefetch(&self, _offset: u64, _len: u64) {}

    /// Reads `buf.len()` bytes at `offset` back from the store (bytes never put read
    /// as zeros). Only where [`Capabilities::read_back`].
    fn read_back(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError>;

    /// Block `block` (`len` bytes) is verified: record it so that a resume can take it
    /// up. A store may batch records, but must never record a block before it is
    /// durable.
    fn record(&self, block: u64, digest: &Digest, len: u64) -> Result<(), StorageError>;

    /// Makes everything put so far durable (growing files' acknowledgements).
    fn sync(&self) -> Result<(), StorageError>;

    /// The whole-file digest of what is stored (for algorithms whose block digests do
    /// not merge, and for checks against a source's final digest).
    fn digest(&self, algo: Algorithm, block_size: u64) -> Result<Vec<u8>, StorageError>;

    /// Makes the file appear under its name, `size` bytes long, with `meta` (and the
    /// whole-file BLAKE3 digest `xattr` where the store keeps one); `fsync` makes it
    /// durable first.
    fn commit(
        &self,
        size: u64,
        meta: FinalMeta,
        xattr: Option<&Digest>,
        fsync: bool,
    ) -> Result<(), StorageError>;

    /// Gives the file up: nothing appears under its name and nothing is left behind.
    fn abort(&self);
}

/// Why a store or an origin cannot be used at all: an error that ends the session
/// (errors about single entries are [`StorageError`]s of their own).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file system error about the whole destination or source.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The destination cannot take what is sent, as `cp -r` decides (a file where a
    /// directory is needed, several sources into one file).
    #[error("{0}")]
    Destination(String),
    /// The service behind a store or origin refused or failed (credentials, a missing
    /// bucket).
    #[error("{0}")]
    Service(String),
}
