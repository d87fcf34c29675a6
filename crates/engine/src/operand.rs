//! What a transfer reads from and writes to: local paths, or any origin or store.

use std::path::PathBuf;
use std::sync::Arc;

use crate::store::origin::Origin;
use crate::store::Store;

/// A source operand.
#[derive(Debug, Clone)]
pub enum Operand {
    /// A local file or directory.
    Local(PathBuf),
    /// An operand of another origin (an object or a prefix in a bucket).
    Origin(Arc<dyn Origin>),
    /// Only these entries of a local operand, in this order, instead of all of it:
    /// wire paths (the operand's own name, then the path inside it), each looked up
    /// below the operand with no symlink followed (see
    /// [`hetch_storage::walk::EntriesBelow`]). How a worker moves its share of a
    /// listing made elsewhere; an entry that is not below the operand is an error
    /// naming it, like a file that cannot be read.
    Entries {
        /// The local operand.
        operand: PathBuf,
        /// The entries to send.
        entries: Vec<Vec<u8>>,
    },
}

impl From<PathBuf> for Operand {
    fn from(p: PathBuf) -> Self {
        Operand::Local(p)
    }
}

/// Where a transfer writes.
#[derive(Clone)]
pub enum Destination {
    /// A local path with `cp -r` semantics.
    Local(crate::DestSpec),
    /// Any store (see [`crate::store`]), resolved by the caller.
    Store(Arc<dyn Store>),
}

impl Destination {
    /// The store that receives into this destination.
    pub fn into_store(self) -> Arc<dyn Store> {
        match self {
            Destination::Local(d) => Arc::new(crate::store::posix::PosixStore::new(d)),
            Destination::Store(s) => s,
        }
    }
}
