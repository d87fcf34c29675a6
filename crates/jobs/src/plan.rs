//! Cutting a job's listing into work units.
//!
//! Small files go in batches (bounded by count and by bytes, so that one unit is a
//! few seconds of one node's work whatever the file sizes); a file larger than the
//! split size becomes block ranges that several nodes move at once, plus one commit
//! unit that checks and renames it once every range is done. Files are fed in
//! listing order and units come out as soon as they are whole, so a listing of
//! millions of files is planned in memory bounded by one batch.
//!
//! Nothing a listing holds sizes the plan beyond the planner's bounds: a file may be
//! cut into at most [`Planner::max_ranges`] ranges and a job into at most
//! [`Planner::max_units`] units (a sparse file of 2^63-1 bytes would otherwise be
//! billions of ranges), and no range is longer than [`MAX_RANGE_BLOCKS`] blocks, what
//! one range session may carry. Past a bound, planning stops with a [`PlanError`].

use serde::{Deserialize, Serialize};

/// One unit of work, as planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum UnitSpec {
    /// Files `first..end` of the listing (by their index in it), whole.
    Files {
        /// The first file's index.
        first: u64,
        /// One past the last file's index.
        end: u64,
        /// Their bytes.
        bytes: u64,
    },
    /// Blocks `first..end` of file `file`.
    Range {
        /// The file's index in the listing.
        file: u64,
        /// The first block.
        first: u64,
        /// One past the last block.
        end: u64,
    },
    /// File `file`, all of whose `ranges` ranges are done: check it whole and give it
    /// its final name.
    Commit {
        /// The file's index in the listing.
        file: u64,
        /// How many range units it waits for.
        ranges: u64,
    },
    /// Source operand `operand` of a copy between two servers, whole: the source
    /// server pushes it to the destination server at a worker's request (a
    /// third-party copy, which the service does not list: it cannot see the source).
    Relay {
        /// The operand's index in the job's sources.
        operand: u64,
    },
    /// Source operand `operand` of a streaming job, followed while its files are
    /// written (never listed: its files are still growing, or still to appear).
    Stream {
        /// The operand's index in the job's sources.
        operand: u64,
    },
    /// The deletion step of a mirroring job (`--sync`): once every other unit of the
    /// job is done, remove what the destination holds below the copied trees and the
    /// sources lack (`hetch sync`'s meaning, `--max-delete` included). Planned last,
    /// claimable only then.
    Delete {},
}

/// How a listing is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planner {
    /// Files per batch, at most (at least 1).
    pub batch_files: u64,
    /// Bytes per batch, at most, unless one file alone is larger.
    pub batch_bytes: u64,
    /// Files larger than this are moved in ranges by several nodes.
    pub split_size: u64,
    /// Bytes per range (rounded down to whole blocks, at least one block).
    pub range_size: u64,
    /// The transfer's block size (ranges are whole blocks).
    pub block_size: u64,
    /// Ranges one file may be cut into, at most.
    pub max_ranges: u64,
    /// Units one job may have, at most.
    pub max_units: u64,
}

/// Most blocks in one range: what one range session of the protocol may carry
/// (`hetch_proto::MAX_RANGE_BLOCKS`, which the service checks is the same).
pub const MAX_RANGE_BLOCKS: u64 = 1 << 20;

/// Why a listing cannot be planned within the planner's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// File `file` of the listing would be more ranges than a file may have.
    TooManyRanges {
        /// The file's index in the listing.
        file: u64,
        /// Its size.
        size: u64,
        /// Ranges it would be.
        ranges: u64,
        /// [`Planner::max_ranges`].
        max: u64,
    },
    /// The job would be more units than a job may have; file `file` is the first
    /// that does not fit.
    TooManyUnits {
        /// The file's index in the listing.
        file: u64,
        /// [`Planner::max_units`].
        max: u64,
    },
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::TooManyRanges {
                size, ranges, max, ..
            } => write!(
                f,
                "{size} bytes would be {ranges} ranges, more than the {max} one file may be cut \
                 into (the service's --max-ranges-per-file, or a larger --range-size)"
            ),
            PlanError::TooManyUnits { max, .. } => write!(
                f,
                "the job would be more than {max} units of work (the service's \
                 --max-units-per-job): split it into several jobs"
            ),
        }
    }
}

impl std::error::Error for PlanError {}

impl Default for Planner {
    fn default() -> Self {
        Planner {
            batch_files: 1000,
            batch_bytes: 1 << 30,
            split_size: 1 << 30,
            range_size: 256 << 20,
            block_size: 4 << 20,
            max_ranges: 65_536,
            max_units: 1_000_000,
        }
    }
}

/// A planning under way: feed files in listing order, take the units it hands back.
#[derive(Debug)]
pub struct Planning {
    p: Planner,
    /// The next file's index.
    next: u64,
    /// The batch being filled: its first file and bytes so far.
    batch: Option<(u64, u64)>,
    /// Units handed out so far (and the batch being filled, if any).
    units: u64,
}

impl Planner {
    /// Starts planning a listing.
    pub fn start(self) -> Planning {
        Planning {
            p: self,
            next: 0,
            batch: None,
            units: 0,
        }
    }

    /// Plans a whole listing of file sizes (for tests and small jobs).
    pub fn plan(self, sizes: impl IntoIterator<Item = u64>) -> Result<Vec<UnitSpec>, PlanError> {
        let mut planning = self.start();
        let mut out = Vec::new();
        for size in sizes {
            planning.file(size, &mut out)?;
        }
        planning.finish(&mut out);
        Ok(out)
    }

    /// Blocks per range: the range size in whole blocks, at least one, at most
    /// [`MAX_RANGE_BLOCKS`].
    pub fn range_blocks(&self) -> u64 {
        (self.range_size / self.block_size.max(1)).clamp(1, MAX_RANGE_BLOCKS)
    }
}

impl Planning {
    /// The next file of the listing, of `size` bytes: appends the units it completes.
    /// Past a bound, appends nothing and says why (planning cannot go on).
    pub fn file(&mut self, size: u64, out: &mut Vec<UnitSpec>) -> Result<(), PlanError> {
        let per = self.p.range_blocks();
        self.file_in_ranges(size, per, out)
    }

    /// [`Planning::file`], a split file cut in ranges of `range_blocks` blocks (at
    /// least one, at most [`MAX_RANGE_BLOCKS`]) rather than the planner's: a file going
    /// into an object store is cut in ranges of whole multipart-upload parts, whose
    /// size depends on the file's.
    pub fn file_in_ranges(
        &mut self,
        size: u64,
        range_blocks: u64,
        out: &mut Vec<UnitSpec>,
    ) -> Result<(), PlanError> {
        let per = range_blocks.clamp(1, MAX_RANGE_BLOCKS);
        let index = self.next;
        if size > self.p.split_size {
            // Checked before anything is made: the count alone may be billions.
            let ranges = hetch_integrity::block_count(size, self.p.block_size.max(1)).div_ceil(per);
            if ranges > self.p.max_ranges {
                let max = self.p.max_ranges;
                return Err(PlanError::TooManyRanges {
                    file: index,
                    size,
                    ranges,
                    max,
                });
            }
            // Its ranges and commit, and the batch before it closed.
            self.make_room(index, ranges + 1)?;
            self.next += 1;
            // A large file does not wait for the batch around it: both go out.
            self.close_batch(index, out);
            self.split(index, size, per, out);
            return Ok(());
        }
        if let Some((first, bytes)) = self.batch {
            let full = index - first >= self.p.batch_files.max(1)
                || bytes.saturating_add(size) > self.p.batch_bytes;
            if full {
                self.close_batch(index, out);
            }
        }
        if self.batch.is_none() {
            self.make_room(index, 1)?;
        }
        self.next += 1;
        let (_, bytes) = self.batch.get_or_insert((index, 0));
        *bytes = bytes.saturating_add(size);
        Ok(())
    }

    /// Counts `n` more units for file `file`, or says the job would be too many.
    fn make_room(&mut self, file: u64, n: u64) -> Result<(), PlanError> {
        let units = self.units.saturating_add(n);
        if units > self.p.max_units {
            let max = self.p.max_units;
            return Err(PlanError::TooManyUnits { file, max });
        }
        self.units = units;
        Ok(())
    }

    /// The listing is over: appends the last batch.
    pub fn finish(mut self, out: &mut Vec<UnitSpec>) {
        let end = self.next;
        self.close_batch(end, out);
    }

    fn close_batch(&mut self, end: u64, out: &mut Vec<UnitSpec>) {
        if let Some((first, bytes)) = self.batch.take() {
            out.push(UnitSpec::Files { first, end, bytes });
        }
    }

    fn split(&self, file: u64, size: u64, per: u64, out: &mut Vec<UnitSpec>) {
        let blocks = hetch_integrity::block_count(size, self.p.block_size.max(1));
        let mut first = 0;
        let mut ranges = 0;
        while first < blocks {
            let end = (first + per).min(blocks);
            out.push(UnitSpec::Range { file, first, end });
            ranges += 1;
            first = end;
        }
        out.push(UnitSpec::Commit { file, ranges });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn planner() -> impl Strategy<Value = Planner> {
        (1u64..20, 1u64..64, 1u64..200, 1u64..64, 0u32..3).prop_map(
            |(files, batch_mib, split_mib, range_mib, bs_shift)| Planner {
                batch_files: files,
                batch_bytes: batch_mib * MIB,
                split_size: split_mib * MIB,
                range_size: range_mib * MIB,
                block_size: MIB << bs_shift,
                ..Planner::default()
            },
        )
    }

    fn size() -> impl Strategy<Value = u64> {
        prop_oneof![3 => 0u64..2 * MIB, 1 => 0u64..400 * MIB]
    }

    proptest! {
        /// Every file is in exactly one unit: whole in a batch, or every block of it
        /// in exactly one range, with one commit that counts its ranges. Batches keep
        /// their bounds; units come out in listing order.
        #[test]
        fn every_byte_is_planned_once(
            p in planner(),
            sizes in proptest::collection::vec(size(), 0..200),
        ) {
            let units = p.plan(sizes.iter().copied()).unwrap();
            let mut next_file = 0u64;
            let mut ranges_of: std::collections::HashMap<u64, (u64, u64)> = Default::default();
            for u in &units {
                match *u {
                    UnitSpec::Files { first, end, bytes } => {
                        prop_assert_eq!(first, next_file, "in listing order");
                        prop_assert!(end > first);
                        prop_assert!(end - first <= p.batch_files);
                        let sum: u64 = sizes[first as usize..end as usize].iter().sum();
                        prop_assert_eq!(sum, bytes);
                        prop_assert!(bytes <= p.batch_bytes || end - first == 1);
                        prop_assert!(sizes[first as usize..end as usize].iter().all(|s| *s <= p.split_size));
                        next_file = end;
                    }
                    UnitSpec::Range { file, first, end } => {
                        prop_assert_eq!(file, next_file, "in listing order");
                        prop_assert!(sizes[file as usize] > p.split_size);
                        let (covered, n) = ranges_of.entry(file).or_default();
                        prop_assert_eq!(first, *covered, "ranges are contiguous");
                        prop_assert!(end > first);
                        prop_assert!(end - first <= (p.range_size / p.block_size).max(1));
                        *covered = end;
                        *n += 1;
                    }
                    UnitSpec::Commit { file, ranges } => {
                        prop_assert_eq!(file, next_file);
                        let blocks = hetch_integrity::block_count(sizes[file as usize], p.block_size);
                        prop_assert_eq!(ranges_of.get(&file).copied(), Some((blocks, ranges)));
                        next_file = file + 1;
                    }
                    UnitSpec::Relay { .. } | UnitSpec::Stream { .. } | UnitSpec::Delete {} => {
                        prop_assert!(false, "a listing plans no relays, streams or deletions")
                    }
                }
            }
            prop_assert_eq!(next_file, sizes.len() as u64, "every file planned");
        }
    }

    #[test]
    fn a_large_file_between_small_ones() {
        let p = Planner {
            batch_files: 2,
            batch_bytes: 10 * MIB,
            split_size: 8 * MIB,
            range_size: 4 * MIB,
            block_size: MIB,
            ..Planner::default()
        };
        let units = p.plan([MIB, MIB, MIB, 9 * MIB, 0]).unwrap();
        assert_eq!(
            units,
            vec![
                UnitSpec::Files {
                    first: 0,
                    end: 2,
                    bytes: 2 * MIB
                },
                UnitSpec::Files {
                    first: 2,
                    end: 3,
                    bytes: MIB
                },
                UnitSpec::Range {
                    file: 3,
                    first: 0,
                    end: 4
                },
                UnitSpec::Range {
                    file: 3,
                    first: 4,
                    end: 8
                },
                UnitSpec::Range {
                    file: 3,
                    first: 8,
                    end: 9
                },
                UnitSpec::Commit { file: 3, ranges: 3 },
                UnitSpec::Files {
                    first: 4,
                    end: 5,
                    bytes: 0
                },
            ]
        );
        assert!(p.plan([]).unwrap().is_empty());
    }

    /// A sparse file of 2^63-1 bytes is refused by its count of ranges before any is
    /// made (it would be 2^35 of 256 MiB: this test would run out of memory).
    #[test]
    fn a_huge_file_is_refused_before_its_ranges_are_made() {
        let p = Planner::default();
        let mut out = Vec::new();
        let mut planning = p.start();
        planning.file(10, &mut out).unwrap();
        let e = planning.file(i64::MAX as u64, &mut out).unwrap_err();
        assert_eq!(
            e,
            PlanError::TooManyRanges {
                file: 1,
                size: i64::MAX as u64,
                ranges: (i64::MAX as u64).div_ceil(256 << 20),
                max: 65_536
            }
        );
        assert!(out.is_empty(), "nothing made: {out:?}");
        assert!(e.to_string().contains("--max-ranges-per-file"), "{e}");
        // The largest file that fits is planned, in exactly max_ranges ranges.
        let p = Planner {
            max_ranges: 4,
            split_size: MIB,
            range_size: MIB,
            block_size: MIB,
            ..Planner::default()
        };
        assert_eq!(p.plan([4 * MIB]).unwrap().len(), 5);
        assert!(p.plan([4 * MIB + 1]).is_err());
    }

    #[test]
    fn a_job_of_more_units_than_its_bound_is_refused_at_the_first_file_over() {
        let p = Planner {
            batch_files: 2,
            max_units: 3,
            split_size: 4 * MIB,
            range_size: MIB,
            block_size: MIB,
            ..Planner::default()
        };
        // Two batches of two files: two units.
        assert_eq!(p.plan([1, 1, 1, 1]).unwrap().len(), 2);
        // A fifth file would open a third batch (fits), a seventh a fourth (not).
        assert_eq!(p.plan([1; 6]).unwrap().len(), 3);
        assert_eq!(
            p.plan([1; 7]).unwrap_err(),
            PlanError::TooManyUnits { file: 6, max: 3 }
        );
        // A split file counts its ranges and its commit.
        assert_eq!(
            p.plan([1, 5 * MIB]).unwrap_err(),
            PlanError::TooManyUnits { file: 1, max: 3 }
        );
    }

    #[test]
    fn no_range_is_longer_than_a_range_session_may_carry() {
        let p = Planner {
            range_size: u64::MAX,
            block_size: 4096,
            ..Planner::default()
        };
        assert_eq!(p.range_blocks(), MAX_RANGE_BLOCKS);
    }

    /// A file cut in ranges of its own size (an object store's whole parts) has
    /// every block in one range of that many blocks, its ranges counted against the
    /// bounds; files around it keep the planner's.
    #[test]
    fn a_file_may_be_cut_in_ranges_of_its_own() {
        let p = Planner {
            split_size: 4 * MIB,
            range_size: MIB,
            block_size: MIB,
            max_ranges: 5,
            ..Planner::default()
        };
        let mut planning = p.start();
        let mut out = Vec::new();
        planning.file_in_ranges(10 * MIB + 1, 3, &mut out).unwrap();
        planning.file(5 * MIB, &mut out).unwrap();
        let ranges: Vec<(u64, u64, u64)> = out
            .iter()
            .filter_map(|u| match u {
                UnitSpec::Range { file, first, end } => Some((*file, *first, *end)),
                _ => None,
            })
            .collect();
        let mut want = vec![(0, 0, 3), (0, 3, 6), (0, 6, 9), (0, 9, 11)];
        want.extend((0..5).map(|b| (1, b, b + 1)));
        assert_eq!(ranges, want);
        assert!(out.contains(&UnitSpec::Commit { file: 0, ranges: 4 }));
        // Ranges of its own count against --max-ranges-per-file too; zero is one block.
        let mut planning = p.start();
        let e = planning.file_in_ranges(12 * MIB, 2, &mut out).unwrap_err();
        assert!(
            matches!(e, PlanError::TooManyRanges { ranges: 6, .. }),
            "{e:?}"
        );
        let e = p.start().file_in_ranges(10 * MIB, 0, &mut out).unwrap_err();
        assert!(
            matches!(e, PlanError::TooManyRanges { ranges: 10, .. }),
            "{e:?}"
        );
    }
}
