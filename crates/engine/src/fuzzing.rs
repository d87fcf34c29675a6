//! Whole sessions driven by fuzzed peers, shared by the cargo-fuzz targets (`fuzz/`,
//! feature `fuzzing`) and the in-crate random-input tests, so CI exercises exactly what
//! the fuzzer does. Not part of the crate's API.
//!
//! The input is read as a program for a hostile peer: each step picks a frame and its
//! fields (paths from a small alphabet that includes `..`, `/` and hetch's temporary
//! names; numbers biased to boundaries: 0, block edges, 2^32, 2^42, 2^63, `u64::MAX`).
//! [`sink_session`] plays the source against a real sink receiving into a fresh
//! directory; [`source_session`] plays the sink against a real source reading a small
//! tree. Each fails (panics) on a panic in the engine, a session that does not end
//! once its peer hangs up, or a sink that created anything outside its destination.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hetch_proto::{
    DataHeader, Entry, EntryKind, Frame, ManifestEntry, Piece, PlanAction, PlanItem, Seal, Summary,
    Verify,
};
use tokio::io::split;

use crate::wire::{FrameMac, FrameReader, FrameWriter};
use crate::{DestSpec, Operand, Options, Progress, Transport};

/// Block size of fuzzed sessions: small, so boundaries are cheap to reach.
const BS: u64 = 4096;
/// How long a session may take to end after its peer stopped: far more than any
/// legitimate end needs, so that only a hang trips it.
const END: Duration = Duration::from_secs(60);

/// Reads a fuzzer's bytes as choices.
struct Choices<'a> {
    data: &'a [u8],
}

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    fn done(&self) -> bool {
        self.data.is_empty()
    }

    fn pick<'b, T>(&mut self, from: &'b [T]) -> &'b T {
        &from[self.byte() as usize % from.len()]
    }

    /// A number, mostly from the boundaries that break arithmetic.
    fn num(&mut self) -> u64 {
        const EDGES: [u64; 20] = [
            0,
            1,
            2,
            3,
            63,
            64,
            BS - 1,
            BS,
            BS + 1,
            3 * BS + 5,
            1 << 20,
            u32::MAX as u64,
            1 << 32,
            1 << 42,
            (1 << 52) + 1,
            i64::MAX as u64,
            1 << 63,
            u64::MAX / BS,
            u64::MAX - 1,
            u64::MAX,
        ];
        match self.byte() {
            b if (b as usize) < EDGES.len() * 10 => EDGES[b as usize % EDGES.len()],
            _ => u64::from_le_bytes(std::array::from_fn(|_| self.byte())),
        }
    }

    /// A range that encodes (its end not before its start).
    fn range(&mut self) -> (u64, u64) {
        let (a, b) = (self.num(), self.num());
        (a.min(b), a.max(b))
    }

    fn small(&mut self) -> u64 {
        (self.byte() % 8) as u64
    }

    fn path(&mut self) -> Vec<u8> {
        const PARTS: [&str; 10] = ["a", "b", "d", ".", "..", "", ".x.hetch-part", "x", "é", "/"];
        let mut p = Vec::new();
        for i in 0..1 + self.byte() % 3 {
            if i > 0 {
                p.push(b'/');
            }
            p.extend_from_slice(self.pick(&PARTS).as_bytes());
        }
        p
    }

    fn digest(&mut self) -> [u8; 32] {
        [self.byte(); 32]
    }

    fn payload(&mut self) -> Vec<u8> {
        let len = *self.pick(&[
            0usize,
            1,
            100,
            BS as usize - 1,
            BS as usize,
            BS as usize + 1,
        ]);
        vec![self.byte(); len]
    }

    fn entry(&mut self, id: u64) -> Entry {
        let kind = match self.byte() % 4 {
            0 => EntryKind::Dir,
            1 => EntryKind::Symlink {
                target: self
                    .pick(&["/", "..", "../..", "a", "/tmp", "d/a"])
                    .as_bytes()
                    .to_vec(),
            },
            _ => EntryKind::File {
                size: self.num(),
                digest: (self.byte() % 4 == 0).then(|| self.digest().to_vec()),
                growing: self.byte() % 3 == 0,
            },
        };
        Entry {
            id,
            path: self.path(),
            kind,
            mode: *self.pick(&[0o644, 0o755, 0o4755, 0o7777, 0o000, u32::MAX]),
            mtime_sec: self.num() as i64,
            mtime_nsec: (self.num() % 2_000_000_000) as u32,
            xattrs: Vec::new(),
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The data-frame key of fuzzed sessions that protect plain data streams.
const MAC_KEY: [u8; 32] = [0x42; 32];

/// A pair of in-memory transports, (ours, the engine's), the engine's data stream
/// MAC-protected (as `--no-encrypt` streams are) when `mac`.
fn transports(mac: bool) -> (Transport, Transport) {
    let (ours, mut theirs) = Transport::in_memory_pair(1, 1 << 20, ("engine", "fuzzed peer"));
    theirs.data_mac = mac.then_some(MAC_KEY);
    (ours, theirs)
}

/// How a fuzzed source protects its data stream: not at all (and the sink expects
/// nothing), rightly, or with the key of another stream (every frame must be refused).
fn our_mac(c: &mut Choices<'_>) -> (bool, Option<FrameMac>) {
    match c.byte() % 4 {
        0 => (true, Some(FrameMac::for_stream(&MAC_KEY, 0, 0))),
        1 => (true, Some(FrameMac::for_stream(&MAC_KEY, 1, 0))),
        _ => (false, None),
    }
}

fn options(c: &mut Choices<'_>) -> Options {
    Options {
        block_size: BS,
        buffer_memory: 1 << 20,
        hash_threads: 1,
        verify: *c.pick(&[Verify::Written, Verify::Received, Verify::None]),
        compare_only: c.byte() % 8 == 0,
        // Mirroring: a sink deletes below its own temporary destination only.
        delete: if c.byte() % 4 == 0 {
            Some(crate::DeleteRequest {
                max_delete: None,
                delete_excluded: false,
            })
        } else {
            None
        },
        dry_run: c.byte() % 8 == 0,
        ..Options::default()
    }
}

/// Plays a hostile source, directed by `data`, against a real sink.
pub fn sink_session(data: &[u8]) {
    let mut c = Choices { data };
    let opts = options(&mut c);
    let (mac, ours_mac) = our_mac(&mut c);
    let t = tempfile::tempdir().expect("tempdir");
    let dest = t.path().join("dest");
    std::fs::create_dir(&dest).expect("dest");
    let spec = DestSpec {
        path: dest.clone(),
        sources: 2,
        trailing_slash: false,
        confine_to: None,
        as_operand: opts.compare_only,
    };
    runtime().block_on(async move {
        let (ours, theirs) = transports(mac);
        let sink = tokio::spawn(crate::run_sink(opts, spec, theirs, Arc::default()));
        let (ctl_r, ctl_w) = split(ours.control);
        let drain = tokio::spawn(drain(FrameReader::new(ctl_r, "sink")));
        let mut ctl = FrameWriter::new(ctl_w, "sink");
        let data = ours.data.into_iter().next().expect("one");
        let mut data_w = FrameWriter::new(data, "sink").with_mac(ours_mac);
        let mut next_id = 1;
        while !c.done() {
            let frame = match c.byte() % 11 {
                0..=2 => {
                    let n = 1 + c.small();
                    let batch = (0..n).map(|i| c.entry(next_id + i)).collect();
                    next_id += n;
                    Frame::Entries(batch)
                }
                3 | 4 => {
                    // Only frames that encode: an all-zero block has a length and no
                    // payload, any other block a payload (the decoder is fuzzed apart).
                    // One byte for both, as before holes had a flag (the corpus keeps
                    // its meaning): holes in one block of eight that is not all zeros.
                    let b = c.byte();
                    let zero = b % 4 == 0;
                    let payload = if zero { Vec::new() } else { c.payload() };
                    let h = DataHeader {
                        file: c.small(),
                        block: c.num(),
                        digest: c.digest(),
                        zero,
                        compressed: false,
                        raw_len: if zero {
                            (c.num() % (hetch_proto::MAX_BLOCK as u64 + 1)) as u32
                        } else {
                            0
                        },
                        sparse: b % 8 == 1,
                        patch: None,
                    };
                    if data_w.send_data(&h, &payload).await.is_err() {
                        break;
                    }
                    let _ = data_w.flush().await;
                    continue;
                }
                5 => Frame::Piece(Piece {
                    file: c.small(),
                    offset: c.num(),
                    digest: c.digest(),
                    data: c.payload(),
                }),
                6 => Frame::Cover {
                    file: c.small(),
                    block: c.num(),
                    digest: c.digest(),
                },
                7 => Frame::Seal(Seal {
                    file: c.small(),
                    size: c.num(),
                    mtime_sec: 0,
                    mtime_nsec: 0,
                    digest: c.digest().to_vec(),
                    rewritten: (0..c.small()).map(|_| c.num()).collect(),
                    tail: (0..c.small()).map(|_| (c.num(), c.digest())).collect(),
                }),
                8 => Frame::Abandon { file: c.small() },
                9 => Frame::FileError {
                    file: c.num(),
                    message: "fuzzed".into(),
                },
                _ => Frame::EndOfEntries,
            };
            if ctl.send(&frame).await.is_err() || ctl.flush().await.is_err() {
                break;
            }
        }
        let _ = data_w.send(&Frame::StreamEnd).await;
        let _ = data_w.shutdown().await;
        let _ = ctl.shutdown().await;
        drop((ctl, data_w));
        let ended = tokio::time::timeout(END, sink).await;
        let joined = ended.expect("the sink did not end after its source hung up");
        if let Err(e) = joined {
            std::panic::resume_unwind(e.into_panic());
        }
        drain.abort();
    });
    let names: Vec<_> = std::fs::read_dir(t.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["dest"], "the sink wrote outside its destination");
}

/// Plays a hostile sink, directed by `data`, against a real source reading a small tree.
pub fn source_session(data: &[u8]) {
    let mut c = Choices { data };
    let opts = Options {
        file_digests: c.byte() % 2 == 0,
        ..options(&mut c)
    };
    let t = tempfile::tempdir().expect("tempdir");
    let src = t.path().join("src");
    make_tree(&src);
    runtime().block_on(async move {
        let (ours, theirs) = transports(false);
        let operands = vec![Operand::Local(src)];
        let source = tokio::spawn(crate::run_source_from(
            opts,
            operands,
            theirs,
            Arc::new(Progress::default()),
        ));
        let (ctl_r, ctl_w) = split(ours.control);
        let drain_ctl = tokio::spawn(drain(FrameReader::new(ctl_r, "source")));
        let mut data_streams = ours.data;
        let data_r = data_streams.pop().expect("one");
        let drain_data = tokio::spawn(async move {
            let pool = crate::BufferPool::new(1 << 20);
            let mut r = FrameReader::new(data_r, "source");
            while let Ok(Some(_)) = r.next(Some(&pool)).await {}
        });
        let mut ctl = FrameWriter::new(ctl_w, "source");
        while !c.done() {
            let frame = match c.byte() % 7 {
                0 | 1 => Frame::Plan(
                    (0..1 + c.small())
                        .map(|_| PlanItem {
                            id: c.small(),
                            action: if c.byte() % 3 == 0 {
                                PlanAction::Skip
                            } else {
                                PlanAction::Send((0..c.small()).map(|_| c.range()).collect())
                            },
                        })
                        .collect(),
                ),
                2 => Frame::Resend {
                    file: c.small(),
                    block: c.num(),
                },
                3 => Frame::FileDone {
                    file: c.small(),
                    error: (c.byte() % 2 == 0).then(|| "fuzzed".to_string()),
                    digest: (c.byte() % 2 == 0).then(|| ManifestEntry {
                        digest: c.digest().to_vec(),
                        path: c.path(),
                    }),
                },
                4 => Frame::Durable {
                    file: c.small(),
                    offset: c.num(),
                },
                5 => Frame::Change(hetch_proto::Change {
                    action: hetch_proto::ChangeAction::Deleted,
                    path: c.path(),
                    size: c.num(),
                }),
                _ => Frame::Finished(Summary {
                    files: c.num(),
                    ..Summary::default()
                }),
            };
            if ctl.send(&frame).await.is_err() || ctl.flush().await.is_err() {
                break;
            }
        }
        let _ = ctl.shutdown().await;
        drop(ctl);
        drain_ctl.abort();
        drain_data.abort();
        let ended = tokio::time::timeout(END, source).await;
        let joined = ended.expect("the source did not end after its sink hung up");
        if let Err(e) = joined {
            std::panic::resume_unwind(e.into_panic());
        }
    });
}

/// Reads and drops frames until the stream ends or breaks.
async fn drain<R: tokio::io::AsyncRead + Unpin>(mut r: FrameReader<R>) {
    while let Ok(Some(_)) = r.next_control().await {}
}

fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("d")).expect("tree");
    std::fs::write(root.join("empty"), b"").expect("tree");
    std::fs::write(root.join("d/small"), [7u8; 100]).expect("tree");
    std::fs::write(root.join("blocks"), vec![3u8; 3 * BS as usize + 5]).expect("tree");
    std::os::unix::fs::symlink("d/small", root.join("link")).expect("tree");
}

/// Drives one file's block ledger with the events the input encodes (indexes and
/// sizes biased to boundaries) and checks it against a plain model after each; panics
/// where they disagree.
pub fn ledger_events(data: &[u8]) {
    use crate::sink::ledger::{replay, Event};
    let mut c = Choices { data };
    let size = c.num() % (64 * BS);
    let max_retries = (c.byte() % 4) as u32;
    let mut events = Vec::new();
    while !c.done() && events.len() < 512 {
        let kind = c.byte() % 5;
        let n = match c.byte() % 2 {
            0 => u64::from(c.byte()) % 70, // near the file
            _ => c.num(),                  // anywhere, as a hostile peer sends
        };
        events.push(match kind {
            0 => Event::Admit(n, c.num() % (2 * BS)),
            1 => Event::Done(n),
            2 => Event::Failed(n),
            3 => Event::Undo(n),
            _ => Event::Seal(c.num() % (64 * BS + 5)),
        });
    }
    if let Err(e) = replay(size, BS, max_retries, &events) {
        panic!("ledger: {e}: {events:?}");
    }
    core_events(data);
}

/// Drives one file's whole receive state ([`crate::sink::core::FileCore`]) with the
/// events the input encodes and checks it against a plain model of the file's life;
/// panics where they disagree.
fn core_events(data: &[u8]) {
    use crate::sink::core::model::{replay, Event};
    let mut c = Choices { data };
    let algo = match c.byte() % 4 {
        0 => hetch_integrity::Algorithm::Xxh3,
        _ => hetch_integrity::Algorithm::Blake3,
    };
    let size = c.num() % (24 * BS);
    let growing = c.byte() % 2 == 0;
    let journaled = u64::from(c.byte() % 6);
    let max_retries = (c.byte() % 3) as u32;
    let mut events = Vec::new();
    while !c.done() && events.len() < 256 {
        let kind = c.byte() % 10;
        let n = match c.byte() % 4 {
            0 => c.num(), // anywhere, as a hostile peer sends
            _ => u64::from(c.byte()) % 26,
        };
        events.push(match kind {
            0 => Event::Arrive(n, c.num() % (2 * BS)),
            1 => Event::Claim(n),
            2 => Event::Written(n),
            3 => Event::TakeWritten,
            4 | 5 => Event::Good(n),
            6 => Event::Bad(n),
            7 => match c.byte() % 8 {
                0 => Event::Fail,
                _ => Event::Cover(n),
            },
            8 => Event::Seal(vec![n % 26]),
            _ => Event::HostileSeal(n),
        });
    }
    if let Err(e) = replay(algo, size, BS, growing, journaled, max_retries, &events) {
        panic!("file core: {e}: {events:?}");
    }
}

/// Drives a session's settlement (when the summary may go) with the task events the
/// input encodes and checks it against a plain model; panics where they disagree.
pub fn settle_events(data: &[u8]) {
    use crate::sink::settle::{replay, Event};
    let mut c = Choices { data };
    let mut events = Vec::new();
    while !c.done() && events.len() < 512 {
        let f = c.byte() % 24;
        events.push(match c.byte() % 5 {
            0 => Event::Plan(f),
            1 => Event::Written(f),
            2 => Event::End(f),
            3 => Event::Report(f),
            _ => Event::EndOfEntries,
        });
    }
    if let Err(e) = replay(&events) {
        panic!("settlement: {e}: {events:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic random programs, so a failure here reproduces.
    fn programs(seed: u64, n: usize) -> impl Iterator<Item = Vec<u8>> {
        let mut x = seed | 1;
        (0..n).map(move |_| {
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let len = (next() % 200) as usize;
            (0..len).map(|_| next() as u8).collect()
        })
    }

    #[test]
    fn fuzzed_events_keep_the_ledger_right() {
        for p in programs(0x1ed9e5, 300) {
            ledger_events(&p);
        }
    }

    #[test]
    fn fuzzed_events_keep_the_settlement_right() {
        for p in programs(0x5e771e, 300) {
            settle_events(&p);
        }
    }

    #[test]
    fn fuzzed_sources_do_not_break_the_sink() {
        for p in programs(0x5eed, 150) {
            sink_session(&p);
        }
    }

    #[test]
    fn fuzzed_sinks_do_not_break_the_source() {
        for p in programs(0xbeef, 150) {
            source_session(&p);
        }
    }
}
