//! Repairing a damaged block a patch at a time.
//!
//! A block that fails its check was damaged somewhere: on the link (a bit TCP's
//! checksum let through), or in the store. Sending it whole again fails as often as
//! the first time did when the damage is spread thinly over many packets: a 4 MiB
//! block crosses a 9000-byte MTU in 470 packets, so at 0.2% of packets damaged 61% of
//! its sends are, and at 2% nearly all. So the sink keeps its damaged copy, cuts it
//! into patches and sends their BLAKE3 hashes ([`Frame::Repair`]); the source answers
//! with the patches whose bytes differ from its own (data frames carrying a
//! [`hetch_proto::Patch`]), each checked on arrival against the hash the frame's
//! authenticated header gives it; the copy is patched, and once the answer is
//! complete the whole block is checked against the digest it first came with. A
//! patch damaged on the way leaves its part of the copy as it was, for the next
//! round, which only asks for what is still wrong (in smaller patches after a round
//! that fixed nothing). Every round that fixes something is progress; rounds that fix
//! nothing count as the block's failed checks, so only a link that damages everything
//! exhausts them.
//!
//! Copies held are bounded ([`MAX_HELD_BYTES`], at least one block); a block that
//! fails while they are all taken is asked for whole ([`Frame::Resend`]), as before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use hetch_integrity::Digest;
use hetch_proto::{DataHeader, Frame, Patch, MIN_PATCH};

use super::{IncomingFile, SinkShared};
use crate::error::EngineError;
use crate::progress::Progress;

/// Bytes of damaged copies the sink holds at once (at least one block's).
pub(crate) const MAX_HELD_BYTES: usize = 64 << 20;

/// Largest patch of a first round: 64 KiB, a few packets of a jumbo-frame link.
const FIRST_PATCH_MAX: usize = 64 << 10;

/// Patches a first round cuts a block into, at most (fewer when that would make them
/// shorter than [`MIN_PATCH`]).
const FIRST_PATCHES: usize = 64;

/// The damaged copies being repaired, by (file, block).
#[derive(Default)]
pub(crate) struct Repairs {
    held: Mutex<HashMap<(u64, u64), Held>>,
    /// Entries of `held`: a block arriving whole looks at the map only when some are.
    count: AtomicUsize,
}

/// One block under repair.
struct Held {
    /// The block's digest as its first arrival's header gave it.
    expected: Digest,
    /// The sink's copy, patched as patches arrive.
    copy: Vec<u8>,
    /// The round in flight (from 1).
    round: u32,
    /// Bytes per patch of the round in flight.
    patch_len: usize,
    /// Patches the source said this round's answer has, once one arrived.
    count: Option<u32>,
    /// Which patches of this round were seen (intact or not): an answer sent again
    /// after its data stream was lost repeats some.
    seen: Vec<bool>,
    /// How many of `seen` are.
    seen_count: u32,
    /// Whether a patch of this round changed the copy.
    progress: bool,
}

/// What a patch did.
pub(crate) enum Patched {
    /// The copy is whole and has the block's digest: store it as the block.
    Whole {
        /// The block's digest.
        digest: Digest,
        /// Its bytes.
        data: Vec<u8>,
    },
    /// Send this (the next round's [`Frame::Repair`], or the file's failure).
    Reply(Option<Frame>),
}

impl Repairs {
    /// Copies that may be held at once for blocks of `block_size` bytes.
    fn cap(block_size: u64) -> usize {
        (MAX_HELD_BYTES / block_size.max(1) as usize).max(1)
    }

    /// Block `block` of `file` failed its check with bytes `data` (expected digest
    /// `expected`): keeps a copy and returns the first round's [`Frame::Repair`], or
    /// `None` when the block is too short to patch or copies are all taken (the caller
    /// asks for it whole).
    pub(crate) fn start(
        &self,
        file: u64,
        block: u64,
        block_size: u64,
        expected: &Digest,
        data: std::borrow::Cow<'_, [u8]>,
    ) -> Option<Frame> {
        if data.len() <= MIN_PATCH as usize || !self.has_room(file, block, block_size, data.len()) {
            return None;
        }
        // Hashed outside the lock: other blocks' patches go on meanwhile.
        let patch_len = first_patch_len(data.len());
        let frame = repair_frame((file, block, 1), patch_len, &data);
        let patches = data.len().div_ceil(patch_len);
        let mut held = self.held.lock().expect("repairs lock");
        if !held.contains_key(&(file, block)) && held.len() >= Self::cap(block_size) {
            return None;
        }
        held.insert(
            (file, block),
            Held {
                expected: *expected,
                copy: data.into_owned(),
                round: 1,
                patch_len,
                count: None,
                seen: vec![false; patches],
                seen_count: 0,
                progress: false,
            },
        );
        self.count.store(held.len(), Relaxed);
        Some(frame)
    }

    /// Whether a damaged copy of `len` bytes of block `block` of `file` could be
    /// held now: it is held already, or there is room; always for a block too short to
    /// patch (it is sent whole anyway, and counted).
    pub(crate) fn has_room(&self, file: u64, block: u64, block_size: u64, len: usize) -> bool {
        if len <= MIN_PATCH as usize {
            return true;
        }
        let held = self.held.lock().expect("repairs lock");
        held.contains_key(&(file, block)) || held.len() < Self::cap(block_size)
    }

    /// Block `block` of `file` arrived whole (the source had no patch to send, or
    /// sends whole blocks only): its repair, if any, is over.
    pub(crate) fn arrived_whole(&self, file: u64, block: u64) {
        if self.count.load(Relaxed) == 0 {
            return;
        }
        let mut held = self.held.lock().expect("repairs lock");
        held.remove(&(file, block));
        self.count.store(held.len(), Relaxed);
    }
}

/// The first round's patch length for a block of `len` bytes: about
/// [`FIRST_PATCHES`] patches, a power of two from [`MIN_PATCH`] to
/// [`FIRST_PATCH_MAX`].
fn first_patch_len(len: usize) -> usize {
    (len / FIRST_PATCHES)
        .next_power_of_two()
        .clamp(MIN_PATCH as usize, FIRST_PATCH_MAX)
}

/// The [`Frame::Repair`] of round `round` of block `block` of `file`, for a copy `data`
/// cut into patches of `patch_len` bytes.
fn repair_frame((file, block, round): (u64, u64, u32), patch_len: usize, data: &[u8]) -> Frame {
    Frame::Repair {
        file,
        block,
        round,
        patch_len: patch_len as u32,
        digests: patch_digests(data, patch_len),
    }
}

/// The BLAKE3 hash of each `patch_len`-byte patch of `data` (the last one shorter).
pub(crate) fn patch_digests(data: &[u8], patch_len: usize) -> Vec<[u8; 32]> {
    data.chunks(patch_len)
        .map(|p| *blake3::hash(p).as_bytes())
        .collect()
}

/// A patch `h` (at `p`) of a block under repair arrived with bytes `data`: patches the
/// copy when the bytes have the hash the header gives them, and ends the round when
/// it was the last of the answer's patches to arrive. A patch for a block not under
/// repair (its file failed, or the session's copy was dropped) or of another round
/// (an answer sent again after its data stream was lost, arriving late) is let go; one
/// that does not fit the round (another count, an offset off the patch grid or past
/// the block, a length other than the patch's) is the peer's error.
pub(crate) fn patch(
    sh: &SinkShared,
    inc: &IncomingFile,
    h: &DataHeader,
    p: Patch,
    data: &[u8],
) -> Result<Patched, EngineError> {
    let unexpected = |what: String| EngineError::unexpected(&sh.peer, what);
    let intact = *blake3::hash(data).as_bytes() == h.digest;
    let mut all = sh.repairs.held.lock().expect("repairs lock");
    let Some(held) = all
        .get_mut(&(h.file, h.block))
        .filter(|h| h.round == p.round)
    else {
        return Ok(Patched::Reply(None));
    };
    let at = p.at as usize;
    let want = held.patch_len.min(held.copy.len().saturating_sub(at));
    if at % held.patch_len != 0 || at >= held.copy.len() || data.len() != want {
        return Err(unexpected(format!(
            "patch of {} bytes at {at} of block {} of file {}: not one of its {}-byte patches",
            data.len(),
            h.block,
            h.file,
            held.patch_len
        )));
    }
    let first = !std::mem::replace(&mut held.seen[at / held.patch_len], true);
    if *held.count.get_or_insert(p.count) != p.count || (first && held.seen_count >= p.count) {
        return Err(unexpected(format!(
            "patches of block {} of file {}: more than the {} the answer has",
            h.block, h.file, p.count
        )));
    }
    held.seen_count += u32::from(first);
    Progress::add(&sh.progress.patch_bytes, data.len() as u64);
    if intact && held.copy[at..at + want] != *data {
        held.copy[at..at + want].copy_from_slice(data);
        held.progress = true;
    }
    if !first || held.seen_count < p.count {
        return Ok(Patched::Reply(None));
    }
    // The answer is complete: the block is whole, or another round asks for the rest.
    if sh.gate.run(|| inc.block_digest(h.block, &held.copy)) == held.expected {
        let held = all.remove(&(h.file, h.block)).expect("held above");
        sh.repairs.count.store(all.len(), Relaxed);
        Progress::add(&sh.progress.repaired_blocks, 1);
        return Ok(Patched::Whole {
            digest: held.expected,
            data: held.copy,
        });
    }
    if !held.progress {
        // Nothing got through intact: smaller patches cross fewer damaged packets. A
        // round that fixed nothing is one failed check of the block.
        held.patch_len = (held.patch_len / 2).max(MIN_PATCH as usize);
        if let super::ledger::Checked::GiveUp { tries } = inc.event(|c| c.failed_check(h.block)) {
            let (expected, copy) = (held.expected, std::mem::take(&mut held.copy));
            all.remove(&(h.file, h.block));
            sh.repairs.count.store(all.len(), Relaxed);
            drop(all);
            let got = inc.block_digest(h.block, &copy);
            let message =
                super::write::check_failed_message(sh, inc, h.block, tries, &expected, &got);
            return Ok(Patched::Reply(sh.fail_file(h.file, message)));
        }
    }
    held.round += 1;
    held.count = None;
    held.seen = vec![false; held.copy.len().div_ceil(held.patch_len)];
    held.seen_count = 0;
    held.progress = false;
    let frame = repair_frame((h.file, h.block, held.round), held.patch_len, &held.copy);
    Ok(Patched::Reply(Some(frame)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_rounds_cut_blocks_into_about_64_patches_of_4_to_64_kib() {
        assert_eq!(first_patch_len(4 << 20), 64 << 10);
        assert_eq!(first_patch_len(64 << 20), 64 << 10, "at most 64 KiB");
        assert_eq!(first_patch_len(1 << 20), 16 << 10);
        assert_eq!(first_patch_len(8 << 10), 4 << 10, "at least MIN_PATCH");
        assert_eq!(
            first_patch_len((1 << 20) + 64 * 5),
            32 << 10,
            "a power of two"
        );
    }

    #[test]
    fn patch_digests_cover_the_copy_with_a_shorter_last_patch() {
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let d = patch_digests(&data, 4096);
        assert_eq!(d.len(), 3);
        assert_eq!(d[2], *blake3::hash(&data[8192..]).as_bytes());
    }

    #[test]
    fn copies_held_are_bounded_by_bytes_and_a_short_block_is_not_held() {
        let r = Repairs::default();
        let bs = 16u64 << 20;
        let block = vec![1u8; bs as usize];
        let cap = Repairs::cap(bs);
        assert_eq!(cap, 4);
        for b in 0..cap as u64 {
            assert!(r.start(1, b, bs, &[0; 32], block[..].into()).is_some());
        }
        assert!(
            r.start(1, 99, bs, &[0; 32], block[..].into()).is_none(),
            "all taken"
        );
        assert!(!r.has_room(1, 99, bs, block.len()));
        assert!(r.has_room(1, 0, bs, block.len()), "its own");
        assert!(
            r.has_room(1, 99, bs, 4096),
            "too short to hold: sent whole, counted"
        );
        assert!(
            r.start(1, 0, bs, &[0; 32], block[..].into()).is_some(),
            "its own again"
        );
        r.arrived_whole(1, 0);
        assert!(
            r.start(1, 99, bs, &[0; 32], block[..].into()).is_some(),
            "one freed"
        );
        assert!(r
            .start(2, 0, 4096, &[0; 32], [0u8; 4096][..].into())
            .is_none());
        assert_eq!(Repairs::cap(512 << 20), 1, "one block at least");
    }
}
