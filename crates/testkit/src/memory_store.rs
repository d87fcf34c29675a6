//! A tree in memory as a [`Store`]: the destination of tests that want the whole
//! engine without a disk, and the reference that shows what the seam asks of a store.
//!
//! The tree is shared ([`MemoryTree`]): a test looks at it after a session, damages
//! it, or hands it to the next session, which resumes from the unfinished files'
//! records as a directory's journal would let it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use hetch_integrity::{Algorithm, Digest};
use hetch_storage::part::FinalMeta;
use hetch_storage::StorageError;

use hetch_engine::sum::sum_bytes;
use hetch_store::placement::{self, Found, Placement};
use hetch_store::StoreError;
use hetch_store::{Capabilities, FileSpec, Kind, Listed, Opened, Place, Present, Store, StoreFile};

/// An entry of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A directory and its mode and mtime.
    Dir(FinalMeta),
    /// A committed file.
    File {
        /// Its contents.
        data: Vec<u8>,
        /// Mode and mtime.
        meta: FinalMeta,
    },
    /// A symbolic link.
    Symlink {
        /// What it points to.
        target: Vec<u8>,
        /// Its own mtime.
        mtime: (i64, u32),
    },
}

/// A file being received: what a part file and its journal are to a directory.
#[derive(Debug, Clone, Default)]
pub struct Unfinished {
    /// The bytes put so far.
    pub data: Vec<u8>,
    /// Verified blocks, as recorded.
    pub records: Vec<(u64, Digest)>,
    /// What it is a copy of: block size, size (`u64::MAX` while growing), mtime,
    /// algorithm. Records of another file are not taken up.
    pub identity: (u64, u64, (i64, u32), u8),
}

/// The contents of a memory store, shared between sessions and the test looking on.
#[derive(Debug, Default)]
pub struct MemoryTree {
    /// Entries by path (relative, no `.` or `..`); the root is implicit.
    pub nodes: BTreeMap<PathBuf, Node>,
    /// Files being received, by final path.
    pub unfinished: HashMap<PathBuf, Unfinished>,
    /// Directories created as the copy of an operand, and its name.
    pub marks: HashMap<PathBuf, Vec<u8>>,
    /// The newest writer of each file being received: an older one that is still
    /// running is refused, as a newer transfer of the file took it over.
    pub writers: HashMap<PathBuf, u64>,
    /// Writers opened so far (the next one's number).
    pub opened: u64,
    /// Every directory made is found made by another writer just before (as two
    /// units of one service job writing one tree may): `make_dir` creates it and then
    /// fails with `AlreadyExists`, as the second `mkdir` of a race does.
    pub racing_dirs: bool,
}

impl MemoryTree {
    fn kind_at(&self, p: &Path) -> Option<Kind> {
        if p.as_os_str().is_empty() {
            return Some(Kind::Dir);
        }
        self.nodes.get(p).map(|n| match n {
            Node::Dir(_) => Kind::Dir,
            Node::File { .. } => Kind::File,
            Node::Symlink { .. } => Kind::Symlink,
        })
    }

    fn has_children(&self, p: &Path) -> bool {
        self.nodes
            .range(p.to_path_buf()..)
            .nth(1)
            .is_some_and(|(k, _)| k.starts_with(p) && k != p)
    }
}

/// A destination in memory, with `cp -r` rules for where the operands go.
pub struct MemoryStore {
    tree: Arc<Mutex<MemoryTree>>,
    /// The destination as named (relative to the tree's root).
    dest: PathBuf,
    sources: u32,
    trailing_slash: bool,
    /// Directory the entries go in, and the name replacing the operand's (copy *as*).
    resolved: OnceLock<(PathBuf, Option<OsString>)>,
}

impl MemoryStore {
    /// A store that writes `sources` operands to `dest` (relative to the root of
    /// `tree`; a trailing `/` as on a command line).
    pub fn new(tree: Arc<Mutex<MemoryTree>>, dest: &str, sources: u32) -> Self {
        MemoryStore {
            tree,
            dest: PathBuf::from(dest.trim_end_matches('/')),
            sources,
            trailing_slash: dest.ends_with('/'),
            resolved: OnceLock::new(),
        }
    }

    fn tree(&self) -> MutexGuard<'_, MemoryTree> {
        self.tree.lock().expect("tree lock")
    }

    fn base(&self) -> &(PathBuf, Option<OsString>) {
        self.resolved
            .get()
            .expect("destination resolved before use")
    }

    fn full(&self, rel: &Path) -> PathBuf {
        self.base().0.join(rel)
    }

    fn refused(p: &Path, reason: &'static str) -> StorageError {
        StorageError::Refused {
            path: p.display().to_string(),
            reason,
        }
    }

    /// The parent of `p` must be a directory (no symlink is followed on the way).
    fn parent_is_dir(tree: &MemoryTree, p: &Path) -> Result<(), StorageError> {
        let parent = p.parent().unwrap_or(Path::new(""));
        match tree.kind_at(parent) {
            Some(Kind::Dir) => Ok(()),
            Some(k) => Err(k.found_where(parent, "directory")),
            None => Err(StorageError::io(
                parent,
                std::io::ErrorKind::NotFound.into(),
            )),
        }
    }
}

fn clean(p: &Path) -> PathBuf {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect()
}

impl Store for MemoryStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::FILE_TREE
    }

    fn resolve(&self, first_top: &[u8], create: bool) -> Result<(), StoreError> {
        let dest = clean(&self.dest);
        let tree = self.tree();
        let shown = dest.display();
        let as_dest = || -> Result<(PathBuf, Option<OsString>), StoreError> {
            let name = dest.file_name().ok_or_else(|| {
                StoreError::Destination(format!("{shown}: not a usable destination name"))
            })?;
            let parent = dest.parent().unwrap_or(Path::new("")).to_path_buf();
            if tree.kind_at(&parent) != Some(Kind::Dir) {
                return Err(StoreError::Destination(format!(
                    "{shown}: parent directory {} does not exist",
                    parent.display()
                )));
            }
            Ok((parent, Some(name.to_os_string())))
        };
        let found = match tree.kind_at(&dest) {
            Some(Kind::Dir) => Found::Dir {
                marked: tree.marks.get(&dest).map(Vec::as_slice) == Some(first_top),
            },
            Some(_) => Found::NotDir,
            None => Found::Nothing,
        };
        let resolved = match placement::place(found, self.sources, self.trailing_slash, &dest)? {
            Placement::Into => (dest.clone(), None),
            Placement::CreateThenInto if !create => (dest.clone(), None),
            Placement::CreateThenInto => {
                drop(tree);
                let mut tree = self.tree();
                let mut at = PathBuf::new();
                for c in dest.components() {
                    at.push(c);
                    tree.nodes.entry(at.clone()).or_insert(Node::Dir(FinalMeta {
                        mode: 0o755,
                        mtime_sec: 0,
                        mtime_nsec: 0,
                    }));
                }
                (dest.clone(), None)
            }
            Placement::As => as_dest()?,
        };
        let _ = self.resolved.set(resolved);
        Ok(())
    }

    fn place(&self, wire: &[u8]) -> Result<Place, StorageError> {
        let rel = hetch_storage::paths::rel_from_wire(wire)?;
        let rel = match &self.base().1 {
            None => rel,
            Some(name) => Path::new(name).join(rel.components().skip(1).collect::<PathBuf>()),
        };
        let rel = clean(&rel);
        Ok(Place {
            shown: self.full(&rel),
            rel,
        })
    }

    fn manifest_path(&self, place: &Place) -> Vec<u8> {
        let dest = clean(&self.dest);
        let rel = place
            .shown
            .strip_prefix(&dest)
            .ok()
            .filter(|r| !r.as_os_str().is_empty())
            .unwrap_or(&place.rel);
        rel.as_os_str().as_bytes().to_vec()
    }

    fn stat(&self, rel: &Path) -> Result<Option<Present>, StorageError> {
        let full = self.full(rel);
        let tree = self.tree();
        Ok(tree.nodes.get(&full).map(|n| match n {
            Node::Dir(m) => Present {
                kind: Kind::Dir,
                size: 0,
                mtime: (m.mtime_sec, m.mtime_nsec),
                mode: Some(m.mode),
                kept_mtime: true,
            },
            Node::File { data, meta } => Present {
                kind: Kind::File,
                size: data.len() as u64,
                mtime: (meta.mtime_sec, meta.mtime_nsec),
                mode: Some(meta.mode),
                kept_mtime: true,
            },
            Node::Symlink { target, mtime } => Present {
                kind: Kind::Symlink,
                size: target.len() as u64,
                mtime: *mtime,
                mode: None,
                kept_mtime: true,
            },
        }))
    }

    fn read_link(&self, rel: &Path) -> Result<OsString, StorageError> {
        let full = self.full(rel);
        match self.tree().nodes.get(&full) {
            Some(Node::Symlink { target, .. }) => Ok(OsStr::from_bytes(target).to_os_string()),
            _ => Err(Self::refused(&full, "is not a symlink")),
        }
    }

    fn digest(
        &self,
        rel: &Path,
        algo: Algorithm,
        block_size: u64,
    ) -> Result<Vec<u8>, StorageError> {
        let full = self.full(rel);
        match self.tree().nodes.get(&full) {
            Some(Node::File { data, .. }) => Ok(sum_bytes(algo, data, block_size)),
            _ => Err(Self::refused(&full, "is not a file")),
        }
    }

    fn make_dir(&self, rel: &Path) -> Result<(), StorageError> {
        let full = self.full(rel);
        let mut tree = self.tree();
        Self::parent_is_dir(&tree, &full)?;
        let meta = FinalMeta {
            mode: 0o700,
            mtime_sec: 0,
            mtime_nsec: 0,
        };
        if tree.racing_dirs && !tree.nodes.contains_key(&full) {
            tree.nodes.insert(full.clone(), Node::Dir(meta));
        }
        if tree.nodes.contains_key(&full) {
            return Err(StorageError::io(
                &full,
                std::io::ErrorKind::AlreadyExists.into(),
            ));
        }
        tree.nodes.insert(full, Node::Dir(meta));
        Ok(())
    }

    fn mark_copy(&self, rel: &Path, top: &[u8]) {
        if self.base().1.is_some() {
            let full = self.full(rel);
            self.tree().marks.insert(full, top.to_vec());
        }
    }

    fn finish_dir(&self, rel: &Path, meta: FinalMeta) -> Result<(), StorageError> {
        let full = self.full(rel);
        match self.tree().nodes.get_mut(&full) {
            Some(Node::Dir(m)) => {
                *m = meta;
                Ok(())
            }
            Some(_) => Err(Self::refused(&full, "is no longer a directory")),
            None => Err(StorageError::io(&full, std::io::ErrorKind::NotFound.into())),
        }
    }

    fn refresh_meta(&self, rel: &Path, _kind: Kind, fm: FinalMeta) -> Result<(), StorageError> {
        let full = self.full(rel);
        match self.tree().nodes.get_mut(&full) {
            Some(Node::Dir(m)) | Some(Node::File { meta: m, .. }) => *m = fm,
            Some(Node::Symlink { mtime, .. }) => *mtime = (fm.mtime_sec, fm.mtime_nsec),
            None => return Err(StorageError::io(&full, std::io::ErrorKind::NotFound.into())),
        }
        Ok(())
    }

    fn make_symlink(&self, rel: &Path, target: &[u8], meta: FinalMeta) -> Result<(), StorageError> {
        let full = self.full(rel);
        let mut tree = self.tree();
        Self::parent_is_dir(&tree, &full)?;
        if tree.kind_at(&full) == Some(Kind::Dir) {
            return Err(Kind::Dir.found_where(&full, "symlink"));
        }
        let node = Node::Symlink {
            target: target.to_vec(),
            mtime: (meta.mtime_sec, meta.mtime_nsec),
        };
        tree.nodes.insert(full, node);
        Ok(())
    }

    fn open(&self, place: &Place, spec: &FileSpec) -> Result<Opened, StorageError> {
        let full = self.full(&place.rel);
        let identity = (
            spec.block_size,
            spec.size.digest_len(),
            if spec.growing() {
                (0, 0)
            } else {
                (spec.meta.mtime_sec, spec.meta.mtime_nsec)
            },
            spec.checksum.id(),
        );
        let (recorded, writer) = {
            let mut tree = self.tree();
            tree.opened += 1;
            let writer = tree.opened;
            tree.writers.insert(full.clone(), writer);
            let recorded = match tree.unfinished.get(&full) {
                Some(u) if u.identity == identity && spec.blocks() > 1 => Some(
                    u.records
                        .iter()
                        .filter(|(i, _)| *i < spec.blocks())
                        .copied()
                        .collect(),
                ),
                Some(_) => {
                    tree.unfinished.remove(&full);
                    None
                }
                None => None,
            };
            (recorded, writer)
        };
        let file = MemoryFile {
            tree: self.tree.clone(),
            path: full,
            writer,
            identity,
            keep: recorded.is_some(),
            state: Mutex::default(),
        };
        Ok(Opened {
            file: Arc::new(file),
            recorded,
        })
    }

    fn list(&self, rel: &Path) -> Result<Vec<Listed>, StorageError> {
        let full = self.full(rel);
        let tree = self.tree();
        if tree.kind_at(&full) != Some(Kind::Dir) {
            return Err(Self::refused(&full, "is not a directory"));
        }
        let mut out = Vec::new();
        for (p, _) in tree.nodes.range(full.clone()..) {
            if !p.starts_with(&full) {
                break;
            }
            if p.parent() == Some(&full) {
                out.push(Listed {
                    name: p.file_name().unwrap_or_default().to_os_string(),
                    kind: tree.kind_at(p).unwrap_or(Kind::Other),
                    temporary_of: None,
                });
            }
        }
        Ok(out)
    }

    fn remove(&self, rel: &Path, dir: bool) -> Result<(), StorageError> {
        let full = self.full(rel);
        let mut tree = self.tree();
        match tree.kind_at(&full) {
            None => Err(StorageError::io(&full, std::io::ErrorKind::NotFound.into())),
            Some(Kind::Dir) if !dir => Err(Kind::Dir.found_where(&full, "file")),
            Some(Kind::Dir) if tree.has_children(&full) => {
                Err(Self::refused(&full, "directory not empty"))
            }
            Some(_) => {
                tree.nodes.remove(&full);
                Ok(())
            }
        }
    }

    fn sync(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn shown_base(&self) -> Option<PathBuf> {
        self.resolved.get().map(|(b, _)| b.clone())
    }
}

/// A file being received into memory.
struct MemoryFile {
    tree: Arc<Mutex<MemoryTree>>,
    path: PathBuf,
    /// Its number among the writers (see [`MemoryTree::writers`]).
    writer: u64,
    identity: (u64, u64, (i64, u32), u8),
    /// Takes up the unfinished file an earlier session left.
    keep: bool,
    state: Mutex<FileState>,
}

#[derive(Default)]
struct FileState {
    started: bool,
    closed: bool,
}

impl MemoryFile {
    /// The unfinished file, started (afresh, unless resumed) on first use.
    fn with<T>(&self, f: impl FnOnce(&mut Unfinished) -> T) -> Result<T, StorageError> {
        let mut st = self.state.lock().expect("file lock");
        if st.closed {
            return Err(MemoryStore::refused(
                &self.path,
                "file already finished or dropped",
            ));
        }
        let mut tree = self.tree.lock().expect("tree lock");
        if !self.is_newest(&tree) {
            return Err(MemoryStore::refused(&self.path, TAKEN_OVER));
        }
        if !st.started {
            st.started = true;
            MemoryStore::parent_is_dir(&tree, &self.path)?;
            if !self.keep || !tree.unfinished.contains_key(&self.path) {
                let fresh = Unfinished {
                    identity: self.identity,
                    ..Unfinished::default()
                };
                tree.unfinished.insert(self.path.clone(), fresh);
            }
        }
        let u = tree
            .unfinished
            .get_mut(&self.path)
            .ok_or_else(|| MemoryStore::refused(&self.path, "removed while being received"))?;
        Ok(f(u))
    }
}

/// Why an older writer of a file a newer one took over is refused.
const TAKEN_OVER: &str = "taken over by a newer transfer of the same file";

impl MemoryFile {
    /// Whether no newer writer of this file was opened since.
    fn is_newest(&self, tree: &MemoryTree) -> bool {
        tree.writers.get(&self.path) == Some(&self.writer)
    }

    /// Ends this writer's claim on the file (a newer one's stays).
    fn release(&self, tree: &mut MemoryTree) {
        if self.is_newest(tree) {
            tree.writers.remove(&self.path);
        }
    }
}

impl StoreFile for MemoryFile {
    fn put(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        let (start, end) = (offset as usize, offset as usize + data.len());
        self.with(|u| {
            if u.data.len() < end {
                u.data.resize(end, 0);
            }
            u.data[start..end].copy_from_slice(data);
        })
    }

    fn put_zeros(&self, offset: u64, len: u64, zeros: &[u8]) -> Result<(), StorageError> {
        self.put(offset, &zeros[..len as usize])
    }

    fn read_back(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        self.with(|u| {
            buf.fill(0);
            let start = (offset as usize).min(u.data.len());
            let end = (offset as usize + buf.len()).min(u.data.len());
            buf[..end - start].copy_from_slice(&u.data[start..end]);
        })
    }

    fn record(&self, block: u64, digest: &Digest, _len: u64) -> Result<(), StorageError> {
        self.with(|u| u.records.push((block, *digest)))
    }

    fn sync(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn digest(&self, algo: Algorithm, block_size: u64) -> Result<Vec<u8>, StorageError> {
        self.with(|u| sum_bytes(algo, &u.data, block_size))
    }

    fn commit(
        &self,
        size: u64,
        meta: FinalMeta,
        _xattr: Option<&Digest>,
        _fsync: bool,
    ) -> Result<(), StorageError> {
        let mut data = self.with(|u| std::mem::take(&mut u.data))?;
        data.resize(size as usize, 0);
        self.state.lock().expect("file lock").closed = true;
        let mut tree = self.tree.lock().expect("tree lock");
        // Checked again under the same lock as the commit itself.
        if !self.is_newest(&tree) {
            return Err(MemoryStore::refused(&self.path, TAKEN_OVER));
        }
        self.release(&mut tree);
        tree.unfinished.remove(&self.path);
        if tree.kind_at(&self.path) == Some(Kind::Dir) {
            return Err(Kind::Dir.found_where(&self.path, "file"));
        }
        tree.nodes
            .insert(self.path.clone(), Node::File { data, meta });
        Ok(())
    }

    fn abort(&self) {
        let mut st = self.state.lock().expect("file lock");
        if st.closed {
            return;
        }
        st.closed = true;
        let mut tree = self.tree.lock().expect("tree lock");
        // What is unfinished there is the newer writer's.
        if self.is_newest(&tree) {
            self.release(&mut tree);
            tree.unfinished.remove(&self.path);
        }
    }
}

/// The paths of a tree's directories, files and symlinks below `root` (for tests).
pub fn paths_below(tree: &MemoryTree, root: &Path) -> BTreeSet<PathBuf> {
    tree.nodes
        .keys()
        .filter(|p| p.starts_with(root) && *p != root)
        .map(|p| p.strip_prefix(root).expect("below root").to_path_buf())
        .collect()
}
