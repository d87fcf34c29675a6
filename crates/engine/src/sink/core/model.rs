//! [`FileCore`] against a plain model of a file's life at the receiver (property
//! tests and the `ledger` fuzz target).
//!
//! The file has a final content fixed up front (a known size, or a growing file that
//! is sealed at that size); the events are those a session's tasks produce, in any
//! order and with any numbers, as a hostile or confused peer may cause. After each,
//! the value must agree with the model: what it admits and claims, which blocks count,
//! what remains, that a file commits exactly once, only when every block is done and
//! it has not failed, and with the whole-file digest of the real content.

use std::collections::{BTreeMap, BTreeSet};

use hetch_integrity::{self as integrity, Algorithm, Digest};
use hetch_proto::Seal;
use hetch_storage::part::FinalMeta;

use super::{Cover, Done, FileCore, Setup};
use crate::sink::ledger::Checked;
use crate::store::Size;

/// Something that happens to a file being received.
#[derive(Debug, Clone)]
pub(crate) enum Event {
    /// A block header of this index and length arrived.
    Arrive(u64, u64),
    /// A writer is about to store the block.
    Claim(u64),
    /// The block was stored and waits for the file's read-back.
    Written(u64),
    /// The file's read-back takes its written blocks.
    TakeWritten,
    /// The block (its real bytes) passed its check.
    Good(u64),
    /// The block failed its check.
    Bad(u64),
    /// The file failed.
    Fail,
    /// A growing file is sealed at its final size; these blocks were rewritten.
    Seal(Vec<u64>),
    /// A seal naming this block, maybe beyond the file.
    HostileSeal(u64),
    /// A `Cover` of this block.
    Cover(u64),
}

/// The bytes of the file the model receives: `size` bytes that differ per block.
fn content(size: u64) -> Vec<u8> {
    (0..size).map(|j| (j * 7 + j / 1000) as u8).collect()
}

/// Plays `events` on a file of `size` bytes in blocks of `bs` checked with `algo`
/// (`growing`: announced while it grows, sealed by a [`Event::Seal`]), whose first
/// `journaled` blocks an earlier run recorded; `Err` says where value and model
/// disagree.
pub(crate) fn replay(
    algo: Algorithm,
    size: u64,
    bs: u64,
    growing: bool,
    journaled: u64,
    max_retries: u32,
    events: &[Event],
) -> Result<(), String> {
    let data = content(size);
    let meta = FinalMeta {
        mode: 0o644,
        mtime_sec: 1,
        mtime_nsec: 2,
    };
    let announced = Size::announced(size, growing);
    let mut core = FileCore::new(Setup {
        size: announced,
        block_size: bs,
        checksum: algo,
        max_retries,
        ordered: !algo.merges_blocks(),
        meta,
    });
    let final_blocks = integrity::block_count(size, bs);
    // Blocks whose digest does not depend on knowing the end (see `full_blocks`).
    let early = crate::sink::full_blocks(size, bs);
    let bytes = |b: u64| {
        let start = (b * bs).min(size) as usize;
        &data[start..((b + 1) * bs).min(size) as usize]
    };
    let mut sealed = !growing;
    let digest = |b: u64, sealed: bool| {
        let len = if sealed { size } else { u64::MAX };
        algo.block_digest(len, bs, b, bytes(b))
    };
    let mut done: BTreeSet<u64> = BTreeSet::new();
    let mut written: BTreeSet<u64> = BTreeSet::new();
    let mut fails: BTreeMap<u64, u32> = BTreeMap::new();
    let mut failed = false;
    let mut committed = 0;
    // A growing file's journal holds early blocks only (it grew past them).
    let recorded = if growing { early } else { final_blocks };
    for b in 0..journaled.min(recorded) {
        if core.taken_up(b, digest(b, sealed)) {
            done.insert(b);
        }
    }
    let fail = |i: usize, e: &Event, what: String| Err(format!("event {i} ({e:?}): {what}"));
    let mut read = |i: u64, buf: &mut [u8]| {
        buf.copy_from_slice(bytes(i));
        Ok(())
    };
    for (i, e) in events.iter().enumerate() {
        let blocks = if sealed {
            final_blocks
        } else {
            Size::Growing.blocks(bs)
        };
        let len_of = |b: u64| match sealed {
            true => integrity::block_len(size, bs, b),
            false => bs,
        };
        // The blocks a source may send now: any of the final file once sealed, the
        // early ones before.
        let sendable = |b: u64| b < if sealed { final_blocks } else { early };
        match e {
            Event::Arrive(b, len) => {
                let ok = *b < blocks && *len == len_of(*b);
                if core.admit(*b, *len).is_ok() != ok {
                    return fail(i, e, "admit disagrees".into());
                }
            }
            Event::Claim(b) if sendable(*b) => {
                let want = !failed && !done.contains(b) && !written.contains(b);
                if core.claim(*b, false) != want {
                    return fail(i, e, format!("claim is not {want}"));
                }
            }
            Event::Written(b) if sendable(*b) && !done.contains(b) && !failed => {
                written.insert(*b);
                let all = core.written(*b, digest(*b, sealed));
                let remaining = blocks - done.len() as u64;
                if all != (written.len() as u64 == remaining) {
                    return fail(i, e, format!("all written is {all}"));
                }
            }
            Event::TakeWritten => {
                let got: Vec<u64> = core.take_written().into_iter().map(|(b, _)| b).collect();
                if got != written.iter().copied().collect::<Vec<_>>() {
                    return fail(i, e, format!("took {got:?}, written {written:?}"));
                }
                written.clear();
            }
            Event::Good(b) if sendable(*b) => {
                let got = core
                    .done(*b, digest(*b, sealed), bytes(*b), &mut read)
                    .map_err(|e| e.to_string())?;
                let counts = !failed && done.insert(*b);
                if counts {
                    fails.remove(b);
                }
                let last = counts && sealed && done.len() as u64 == final_blocks;
                match (&got, counts, last) {
                    (Done::Ignored, false, _) => {}
                    (Done::More { durable }, true, false) if *durable != sealed => {}
                    (Done::Last(c), true, true) => {
                        committed += 1;
                        let whole = expected_whole(algo, &data, growing);
                        if c.whole != whole || c.size != size || c.meta.mtime_sec != 1 {
                            return fail(i, e, format!("committed {c:?}, want {whole:?}"));
                        }
                        if growing != c.expected.is_some() {
                            return fail(i, e, "the seal's digest went astray".into());
                        }
                    }
                    _ => return fail(i, e, format!("{got:?}, counts {counts}, last {last}")),
                }
            }
            Event::Bad(b) => {
                let n = fails.entry(*b).or_insert(0);
                *n = n.saturating_add(1);
                let want = match *n > max_retries {
                    true => Checked::GiveUp { tries: *n },
                    false => Checked::Resend,
                };
                if core.failed_check(*b) != want {
                    return fail(i, e, "failed check disagrees".into());
                }
            }
            Event::Fail => {
                if core.fail() == failed {
                    return fail(i, e, "fail disagrees".into());
                }
                failed = true;
            }
            Event::Seal(rewritten) => {
                let rewritten: Vec<u64> =
                    rewritten.iter().map(|b| b % final_blocks.max(1)).collect();
                let got = core.seal(&seal_of(size, &data, algo, rewritten.clone(), meta));
                match (got, sealed, failed) {
                    (Err(_), true, _) => {}
                    (Ok(None), false, true) => {}
                    (Ok(Some(s)), false, false) => {
                        sealed = true;
                        for b in &rewritten {
                            done.remove(b);
                        }
                        done.retain(|&b| b < final_blocks);
                        fails.retain(|&b, _| b < final_blocks);
                        let gaps = (0..final_blocks).filter(|b| !done.contains(b));
                        let asked: Vec<u64> = s.ask.iter().flat_map(|&(a, b)| a..b).collect();
                        if asked != gaps.collect::<Vec<_>>() || !s.tail.is_empty() {
                            return fail(i, e, format!("sealed {s:?}, done {done:?}"));
                        }
                    }
                    (got, ..) => return fail(i, e, format!("seal gave {got:?}")),
                }
            }
            Event::HostileSeal(b) => {
                let mut seal = seal_of(size, &data, algo, vec![*b], meta);
                seal.size = size;
                if *b >= final_blocks && core.seal(&seal).is_ok() {
                    return fail(i, e, "a seal beyond the file was taken".into());
                }
            }
            Event::Cover(b) => {
                // No pieces are modelled: a block is never covered.
                let got = core.cover(*b);
                let want = match () {
                    _ if *b >= blocks => Err(()),
                    _ if failed || done.contains(b) || sealed => Ok(Cover::Gone),
                    _ => Ok(Cover::Resend),
                };
                if got.map_err(|_| ()) != want {
                    return fail(i, e, "cover disagrees".into());
                }
            }
            _ => {}
        }
        let blocks = if sealed {
            final_blocks
        } else {
            Size::Growing.blocks(bs)
        };
        let remaining = blocks - done.len() as u64;
        if core.remaining() != remaining {
            return fail(
                i,
                e,
                format!("remaining {} not {remaining}", core.remaining()),
            );
        }
        if committed > 1 {
            return fail(i, e, "committed twice".into());
        }
    }
    Ok(())
}

/// The whole-file digest a complete copy must commit with: the BLAKE3 of the content
/// (merged from block digests), or the algorithm's in-order digest (none for a file
/// that grew: its blocks are checked against the seal's digest instead).
fn expected_whole(algo: Algorithm, data: &[u8], growing: bool) -> Option<Vec<u8>> {
    if algo.merges_blocks() {
        return Some(blake3::hash(data).as_bytes().to_vec());
    }
    (!growing).then(|| {
        let mut h = algo.hasher();
        h.update(data);
        h.finish()
    })
}

fn seal_of(size: u64, data: &[u8], algo: Algorithm, rewritten: Vec<u64>, m: FinalMeta) -> Seal {
    let mut h = algo.hasher();
    h.update(data);
    Seal {
        file: 0,
        size,
        mtime_sec: m.mtime_sec,
        mtime_nsec: m.mtime_nsec,
        digest: h.finish(),
        rewritten,
        tail: Vec::<(u64, Digest)>::new(),
    }
}
