//! Settings of a transfer that both sides must agree on or that tune one side.

/// Transfer settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Block size in bytes (power of two, at least 1 KiB).
    pub block_size: u64,
    /// Files read (source) concurrently; also the number of block readers.
    pub concurrency: usize,
    /// Blocks written and verified concurrently on the sink.
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
    /// Test-only fault hook: flip one bit in this many of the first data blocks the
    /// source sends, after hashing them (simulates corruption in flight).
    pub corrupt_blocks: u64,
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
            corrupt_blocks: 0,
        }
    }
}

impl Options {
    /// Buffer memory actually used: at least enough for a few blocks in each direction.
    pub fn effective_buffer_memory(&self) -> usize {
        self.buffer_memory.max(4 * self.block_size as usize)
    }
}
