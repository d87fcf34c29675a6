//! The size of a file being received: known, or not yet (it still grows at the source).
//!
//! A growing file's size is unknown until the source seals it. Until then every block
//! is taken as full, and every block digest is a non-root BLAKE3 chaining value, as
//! it will be in the final file; `hetch_integrity` computes such digests when given
//! the length [`u64::MAX`], which only [`Size::digest_len`] passes it.

use hetch_integrity as integrity;

/// The largest file a receiver takes: offsets are `off_t`, so no file can be larger,
/// and a block whose end lies beyond is a number no honest peer sends.
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// The size of a file being received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// It has this many bytes.
    Known(u64),
    /// It still grows at the source: no end is known.
    Growing,
}

impl Size {
    /// The size announced for a file: `growing` files have none yet.
    pub fn announced(size: u64, growing: bool) -> Size {
        match growing {
            true => Size::Growing,
            false => Size::Known(size),
        }
    }

    /// The number of bytes, once known.
    pub fn known(self) -> Option<u64> {
        match self {
            Size::Known(n) => Some(n),
            Size::Growing => None,
        }
    }

    /// Whether the file still grows.
    pub fn is_growing(self) -> bool {
        self == Size::Growing
    }

    /// Blocks of `block_size` in the file; for a growing file, as many full blocks as
    /// fit below the largest offset, so that a block index from a peer can be checked
    /// against it before the end is known.
    pub fn blocks(self, block_size: u64) -> u64 {
        match self {
            Size::Known(n) => integrity::block_count(n, block_size),
            Size::Growing => MAX_FILE_SIZE / block_size.max(1),
        }
    }

    /// The length of block `index` (every block of a growing file is full).
    pub fn block_len(self, block_size: u64, index: u64) -> u64 {
        integrity::block_len(self.digest_len(), block_size, index)
    }

    /// The file length `hetch_integrity` takes for block lengths and digests: a
    /// growing file's is [`u64::MAX`], which makes every block full and every digest
    /// a chaining value (see the module documentation).
    pub fn digest_len(self) -> u64 {
        self.known().unwrap_or(u64::MAX)
    }

    /// Whether `size` is beyond the largest possible file.
    pub fn too_large(size: u64) -> bool {
        size > MAX_FILE_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_growing_file_has_full_blocks_up_to_the_largest_offset() {
        let bs = 4096;
        assert_eq!(Size::Growing.block_len(bs, 12345), bs);
        assert_eq!(Size::Growing.blocks(bs), MAX_FILE_SIZE / bs);
        assert_eq!(Size::Known(5000).blocks(bs), 2);
        assert_eq!(Size::Known(5000).block_len(bs, 1), 904);
        assert_eq!(Size::Known(5000).block_len(bs, 2), 0);
        assert_eq!(Size::announced(7, true), Size::Growing);
        assert_eq!(Size::announced(7, false).known(), Some(7));
    }
}
