//! The file the checks push and pull: pseudo-random bytes (incompressible, so the data
//! path does real work), the same for every run.

use std::path::Path;

use anyhow::{Context, Result};

/// Writes `len` pseudo-random bytes to `path`.
pub fn write(path: &Path, len: usize) -> Result<()> {
    let mut x = 0x9E37_79B9_7F4A_7C15_u64;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    bytes.truncate(len);
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}
