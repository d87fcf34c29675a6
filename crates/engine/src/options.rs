//! Settings of a transfer that both sides must agree on or that tune one side.

use std::sync::Arc;

pub use hetch_integrity::Algorithm;
pub use hetch_proto::{Schedule, Verify};

use crate::manifest::Manifest;

/// Transfer settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Block size in bytes (power of two, at least 1 KiB).
    pub block_size: u64,
    /// Files read (source) concurrently; also the number of block readers.
    pub concurrency: usize,
    /// Blocks written concurrently on the sink.
    pub writers: usize,
    /// Bytes of block buffers each side may hold at once.
    pub buffer_memory: usize,
    /// Cap on the data rate in bytes per second (0 = none).
    pub rate_limit: u64,
    /// Refuse to replace existing files that differ.
    pub no_clobber: bool,
    /// fdatasync every file before it is renamed into place.
    pub fsync: bool,
    /// How often one block may be re-sent after failing its check.
    pub max_retries: u32,
    /// Algorithm of block and whole-file digests.
    pub checksum: Algorithm,
    /// What the sink checks before a block counts as done.
    pub verify: Verify,
    /// When the sink checks (for [`Verify::Written`]).
    pub schedule: Schedule,
    /// Threads that hash at once on this side.
    pub hash_threads: usize,
    /// The sink reports each finished (or skipped) file's whole-file digest.
    pub file_digests: bool,
    /// Skip an existing destination file only when its whole-file digest matches.
    pub checksum_skip: bool,
    /// Compare source and destination only; write nothing.
    pub compare_only: bool,
    /// Where this side writes manifest lines (the client side of a session).
    pub manifest: Option<Arc<Manifest>>,
    /// Test-only fault hook: flip one bit in this many of the first data blocks the
    /// source sends, after hashing them (simulates corruption in flight).
    pub corrupt_blocks: u64,
    /// Test-only fault hook: flip one bit in the destination file after writing each
    /// of this many of the first blocks (simulates storage damage, which only
    /// `--verify written` can see).
    pub corrupt_written: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            block_size: 4 << 20,
            concurrency: 4,
            writers: 4,
            buffer_memory: 64 << 20,
            rate_limit: 0,
            no_clobber: false,
            fsync: false,
            max_retries: 3,
            checksum: Algorithm::Blake3,
            verify: Verify::Written,
            schedule: Schedule::Block,
            hash_threads: default_hash_threads(),
            file_digests: false,
            checksum_skip: false,
            compare_only: false,
            manifest: None,
            corrupt_blocks: 0,
            corrupt_written: 0,
        }
    }
}

impl Options {
    /// Buffer memory actually used: at least enough for a few blocks in each direction.
    pub fn effective_buffer_memory(&self) -> usize {
        self.buffer_memory.max(4 * self.block_size as usize)
    }
}

/// One hashing thread per CPU.
pub fn default_hash_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}
