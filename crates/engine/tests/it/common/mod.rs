//! Helpers shared by the engine's integration tests: options for small blocks, a
//! mixed tree with every boundary case, and a tree comparison.

use std::path::Path;

use hetch_engine::{DestSpec, Options};

pub fn opts() -> Options {
    Options {
        block_size: 64 << 10,
        buffer_memory: 1 << 20,
        ..Options::default()
    }
}

pub fn dest(p: &Path, sources: u32) -> DestSpec {
    DestSpec {
        path: p.to_path_buf(),
        sources,
        trailing_slash: false,
        confine_to: None,
        as_operand: false,
    }
}

/// Deterministic pseudo-random bytes (`n` of them, from `seed`).
pub fn bytes(seed: u64, n: usize) -> Vec<u8> {
    hetch_testkit::data::random_bytes(n, seed)
}

pub use hetch_testkit::tree::mixed_tree as make_tree;
pub use hetch_testkit::tree::{assert_same_tree, walk};
