//! Cutting an object into multipart-upload parts made of whole transfer blocks.

/// S3's smallest part (all but the last part of an upload).
pub const MIN_PART: u64 = 5 << 20;
/// S3's largest part.
pub const MAX_PART: u64 = 5 << 30;
/// S3's most parts per upload.
pub const MAX_PARTS: u64 = 10_000;
/// Part size hetch aims for: big enough for few requests, small enough that many
/// parts of one object upload at once.
pub const TARGET_PART: u64 = 8 << 20;

/// How an object of `size` bytes is uploaded, in blocks of `block_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartPlan {
    /// Blocks per part (the last part may have fewer).
    pub part_blocks: u64,
    /// Number of parts; 1 means a single PUT.
    pub parts: u64,
}

impl PartPlan {
    /// Chooses whole blocks per part: at least [`TARGET_PART`] bytes, few enough parts
    /// for S3's limit, and a power of two so that parts line up with the source's reading
    /// turns (blocks of one part then arrive together). Objects of one part go in a
    /// single request.
    pub fn new(size: u64, block_size: u64) -> Result<PartPlan, String> {
        let bs = block_size.max(1);
        let blocks = size.div_ceil(bs).max(1);
        let mut k = TARGET_PART.div_ceil(bs).max(1).next_power_of_two();
        while blocks.div_ceil(k) > MAX_PARTS {
            k *= 2;
        }
        if k * bs > MAX_PART && blocks > k {
            return Err(format!(
                "{size} bytes need parts of {} bytes, over S3's 5 GiB part limit",
                k * bs
            ));
        }
        Ok(PartPlan {
            part_blocks: k,
            parts: blocks.div_ceil(k),
        })
    }

    /// Whether the object goes up in one request.
    pub fn single(&self) -> bool {
        self.parts <= 1
    }

    /// The part holding `block`.
    pub fn part_of(&self, block: u64) -> u64 {
        block / self.part_blocks
    }

    /// The blocks of `part`, of `blocks` in all.
    pub fn blocks_of(&self, part: u64, blocks: u64) -> std::ops::Range<u64> {
        let start = part * self.part_blocks;
        start..(start + self.part_blocks).min(blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_respect_s3_limits() {
        let mib = 1u64 << 20;
        // Small objects: one request.
        assert!(PartPlan::new(0, 4 * mib).unwrap().single());
        assert!(PartPlan::new(8 * mib, 4 * mib).unwrap().single());
        // 1 GiB in 4 MiB blocks: 8 MiB parts.
        let p = PartPlan::new(1 << 30, 4 * mib).unwrap();
        assert_eq!((p.part_blocks, p.parts), (2, 128));
        assert_eq!(p.blocks_of(127, 256), 254..256);
        assert_eq!(p.part_of(255), 127);
        // Small blocks still make parts of at least 5 MiB.
        let p = PartPlan::new(100 * mib, 64 * 1024).unwrap();
        assert!(p.part_blocks * 64 * 1024 >= MIN_PART);
        // 5 TiB: within 10,000 parts, each within 5 GiB.
        for bs in [64 * 1024, 4 * mib, 16 * mib] {
            let size = 5u64 << 40;
            let p = PartPlan::new(size, bs).unwrap();
            assert!(p.parts <= MAX_PARTS, "{bs}: {p:?}");
            assert!(p.part_blocks * bs <= MAX_PART, "{bs}: {p:?}");
            assert!(p.part_blocks.is_power_of_two());
        }
    }
}
