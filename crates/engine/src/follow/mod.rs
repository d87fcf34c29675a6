//! Following growing files at the source (`hetch cp --follow`, `hetch watch`).
//!
//! A file modified less than `idle` ago when it is listed is announced as *growing*.
//! The follower then checks it every `poll`: new full blocks go to the readers as they
//! appear; bytes of a block that is not full yet go as a piece once they have waited
//! `flush`; a file that shrank or was replaced is dropped at the sink and announced
//! again; and a file that has not changed for `idle` (or whose `NAME.done` marker
//! appeared) is *sealed*: once the sink has acknowledged everything sent, the source
//! reads the whole file once more, compares each block with the digest it was sent
//! with (a block rewritten in place is sent again), and sends the final size and
//! whole-file digest. The sink then asks for the tail and any rewritten block, checks
//! the whole file against that digest, and only then renames it into place.
//!
//! Lag is measured here: every observed growth is stamped with the file's mtime (when
//! the writer wrote it), and the sink's durable acknowledgements close the samples.
//!
//! Directory operands are scanned again every `rescan`; entries whose status-change
//! time is new are announced (renames into the tree count), so memory stays bounded
//! by the entries in flight rather than by the size of the tree.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use hetch_integrity::Digest;
use hetch_proto::Frame;
use hetch_storage::walk::{SourceEntry, SourceKind};
use tokio::sync::mpsc;

use crate::error::EngineError;
use crate::sink::full_blocks;
use crate::source::listing::{Announce, Listing};
use crate::source::{Announced, Job, Shared};
use crate::Follow;

mod poll;
mod scan;
mod seal;

use scan::Seen;

/// Growth records kept per file before new ones are merged into the newest.
const MAX_GROWTH_RECORDS: usize = 4096;
/// A growing file being followed.
pub(crate) struct Followed {
    rel: Vec<u8>,
    /// Device and inode when listed: another one under the name means a new file.
    file_id: (u64, u64),
    /// The sink's first plan arrived.
    planned: bool,
    /// Blocks `0..next_block` are queued (or were already at the sink).
    next_block: u64,
    /// Bytes up to here went as pieces.
    piece_end: u64,
    /// The sink acknowledged bytes `0..acked` as durable.
    acked: u64,
    last_size: u64,
    last_change: Instant,
    /// When bytes beyond what was sent first appeared.
    tail_since: Option<Instant>,
    /// Digests of the blocks this session sent, by index (zero: not sent).
    sent: Vec<Digest>,
    /// Observed sizes and when they were written, oldest first.
    growth: VecDeque<(u64, SystemTime)>,
    sealing: bool,
    /// The done-marker seen next to the file; sent once the file is finished.
    marker: Option<PathBuf>,
}

impl Followed {
    pub(crate) fn new(se: &SourceEntry, size: u64) -> Self {
        let mtime = UNIX_EPOCH + Duration::new(se.mtime_sec.max(0) as u64, se.mtime_nsec);
        let age = SystemTime::now().duration_since(mtime).unwrap_or_default();
        let now = Instant::now();
        Followed {
            rel: se.rel.clone(),
            file_id: se.id,
            planned: false,
            next_block: 0,
            piece_end: 0,
            acked: 0,
            last_size: size,
            last_change: now.checked_sub(age).unwrap_or(now),
            tail_since: None,
            sent: Vec::new(),
            // Bytes already there when it was listed; an empty file has none, and a
            // sample for it would only measure how long its writer took to start.
            growth: if size > 0 {
                VecDeque::from([(size, mtime.min(SystemTime::now()))])
            } else {
                VecDeque::new()
            },
            sealing: false,
            marker: None,
        }
    }

    fn record_growth(&mut self, size: u64, written: SystemTime) {
        if self.growth.len() >= MAX_GROWTH_RECORDS {
            // Keep the older stamp: merged records overstate lag, never understate it.
            if let Some(last) = self.growth.back_mut() {
                last.0 = size;
                return;
            }
        }
        self.growth.push_back((size, written));
    }
}

/// Follows growing files and lists what appears in followed trees: the listing of
/// `cp --follow` and `watch` (see [`Listing`]).
pub(crate) struct Follower {
    follow: Follow,
    /// The local operands, scanned again for what appears.
    operands: Vec<PathBuf>,
    /// The status-change time of recently changed entries when they were last listed or
    /// sealed, so that a scan announces only what changed since.
    seen: Arc<Seen>,
    /// Durable acks arrived (sealing waits for them).
    acks: tokio::sync::Notify,
}

impl Follower {
    pub(crate) fn new(follow: Follow, operands: Vec<PathBuf>) -> Self {
        Follower {
            follow,
            operands,
            seen: Arc::default(),
            acks: tokio::sync::Notify::new(),
        }
    }

    /// Whether a listed file has not changed for `idle`.
    fn is_idle(&self, se: &SourceEntry) -> bool {
        let mtime = UNIX_EPOCH + Duration::new(se.mtime_sec.max(0) as u64, se.mtime_nsec);
        SystemTime::now().duration_since(mtime).unwrap_or_default() >= self.follow.idle
    }
}

impl Listing for Follower {
    fn classify(&self, shared: &Shared, se: &SourceEntry) -> Announce {
        let SourceKind::File { size } = se.kind else {
            self.listed(se);
            return Announce::Plain;
        };
        if let Some(suffix) = &self.follow.done_suffix {
            if let Some(base) = strip_suffix(&se.abs, suffix) {
                let mut ann = shared.announced.lock().expect("announced lock");
                if let Some(fl) = ann
                    .values_mut()
                    .filter(|a| a.abs == base)
                    .find_map(|a| a.follow.as_mut())
                {
                    // A done-marker of a file being followed: sent after that file.
                    fl.marker = Some(se.abs.clone());
                    return Announce::Held;
                }
                drop(ann);
                self.listed(se);
                return Announce::Plain;
            }
        }
        self.listed(se);
        // Every file is followed, old ones too: it is sealed at the first look when it
        // has been idle long enough, and its seal re-reads it. That costs a second read
        // of files complete when listed, but a file that was growing when an earlier
        // session stopped resumes from the blocks the destination journaled for it,
        // whatever its age now, and every file gets the whole-file check against its
        // final contents.
        Announce::Growing {
            state: Box::new(Followed::new(se, size)),
            idle: self.is_idle(se),
        }
    }

    /// The sink's first plan for a growing file: queue the blocks it lacks among those
    /// full when the file was announced; later ones follow as they fill.
    fn first_plan(&self, shared: &Shared, id: u64, ranges: &[(u64, u64)]) -> Option<Vec<Job>> {
        let bs = shared.opts.block_size;
        let mut ann = shared.announced.lock().expect("announced lock");
        let fl = ann.get_mut(&id).and_then(|a| a.follow.as_mut())?;
        if fl.planned {
            return None;
        }
        fl.planned = true;
        fl.next_block = full_blocks(fl.last_size, bs);
        let limit = fl.next_block;
        // Blocks before the first one planned are durable at the sink already (a
        // resumed file): the seal must not wait for acknowledgements of them.
        let first = ranges.iter().map(|r| r.0).min().unwrap_or(limit).min(limit);
        fl.acked = fl.acked.max(first * bs);
        let jobs = ranges
            .iter()
            .map(|&(s, e)| (s.min(limit), e.min(limit)))
            .filter(|(s, e)| s < e)
            .map(|(start, end)| Job {
                file: id,
                start,
                end,
                cover: false,
                repair: None,
            })
            .collect();
        Some(jobs)
    }

    fn sent(&self, shared: &Shared, file: u64, index: u64, digest: &Digest) {
        let mut ann = shared.announced.lock().expect("announced lock");
        if let Some(fl) = ann.get_mut(&file).and_then(|a| a.follow.as_mut()) {
            let i = index as usize;
            if fl.sent.len() <= i {
                fl.sent.resize(i + 1, [0; 32]);
            }
            fl.sent[i] = *digest;
        }
    }

    fn durable(&self, shared: &Shared, file: u64, offset: u64) {
        let now = SystemTime::now();
        {
            let mut ann = shared.announced.lock().expect("announced lock");
            if let Some(fl) = ann.get_mut(&file).and_then(|a| a.follow.as_mut()) {
                fl.acked = fl.acked.max(offset);
                while fl.growth.front().is_some_and(|(end, _)| *end <= offset) {
                    let (_, written) = fl.growth.pop_front().expect("checked above");
                    shared
                        .progress
                        .record_lag(now.duration_since(written).unwrap_or_default());
                }
            }
        }
        self.acks.notify_waiters();
    }

    /// A followed file is finished at the sink: what it still had in flight is durable
    /// now; its done-marker, if any, goes next.
    fn finished<'a>(
        &'a self,
        shared: &'a Arc<Shared>,
        entry: &'a Announced,
        ok: bool,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(fl) = entry.follow.as_deref().filter(|_| ok) else {
                return;
            };
            let now = SystemTime::now();
            for (_, written) in &fl.growth {
                shared
                    .progress
                    .record_lag(now.duration_since(*written).unwrap_or_default());
            }
            if let (Some(marker), Some(suffix)) = (&fl.marker, &self.follow.done_suffix) {
                let mut rel = fl.rel.clone();
                rel.extend_from_slice(suffix.as_bytes());
                self.announce_path(shared, marker.clone(), rel).await;
            }
        })
    }

    fn watch(
        self: Arc<Self>,
        shared: Arc<Shared>,
        ctl: mpsc::Sender<Frame>,
    ) -> Option<BoxFuture<'static, Result<(), EngineError>>> {
        Some(Box::pin(async move {
            self.follow_until_done(shared, ctl).await
        }))
    }

    fn logs_files(&self) -> bool {
        self.follow.forever
    }
}

fn marker_of(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

fn strip_suffix(path: &Path, suffix: &str) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    let base = bytes.strip_suffix(suffix.as_bytes())?;
    (!base.is_empty() && !base.ends_with(b"/"))
        .then(|| PathBuf::from(std::ffi::OsStr::from_bytes(base)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_strip_to_their_file() {
        let p = Path::new("/data/run1.h5.done");
        assert_eq!(
            strip_suffix(p, ".done"),
            Some(PathBuf::from("/data/run1.h5"))
        );
        assert_eq!(strip_suffix(Path::new("/data/.done"), ".done"), None);
        assert_eq!(strip_suffix(Path::new("/data/run1.h5"), ".done"), None);
        assert_eq!(
            marker_of(Path::new("/data/run1.h5"), ".done"),
            PathBuf::from("/data/run1.h5.done")
        );
    }

    #[test]
    fn growth_records_merge_into_the_newest_when_full() {
        let se = SourceEntry {
            rel: b"f".to_vec(),
            abs: PathBuf::from("/f"),
            kind: SourceKind::File { size: 0 },
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            ctime_sec: 0,
            ctime_nsec: 0,
            id: (1, 2),
            nlink: 1,
            sparse: false,
        };
        let mut fl = Followed::new(&se, 0);
        let t = SystemTime::now();
        for i in 0..(2 * MAX_GROWTH_RECORDS as u64) {
            fl.record_growth(i + 1, t);
        }
        assert_eq!(fl.growth.len(), MAX_GROWTH_RECORDS);
        assert_eq!(fl.growth.back().unwrap().0, 2 * MAX_GROWTH_RECORDS as u64);
    }
}
