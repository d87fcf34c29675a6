//! A tree in memory as a source [`Origin`]: what a test copies from when it wants the
//! whole engine without a disk, and, next to the local walk and `ObjectOrigin`, the
//! third source the origin conformance suite runs against.
//!
//! It reads the [`MemoryTree`] a [`MemoryStore`](crate::MemoryStore) writes, so a
//! test can copy memory to memory, and change a file between the listing and the
//! reads to see the copy refuse a file that is no longer the one listed.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use hetch_engine::sum::sum_bytes;
use hetch_integrity::Algorithm;
use hetch_storage::walk::{SourceEntry, SourceKind};
use hetch_store::origin::{Found, Origin, OriginFile};
use hetch_store::StoreError;

use crate::memory_store::{MemoryTree, Node};

/// One operand in a memory tree: a file, a symlink, or a directory and all below it.
pub struct MemoryOrigin {
    tree: Arc<Mutex<MemoryTree>>,
    /// The operand, relative to the tree's root.
    path: PathBuf,
}

impl MemoryOrigin {
    /// Reads `path` (relative to the root of `tree`, not empty) when a session lists
    /// it.
    pub fn new(tree: Arc<Mutex<MemoryTree>>, path: &str) -> Self {
        MemoryOrigin {
            tree,
            path: PathBuf::from(path.trim_end_matches('/')),
        }
    }
}

/// How entries of a memory tree are named in messages.
fn shown(p: &Path) -> String {
    format!("memory:{}", p.display())
}

impl Origin for MemoryOrigin {
    fn name(&self) -> String {
        shown(&self.path)
    }

    fn concurrent_reads(&self) -> usize {
        // A few more than a local disk gets: reads of a service are many at once.
        4
    }

    fn list(&self, found: &mut dyn FnMut(Found) -> bool) -> Result<(), StoreError> {
        let Some(name) = self.path.file_name() else {
            let what = format!("{}: not an operand with a name", self.name());
            found(Found::Error(what));
            return Ok(());
        };
        // Taken under the lock, handed on without it: `found` waits for room in the
        // session's window, and the sink may be writing into the same tree.
        let entries: Vec<(PathBuf, Node)> = {
            let t = self.tree.lock().expect("tree lock");
            t.nodes
                .range(self.path.clone()..)
                .take_while(|(p, _)| p.starts_with(&self.path))
                .map(|(p, n)| (p.clone(), n.clone()))
                .collect()
        };
        if entries.is_empty() {
            found(Found::Error(format!(
                "{}: no such file or directory",
                self.name()
            )));
            return Ok(());
        }
        for (p, node) in entries {
            let mut rel = name.as_bytes().to_vec();
            let below = p
                .strip_prefix(&self.path)
                .expect("listed below the operand");
            if !below.as_os_str().is_empty() {
                rel.push(b'/');
                rel.extend_from_slice(below.as_os_str().as_bytes());
            }
            let (kind, mode, mtime, file) = match node {
                Node::Dir(m) => (SourceKind::Dir, m.mode, (m.mtime_sec, m.mtime_nsec), None),
                Node::Symlink { target, mtime } => {
                    (SourceKind::Symlink { target }, 0o777, mtime, None)
                }
                Node::File { data, meta } => {
                    let mtime = (meta.mtime_sec, meta.mtime_nsec);
                    let size = data.len() as u64;
                    let file: Arc<dyn OriginFile> = Arc::new(MemoryFile {
                        tree: self.tree.clone(),
                        path: p.clone(),
                        listed: (size, mtime),
                    });
                    (SourceKind::File { size }, meta.mode, mtime, Some(file))
                }
            };
            let se = SourceEntry::unlinked(rel, PathBuf::from(shown(&p)), kind, mode, mtime);
            if !found(Found::Entry(se, file)) {
                break;
            }
        }
        Ok(())
    }
}

/// A listed file of a memory tree.
struct MemoryFile {
    tree: Arc<Mutex<MemoryTree>>,
    path: PathBuf,
    /// Its size and mtime when listed: a read of anything else fails.
    listed: (u64, (i64, u32)),
}

impl MemoryFile {
    /// Runs `f` on the file's bytes if it is still the one listed.
    fn with<T>(&self, f: impl FnOnce(&[u8]) -> Result<T, String>) -> Result<T, String> {
        let t = self.tree.lock().expect("tree lock");
        match t.nodes.get(&self.path) {
            Some(Node::File { data, meta })
                if (data.len() as u64, (meta.mtime_sec, meta.mtime_nsec)) == self.listed =>
            {
                f(data)
            }
            Some(_) => Err(format!(
                "{}: changed since it was listed",
                shown(&self.path)
            )),
            None => Err(format!("{}: gone since it was listed", shown(&self.path))),
        }
    }
}

impl OriginFile for MemoryFile {
    fn read<'a>(&'a self, offset: u64, buf: &'a mut [u8]) -> BoxFuture<'a, Result<(), String>> {
        let r = self.with(|data| {
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            let bytes = start
                .checked_add(buf.len())
                .and_then(|end| data.get(start..end))
                .ok_or_else(|| format!("{}: read beyond its end", shown(&self.path)))?;
            buf.copy_from_slice(bytes);
            Ok(())
        });
        Box::pin(std::future::ready(r))
    }

    fn digest(
        &self,
        size: u64,
        algo: Algorithm,
        block_size: u64,
    ) -> BoxFuture<'_, Result<Vec<u8>, String>> {
        let r = self.with(|data| match data.len() as u64 == size {
            true => Ok(sum_bytes(algo, data, block_size)),
            false => Err(format!(
                "{}: changed since it was listed",
                shown(&self.path)
            )),
        });
        Box::pin(std::future::ready(r))
    }
}
