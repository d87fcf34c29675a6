//! Test data: deterministic pseudo-random bytes, so that every run of a test moves the
//! same data, and a swapped, lost or misplaced block changes a file's hash.

use std::io::Write;
use std::path::Path;

/// SplitMix64: small, fast, deterministic, and (unlike xorshift) with no bad seed.
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5eed_5eed_5eed_5eed)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// Fills `buf`.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        // A tail of 1-7 bytes takes one more value; none is drawn for an empty tail, so
        // filling in pieces of whole words gives the bytes of filling all at once.
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let last = self.next_u64().to_le_bytes();
            let n = rest.len();
            rest.copy_from_slice(&last[..n]);
        }
    }
}

/// `len` pseudo-random bytes from `seed`.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed).fill(&mut v);
    v
}

/// Writes `len` pseudo-random bytes from `seed` to `path` (created or truncated),
/// 1 MiB at a time, so a large file costs no more memory than a small one; the bytes
/// are those of [`random_bytes`]`(len, seed)`. Panics naming the file on failure.
pub fn write_random(path: &Path, len: u64, seed: u64) {
    let mut f =
        std::fs::File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    let mut rng = Rng::new(seed);
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        rng.fill(&mut buf[..n]);
        f.write_all(&buf[..n])
            .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        left -= n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_give_their_own_bytes_and_a_file_gets_the_same_ones() {
        let a = random_bytes(3 << 20, 1);
        assert!(a == random_bytes(3 << 20, 1));
        assert!(a != random_bytes(3 << 20, 2));
        // No run of one value: a zero or repeated block would hide a misplaced one.
        assert!(a.windows(16).all(|w| w.iter().any(|b| *b != w[0])));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        write_random(&f, (3 << 20) + 5, 7);
        let same = std::fs::read(&f).unwrap() == random_bytes((3 << 20) + 5, 7);
        assert!(same, "the file's bytes are not random_bytes'");
    }
}
