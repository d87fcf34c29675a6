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

/// What one store takes of a multipart object: its parts' sizes and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartLimits {
    /// Smallest part, but for the last.
    pub min_part: u64,
    /// Largest part.
    pub max_part: u64,
    /// Most parts of one object.
    pub max_parts: u64,
}

impl PartLimits {
    /// The limits of `scheme`'s store: S3 and GCS (XML multipart): parts of 5 MiB to
    /// 5 GiB, at most 10,000; Azure blocks: at most 4,000 MiB, at most 50,000 (no
    /// smallest, but 5 MiB is kept as a floor: smaller parts only cost requests).
    pub fn of(scheme: crate::Scheme) -> PartLimits {
        match scheme {
            crate::Scheme::S3 | crate::Scheme::Gcs => PartLimits {
                min_part: MIN_PART,
                max_part: MAX_PART,
                max_parts: MAX_PARTS,
            },
            crate::Scheme::Azure => PartLimits {
                min_part: MIN_PART,
                max_part: 4000 << 20,
                max_parts: 50_000,
            },
        }
    }

    /// How a file of `size` bytes in blocks of `block_size` is cut when several
    /// writers move it in ranges of about `wanted` blocks into one multipart object:
    /// parts of [`PartPlan`]'s size (a power of two of blocks, at least
    /// [`PartLimits::min_part`], doubled until the parts are at most
    /// [`PartLimits::max_parts`]), and ranges of whole parts (`wanted` rounded up),
    /// at most `max_blocks` (what one range may carry). A writer then holds one part
    /// at a time, whatever the range's size. One line naming the limit when the file
    /// cannot fit.
    pub fn cut(
        &self,
        size: u64,
        block_size: u64,
        wanted: u64,
        max_blocks: u64,
    ) -> Result<RangeCut, String> {
        let bs = block_size.max(1);
        let blocks = size.div_ceil(bs).max(1);
        let mut k = TARGET_PART
            .max(self.min_part)
            .div_ceil(bs)
            .next_power_of_two();
        while blocks.div_ceil(k) > self.max_parts {
            k = k.saturating_mul(2);
        }
        let part = k.saturating_mul(bs);
        if part > self.max_part && blocks > k {
            return Err(format!(
                "{size} bytes need parts of {part} bytes to stay within {} parts, over the \
                 store's {}-byte part limit",
                self.max_parts, self.max_part
            ));
        }
        let range = wanted.max(1).div_ceil(k).saturating_mul(k);
        if range > max_blocks && blocks > max_blocks {
            return Err(format!(
                "{size} bytes need ranges of at least {range} blocks of {bs} bytes (whole \
                 parts), over the {max_blocks} blocks one range may carry: use a larger \
                 block size"
            ));
        }
        Ok(RangeCut {
            part_blocks: k.min(blocks),
            range_blocks: range.min(blocks),
        })
    }
}

/// How a file moved in ranges into a multipart object is cut (see [`PartLimits::cut`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeCut {
    /// Blocks per part (the last part may have fewer); part `n` holds blocks
    /// `n * part_blocks..`.
    pub part_blocks: u64,
    /// Blocks per range, a multiple of `part_blocks` (the last range may have fewer).
    pub range_blocks: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_into_object_stores_respect_their_part_limits() {
        let mib = 1u64 << 20;
        let s3 = PartLimits::of(crate::Scheme::S3);
        let az = PartLimits::of(crate::Scheme::Azure);
        let cut = |part_blocks, range_blocks| RangeCut {
            part_blocks,
            range_blocks,
        };
        // Parts of 8 MiB; ranges of 4 blocks of 1 MiB are too small for one: 8.
        assert_eq!(s3.cut(64 * mib, mib, 4, 1 << 20), Ok(cut(8, 8)));
        // Ranges of 64 blocks of 4 MiB: 32 parts of 8 MiB each.
        assert_eq!(s3.cut(1 << 30, 4 * mib, 64, 1 << 20), Ok(cut(2, 64)));
        // Ranges are whole parts: 5 blocks of 4 MiB become 6.
        assert_eq!(s3.cut(1 << 30, 4 * mib, 5, 1 << 20), Ok(cut(2, 6)));
        // A small file: one part and one range of all its blocks.
        assert_eq!(s3.cut(3 * mib, mib, 64, 1 << 20), Ok(cut(3, 3)));
        // 5 TiB: within 10,000 parts of S3 and 50,000 of Azure, each within limits.
        for (l, bs) in [(s3, 4 * mib), (az, 4 * mib), (s3, 64 * 1024)] {
            let size = 5u64 << 40;
            let c = l.cut(size, bs, 1, u64::MAX).unwrap();
            assert!(
                size.div_ceil(bs).div_ceil(c.part_blocks) <= l.max_parts,
                "{l:?}"
            );
            let part = c.part_blocks * bs;
            assert!(part <= l.max_part && part >= l.min_part, "{l:?} {bs}");
            assert_eq!(c.range_blocks % c.part_blocks, 0);
        }
        // Beyond 10,000 parts of 5 GiB: refused in one line naming the limit.
        let e = s3.cut(60 << 40, 4 * mib, 1, u64::MAX).unwrap_err();
        assert!(e.contains("part limit") && !e.contains('\n'), "{e}");
        // Azure takes more parts: 60 TiB fits its 50,000 blocks.
        assert!(az.cut(60 << 40, 4 * mib, 1, u64::MAX).is_ok());
        // A range may carry only so many blocks.
        let e = s3.cut(1 << 40, 4096, 1, 1024).unwrap_err();
        assert!(e.contains("larger block size"), "{e}");
    }

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
