//! Block and file digests.
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
//!
//! # Why blocks line up with the BLAKE3 tree
//!
//! BLAKE3 hashes 1 KiB chunks, then joins them in a binary tree whose left subtree
//! always holds the largest power-of-two number of chunks strictly less than the total.
//! With a power-of-two block size of at least one chunk, every full block is an aligned,
//! complete subtree of that tree, and the tree *above* the blocks has exactly the same
//! shape as a BLAKE3 tree whose leaves are the blocks (only the last one may be short).
//! So blocks can be hashed independently and merged like chunks.

use std::collections::BTreeMap;

use blake3::hazmat::{merge_subtrees_non_root, merge_subtrees_root, HasherExt, Mode};

mod algo;
mod manifest;
pub use algo::{Algorithm, Hasher};
pub use manifest::{b3sum_checks, manifest_line, parse_manifest_line, ManifestLine};

/// Smallest block size: one BLAKE3 chunk.
pub const MIN_BLOCK_SIZE: u64 = 1024;
/// Largest block size.
pub const MAX_BLOCK_SIZE: u64 = 256 << 20;

// A block smaller than a chunk would not be a BLAKE3 subtree at all.
const _: () = assert!(MIN_BLOCK_SIZE == blake3::CHUNK_LEN as u64);

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

/// Lowercase hex of a digest, as checksum tools print it.
pub fn to_hex(digest: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(digest.len() * 2);
    for b in digest {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Checks that `block_size` is a power of two in `MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE`.
pub fn check_block_size(block_size: u64) -> Result<(), IntegrityError> {
    if block_size.is_power_of_two() && (MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) {
        Ok(())
    } else {
        Err(IntegrityError::BadBlockSize(block_size))
    }
}

/// Number of blocks of a file of `file_len` bytes: `max(1, ceil(file_len / block_size))`.
///
/// `block_size` must be valid (see [`check_block_size`]); in particular it must not be 0.
pub fn block_count(file_len: u64, block_size: u64) -> u64 {
    // The empty file still has one (empty) block, so that it has a digest to send,
    // journal and check like any other file.
    file_len.div_ceil(block_size).max(1)
}

/// Length of block `index` of a file of `file_len` bytes.
///
/// Blocks past the end of the file (`index >= block_count(..)`) have length 0, as does
/// the single block of the empty file. `block_size` must be valid (see
/// [`check_block_size`]).
pub fn block_len(file_len: u64, block_size: u64, index: u64) -> u64 {
    // Saturate rather than overflow: a huge index is simply past the end.
    let start = index.saturating_mul(block_size);
    file_len.saturating_sub(start).min(block_size)
}

/// Digest of block `index` (whose bytes are `data`) of a file of `file_len` bytes.
///
/// # Panics
///
/// If `block_size` is invalid (see [`check_block_size`]), `index` is outside the file,
/// or `data.len()` differs from [`block_len`]`(file_len, block_size, index)`. These are
/// caller bugs: a wrong-length block would otherwise yield a meaningless digest (or a
/// panic deep inside `blake3`), so callers must check lengths of received data first.
pub fn block_digest(file_len: u64, block_size: u64, index: u64, data: &[u8]) -> Digest {
    if let Err(e) = check_block_size(block_size) {
        panic!("block_digest: {e}");
    }
    let blocks = block_count(file_len, block_size);
    assert!(
        index < blocks,
        "block_digest: block {index} is outside a file of {blocks} blocks"
    );
    let expected = block_len(file_len, block_size, index);
    assert_eq!(
        data.len() as u64,
        expected,
        "block_digest: block {index} must be {expected} bytes"
    );
    if blocks == 1 {
        // The only block is the whole file, so it is the root of the tree and must be
        // hashed with root flags: its chaining value would never equal b3sum's output
        // (and the empty file has no chaining value at all).
        return *blake3::hash(data).as_bytes();
    }
    // `index < blocks` and `blocks * block_size` covers the file, so this cannot
    // overflow for any `file_len` that fits in a u64.
    let offset = index * block_size;
    let mut hasher = blake3::Hasher::new();
    hasher.set_input_offset(offset);
    hasher.update(data);
    hasher.finalize_non_root()
}

/// Merges block digests, added in any order, into the whole-file BLAKE3 hash.
///
/// Memory is bounded by the number of blocks added out of order plus O(log blocks):
/// digests are merged as soon as their left neighbours are known.
///
/// # How the merge matches the BLAKE3 tree
///
/// Blocks `0..prefix` that have all arrived are kept as a stack of complete, aligned
/// power-of-two subtrees (one per set bit of `prefix`, largest first), like the chaining
/// value stack of `blake3::Hasher`. Such subtrees are always interior nodes of the final
/// tree, so they are merged eagerly with non-root merges. `blake3::Hasher` must keep its
/// last subtree unmerged because it does not know whether more input follows (the merge
/// might be the root); here the block count is known, so only the arrival of the *last*
/// block triggers the final fold: it is merged right to left with every subtree on the
/// stack, the last of those merges being the root. That fold reproduces BLAKE3's "left
/// subtree = largest power of two strictly less than the total" rule exactly.
#[derive(Debug)]
pub struct FileDigest {
    /// Blocks in the file.
    blocks: u64,
    /// Set when the block size given to [`FileDigest::new`] was invalid: every later
    /// call reports it, since `new` itself cannot fail.
    bad_block_size: Option<u64>,
    /// Blocks `0..prefix` have been merged into `stack` (or `root`).
    prefix: u64,
    /// Chaining values of the complete subtrees covering blocks `0..prefix`, largest
    /// (leftmost) first. At most 64 entries.
    stack: Vec<Digest>,
    /// Digests of blocks at or after `prefix + 1` that arrived early.
    pending: BTreeMap<u64, Digest>,
    /// The whole-file hash, once every block was merged.
    root: Option<Digest>,
}

impl FileDigest {
    /// A merger for a file of `file_len` bytes cut into `block_size` blocks.
    ///
    /// An invalid `block_size` is not reported here but by every later call to
    /// [`add`](Self::add) and [`finish`](Self::finish), as
    /// [`IntegrityError::BadBlockSize`].
    pub fn new(file_len: u64, block_size: u64) -> Self {
        let bad_block_size = check_block_size(block_size).err().map(|_| block_size);
        // Avoid dividing by a zero block size; the count is unused when it is bad.
        let blocks = if bad_block_size.is_some() {
            1
        } else {
            block_count(file_len, block_size)
        };
        Self {
            blocks,
            bad_block_size,
            prefix: 0,
            stack: Vec::new(),
            pending: BTreeMap::new(),
            root: None,
        }
    }

    /// Adds the digest of block `index`. Adding the same index twice keeps the first.
    pub fn add(&mut self, index: u64, digest: Digest) -> Result<(), IntegrityError> {
        self.check_block_size()?;
        if index >= self.blocks {
            return Err(IntegrityError::BlockOutOfRange {
                index,
                blocks: self.blocks,
            });
        }
        if index < self.prefix {
            // Already merged: a duplicate, which keeps the first digest.
            return Ok(());
        }
        if index > self.prefix {
            // Ahead of the contiguous prefix: park it until its left neighbours come.
            // `or_insert` keeps the first digest for a duplicate.
            self.pending.entry(index).or_insert(digest);
            return Ok(());
        }
        self.push(digest);
        // The prefix advanced: drain every parked block that now continues it.
        while let Some(next) = self.pending.remove(&self.prefix) {
            self.push(next);
        }
        Ok(())
    }

    /// Number of blocks whose digest has not been added yet.
    pub fn missing(&self) -> u64 {
        self.blocks - self.prefix - self.pending.len() as u64
    }

    /// The whole-file BLAKE3 hash, once every block was added.
    pub fn finish(self) -> Result<Digest, IntegrityError> {
        self.check_block_size()?;
        self.root.ok_or(IntegrityError::Incomplete {
            missing: self.missing(),
            blocks: self.blocks,
        })
    }

    fn check_block_size(&self) -> Result<(), IntegrityError> {
        match self.bad_block_size {
            Some(size) => Err(IntegrityError::BadBlockSize(size)),
            None => Ok(()),
        }
    }

    /// Merges the digest of block `self.prefix` and advances the prefix.
    fn push(&mut self, digest: Digest) {
        self.prefix += 1;
        if self.prefix < self.blocks {
            // Not the last block: every subtree completed by this block is an interior
            // node of the final tree (it is strictly smaller than the whole file), so
            // merge now with non-root merges. After merging, the stack holds one subtree
            // per set bit of `prefix`; the merges needed are the trailing zeros of
            // `prefix`, each joining two equal-sized neighbours.
            self.stack.push(digest);
            let keep = self.prefix.count_ones() as usize;
            while self.stack.len() > keep {
                let right = self.stack.pop().expect("stack holds more than `keep`");
                let left = self.stack.pop().expect("stack holds more than `keep`");
                self.stack
                    .push(merge_subtrees_non_root(&left, &right, Mode::Hash));
            }
            return;
        }
        // The last block (possibly short). The stack holds the subtrees for
        // `blocks - 1` in decreasing sizes; folding right to left builds exactly the
        // right edge of the BLAKE3 tree: the left child of every node on that edge is
        // the largest power of two strictly smaller than the node. The final merge is
        // the root. With a single block there is nothing to merge and the digest is
        // already the root hash (see `block_digest`).
        let mut acc = digest;
        while let Some(left) = self.stack.pop() {
            acc = if self.stack.is_empty() {
                *merge_subtrees_root(&left, &acc, Mode::Hash).as_bytes()
            } else {
                merge_subtrees_non_root(&left, &acc, Mode::Hash)
            };
        }
        self.root = Some(acc);
    }
}

#[cfg(test)]
mod tests;
