//! One file's block accounting, without I/O: which blocks are done, how many remain,
//! how often each failed its check, what the source must still send, and the bounds a
//! block index or length from the peer must meet before anything is sized by it.
//!
//! The sink's tasks tell it what happened (a block arrived, passed or failed its
//! check, was taken up from a journal, was rewritten at the source, the file was
//! sealed) and act on its answers; it holds no lock, no clock and no handle, so the
//! property tests below (and the `ledger` fuzz target) drive it with arbitrary events.
//! Memory follows the blocks that arrived ([`BlockSet`]), never the size announced.

use std::collections::HashMap;
use std::ops::Range;

use hetch_integrity as integrity;

use super::BlockSet;
use crate::store::Size;

/// A block header the peer should not have sent: the session ends on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its index lies beyond the file's last block.
    Beyond {
        /// The index sent.
        block: u64,
    },
    /// Its length is not what the file's size makes that block.
    Length {
        /// The index sent.
        block: u64,
        /// The length sent.
        got: u64,
        /// The block's length.
        want: u64,
    },
}

/// What to do about a block that failed its check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Checked {
    /// Ask the source for it again.
    Resend,
    /// It failed `tries` times: the file fails.
    GiveUp {
        /// Failed checks of that block.
        tries: u32,
    },
}

/// One file's blocks (see the module documentation).
#[derive(Debug, Clone)]
pub(crate) struct Ledger {
    /// Bytes in the file (none until a growing file is sealed).
    size: Size,
    /// Blocks in the file.
    blocks: u64,
    block_size: u64,
    done: BlockSet,
    /// Blocks not done yet: `blocks - done.count()`.
    remaining: u64,
    /// Failed checks of blocks not done yet. Bounded by the blocks that arrived: a
    /// block's entry goes once it is done.
    retries: HashMap<u64, u32>,
    max_retries: u32,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger::new(Size::Known(0), integrity::MIN_BLOCK_SIZE, 0)
    }
}

impl Ledger {
    /// A file of `size` in blocks of `block_size` (for a growing file: as many full
    /// blocks as fit below the largest offset), nothing done yet; a block may fail its
    /// check `max_retries` times before the file fails.
    pub fn new(size: Size, block_size: u64, max_retries: u32) -> Self {
        let block_size = block_size.max(1);
        let blocks = size.blocks(block_size);
        Ledger {
            size,
            blocks,
            block_size,
            done: BlockSet::default(),
            remaining: blocks,
            retries: HashMap::new(),
            max_retries,
        }
    }

    /// The blocks `range` of such a file, those outside it counted done already
    /// (another writer's): O(1) whatever the range.
    pub fn within(size: Size, block_size: u64, max_retries: u32, range: Range<u64>) -> Self {
        let mut l = Ledger::new(size, block_size, max_retries);
        let end = range.end.min(l.blocks);
        let start = range.start.min(end);
        l.done = BlockSet::outside(start, end, l.blocks);
        l.remaining = end - start;
        l
    }

    /// Checks a block header from the peer: an index within the file, and the length
    /// the file's size gives that block.
    pub fn admit(&self, block: u64, len: u64) -> Result<(), Refused> {
        if block >= self.blocks {
            return Err(Refused::Beyond { block });
        }
        let want = self.size.block_len(self.block_size, block);
        if len != want {
            return Err(Refused::Length {
                block,
                got: len,
                want,
            });
        }
        Ok(())
    }

    /// Whether `block` is done.
    pub fn is_done(&self, block: u64) -> bool {
        self.done.contains(block)
    }

    /// `block` passed its check (or was taken up): true when that counts it, false
    /// for a block done already or beyond the file.
    pub fn done(&mut self, block: u64) -> bool {
        if block >= self.blocks || !self.done.insert(block) {
            return false;
        }
        self.remaining -= 1;
        self.retries.remove(&block);
        true
    }

    /// Blocks not done yet.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// `block` failed its check once more.
    pub fn failed_check(&mut self, block: u64) -> Checked {
        let tries = self.retries.entry(block).or_insert(0);
        *tries = tries.saturating_add(1);
        match *tries > self.max_retries {
            true => Checked::GiveUp { tries: *tries },
            false => Checked::Resend,
        }
    }

    /// The ranges of blocks below `upto` not done yet: what the source must send.
    /// O(fragments), whatever the size.
    pub fn missing(&self, upto: u64) -> Vec<(u64, u64)> {
        self.done.gaps(upto.min(self.blocks))
    }

    /// The first block at or after `from` that is not done.
    pub fn first_missing_from(&self, from: u64) -> u64 {
        self.done.run_end(from).min(self.blocks)
    }

    /// A growing file's block was rewritten at the source: it is to be received again.
    pub fn undo(&mut self, block: u64) {
        if self.done.remove(block) {
            self.remaining += 1;
        }
    }

    /// A growing file is sealed at `size` bytes: blocks beyond its end do not count
    /// any more (a part file of a longer version may have had them).
    pub fn seal(&mut self, size: u64) {
        self.size = Size::Known(size);
        self.blocks = integrity::block_count(size, self.block_size);
        self.done.truncate(self.blocks);
        self.retries.retain(|&b, _| b < self.blocks);
        self.remaining = self.blocks - self.done.count();
    }
}

/// Something that happens to a file's blocks (model checking: tests and fuzzing).
#[cfg(any(test, feature = "fuzzing"))]
#[derive(Debug, Clone)]
pub(crate) enum Event {
    /// A block header of this index and length arrived.
    Admit(u64, u64),
    /// The block passed its check.
    Done(u64),
    /// The block failed its check.
    Failed(u64),
    /// The block was rewritten at the source.
    Undo(u64),
    /// The file was sealed at this size.
    Seal(u64),
}

/// Plays `events` on a ledger of a file of `size` bytes in blocks of `bs` and on a
/// plain model of it, and checks after each that they agree: the done set, the count
/// remaining, the missing ranges (disjoint, in order, covering exactly what is not
/// done), bounds, and retries that give up after the limit. `Err` says where not.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn replay(size: u64, bs: u64, max_retries: u32, events: &[Event]) -> Result<(), String> {
    use std::collections::BTreeSet;
    let mut l = Ledger::new(Size::Known(size), bs, max_retries);
    let mut size = size;
    let mut done = BTreeSet::new();
    let mut fails: HashMap<u64, u32> = HashMap::new();
    let fail = |i: usize, what: &str| Err(format!("after event {i}: {what}"));
    for (i, e) in events.iter().enumerate() {
        let blocks = integrity::block_count(size, bs);
        match *e {
            Event::Admit(b, len) => {
                let ok = b < blocks && len == integrity::block_len(size, bs, b);
                if l.admit(b, len).is_ok() != ok {
                    return fail(i, "admit disagrees");
                }
            }
            Event::Done(b) => {
                let counts = b < blocks && done.insert(b);
                if l.done(b) != counts {
                    return fail(i, "done disagrees");
                }
                if counts {
                    fails.remove(&b);
                }
            }
            Event::Failed(b) => {
                let n = fails.entry(b).or_insert(0);
                *n = n.saturating_add(1);
                let want = match *n > max_retries {
                    true => Checked::GiveUp { tries: *n },
                    false => Checked::Resend,
                };
                if l.failed_check(b) != want {
                    return fail(i, "failed check disagrees");
                }
            }
            Event::Undo(b) => {
                done.remove(&b);
                l.undo(b);
            }
            Event::Seal(s) => {
                size = s;
                let blocks = integrity::block_count(s, bs);
                done.retain(|&b| b < blocks);
                fails.retain(|&b, _| b < blocks);
                l.seal(s);
            }
        }
        let blocks = integrity::block_count(size, bs);
        if l.remaining() != blocks - done.len() as u64 {
            return fail(i, "remaining disagrees");
        }
        let mut covered = 0;
        let mut last_end = 0;
        for (a, b) in l.missing(blocks) {
            if a < last_end || a >= b || b > blocks || (a..b).any(|x| done.contains(&x)) {
                return fail(i, "missing ranges wrong");
            }
            covered += b - a;
            last_end = b;
        }
        if covered != l.remaining() || done.iter().any(|&b| !l.is_done(b)) {
            return fail(i, "missing ranges or done set disagree");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const BS: u64 = 1024;

    fn event(blocks: u64) -> impl Strategy<Value = Event> {
        // Mostly indexes near the file, some anywhere (a hostile peer's).
        let index = prop_oneof![4 => 0..blocks + 3, 1 => any::<u64>()];
        prop_oneof![
            (index.clone(), 0..2 * BS).prop_map(|(b, l)| Event::Admit(b, l)),
            index.clone().prop_map(Event::Done),
            index.clone().prop_map(Event::Failed),
            index.prop_map(Event::Undo),
            (0..blocks * BS + 5).prop_map(Event::Seal),
        ]
    }

    proptest! {
        /// Whatever happens, the ledger agrees with a plain model (see [`replay`]).
        #[test]
        fn agrees_with_a_model(
            size in 0u64..64 * BS,
            max_retries in 0u32..4,
            events in proptest::collection::vec(event(64), 0..200),
        ) {
            prop_assert_eq!(replay(size, BS, max_retries, &events), Ok(()));
        }
    }

    #[test]
    fn a_range_admits_and_waits_for_its_own_blocks_only() {
        let size = Size::Known(10 * BS + 7);
        let mut l = Ledger::within(size, BS, 1, 3..6);
        assert_eq!((l.remaining(), l.missing(11)), (3, vec![(3, 6)]));
        assert!(l.is_done(0) && l.is_done(2) && l.is_done(6) && l.is_done(10));
        assert!(!l.is_done(3) && !l.is_done(5));
        assert!(l.done(4) && !l.done(7));
        assert_eq!(l.missing(11), vec![(3, 4), (5, 6)]);
        // A hostile range beyond a huge file costs nothing.
        let huge = Ledger::within(Size::Growing, BS, 1, 0..u64::MAX);
        assert_eq!(huge.remaining(), Size::Growing.blocks(BS));
        let none = Ledger::within(size, BS, 1, 5..5);
        assert_eq!((none.remaining(), none.missing(11)), (0, vec![]));
    }

    #[test]
    fn hostile_indexes_are_refused_before_anything_is_sized() {
        // A growing file: as many blocks as fit below the largest offset.
        let bs = 4 << 20;
        let blocks = crate::store::MAX_FILE_SIZE / bs;
        let mut l = Ledger::new(Size::Growing, bs, 3);
        assert_eq!(
            l.admit(u64::MAX, bs),
            Err(Refused::Beyond { block: u64::MAX })
        );
        assert_eq!(l.admit(blocks, bs), Err(Refused::Beyond { block: blocks }));
        // The last possible block is fine, and costs a range, not a bitset.
        assert_eq!(l.admit(blocks - 1, bs), Ok(()));
        assert!(l.done(blocks - 1));
        assert_eq!(l.remaining(), blocks - 1);
        assert_eq!(l.missing(blocks), vec![(0, blocks - 1)]);
        assert!(!l.done(u64::MAX));
    }
}
