//! The life of one file at the receiver, as one plain value: the one place where a
//! file's receive state changes.
//!
//! [`FileCore`] holds the block ledger and everything else a file goes through on its
//! way to its final name: blocks written and waiting for their read-back, journaled
//! blocks being checked again, the whole-file digest (merged from block digests, or
//! fed in file order), failure, and a growing file's pieces, durable prefix and seal.
//! The drivers (the writers, verifiers, the recheck of a resume, the growing-file
//! frames, a range session) tell it what happened — a block arrived, was stored,
//! passed or failed its check, the source sealed the file — and perform what it
//! answers: store the block, read it back, record it, ask for it again, commit the
//! file, fail it. It holds no lock, no clock and no handle, so the property tests
//! below (and the `ledger` fuzz target) drive it with arbitrary events.
//!
//! [`IncomingFile`] is the value under its lock, shared by a session's tasks: each of
//! its methods is one event, taken under the lock at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};

use hetch_integrity::{self as integrity, Algorithm, Digest, FileDigest, Hasher};
use hetch_proto::Seal;
use hetch_storage::part::FinalMeta;
use hetch_storage::StorageError;

use super::ledger::{Checked, Ledger, Refused};
use super::BlockSet;
use crate::pool::Pages;
use crate::store::{FileSpec, Place, Size, StoreFile};

/// How a file is received.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setup {
    /// Its size as announced.
    pub size: Size,
    pub block_size: u64,
    /// The session's block digest algorithm.
    pub checksum: Algorithm,
    /// Failed checks of one block before the file fails.
    pub max_retries: u32,
    /// Feed a whole-file digest with the blocks in file order (algorithms whose block
    /// digests do not merge, when the session wants file digests).
    pub ordered: bool,
    /// Mode and mtime to give the file.
    pub meta: FinalMeta,
}

/// One file's receive state (see the module documentation).
pub(crate) struct FileCore {
    size: Size,
    bs: u64,
    checksum: Algorithm,
    ledger: Ledger,
    /// Blocks written but not yet read back and checked, with the source's digests
    /// (file and sequential schedules), in block order.
    written: BTreeMap<u64, Digest>,
    /// Journaled blocks of a resumed part file not read back and checked yet (see
    /// `recheck.rs`): neither done nor to be received, unless their check fails.
    rechecking: u64,
    /// The whole-file digest merged from block digests (algorithms that merge).
    digest: FileDigest,
    /// The in-order whole-file digest, for algorithms whose block digests do not merge.
    ordered: Option<OrderedDigest>,
    /// The file failed: late blocks are dropped, nothing is written for it any more.
    failed: bool,
    /// Set for files announced as growing.
    streamed: Option<Streamed>,
    meta: FinalMeta,
}

/// A whole-file digest fed with blocks in file order as they become done.
struct OrderedDigest {
    hasher: Hasher,
    /// The next block to feed.
    next: u64,
}

/// What a growing file keeps besides the ordinary state.
#[derive(Default)]
struct Streamed {
    /// Digest of every done block, by index, to merge the whole-file digest once the
    /// final size is known (and to drop rewritten blocks). Sparse: it holds what
    /// arrived, whatever the indexes.
    digests: BTreeMap<u64, Digest>,
    /// Blocks whose full copy was written (pieces must not touch them again).
    stored: BlockSet,
    /// Blocks `0..durable_blocks` are done (the durable prefix, in blocks).
    durable_blocks: u64,
    /// Blocks not done yet whose first bytes pieces cover: block -> end of the
    /// contiguous pieces from its start. Counted in the durable prefix once the blocks
    /// before them are done.
    pieces: BTreeMap<u64, u64>,
    /// The source's whole-file digest, from its `Seal`.
    expected: Option<Vec<u8>>,
}

/// Reads block `i`'s bytes back from the store into the buffer (an in-order digest
/// fed with blocks done before their turn).
pub(crate) type ReadBlock<'a> = &'a mut dyn FnMut(u64, &mut [u8]) -> Result<(), StorageError>;

/// A file whose every block is done: what its commit needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Complete {
    /// Its final size.
    pub size: u64,
    /// Its final mode and mtime.
    pub meta: FinalMeta,
    /// The whole-file digest, when the blocks gave it.
    pub whole: Option<Vec<u8>>,
    /// A once-growing file: the source's final digest, which the copy's must equal.
    pub expected: Option<Vec<u8>>,
}

/// What a block that passed its check did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Done {
    /// Nothing: the block was done already, or the file failed.
    Ignored,
    /// Counted; other blocks remain. `durable`: the file still grows, and its
    /// durable prefix may have moved (an acknowledgement is due).
    More { durable: bool },
    /// Counted, and it was the last one: commit the file.
    Last(Complete),
}

/// A peer's numbers in a growing-file frame that no honest source sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hostile {
    /// A seal of a file that is not growing.
    NotGrowing,
    /// A seal beyond the largest file size.
    TooLarge,
    /// A block beyond the file's blocks.
    Beyond(u64),
    /// A piece that crosses a block or lies beyond the largest offset.
    BadPiece,
}

/// What a seal leaves to do.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Sealed {
    /// Block ranges the source must still send.
    pub ask: Vec<(u64, u64)>,
    /// Tail blocks pieces cover completely, with the source's digests: read them back
    /// and count those that match.
    pub tail: Vec<(u64, Digest)>,
}

/// What to do about a `Cover` of a growing file's block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cover {
    /// Nothing (the file failed, was sealed, or the block is done).
    Gone,
    /// Pieces do not cover it: ask for the block.
    Resend,
    /// Pieces wrote all of it: read it back and check it against the digest.
    ReadBack,
}

impl FileCore {
    /// A file nothing of which has arrived yet.
    pub fn new(s: Setup) -> FileCore {
        let bs = s.block_size;
        FileCore {
            size: s.size,
            bs,
            checksum: s.checksum,
            ledger: Ledger::new(s.size, bs, s.max_retries),
            written: BTreeMap::new(),
            rechecking: 0,
            digest: FileDigest::new(s.size.digest_len(), bs),
            ordered: (s.ordered && !s.size.is_growing()).then(|| OrderedDigest {
                hasher: s.checksum.hasher(),
                next: 0,
            }),
            failed: false,
            streamed: s.size.is_growing().then(Streamed::default),
            meta: s.meta,
        }
    }

    /// A range `blocks` of a file, written by one of several writers: the blocks
    /// outside it count as done here (another writer's), so that only the range's
    /// are admitted, asked for and waited on.
    pub fn range(s: Setup, blocks: std::ops::Range<u64>) -> FileCore {
        let mut core = FileCore::new(s);
        core.ledger = Ledger::within(s.size, s.block_size, s.max_retries, blocks);
        core
    }

    /// Its size.
    pub fn size(&self) -> Size {
        self.size
    }

    /// Its blocks (while growing: as many as fit below the largest offset).
    pub fn blocks(&self) -> u64 {
        self.size.blocks(self.bs)
    }

    /// The length of block `block`.
    pub fn block_len(&self, block: u64) -> u64 {
        self.size.block_len(self.bs, block)
    }

    /// The digest block `block` with bytes `data` has (as the source computes it).
    pub fn block_digest(&self, block: u64, data: &[u8]) -> Digest {
        self.checksum
            .block_digest(self.size.digest_len(), self.bs, block, data)
    }

    /// Checks a block header from the peer: an index within the file, and the length
    /// the file's size gives that block.
    pub fn admit(&self, block: u64, len: u64) -> Result<(), Refused> {
        self.ledger.admit(block, len)
    }

    /// Whether block `block` is neither done nor the file failed (its check is due).
    pub fn wants(&self, block: u64) -> bool {
        !self.failed && !self.ledger.is_done(block)
    }

    /// Block `block` is about to be stored: false when it must not be (a duplicate,
    /// e.g. a resend that crossed a good copy; the file failed; the session stops).
    pub fn claim(&mut self, block: u64, stopping: bool) -> bool {
        if !self.wants(block) || self.written.contains_key(&block) || stopping {
            return false;
        }
        if let Some(s) = &mut self.streamed {
            // From now on pieces leave this block alone (see `piece`).
            s.stored.insert(block);
        }
        true
    }

    /// Block `block` was stored and waits for its read-back with the whole file;
    /// true once every block still to come is written (the file's check may start).
    pub fn written(&mut self, block: u64, digest: Digest) -> bool {
        self.written.insert(block, digest);
        // Journaled blocks still being read back are not written here.
        self.written.len() as u64 + self.rechecking == self.ledger.remaining()
    }

    /// The written blocks waiting for their read-back, in order (taken).
    pub fn take_written(&mut self) -> Vec<(u64, Digest)> {
        std::mem::take(&mut self.written).into_iter().collect()
    }

    /// Journaled blocks of a resumed file to read back before they count.
    pub fn recheck(&mut self, blocks: u64) {
        self.rechecking = blocks;
    }

    /// One journaled block was read back (whatever the outcome).
    pub fn rechecked(&mut self) {
        self.rechecking = self.rechecking.saturating_sub(1);
    }

    /// Block `block` failed its check once more: ask for it again, or give up.
    pub fn failed_check(&mut self, block: u64) -> Checked {
        self.ledger.failed_check(block)
    }

    /// A resumed file's journaled block, taken as it is (the journal is trusted, or
    /// the file grows and is checked whole at its seal): true when that counts it.
    pub fn taken_up(&mut self, block: u64, digest: Digest) -> bool {
        if !self.ledger.done(block) {
            return false;
        }
        self.keep_digest(block, digest);
        true
    }

    /// Block `block`, with bytes `data` and digest `digest`, passed its check. An
    /// in-order whole-file digest is fed with every done block from its cursor on;
    /// `read` fetches the bytes of the blocks done before their turn.
    pub fn done(
        &mut self,
        block: u64,
        digest: Digest,
        data: &[u8],
        read: ReadBlock<'_>,
    ) -> Result<Done, StorageError> {
        if self.failed || !self.ledger.done(block) {
            return Ok(Done::Ignored);
        }
        self.keep_digest(block, digest);
        self.feed_ordered(block, data, read)?;
        if self.ledger.remaining() > 0 || self.size.is_growing() {
            let durable = self.size.is_growing();
            return Ok(Done::More { durable });
        }
        Ok(Done::Last(self.complete()))
    }

    /// Keeps a done block's digest for the whole-file digest.
    fn keep_digest(&mut self, block: u64, digest: Digest) {
        match &mut self.streamed {
            // The final size, and so the shape of the digest tree, is not known yet.
            Some(s) if self.size.is_growing() => {
                s.digests.insert(block, digest);
            }
            _ if self.checksum.merges_blocks() => {
                let _ = self.digest.add(block, digest);
            }
            _ => {}
        }
    }

    fn feed_ordered(
        &mut self,
        block: u64,
        data: &[u8],
        read: ReadBlock<'_>,
    ) -> Result<(), StorageError> {
        let Some(o) = &mut self.ordered else {
            return Ok(());
        };
        let mut scratch = Vec::new();
        while o.next < self.size.blocks(self.bs) && self.ledger.is_done(o.next) {
            if o.next == block {
                o.hasher.update(data);
            } else {
                scratch.resize(self.size.block_len(self.bs, o.next) as usize, 0);
                read(o.next, &mut scratch)?;
                o.hasher.update(&scratch);
            }
            o.next += 1;
        }
        Ok(())
    }

    /// What the commit of a file whose blocks are all done needs (its digests taken).
    pub fn complete(&mut self) -> Complete {
        let whole = if self.checksum.merges_blocks() {
            let d = std::mem::replace(&mut self.digest, FileDigest::new(0, self.bs));
            d.finish().ok().map(|d| d.to_vec())
        } else {
            // Only when every block was fed (blocks taken up from a journal and never
            // done here were not): else the store reads the file whole.
            let blocks = self.blocks();
            self.ordered
                .take()
                .filter(|o| o.next == blocks)
                .map(|o| o.hasher.finish())
        };
        Complete {
            size: self.size.digest_len(),
            meta: self.meta,
            whole,
            expected: self.streamed.as_mut().and_then(|s| s.expected.take()),
        }
    }

    /// Blocks not done yet.
    pub fn remaining(&self) -> u64 {
        self.ledger.remaining()
    }

    /// The ranges of blocks below `upto` not done yet: what the source must send.
    pub fn missing(&self, upto: u64) -> Vec<(u64, u64)> {
        self.ledger.missing(upto)
    }

    /// The file fails or is dropped: true when it had not already.
    pub fn fail(&mut self) -> bool {
        !std::mem::replace(&mut self.failed, true)
    }

    /// The source sealed a growing file: fix its size, take back rewritten blocks,
    /// merge the digests of the blocks done so far, and say what is still needed.
    pub fn seal(&mut self, seal: &Seal) -> Result<Option<Sealed>, Hostile> {
        if !self.size.is_growing() {
            return Err(Hostile::NotGrowing);
        }
        if Size::too_large(seal.size) {
            return Err(Hostile::TooLarge);
        }
        let bs = self.bs;
        let blocks = integrity::block_count(seal.size, bs);
        let named = seal
            .rewritten
            .iter()
            .chain(seal.tail.iter().map(|(b, _)| b));
        if let Some(b) = named.copied().find(|&b| b >= blocks) {
            return Err(Hostile::Beyond(b));
        }
        if self.failed {
            return Ok(None);
        }
        let mut s = self.streamed.take().expect("a growing file is streamed");
        for &b in &seal.rewritten {
            self.ledger.undo(b);
            s.stored.remove(b);
            s.digests.remove(&b);
        }
        // Blocks beyond the end (from a part file of a longer version) do not count.
        self.ledger.seal(seal.size);
        self.size = Size::Known(seal.size);
        let _ = s.digests.split_off(&blocks);
        // Every done block has its digest (journaled or received): O(blocks held).
        let mut digest = FileDigest::new(seal.size, bs);
        for (&i, d) in &s.digests {
            if self.ledger.is_done(i) {
                let _ = digest.add(i, *d);
            }
        }
        self.digest = digest;
        s.expected = Some(seal.digest.clone());
        self.meta = FinalMeta {
            mtime_sec: seal.mtime_sec,
            mtime_nsec: seal.mtime_nsec,
            ..self.meta
        };
        let pieces = std::mem::take(&mut s.pieces);
        s.digests = Default::default();
        self.streamed = Some(s);
        let tail: Vec<(u64, Digest)> = seal
            .tail
            .iter()
            .filter(|&&(b, _)| {
                let covered = pieces.get(&b).copied().unwrap_or(0);
                !self.ledger.is_done(b) && covered >= b * bs + self.block_len(b)
            })
            .copied()
            .collect();
        let held: Vec<u64> = tail.iter().map(|(b, _)| *b).collect();
        let ask = without(self.ledger.missing(blocks), &held);
        Ok(Some(Sealed { ask, tail }))
    }

    /// A piece `offset..offset + len` of a growing file's block arrived: whether to
    /// write it (pieces never touch a block once its full copy was written: the full
    /// block is what counts, and a late piece must not overwrite it).
    pub fn piece(&self, offset: u64, len: u64) -> Result<bool, Hostile> {
        let block = offset / self.bs;
        // Checked: a hostile offset near u64::MAX must not wrap into a small one.
        let in_block = offset
            .checked_add(len)
            .is_some_and(|end| end <= block.saturating_add(1).saturating_mul(self.bs));
        if !self.size.is_growing() || block >= self.blocks() || !in_block {
            return Err(Hostile::BadPiece);
        }
        let stored = self
            .streamed
            .as_ref()
            .is_none_or(|s| s.stored.contains(block));
        Ok(self.wants(block) && !stored)
    }

    /// A piece was written and read back intact. Pieces of a block come in order on
    /// the control stream, the first one at the block's start, each next one where
    /// the last ended.
    pub fn piece_written(&mut self, offset: u64, len: u64) {
        let bs = self.bs;
        if let Some(s) = &mut self.streamed {
            let block = offset / bs;
            let start = block * bs;
            let end = s.pieces.get(&block).copied().unwrap_or(start);
            if offset == start || offset == end {
                s.pieces.insert(block, end.max(offset + len));
            }
        }
    }

    /// The source says pieces cover block `block` of a growing file completely.
    pub fn cover(&mut self, block: u64) -> Result<Cover, Hostile> {
        if block >= self.blocks() {
            return Err(Hostile::Beyond(block));
        }
        let len = self.block_len(block);
        let growing = self.size.is_growing();
        let (failed, done) = (self.failed, self.ledger.is_done(block));
        let Some(s) = self
            .streamed
            .as_mut()
            .filter(|_| !failed && !done && growing)
        else {
            return Ok(Cover::Gone);
        };
        let covered = s.pieces.get(&block).copied().unwrap_or(0) >= block * self.bs + len;
        if !covered || s.stored.contains(block) {
            return Ok(Cover::Resend);
        }
        // Like a full copy written: pieces leave it alone from now on.
        s.stored.insert(block);
        Ok(Cover::ReadBack)
    }

    /// A covered block read back differs from the source's digest: pieces may write
    /// it again (it is asked for).
    pub fn uncover(&mut self, block: u64) {
        if let Some(s) = &mut self.streamed {
            s.stored.remove(block);
        }
    }

    /// Moves a growing file's durable prefix up to its first block not done, before
    /// a sync; false when the file failed or is not streamed.
    pub fn advance_durable(&mut self) -> bool {
        if self.failed {
            return false;
        }
        let Some(from) = self.streamed.as_ref().map(|s| s.durable_blocks) else {
            return false;
        };
        let cursor = self.ledger.first_missing_from(from);
        let s = self.streamed.as_mut().expect("streamed");
        s.durable_blocks = cursor;
        // Pieces of blocks now done no longer count.
        s.pieces = s.pieces.split_off(&cursor);
        true
    }

    /// The durable prefix in bytes: the done blocks, then what pieces cover of the
    /// next block (after [`FileCore::advance_durable`] and a sync).
    pub fn durable_offset(&self) -> Option<u64> {
        let s = self.streamed.as_ref()?;
        let pieces = s.pieces.get(&s.durable_blocks).copied().unwrap_or(0);
        let offset = s.durable_blocks.saturating_mul(self.bs).max(pieces);
        Some(offset.min(self.size.digest_len()))
    }
}

/// Block ranges minus the blocks in `skip` (split where needed).
fn without(ranges: Vec<(u64, u64)>, skip: &[u64]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for (mut start, end) in ranges {
        let mut cuts: Vec<u64> = skip
            .iter()
            .copied()
            .filter(|b| (start..end).contains(b))
            .collect();
        cuts.sort_unstable();
        for c in cuts {
            if c > start {
                out.push((start, c));
            }
            start = c + 1;
        }
        if start < end {
            out.push((start, end));
        }
    }
    out
}

/// A file being received: its place and store handle, and its [`FileCore`] under a
/// lock that only this type takes.
pub(crate) struct IncomingFile {
    /// Where the file goes.
    pub place: Place,
    /// The store's handle of the file.
    pub out: Arc<dyn StoreFile>,
    /// The file was announced as growing: it acknowledges durable data and is checked
    /// against the source's final digest.
    pub streamed: bool,
    core: Mutex<FileCore>,
    /// Growing files: no piece lands in a block while it is read back and counted
    /// (see `growing::cover`).
    one_writer: Mutex<()>,
}

impl IncomingFile {
    /// A file opened in a store, with its state.
    pub fn new(place: Place, out: Arc<dyn StoreFile>, spec: &FileSpec, core: FileCore) -> Self {
        IncomingFile {
            place,
            out,
            streamed: spec.growing(),
            core: Mutex::new(core),
            one_writer: Mutex::new(()),
        }
    }

    /// Applies one event to the file's state, under its lock (taken here only, and
    /// only for the event).
    pub fn event<T>(&self, event: impl FnOnce(&mut FileCore) -> T) -> T {
        event(&mut self.core())
    }

    /// The file's state, locked.
    fn core(&self) -> MutexGuard<'_, FileCore> {
        self.core.lock().expect("file lock")
    }

    /// Holds off pieces of a growing file while a block is read back and counted.
    pub fn one_writer(&self) -> MutexGuard<'_, ()> {
        self.one_writer.lock().expect("write lock")
    }

    /// Its size now.
    pub fn size(&self) -> Size {
        self.core().size()
    }

    /// Block `block` is about to be stored (see [`FileCore::claim`]).
    pub fn claim(&self, block: u64, stopping: &AtomicBool) -> bool {
        // Under the lock: a session that stops marks every file failed under it after
        // raising `stopping`, so no block is stored after that.
        let mut core = self.core();
        core.claim(block, stopping.load(SeqCst))
    }

    /// Block `block` passed its check (see [`FileCore::done`]); blocks done before
    /// their turn are read back from the store for an in-order digest.
    pub fn done(&self, block: u64, digest: Digest, data: &[u8]) -> Result<Done, StorageError> {
        let bs = self.core().bs;
        let out = &self.out;
        self.core().done(block, digest, data, &mut |i, buf| {
            out.read_back(i * bs, buf)
        })
    }

    /// Marks the file failed (see [`FileCore::fail`]) and discards what the store
    /// holds of it; true when it had not failed already.
    pub fn drop_all(&self) -> bool {
        // Under the file's lock: a writer that is storing a block finishes claiming
        // first, and any later one sees the failure.
        let first = self.core().fail();
        self.out.abort();
        first
    }

    /// Reads block `block` back into `scratch` and hashes it on `gate`: the bytes and
    /// their digest, or `None` when the block is no longer wanted (done, or the file
    /// failed meanwhile).
    pub fn read_back<'a>(
        &self,
        block: u64,
        scratch: &'a mut Pages,
        gate: &crate::gate::Gate,
    ) -> Result<Option<(&'a [u8], Digest)>, StorageError> {
        // One look under the lock; the read and the hash run outside it.
        let Some((offset, len)) = self.wanted_back(block) else {
            return Ok(None);
        };
        scratch.resize(len);
        self.out.read_back(offset, scratch)?;
        let got = gate.run(|| self.block_digest(block, scratch));
        Ok(Some((&scratch[..], got)))
    }

    /// Where block `block` is stored (offset and length) when it still wants its
    /// read-back check; `None` when it no longer does (done, or the file failed).
    pub fn wanted_back(&self, block: u64) -> Option<(u64, usize)> {
        let core = self.core();
        core.wants(block)
            .then(|| (block * core.bs, core.block_len(block) as usize))
    }

    /// The digest block `block` with bytes `data` has (hashed outside the lock).
    pub fn block_digest(&self, block: u64, data: &[u8]) -> Digest {
        let (size, bs, algo) = {
            let c = self.core();
            (c.size, c.bs, c.checksum)
        };
        algo.block_digest(size.digest_len(), bs, block, data)
    }
}

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod model;

#[cfg(test)]
mod tests {
    use super::model::{replay, Event};
    use super::*;
    use proptest::prelude::*;

    const BS: u64 = 1024;

    fn event(blocks: u64) -> impl Strategy<Value = Event> {
        // Mostly indexes near the file, some anywhere (a hostile peer's).
        let index = prop_oneof![6 => 0..blocks + 2, 1 => any::<u64>()];
        prop_oneof![
            1 => (index.clone(), 0..2 * BS).prop_map(|(b, l)| Event::Arrive(b, l)),
            3 => index.clone().prop_map(Event::Claim),
            2 => index.clone().prop_map(Event::Written),
            1 => Just(Event::TakeWritten),
            6 => index.clone().prop_map(Event::Good),
            2 => index.clone().prop_map(Event::Bad),
            1 => (0u8..8).prop_map(|n| if n == 0 { Event::Fail } else { Event::TakeWritten }),
            1 => proptest::collection::vec(0..blocks + 1, 0..3).prop_map(Event::Seal),
            1 => index.clone().prop_map(Event::HostileSeal),
            1 => index.prop_map(Event::Cover),
        ]
    }

    fn algorithm() -> impl Strategy<Value = Algorithm> {
        prop_oneof![3 => Just(Algorithm::Blake3), 1 => Just(Algorithm::Xxh3)]
    }

    proptest! {
        /// Whatever happens to a file, its core agrees with a plain model of its life
        /// (see [`replay`]): blocks count once, the file commits exactly once, only
        /// complete and not failed, with the digest of its real content.
        #[test]
        fn agrees_with_a_model_of_a_files_life(
            algo in algorithm(),
            size in 0u64..24 * BS,
            growing in any::<bool>(),
            journaled in 0u64..6,
            max_retries in 0u32..3,
            events in proptest::collection::vec(event(24), 0..160),
        ) {
            prop_assert_eq!(
                replay(algo, size, BS, growing, journaled, max_retries, &events),
                Ok(())
            );
        }
    }

    #[test]
    fn every_block_in_any_order_commits_once_with_the_contents_digest() {
        let size = 5 * BS + 17;
        let order = [3, 0, 5, 1, 4, 2, 2, 5];
        for algo in [Algorithm::Blake3, Algorithm::Xxh3, Algorithm::Sha256] {
            for growing in [false, true] {
                let mut events: Vec<Event> = order.iter().map(|&b| Event::Good(b)).collect();
                if growing {
                    events.insert(3, Event::Seal(vec![0]));
                    events.push(Event::Good(0));
                }
                assert_eq!(replay(algo, size, BS, growing, 0, 1, &events), Ok(()));
            }
        }
    }

    #[test]
    fn pieces_count_once_the_blocks_before_them_are_done() {
        let mut core = FileCore::new(Setup {
            size: Size::Growing,
            block_size: BS,
            checksum: Algorithm::Blake3,
            max_retries: 1,
            ordered: false,
            meta: FinalMeta {
                mode: 0o644,
                mtime_sec: 0,
                mtime_nsec: 0,
            },
        });
        let never = &mut |_: u64, _: &mut [u8]| Ok(());
        for b in [0, 1] {
            core.done(b, [b as u8; 32], &[0; BS as usize], never)
                .unwrap();
        }
        // Pieces of block 3 arrive while block 2 is not done.
        assert_eq!(core.piece(3 * BS, 100), Ok(true));
        core.piece_written(3 * BS, 100);
        core.piece_written(3 * BS + 100, 50);
        core.piece_written(3 * BS + 500, 10); // not contiguous: ignored
        assert!(core.advance_durable());
        assert_eq!(core.durable_offset(), Some(2 * BS));
        assert_eq!(core.cover(3), Ok(Cover::Resend), "not covered whole");
        // Block 2 is done: the prefix runs on through the pieces of block 3.
        core.done(2, [2; 32], &[0; BS as usize], never).unwrap();
        assert!(core.advance_durable());
        assert_eq!(core.durable_offset(), Some(3 * BS + 150));
        // A piece that crosses a block, or a block stored whole, is refused or dropped.
        assert_eq!(core.piece(3 * BS + 1000, 100), Err(Hostile::BadPiece));
        assert!(core.claim(4, false));
        assert_eq!(core.piece(4 * BS, 10), Ok(false));
        assert_eq!(core.piece(u64::MAX - 5, 10), Err(Hostile::BadPiece));
    }

    #[test]
    fn ranges_without_held_blocks_stay_merged() {
        assert_eq!(without(vec![(0, 10)], &[]), vec![(0, 10)]);
        assert_eq!(without(vec![(0, 10)], &[9]), vec![(0, 9)]);
        assert_eq!(without(vec![(0, 10)], &[0, 4]), vec![(1, 4), (5, 10)]);
        assert_eq!(without(vec![(3, 4), (7, 9)], &[3, 8]), vec![(7, 8)]);
    }
}
