//! Block and file digests (SPEC ONLY: bodies to be written).
//!
//! A file is cut into blocks of `block_size` bytes (a power of two, at least
//! [`MIN_BLOCK_SIZE`] = one BLAKE3 chunk), the last one possibly shorter. Each block's
//! digest is computed in the same pass that reads it:
//! - a file that fits in one block (including the empty file, which is one empty block)
//!   has as its block digest the standard BLAKE3 hash of its bytes;
//! - otherwise each block's digest is the BLAKE3 *chaining value* of that block as a
//!   subtree at its offset (`blake3::hazmat`), so that [`FileDigest`] can merge the
//!   block digests, received in any order, into the standard BLAKE3 hash of the whole
//!   file: the value `b3sum` prints.
//!
//! The same digest is checked on the wire, recorded in the receiver's journal for
//! resume, and merged into the whole-file digest: one record serves all three.

/// Smallest block size: one BLAKE3 chunk.
pub const MIN_BLOCK_SIZE: u64 = 1024;
/// Largest block size.
pub const MAX_BLOCK_SIZE: u64 = 256 << 20;

/// A 32-byte digest.
pub type Digest = [u8; 32];

/// Errors of this crate.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IntegrityError {
    /// The block size is not a power of two within limits.
    #[error("block size {0} must be a power of two between 1 KiB and 256 MiB")]
    BadBlockSize(u64),
    /// A block index outside the file.
    #[error("block {index} is outside a file of {blocks} blocks")]
    BlockOutOfRange {
        /// Index given.
        index: u64,
        /// Blocks in the file.
        blocks: u64,
    },
    /// `finish` was called before every block was added.
    #[error("{missing} of {blocks} blocks have no digest yet")]
    Incomplete {
        /// Blocks still missing.
        missing: u64,
        /// Blocks in the file.
        blocks: u64,
    },
}

/// Checks that `block_size` is a power of two in `MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE`.
pub fn check_block_size(_block_size: u64) -> Result<(), IntegrityError> {
    todo!()
}

/// Number of blocks of a file of `file_len` bytes: `max(1, ceil(file_len / block_size))`.
pub fn block_count(_file_len: u64, _block_size: u64) -> u64 {
    todo!()
}

/// Length of block `index` of a file of `file_len` bytes.
pub fn block_len(_file_len: u64, _block_size: u64, _index: u64) -> u64 {
    todo!()
}

/// Digest of block `index` (whose bytes are `data`) of a file of `file_len` bytes.
pub fn block_digest(_file_len: u64, _block_size: u64, _index: u64, _data: &[u8]) -> Digest {
    todo!()
}

/// Merges block digests, added in any order, into the whole-file BLAKE3 hash.
///
/// Memory is bounded by the number of blocks added out of order plus O(log blocks):
/// digests are merged as soon as their left neighbours are known.
#[derive(Debug)]
pub struct FileDigest {
    _private: (),
}

impl FileDigest {
    /// A merger for a file of `file_len` bytes cut into `block_size` blocks.
    pub fn new(_file_len: u64, _block_size: u64) -> Self {
        todo!()
    }

    /// Adds the digest of block `index`. Adding the same index twice keeps the first.
    pub fn add(&mut self, _index: u64, _digest: Digest) -> Result<(), IntegrityError> {
        todo!()
    }

    /// The whole-file BLAKE3 hash, once every block was added.
    pub fn finish(self) -> Result<Digest, IntegrityError> {
        todo!()
    }
}
