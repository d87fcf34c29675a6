//! Compression of blocks on the wire (`--compress`).
//!
//! The source compresses a block after hashing it, so digests are always over the
//! block's own bytes and every `--verify` mode checks exactly what it checked before.
//! A block goes compressed only when that saves at least 1/32 of it; otherwise it goes
//! as it is, and after each block of a file that did not shrink the next 1, 3, 7 ... up
//! to 63 blocks of that file are not even tried, so an incompressible file costs a
//! compression attempt in 64 blocks at most (small files, one block each, are each
//! tried: a mixed tree keeps compressing its text).
//!
//! With `auto` the source compresses once blocks have queued for the network (the link,
//! not the source's storage, is the bottleneck; this is not forgotten, since once
//! compressing the queue drains when the CPU becomes the limit, and going back to
//! uncompressed blocks would then be slower), and only while this host's compressing
//! threads together
//! compress at least [`AUTO_HEADROOM`] times faster than the link carries (the CPU is
//! not): on a fast link compression would only make a CPU-bound transfer slower.
//!
//! The receiver inflates each compressed block into a buffer of the block's declared
//! length (at most the session's block size), and refuses one that does not fill it
//! exactly: a peer cannot make it allocate or write more than an uncompressed block.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use hetch_proto::{Compression, AUTO_ZSTD_LEVEL};

/// Under `auto`, compression is used only while the threads that may compress (the
/// hashing threads) together compress at least this many times faster than bytes
/// leave on the link: then keeping the link busy takes at most half of their time.
pub(crate) const AUTO_HEADROOM: f64 = 2.0;

/// A compressed block must save at least 1/`MIN_SAVING` of its length to be sent so.
const MIN_SAVING: usize = 32;

/// Most blocks skipped after blocks that did not shrink.
const MAX_SKIP: u32 = 63;

/// Bytes compressed before `auto` trusts its measured compression speed.
const SPEED_SAMPLE: u64 = 1 << 20;

/// A compression context and its output buffer, reused across blocks.
struct Slot {
    cctx: zstd::bulk::Compressor<'static>,
    out: Vec<u8>,
}

/// The source's block compressor: contexts for the threads that compress at once (as
/// many as hash at once: it runs under the same gate), and what `auto` decides by.
pub(crate) struct Packer {
    auto: bool,
    /// Threads that may compress at once (the hashing gate's).
    threads: usize,
    level: i32,
    slots: Mutex<Vec<Slot>>,
    /// Bytes compressed and the nanoseconds that took (auto's speed estimate).
    tried_bytes: AtomicU64,
    tried_nanos: AtomicU64,
    /// Blocks have queued for the network: the link, not the source, limits.
    link_bound: AtomicBool,
    started: Instant,
}

impl Packer {
    /// The compressor for a session's `Compression`, run on up to `threads` threads at
    /// once; `None` when it is off.
    pub(crate) fn new(mode: Compression, threads: usize) -> Option<Packer> {
        let (auto, level) = match mode {
            Compression::Off => return None,
            Compression::Auto => (true, AUTO_ZSTD_LEVEL),
            Compression::Zstd(l) => (false, l),
        };
        Some(Packer {
            auto,
            threads: threads.max(1),
            level: level.into(),
            slots: Mutex::default(),
            tried_bytes: AtomicU64::new(0),
            tried_nanos: AtomicU64::new(0),
            link_bound: AtomicBool::new(false),
            started: Instant::now(),
        })
    }

    /// Whether the session's mode compresses the next block now. `queued` says
    /// whether blocks are waiting for the network (the data queue is at least half
    /// full); `wire_bytes` is what has left on the data streams so far.
    pub(crate) fn wants(&self, queued: bool, wire_bytes: u64) -> bool {
        if !self.auto {
            return true;
        }
        if queued {
            self.link_bound.store(true, Relaxed);
        }
        let link_bound = self.link_bound.load(Relaxed);
        let secs = self.started.elapsed().as_secs_f64();
        let link = if secs > 0.0 {
            wire_bytes as f64 / secs
        } else {
            0.0
        };
        auto_pays(
            link_bound,
            self.speed().map(|s| s * self.threads as f64),
            link,
        )
    }

    /// Bytes per second one thread compresses, once enough was compressed to tell.
    fn speed(&self) -> Option<f64> {
        let bytes = self.tried_bytes.load(Relaxed);
        let nanos = self.tried_nanos.load(Relaxed).max(1);
        (bytes >= SPEED_SAMPLE).then(|| bytes as f64 * 1e9 / nanos as f64)
    }

    /// Compresses `buf` in place when that saves enough: the length of the zstd frame
    /// now at its start if it did (the bytes after the frame are left as they were).
    pub(crate) fn pack(&self, buf: &mut [u8]) -> Option<usize> {
        let mut slot = match self.slots.lock().expect("packer lock").pop() {
            Some(s) => s,
            None => match zstd::bulk::Compressor::new(self.level) {
                Ok(cctx) => Slot {
                    cctx,
                    out: Vec::new(),
                },
                Err(_) => return None,
            },
        };
        let t0 = Instant::now();
        let raw = buf.len() as u64;
        // Room for the largest output worth sending: a longer one does not fit, which
        // zstd reports as an error, and that is the "does not shrink" answer.
        let room = buf.len() - buf.len() / MIN_SAVING;
        let packed = compress_bounded(&mut slot.cctx, buf, &mut slot.out, room).is_some();
        let packed = packed.then(|| {
            buf[..slot.out.len()].copy_from_slice(&slot.out);
            slot.out.len()
        });
        self.tried_bytes.fetch_add(raw, Relaxed);
        self.tried_nanos
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        self.slots.lock().expect("packer lock").push(slot);
        packed
    }
}

/// One reader's back-off from blocks that do not shrink, per file: after each such
/// block of a file the next 1, 3, 7 ... up to [`MAX_SKIP`] of its blocks are not tried;
/// a block that shrinks, or another file, starts again.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    file: Option<u64>,
    skip: u32,
    misses: u32,
}

impl Backoff {
    /// Whether to try the next block of `file`.
    pub(crate) fn wants(&mut self, file: u64) -> bool {
        if self.file != Some(file) {
            *self = Backoff {
                file: Some(file),
                ..Backoff::default()
            };
        }
        match self.skip.checked_sub(1) {
            Some(n) => {
                self.skip = n;
                false
            }
            None => true,
        }
    }

    /// Records whether a block that was tried shrank.
    pub(crate) fn tried(&mut self, packed: bool) {
        if packed {
            self.misses = 0;
        } else {
            self.misses += 1;
            self.skip = ((1u32 << self.misses.min(6)) - 1).min(MAX_SKIP);
        }
    }
}

/// Compresses `src` into `out`; the length written, or `None` when it is not below
/// `room` bytes (or zstd failed). zstd writes into `out`'s spare capacity, which is at
/// least `room` and bounds the output, so the buffer is not zeroed for every block.
fn compress_bounded(
    cctx: &mut zstd::bulk::Compressor<'static>,
    src: &[u8],
    out: &mut Vec<u8>,
    room: usize,
) -> Option<usize> {
    out.clear();
    out.reserve(room);
    let n = cctx.compress_to_buffer(src, out).ok()?;
    (n > 0 && n < room).then_some(n)
}

/// Auto's rule: compress while the link is the bottleneck and this host compresses
/// (`speed`, bytes per second over all compressing threads) at least [`AUTO_HEADROOM`]
/// times faster than the link carries. Until the speed is known (`None`), blocks that
/// queue are compressed, which measures it.
pub(crate) fn auto_pays(link_bound: bool, speed: Option<f64>, link: f64) -> bool {
    link_bound && speed.is_none_or(|s| s >= AUTO_HEADROOM * link)
}

/// Inflates one compressed block into `out`, which must be exactly the block's length:
/// an error when the payload is not a zstd frame of exactly that many bytes.
pub(crate) fn unpack(payload: &[u8], out: &mut [u8]) -> Result<(), String> {
    thread_local! {
        static DCTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    DCTX.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?);
        }
        let dctx = d.as_mut().expect("set above");
        match dctx.decompress_to_buffer(payload, out) {
            Ok(n) if n == out.len() => Ok(()),
            Ok(n) => Err(format!(
                "compressed block inflates to {n} bytes, not the {} it declares",
                out.len()
            )),
            Err(e) => Err(format!("compressed block does not inflate: {e}")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(len: usize) -> Vec<u8> {
        let mut v = Vec::new();
        let mut i = 0u64;
        while v.len() < len {
            v.extend_from_slice(
                format!("{i},sensor-{},{:.3}\n", i % 17, i as f64 / 7.0).as_bytes(),
            );
            i += 1;
        }
        v.truncate(len);
        v
    }

    /// Incompressible bytes: BLAKE3's output stream.
    fn random(len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        blake3::Hasher::new().finalize_xof().fill(&mut v);
        v
    }

    #[test]
    fn text_is_packed_and_unpacks_to_the_same_bytes() {
        let p = Packer::new(Compression::Zstd(3), 1).unwrap();
        let orig = text(1 << 20);
        let mut buf = orig.clone();
        let n = p.pack(&mut buf).expect("packed");
        buf.truncate(n);
        assert!(buf.len() < orig.len() / 3, "{} bytes", buf.len());
        let mut out = vec![0; orig.len()];
        unpack(&buf, &mut out).unwrap();
        assert_eq!(out, orig);
    }

    #[test]
    fn incompressible_blocks_go_as_they_are_and_later_ones_are_skipped() {
        let p = Packer::new(Compression::Zstd(1), 1).unwrap();
        let orig = random(64 << 10);
        let mut buf = orig.clone();
        assert!(p.pack(&mut buf).is_none());
        assert_eq!(
            buf, orig,
            "a block that did not shrink must be left as it was"
        );
        let mut b = Backoff::default();
        assert!(b.wants(1));
        b.tried(false);
        // One miss: the next block is not tried, the one after is.
        assert!(!b.wants(1));
        assert!(b.wants(1));
        for _ in 0..10 {
            b.tried(false);
        }
        let skipped = (0..100).take_while(|_| !b.wants(1)).count();
        assert_eq!(skipped as u32, MAX_SKIP);
        // A block that shrinks resets the back-off; so does another file.
        b.tried(true);
        assert!(b.wants(1));
        b.tried(false);
        assert!(!b.wants(1));
        b.tried(false);
        assert!(b.wants(2));
        assert!(p.pack(&mut text(64 << 10)).is_some());
    }

    #[test]
    fn auto_compresses_only_when_the_link_is_the_bottleneck() {
        // Nothing queues for the network: the source is slower than the link.
        assert!(!auto_pays(false, None, 1e6));
        assert!(!auto_pays(false, Some(1e9), 1e6));
        // Queued, speed not known yet: try, to measure it.
        assert!(auto_pays(true, None, 0.0));
        // A 62.5 MB/s link and 200 MB/s compression: the link limits.
        assert!(auto_pays(true, Some(200e6), 62.5e6));
        // A 1.5 GB/s link and 400 MB/s compression: the CPU would.
        assert!(!auto_pays(true, Some(400e6), 1.5e9));
    }

    #[test]
    fn hostile_payloads_are_refused_without_writing_past_the_block() {
        let orig = text(64 << 10);
        let packed = zstd::bulk::compress(&orig, 3).unwrap();
        // Declares fewer bytes than it holds: refused, nothing written past the buffer.
        let mut short = vec![0; orig.len() - 1];
        assert!(unpack(&packed, &mut short).is_err());
        // Declares more bytes than it holds.
        let mut long = vec![0; orig.len() + 1];
        let e = unpack(&packed, &mut long).unwrap_err();
        assert!(e.contains("not the"), "{e}");
        // Not zstd at all, and a truncated frame.
        assert!(unpack(b"not a zstd frame", &mut [0; 100]).is_err());
        assert!(unpack(&packed[..packed.len() / 2], &mut vec![0; orig.len()]).is_err());
        // A bomb: 256 MiB of zeros in a few KiB, into a 1 MiB block.
        let bomb = zstd::bulk::compress(&vec![0u8; 256 << 20], 1).unwrap();
        assert!(bomb.len() < 1 << 20);
        assert!(unpack(&bomb, &mut vec![0; 1 << 20]).is_err());
    }
}
