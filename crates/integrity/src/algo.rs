//! Checksum algorithms behind one interface, chosen by name (`--checksum ALGO`).
//!
//! BLAKE3 is the default and the only one whose block digests merge into a whole-file
//! digest in any order (see [`crate::FileDigest`]); the others are computed over the
//! file in order. Digests display as lowercase hex, big-endian for the integer ones
//! (CRC32C, Adler-32), as `crc32c`/`cksum`-style tools print them.

use std::fmt;
use std::str::FromStr;

use md5::Digest as _;

/// A checksum algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// BLAKE3 (256 bits), the default.
    Blake3,
    /// XXH3, 128-bit variant (fast, not cryptographic).
    Xxh3,
    /// CRC-32C (Castagnoli), as S3 and iSCSI use it.
    Crc32c,
    /// MD5 (128 bits; for compatibility with existing manifests only).
    Md5,
    /// SHA-256.
    Sha256,
    /// Adler-32 (cheap, weak; as some grid tools use it).
    Adler32,
}

impl Algorithm {
    /// Every algorithm, in the order the help text lists them.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::Blake3,
        Algorithm::Xxh3,
        Algorithm::Crc32c,
        Algorithm::Md5,
        Algorithm::Sha256,
        Algorithm::Adler32,
    ];

    /// The name used on the command line and in manifests.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Blake3 => "blake3",
            Algorithm::Xxh3 => "xxh3",
            Algorithm::Crc32c => "crc32c",
            Algorithm::Md5 => "md5",
            Algorithm::Sha256 => "sha256",
            Algorithm::Adler32 => "adler32",
        }
    }

    /// Length of a digest in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            Algorithm::Blake3 | Algorithm::Sha256 => 32,
            Algorithm::Xxh3 | Algorithm::Md5 => 16,
            Algorithm::Crc32c | Algorithm::Adler32 => 4,
        }
    }

    /// A small number naming the algorithm in on-disk records (journals); never
    /// renumber. BLAKE3 is 0.
    pub fn id(self) -> u8 {
        match self {
            Algorithm::Blake3 => 0,
            Algorithm::Xxh3 => 1,
            Algorithm::Crc32c => 2,
            Algorithm::Md5 => 3,
            Algorithm::Sha256 => 4,
            Algorithm::Adler32 => 5,
        }
    }

    /// Whether block digests merge into the whole-file digest in any order (BLAKE3);
    /// the others need the file's bytes in order.
    pub fn merges_blocks(self) -> bool {
        self == Algorithm::Blake3
    }

    /// The digest of block `index` (bytes `data`) of a file of `file_len` bytes, in the
    /// 32-byte form that travels with the block and is journaled: for BLAKE3 the block
    /// digest of [`crate::block_digest`] (mergeable); for the others the algorithm's
    /// digest of the block's bytes, zero-padded to 32 bytes.
    ///
    /// # Panics
    ///
    /// As [`crate::block_digest`] for BLAKE3 (wrong length or index).
    pub fn block_digest(
        self,
        file_len: u64,
        block_size: u64,
        index: u64,
        data: &[u8],
    ) -> crate::Digest {
        if self == Algorithm::Blake3 {
            return crate::block_digest(file_len, block_size, index, data);
        }
        let mut out = [0u8; 32];
        let d = self.digest(data);
        out[..d.len()].copy_from_slice(&d);
        out
    }

    /// A hasher for data fed in order.
    pub fn hasher(self) -> Hasher {
        Hasher(match self {
            Algorithm::Blake3 => State::Blake3(Box::new(blake3::Hasher::new())),
            Algorithm::Xxh3 => State::Xxh3(Box::new(xxhash_rust::xxh3::Xxh3::new())),
            Algorithm::Crc32c => State::Crc32c(0),
            Algorithm::Md5 => State::Md5(md5::Md5::new()),
            Algorithm::Sha256 => State::Sha256(sha2::Sha256::new()),
            Algorithm::Adler32 => State::Adler32(adler2::Adler32::new()),
        })
    }

    /// The digest of `data` in one call.
    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        let mut h = self.hasher();
        h.update(data);
        h.finish()
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let wanted = s.trim().to_ascii_lowercase().replace(['-', '_'], "");
        Algorithm::ALL
            .into_iter()
            .find(|a| {
                a.name().replace(['-', '_'], "") == wanted
                    || (wanted == "xxh3128" && *a == Algorithm::Xxh3)
            })
            .ok_or_else(|| {
                let names: Vec<_> = Algorithm::ALL.iter().map(|a| a.name()).collect();
                format!(
                    "unknown checksum '{s}' (choose one of {})",
                    names.join(", ")
                )
            })
    }
}

enum State {
    Blake3(Box<blake3::Hasher>),
    Xxh3(Box<xxhash_rust::xxh3::Xxh3>),
    Crc32c(u32),
    Md5(md5::Md5),
    Sha256(sha2::Sha256),
    Adler32(adler2::Adler32),
}

/// An in-order hasher for one [`Algorithm`].
pub struct Hasher(State);

impl Hasher {
    /// Feeds bytes.
    pub fn update(&mut self, data: &[u8]) {
        match &mut self.0 {
            State::Blake3(h) => {
                h.update(data);
            }
            State::Xxh3(h) => h.update(data),
            State::Crc32c(c) => *c = crc32c::crc32c_append(*c, data),
            State::Md5(h) => h.update(data),
            State::Sha256(h) => h.update(data),
            State::Adler32(h) => h.write_slice(data),
        }
    }

    /// The digest of everything fed.
    pub fn finish(self) -> Vec<u8> {
        match self.0 {
            State::Blake3(h) => h.finalize().as_bytes().to_vec(),
            State::Xxh3(h) => h.digest128().to_be_bytes().to_vec(),
            State::Crc32c(c) => c.to_be_bytes().to_vec(),
            State::Md5(h) => h.finalize().to_vec(),
            State::Sha256(h) => h.finalize().to_vec(),
            State::Adler32(h) => h.checksum().to_be_bytes().to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::to_hex as hex;

    #[test]
    fn known_answers() {
        // Published test vectors.
        assert_eq!(
            hex(&Algorithm::Md5.digest(b"abc")),
            "900150983cd24fb0d6963f7d28e17f72"
        );
        assert_eq!(
            hex(&Algorithm::Sha256.digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(hex(&Algorithm::Crc32c.digest(b"123456789")), "e3069283");
        assert_eq!(hex(&Algorithm::Adler32.digest(b"Wikipedia")), "11e60398");
        assert_eq!(
            hex(&Algorithm::Blake3.digest(b"")),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
        assert_eq!(
            hex(&Algorithm::Xxh3.digest(b"")),
            "99aa06d3014798d86001c324468d497f"
        );
    }

    #[test]
    fn split_updates_equal_one_shot() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 251) as u8).collect();
        for a in Algorithm::ALL {
            let mut h = a.hasher();
            for chunk in data.chunks(7919) {
                h.update(chunk);
            }
            let d = h.finish();
            assert_eq!(d, a.digest(&data), "{a}");
            assert_eq!(d.len(), a.digest_len(), "{a}");
        }
    }

    #[test]
    fn block_digests_are_padded_digests_of_the_block() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 253) as u8).collect();
        for a in Algorithm::ALL {
            let d = a.block_digest(5000 + 4096, 4096, 1, &data[..4096]);
            if a == Algorithm::Blake3 {
                assert_eq!(d, crate::block_digest(5000 + 4096, 4096, 1, &data[..4096]));
            } else {
                let n = a.digest_len();
                assert_eq!(&d[..n], &a.digest(&data[..4096])[..], "{a}");
                assert!(d[n..].iter().all(|b| *b == 0), "{a}");
            }
        }
        let ids: std::collections::HashSet<u8> = Algorithm::ALL.iter().map(|a| a.id()).collect();
        assert_eq!(ids.len(), Algorithm::ALL.len());
        assert_eq!(Algorithm::Blake3.id(), 0);
    }

    #[test]
    fn names_parse_back() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>().unwrap(), a);
        }
        assert_eq!("SHA-256".parse::<Algorithm>().unwrap(), Algorithm::Sha256);
        assert_eq!("xxh3-128".parse::<Algorithm>().unwrap(), Algorithm::Xxh3);
        let e = "sha1".parse::<Algorithm>().unwrap_err();
        assert!(e.contains("blake3") && e.contains("sha1"), "{e}");
    }
}
