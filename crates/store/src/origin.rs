//! The source seam: where a transfer reads from when an operand is not a local path
//! (an object store prefix, memory).
//!
//! An [`Origin`] lists its operand as a tree of entries (directories before what they
//! hold, names relative to the operand's own name), each file with an [`OriginFile`]
//! that reads its bytes and, on request, its whole-file digest. The source side of a
//! session does everything else as it does for local files: the window of entries in
//! flight, plans, block hashing, resends, the buffer pool. Local paths are read by the
//! engine itself, through descriptors confined as `hetch_storage` confines them and
//! checked against their listing after every block.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use hetch_integrity::Algorithm;
use hetch_storage::walk::SourceEntry;

use crate::StoreError;

/// What listing an origin hands on.
pub enum Found {
    /// An entry, with what reads its bytes (files).
    Entry(SourceEntry, Option<Arc<dyn OriginFile>>),
    /// An entry that cannot be copied, as one line naming it.
    Error(String),
}

/// A place a transfer reads entries from.
pub trait Origin: Send + Sync {
    /// How the operand is shown (a URL).
    fn name(&self) -> String;

    /// Reads worth having in flight at once: a service a round trip away wants many.
    fn concurrent_reads(&self) -> usize;

    /// Lists the operand (called on a blocking thread), handing every entry to
    /// `found` until it returns false (the session is over). An error about the whole
    /// origin (credentials, a missing bucket) ends the session; errors about single
    /// entries are [`Found::Error`].
    fn list(&self, found: &mut dyn FnMut(Found) -> bool) -> Result<(), StoreError>;
}

/// The bytes of one listed file.
pub trait OriginFile: Send + Sync {
    /// Reads `buf.len()` bytes at `offset`; fails, naming the entry, when it changed
    /// since it was listed.
    fn read<'a>(&'a self, offset: u64, buf: &'a mut [u8]) -> BoxFuture<'a, Result<(), String>>;

    /// Reads consecutive bytes from `offset` into `bufs`, filling each in turn (the
    /// blocks of a run), as one request where the origin can: a service a round trip
    /// away then pays one request for the run, not one per block. As [`Self::read`]
    /// by default.
    fn read_run<'a, 'b: 'a>(
        &'a self,
        offset: u64,
        bufs: &'a mut [&'b mut [u8]],
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let mut at = offset;
            for buf in bufs.iter_mut() {
                self.read(at, buf).await?;
                at += buf.len() as u64;
            }
            Ok(())
        })
    }

    /// The whole-file digest of its `size` bytes, as `algo` computes it with blocks of
    /// `block_size`, from its bytes.
    fn digest(
        &self,
        size: u64,
        algo: Algorithm,
        block_size: u64,
    ) -> BoxFuture<'_, Result<Vec<u8>, String>>;
}

impl std::fmt::Debug for dyn Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}
