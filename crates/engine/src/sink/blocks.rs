//! A set of block indexes whose memory follows what arrived, not what was announced.
//!
//! A peer announces sizes (a file of 2^63 bytes, a growing file whose blocks may go up
//! to 2^54): a bitset per announced block would let one entry make the receiver
//! allocate hundreds of GiB. Here the blocks done are a contiguous prefix (the common
//! case, in-order blocks, keeps only that counter) plus disjoint ranges beyond it, so
//! memory is O(fragments), every operation O(log fragments), and the gaps (what a plan
//! asks for) come out in O(fragments) too.

use std::collections::BTreeMap;

/// Block indexes `0..prefix` plus disjoint, non-adjacent ranges beyond.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct BlockSet {
    /// Blocks `0..prefix` are in the set; `prefix` itself is not.
    prefix: u64,
    /// Half-open ranges `start -> end` above `prefix`, none touching another or the
    /// prefix (so `start > prefix`).
    rest: BTreeMap<u64, u64>,
    /// Blocks in the set.
    len: u64,
}

impl BlockSet {
    /// Every block in `0..blocks` except those in `start..end` (`start <= end <=
    /// blocks`).
    pub fn outside(start: u64, end: u64, blocks: u64) -> BlockSet {
        let mut rest = BTreeMap::new();
        let prefix = if start == end { blocks } else { start };
        if start < end && end < blocks {
            rest.insert(end, blocks);
        }
        BlockSet {
            prefix,
            rest,
            len: blocks - (end - start),
        }
    }

    /// Whether block `i` is in the set.
    pub fn contains(&self, i: u64) -> bool {
        i < self.prefix
            || self
                .rest
                .range(..=i)
                .next_back()
                .is_some_and(|(_, &end)| i < end)
    }

    /// Adds block `i`; false when it was there already.
    pub fn insert(&mut self, i: u64) -> bool {
        if self.contains(i) {
            return false;
        }
        self.len += 1;
        // No block index reaches u64::MAX (a block count never exceeds 2^64 / 1 KiB),
        // but a saturated end only makes a one-block range look empty: stay safe.
        let next = i.saturating_add(1);
        if i == self.prefix {
            // The fast path: the next block in order.
            self.prefix = next;
            if let Some(end) = self.rest.remove(&next) {
                self.prefix = end;
            }
            return true;
        }
        let mut start = i;
        let mut end = next;
        if let Some((&s, &e)) = self.rest.range(..i).next_back() {
            if e == i {
                self.rest.remove(&s);
                start = s;
            }
        }
        if let Some(e) = self.rest.remove(&next) {
            end = e;
        }
        self.rest.insert(start, end);
        true
    }

    /// Removes block `i`; false when it was not there.
    pub fn remove(&mut self, i: u64) -> bool {
        if !self.contains(i) {
            return false;
        }
        self.len -= 1;
        let (start, end) = if i < self.prefix {
            let end = self.prefix;
            self.prefix = i;
            (i, end)
        } else {
            let (&s, &e) = self.rest.range(..=i).next_back().expect("contains i");
            self.rest.remove(&s);
            if s < i {
                self.rest.insert(s, i);
            }
            (i, e)
        };
        if start + 1 < end {
            self.rest.insert(start + 1, end);
        }
        true
    }

    /// Drops every block at or beyond `n`.
    pub fn truncate(&mut self, n: u64) {
        if self.prefix >= n {
            self.prefix = n;
            self.rest.clear();
            self.len = n;
            return;
        }
        let beyond = self.rest.split_off(&n);
        self.len -= beyond.iter().map(|(s, e)| e - s).sum::<u64>();
        if let Some((_, e)) = self.rest.iter_mut().next_back() {
            if *e > n {
                self.len -= *e - n;
                *e = n;
            }
        }
    }

    /// Blocks in the set.
    pub fn count(&self) -> u64 {
        self.len
    }

    /// The first block at or after `i` that is not in the set.
    pub fn run_end(&self, i: u64) -> u64 {
        if i < self.prefix {
            return self.prefix;
        }
        match self.rest.range(..=i).next_back() {
            Some((_, &end)) if i < end => end,
            _ => i,
        }
    }

    /// The ranges of blocks in `0..limit` that are not in the set, in order.
    pub fn gaps(&self, limit: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut from = self.prefix;
        for (&s, &e) in &self.rest {
            if from >= limit {
                break;
            }
            if s > from {
                out.push((from, s.min(limit)));
            }
            from = e;
        }
        if from < limit {
            out.push((from, limit));
        }
        out
    }

    /// The set's blocks in `0..limit`, as ranges in order.
    #[cfg(test)]
    fn ranges(&self, limit: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        std::iter::once((0, self.prefix))
            .chain(self.rest.iter().map(|(&s, &e)| (s, e)))
            .map(move |(s, e)| (s.min(limit), e.min(limit)))
            .filter(|(s, e)| s < e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The set as a plain list, for comparing with a model.
    fn members(s: &BlockSet, limit: u64) -> Vec<u64> {
        s.ranges(limit).flat_map(|(a, b)| a..b).collect()
    }

    #[test]
    fn matches_a_plain_set_under_random_inserts_and_removes() {
        let mut model = std::collections::BTreeSet::new();
        let mut s = BlockSet::default();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for step in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = x % 200;
            if x % 3 == 0 {
                assert_eq!(s.remove(i), model.remove(&i), "step {step}");
            } else {
                assert_eq!(s.insert(i), model.insert(i), "step {step}");
            }
            if step % 997 == 0 {
                s.truncate(150);
                model.retain(|&b| b < 150);
            }
            assert_eq!(s.count(), model.len() as u64);
            for b in 0..200 {
                assert_eq!(s.contains(b), model.contains(&b), "block {b}");
            }
        }
        assert_eq!(members(&s, 200), model.iter().copied().collect::<Vec<_>>());
    }

    #[test]
    fn outside_a_range_is_the_same_set_as_inserted_one_by_one() {
        for (start, end, blocks) in [(0, 5, 5), (2, 5, 9), (0, 0, 4), (3, 3, 4), (1, 4, 4)] {
            let mut one_by_one = BlockSet::default();
            for i in (0..start).chain(end..blocks) {
                one_by_one.insert(i);
            }
            assert_eq!(BlockSet::outside(start, end, blocks), one_by_one);
        }
    }

    #[test]
    fn gaps_are_the_complement_within_the_limit() {
        let mut s = BlockSet::default();
        for i in [0, 1, 2, 5, 6, 9, 20] {
            s.insert(i);
        }
        assert_eq!(s.run_end(0), 3);
        assert_eq!((s.run_end(1), s.run_end(3), s.run_end(5)), (3, 3, 7));
        assert_eq!(s.gaps(12), vec![(3, 5), (7, 9), (10, 12)]);
        assert_eq!(s.gaps(6), vec![(3, 5)]);
        assert_eq!(s.gaps(30), vec![(3, 5), (7, 9), (10, 20), (21, 30)]);
        assert_eq!(BlockSet::default().gaps(4), vec![(0, 4)]);
    }

    #[test]
    fn huge_indexes_cost_one_range_each() {
        let mut s = BlockSet::default();
        let top = u64::MAX / 1024;
        assert!(s.insert(top - 1));
        assert!(s.insert(1 << 42));
        assert!(s.contains(1 << 42) && !s.contains((1 << 42) + 1));
        assert_eq!(s.rest.len(), 2);
        let far = 1u64 << 42;
        assert_eq!(s.gaps(top), vec![(0, far), (far + 1, top - 1)]);
        s.truncate(1 << 40);
        assert_eq!(s.count(), 0);
    }

    #[test]
    fn in_order_inserts_keep_only_the_prefix() {
        let mut s = BlockSet::default();
        for i in 0..10_000 {
            s.insert(i);
        }
        assert!(s.rest.is_empty());
        assert_eq!(s.run_end(0), 10_000);
        // Out of order, then the hole is filled: one prefix again.
        let mut s = BlockSet::default();
        for i in (0..100).rev() {
            s.insert(i);
        }
        assert!(s.rest.is_empty());
        assert_eq!(s.run_end(0), 100);
    }
}
