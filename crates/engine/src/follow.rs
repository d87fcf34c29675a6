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

use std::collections::{HashSet, VecDeque};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hetch_integrity::{self as integrity, Algorithm, Digest, FileDigest};
use hetch_proto::{Frame, Piece, Seal, MAX_PIECE, MAX_REWRITTEN, MAX_TAIL_BLOCKS};
use hetch_storage::walk::{self, SourceEntry, SourceKind};
use tokio::sync::mpsc;

use crate::error::EngineError;
use crate::notify::Wakeups;
use crate::progress::Progress;
use crate::sink::full_blocks;
use crate::source::{announce, Job, Shared};
use crate::store::Size;
use crate::Follow;

/// Pause after an inotify wake-up before looking, so that a burst of events (a writer
/// making many small writes) costs one look.
const WAKE_GAP: Duration = Duration::from_millis(2);
/// Scans for new entries triggered by inotify come at most this often.
const MIN_RESCAN_GAP: Duration = Duration::from_millis(50);

/// Aborts a task when dropped (the inotify watcher ends with the follower).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Growth records kept per file before new ones are merged into the newest.
const MAX_GROWTH_RECORDS: usize = 4096;
/// Status-change times have one-second resolution here, and clocks of network file
/// systems drift: a rescan looks this far before the previous one started.
const RESCAN_SLACK: Duration = Duration::from_secs(2);

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

/// How a listed entry is announced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Listing {
    /// As it is now.
    Plain,
    /// As a growing file, to be followed.
    Growing,
    /// Not now: a done-marker of a file being followed, sent after that file.
    Held,
}

/// Decides how a listed entry is announced (on the walker's thread).
pub(crate) fn on_listing(shared: &Shared, se: &SourceEntry) -> Listing {
    let Some(f) = &shared.opts.follow else {
        return Listing::Plain;
    };
    let SourceKind::File { .. } = se.kind else {
        return Listing::Plain;
    };
    if let Some(suffix) = &f.done_suffix {
        if let Some(base) = strip_suffix(&se.abs, suffix) {
            let mut ann = shared.announced.lock().expect("announced lock");
            if let Some(fl) = ann
                .values_mut()
                .filter(|a| a.abs == base)
                .find_map(|a| a.follow.as_mut())
            {
                fl.marker = Some(se.abs.clone());
                return Listing::Held;
            }
            return Listing::Plain;
        }
    }
    // Every file is followed, old ones too: it is sealed at the first look when it
    // has been idle long enough, and its seal re-reads it. That costs a second read of
    // files complete when listed, but a file that was growing when an earlier session
    // stopped resumes from the blocks the destination journaled for it, whatever its
    // age now, and every file gets the whole-file check against its final contents.
    Listing::Growing
}

/// Whether a listed file has not changed for `idle` (its digest may be computed up
/// front for a checksum skip).
pub(crate) fn is_idle(shared: &Shared, se: &SourceEntry) -> bool {
    let Some(f) = &shared.opts.follow else {
        return true;
    };
    let mtime = UNIX_EPOCH + Duration::new(se.mtime_sec.max(0) as u64, se.mtime_nsec);
    SystemTime::now().duration_since(mtime).unwrap_or_default() >= f.idle
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

/// The sink's first plan for a growing file: queue the blocks it lacks among those
/// full when the file was announced; later ones follow as they fill. False when the
/// plan is not such a first plan (the ordinary path handles it).
pub(crate) async fn first_plan(shared: &Shared, id: u64, ranges: &[(u64, u64)]) -> bool {
    let bs = shared.opts.block_size;
    let jobs: Vec<Job> = {
        let mut ann = shared.announced.lock().expect("announced lock");
        let Some(fl) = ann.get_mut(&id).and_then(|a| a.follow.as_mut()) else {
            return false;
        };
        if fl.planned {
            return false;
        }
        fl.planned = true;
        fl.next_block = full_blocks(fl.last_size, bs);
        let limit = fl.next_block;
        // Blocks before the first one planned are durable at the sink already (a
        // resumed file): the seal must not wait for acknowledgements of them.
        let first = ranges.iter().map(|r| r.0).min().unwrap_or(limit).min(limit);
        fl.acked = fl.acked.max(first * bs);
        ranges
            .iter()
            .map(|&(s, e)| (s.min(limit), e.min(limit)))
            .filter(|(s, e)| s < e)
            .map(|(start, end)| Job {
                file: id,
                start,
                end,
                cover: false,
            })
            .collect()
    };
    for job in jobs {
        let _ = shared.jobs.0.send(job).await;
    }
    true
}

/// A reader sent block `index` of growing file `file` with `digest`.
pub(crate) fn sent(shared: &Shared, file: u64, index: u64, digest: &Digest) {
    let mut ann = shared.announced.lock().expect("announced lock");
    if let Some(fl) = ann.get_mut(&file).and_then(|a| a.follow.as_mut()) {
        let i = index as usize;
        if fl.sent.len() <= i {
            fl.sent.resize(i + 1, [0; 32]);
        }
        fl.sent[i] = *digest;
    }
}

/// The sink acknowledged bytes `0..offset` of `file` as durable.
pub(crate) fn durable(shared: &Shared, file: u64, offset: u64) {
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
    shared.acks.notify_waiters();
}

/// A followed file is finished at the sink: what it still had in flight is durable
/// now; its done-marker, if any, goes next.
pub(crate) async fn finished(shared: &Arc<Shared>, fl: &Followed, ok: bool) {
    if ok {
        let now = SystemTime::now();
        for (_, written) in &fl.growth {
            shared
                .progress
                .record_lag(now.duration_since(*written).unwrap_or_default());
        }
        let f = shared.opts.follow.as_ref().expect("following");
        if let (Some(marker), Some(suffix)) = (&fl.marker, &f.done_suffix) {
            let mut rel = fl.rel.clone();
            rel.extend_from_slice(suffix.as_bytes());
            announce_path(shared, marker.clone(), rel).await;
        }
    }
}

/// Lists one path again and announces it (a marker, or a file started over).
async fn announce_path(shared: &Arc<Shared>, abs: PathBuf, rel: Vec<u8>) {
    let Some(tx) = shared.entries.lock().expect("entries lock").clone() else {
        return;
    };
    let sh = shared.clone();
    let _ = tokio::task::spawn_blocking(move || match walk::entry(&abs, rel) {
        // A scan may have announced it meanwhile: never two entries for one path.
        Ok(se) if !already_announced(&sh, &se) => {
            announce(&sh, se, None, &tx);
        }
        Ok(_) => {}
        Err(e) => sh.progress.fail(e.to_string()),
    })
    .await;
}

/// Whether `se` is in flight, or was listed with the same status-change time.
fn already_announced(shared: &Shared, se: &SourceEntry) -> bool {
    let in_flight = {
        let ann = shared.announced.lock().expect("announced lock");
        ann.values().any(|a| a.abs == se.abs)
    };
    in_flight
        || shared.seen.lock().expect("seen lock").get(&se.abs)
            == Some(&(se.ctime_sec, se.ctime_nsec))
}

/// What a poll found for one followed file.
struct Probe {
    size: u64,
    file_id: (u64, u64),
    mtime: SystemTime,
    marker: Option<PathBuf>,
}

fn probe(abs: &Path, suffix: Option<&str>) -> std::io::Result<Option<Probe>> {
    let md = match std::fs::metadata(abs) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let marker = suffix.map(|s| marker_of(abs, s)).filter(|m| m.exists());
    Ok(Some(Probe {
        size: md.len(),
        file_id: (md.dev(), md.ino()),
        mtime: md.modified().unwrap_or_else(|_| SystemTime::now()),
        marker,
    }))
}

/// What to do about one followed file after a poll.
enum Action {
    Nothing,
    Gone,
    Restart(String),
    Seal,
    Piece {
        offset: u64,
        len: u64,
    },
    /// Send the rest of a block pieces began as a piece, then the block's digest.
    Cover {
        block: u64,
        offset: u64,
        len: u64,
    },
}

/// Follows growing files until the session ends (watch) or until every file is
/// complete and nothing new has appeared for `idle` (cp --follow).
pub(crate) async fn follower(
    shared: Arc<Shared>,
    operands: Vec<PathBuf>,
    listed: Arc<AtomicBool>,
    ctl: mpsc::Sender<Frame>,
) -> Result<(), EngineError> {
    let f = shared.opts.follow.clone().expect("following");
    let wake = Arc::new(Wakeups::default());
    let inotify = tokio::spawn(crate::notify::watch(operands.clone(), wake.clone()));
    let _stop_inotify = AbortOnDrop(inotify);
    let mut last_scan = SystemTime::now();
    let mut next_rescan = Instant::now() + f.rescan;
    let mut last_new = Instant::now();
    let (mut final_scan, mut scanned_after_marker) = (false, false);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(f.poll) => {}
            _ = wake.changed.notified() => {
                // Let a burst of events settle into one look.
                tokio::time::sleep(WAKE_GAP).await;
            }
        }
        if shared.window.is_closed() {
            return Ok(());
        }
        // `OPERAND.done` beside every operand: the whole run is written. Every file
        // is complete now, and the copy ends as soon as they are all in place.
        let run_done = !f.forever
            && f.done_suffix
                .as_deref()
                .is_some_and(|suffix| operands.iter().all(|op| marker_of(op, suffix).exists()));
        if run_done && !final_scan {
            // What appeared just before the marker is found by one last scan.
            final_scan = true;
            wake.appeared.store(true, SeqCst);
            next_rescan = Instant::now();
        }
        poll_files(&shared, &f, &ctl, run_done).await;
        let walked = listed.load(SeqCst);
        let appeared = Instant::now() + f.rescan >= next_rescan + MIN_RESCAN_GAP
            && wake.appeared.swap(false, SeqCst);
        if walked && (appeared || Instant::now() >= next_rescan) {
            let started = SystemTime::now();
            let since = last_scan.checked_sub(RESCAN_SLACK).unwrap_or(UNIX_EPOCH);
            let found = rescan(&shared, &operands, since).await;
            if found > 0 {
                last_new = Instant::now();
            }
            last_scan = started;
            next_rescan = Instant::now() + f.rescan;
            scanned_after_marker = final_scan;
        }
        let following = {
            let ann = shared.announced.lock().expect("announced lock");
            ann.values().any(|a| a.follow.is_some())
        };
        let quiet = last_new.elapsed() >= f.idle || (run_done && scanned_after_marker);
        if !f.forever && walked && !following && quiet {
            break;
        }
    }
    // No more entries from here: the announcer ends the list once the walker is done.
    shared.entries.lock().expect("entries lock").take();
    Ok(())
}

/// Checks every followed file once and acts on what changed.
async fn poll_files(shared: &Arc<Shared>, f: &Follow, ctl: &mpsc::Sender<Frame>, run_done: bool) {
    let targets: Vec<(u64, PathBuf)> = {
        let ann = shared.announced.lock().expect("announced lock");
        ann.iter()
            .filter(|(_, a)| !a.failed)
            .filter(|(_, a)| {
                a.follow
                    .as_ref()
                    .is_some_and(|fl| fl.planned && !fl.sealing)
            })
            .map(|(id, a)| (*id, a.abs.clone()))
            .collect()
    };
    if targets.is_empty() {
        return;
    }
    let suffix = f.done_suffix.clone();
    let probes = tokio::task::spawn_blocking(move || {
        targets
            .into_iter()
            .map(|(id, abs)| {
                let p = probe(&abs, suffix.as_deref());
                (id, abs, p)
            })
            .collect::<Vec<_>>()
    })
    .await
    .expect("probe task panicked");
    // Pieces of different files are read and sent concurrently: with many slow
    // files, pieces carry most of the data, and one file's read must not wait for
    // another's.
    let mut sends = Vec::new();
    for (id, abs, p) in probes {
        let action = match p {
            Err(e) => {
                let message = format!("{}: {e}", abs.display());
                shared.read_failed(id, message, ctl).await;
                continue;
            }
            Ok(None) => Action::Gone,
            Ok(Some(p)) => observe(shared, f, id, p, run_done),
        };
        match action {
            Action::Nothing => {}
            Action::Gone => {
                shared.progress.warn(&format!(
                    "{}: removed at the source before it was complete; dropped",
                    abs.display()
                ));
                if shared.complete(id).is_some() {
                    let _ = ctl.send(Frame::Abandon { file: id }).await;
                }
            }
            Action::Restart(why) => {
                shared.progress.warn(&format!(
                    "{}: {why} while being followed; sending it again from the start",
                    abs.display()
                ));
                restart(shared, id, ctl).await;
            }
            Action::Seal => {
                tokio::spawn(seal(shared.clone(), id, ctl.clone()));
            }
            Action::Piece { offset, len } => {
                sends.push(piece_then(shared, id, abs, offset, len, None, ctl));
            }
            Action::Cover { block, offset, len } => {
                sends.push(piece_then(shared, id, abs, offset, len, Some(block), ctl));
            }
        }
    }
    futures_util::future::join_all(sends).await;
}

/// Sends a piece (none when `len` is 0) and then, with `cover`, queues that block's
/// digest in place of its bytes.
async fn piece_then(
    shared: &Arc<Shared>,
    id: u64,
    abs: PathBuf,
    offset: u64,
    len: u64,
    cover: Option<u64>,
    ctl: &mpsc::Sender<Frame>,
) {
    let sent = len == 0 || send_piece(shared, id, &abs, offset, len, ctl).await;
    if let (true, Some(block)) = (sent, cover) {
        let job = Job {
            file: id,
            start: block,
            end: block + 1,
            cover: true,
        };
        let _ = shared.jobs.0.send(job).await;
    }
}

/// Updates a followed file from a probe; queues its new full blocks.
fn observe(shared: &Shared, f: &Follow, id: u64, p: Probe, run_done: bool) -> Action {
    let bs = shared.opts.block_size;
    let mut ann = shared.announced.lock().expect("announced lock");
    let Some(fl) = ann.get_mut(&id).and_then(|a| a.follow.as_mut()) else {
        return Action::Nothing;
    };
    if p.file_id != fl.file_id {
        return Action::Restart("replaced by another file".into());
    }
    if p.size < fl.last_size {
        return Action::Restart(format!(
            "truncated from {} to {} bytes",
            fl.last_size, p.size
        ));
    }
    if p.marker.is_some() {
        fl.marker = p.marker;
    }
    let now = Instant::now();
    if p.size > fl.last_size {
        Progress::add(&shared.progress.total_bytes, p.size - fl.last_size);
        fl.record_growth(p.size, p.mtime.min(SystemTime::now()));
        fl.last_size = p.size;
        fl.last_change = now;
    }
    let full = full_blocks(fl.last_size, bs);
    let mut cover = None;
    if full > fl.next_block {
        let mut start = fl.next_block;
        let rest = ((start + 1) * bs).saturating_sub(fl.piece_end);
        if fl.piece_end > start * bs && rest <= MAX_PIECE as u64 {
            // Pieces carried the start of this block: send the rest as a piece and
            // only the block's digest, rather than the whole block again.
            cover = Some((start, fl.piece_end, rest));
            fl.piece_end = (start + 1) * bs;
            start += 1;
        }
        if full > start {
            let job = Job {
                file: id,
                start,
                end: full,
                cover: false,
            };
            // Unbounded channel: never blocks under the lock.
            let _ = shared.jobs.0.try_send(job);
        }
        fl.next_block = full;
    }
    if let Some((block, offset, len)) = cover {
        return Action::Cover { block, offset, len };
    }
    let complete = fl.marker.is_some() || run_done || fl.last_change.elapsed() >= f.idle;
    let unsent = fl.piece_end.max(fl.next_block * bs);
    if fl.last_size > unsent {
        let since = *fl.tail_since.get_or_insert(now);
        // A complete file's tail goes as a piece at once: the seal then finds it at
        // the sink and need not have the whole last block sent again.
        if (complete || since.elapsed() >= f.flush) && unsent / bs == fl.next_block {
            let end = fl
                .last_size
                .min((fl.next_block + 1) * bs)
                .min(unsent + MAX_PIECE as u64);
            fl.piece_end = end;
            fl.tail_since = None;
            return Action::Piece {
                offset: unsent,
                len: end - unsent,
            };
        }
    } else {
        fl.tail_since = None;
    }
    if complete && p.size == fl.last_size {
        fl.sealing = true;
        return Action::Seal;
    }
    Action::Nothing
}

/// Reads and sends a piece of a block that is not full yet; false when it could not
/// be read.
async fn send_piece(
    shared: &Arc<Shared>,
    id: u64,
    abs: &Path,
    offset: u64,
    len: u64,
    ctl: &mpsc::Sender<Frame>,
) -> bool {
    let path = abs.to_path_buf();
    let read = tokio::task::spawn_blocking(move || {
        let f = hetch_storage::walk::open_listed(&path)?;
        let mut data = vec![0; len as usize];
        f.read_exact_at(&mut data, offset)?;
        Ok::<_, std::io::Error>(data)
    })
    .await
    .expect("piece task panicked");
    match read {
        Ok(data) => {
            let piece = Piece {
                file: id,
                offset,
                digest: crate::sink::piece_digest(&data),
                data,
            };
            ctl.send(Frame::Piece(piece)).await.is_ok()
        }
        // Shrunk meanwhile: the next poll sees it and starts the file over.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => false,
        Err(e) => {
            let message = format!("{}: {e}", abs.display());
            shared.read_failed(id, message, ctl).await;
            false
        }
    }
}

/// Drops a file at the sink and announces it again under a new id.
async fn restart(shared: &Arc<Shared>, id: u64, ctl: &mpsc::Sender<Frame>) {
    let Some(a) = shared.complete(id) else {
        return;
    };
    let _ = ctl.send(Frame::Abandon { file: id }).await;
    if let Some(fl) = a.follow {
        announce_path(shared, a.abs, fl.rel).await;
    }
}

/// What the last read of a file before its seal found.
struct Rechecked {
    digest: Vec<u8>,
    /// Digests of the blocks from `first_unsent` on (at most `MAX_TAIL_BLOCKS`).
    tail: Vec<(u64, Digest)>,
    mtime: (i64, u32),
    ctime: (i64, u32),
    rewritten: Vec<u64>,
    still_open: bool,
}

/// Seals a file that stopped changing: waits until the sink acknowledged everything
/// sent, reads the file once more, and sends its final size and digest.
async fn seal(shared: Arc<Shared>, id: u64, ctl: mpsc::Sender<Frame>) {
    let bs = shared.opts.block_size;
    loop {
        let acked = shared.acks.notified();
        {
            let ann = shared.announced.lock().expect("announced lock");
            let Some(fl) = ann.get(&id).and_then(|a| a.follow.as_ref()) else {
                return;
            };
            if fl.acked >= (fl.next_block * bs).max(fl.piece_end) {
                break;
            }
        }
        acked.await;
    }
    let (abs, sent, size, file_id, first_unsent) = {
        let ann = shared.announced.lock().expect("announced lock");
        let Some(a) = ann.get(&id) else { return };
        let fl = a.follow.as_ref().expect("followed");
        let fields = (a.abs.clone(), fl.sent.clone(), fl.last_size, fl.file_id);
        (fields.0, fields.1, fields.2, fields.3, fl.next_block)
    };
    let algo = shared.opts.checksum;
    let path = abs.clone();
    let r = tokio::task::spawn_blocking(move || {
        let file = Reread {
            abs: &path,
            size,
            file_id,
            first_unsent,
        };
        recheck(&file, bs, algo, &sent)
    })
    .await
    .expect("recheck task panicked");
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            let message = format!("{}: {e}", abs.display());
            shared.read_failed(id, message, &ctl).await;
            return;
        }
    };
    let Some(r) = r else {
        // It changed while being read: keep following.
        let mut ann = shared.announced.lock().expect("announced lock");
        if let Some(fl) = ann.get_mut(&id).and_then(|a| a.follow.as_mut()) {
            fl.sealing = false;
        }
        return;
    };
    if r.rewritten.len() > MAX_REWRITTEN {
        shared.progress.warn(&format!(
            "{}: {} blocks changed after they were sent; sending it again from the start",
            abs.display(),
            r.rewritten.len()
        ));
        restart(&shared, id, &ctl).await;
        return;
    }
    if !r.rewritten.is_empty() {
        shared.progress.warn(&format!(
            "{}: {} block(s) changed after they were sent (rewritten in place at the source); sending them again",
            abs.display(),
            r.rewritten.len()
        ));
    }
    if r.still_open {
        shared.progress.warn(&format!(
            "{}: still open for writing, but unchanged for {:?}; finished at {size} bytes",
            abs.display(),
            shared
                .opts
                .follow
                .as_ref()
                .map(|f| f.idle)
                .unwrap_or_default()
        ));
    }
    {
        let mut ann = shared.announced.lock().expect("announced lock");
        let Some(a) = ann.get_mut(&id) else { return };
        a.size = Size::Known(size);
    }
    // Scans announce it again only if it changes after this.
    remember(&shared, abs.clone(), r.ctime);
    let seal = Seal {
        file: id,
        size,
        mtime_sec: r.mtime.0,
        mtime_nsec: r.mtime.1,
        digest: r.digest,
        rewritten: r.rewritten,
        tail: r.tail,
    };
    let _ = ctl.send(Frame::Seal(seal)).await;
}

/// Reads a file whose size should be `size` once more: the whole-file digest, and the
/// blocks whose digest differs from the one they were sent with. `None` when the file
/// changed meanwhile.
/// The file a seal reads again, as the follower last saw it.
struct Reread<'a> {
    abs: &'a Path,
    size: u64,
    file_id: (u64, u64),
    /// Blocks from here on were never sent whole.
    first_unsent: u64,
}

fn recheck(
    file: &Reread<'_>,
    bs: u64,
    algo: Algorithm,
    sent: &[Digest],
) -> std::io::Result<Option<Rechecked>> {
    let (size, file_id) = (file.size, file.file_id);
    let f = hetch_storage::walk::open_listed(file.abs)?;
    let before = f.metadata()?;
    if before.len() != size || (before.dev(), before.ino()) != file_id {
        return Ok(None);
    }
    let blocks = integrity::block_count(size, bs);
    let mut merged = FileDigest::new(size, bs);
    let mut ordered = (!algo.merges_blocks()).then(|| algo.hasher());
    let mut rewritten = Vec::new();
    let mut tail = Vec::new();
    let mut buf = Vec::new();
    for i in 0..blocks {
        buf.resize(integrity::block_len(size, bs, i) as usize, 0);
        f.read_exact_at(&mut buf, i * bs)?;
        let d = algo.block_digest(size, bs, i, &buf);
        if sent
            .get(i as usize)
            .is_some_and(|s| *s != [0; 32] && *s != d)
        {
            rewritten.push(i);
        }
        if i >= file.first_unsent && tail.len() < MAX_TAIL_BLOCKS {
            tail.push((i, d));
        }
        match &mut ordered {
            Some(h) => h.update(&buf),
            None => {
                let _ = merged.add(i, d);
            }
        }
    }
    let after = f.metadata()?;
    if after.len() != size || after.modified().ok() != before.modified().ok() {
        return Ok(None);
    }
    let digest = match ordered {
        Some(h) => h.finish(),
        None => merged.finish().map(|d| d.to_vec()).unwrap_or_default(),
    };
    Ok(Some(Rechecked {
        digest,
        tail,
        mtime: (after.mtime(), after.mtime_nsec() as u32),
        ctime: (after.ctime(), after.ctime_nsec() as u32),
        rewritten,
        still_open: open_for_writing(&f),
    }))
}

/// Whether some process has the file open for writing: a read lease is refused then.
/// Unknown (false) where leases are not allowed (not the owner, or a network file
/// system).
fn open_for_writing(f: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a file descriptor we own, with integer arguments only.
    let r = unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) };
    if r == 0 {
        // SAFETY: as above; releases the lease just taken.
        unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
        return false;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
}

/// How far back [`Shared::seen`] remembers entries: further than any scan looks.
const SEEN_HORIZON: Duration = Duration::from_secs(60);

fn secs(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Remembers the status-change time an entry had when it was listed (recent ones
/// only: a scan looks a few seconds back at most).
pub(crate) fn listed(shared: &Shared, se: &SourceEntry) {
    if shared.opts.follow.is_some() && se.ctime_sec >= secs(SystemTime::now() - SEEN_HORIZON) {
        remember(shared, se.abs.clone(), (se.ctime_sec, se.ctime_nsec));
    }
}

fn remember(shared: &Shared, abs: PathBuf, ctime: (i64, u32)) {
    shared.seen.lock().expect("seen lock").insert(abs, ctime);
}

/// Scans the operands for entries that changed since `since` and announces those that
/// are not in flight and changed since they were last listed or sealed. Returns how
/// many were announced.
async fn rescan(shared: &Arc<Shared>, operands: &[PathBuf], since: SystemTime) -> usize {
    let Some(tx) = shared.entries.lock().expect("entries lock").clone() else {
        return 0;
    };
    let in_flight: HashSet<PathBuf> = {
        let ann = shared.announced.lock().expect("announced lock");
        ann.values().map(|a| a.abs.clone()).collect()
    };
    let since = secs(since);
    // What changed before `since` is never looked at again: forget it.
    shared
        .seen
        .lock()
        .expect("seen lock")
        .retain(|_, (s, _)| *s + 1 >= since);
    let sh = shared.clone();
    let ops = operands.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut announced = 0;
        for op in ops {
            let Ok(iter) = walk::walk(&op) else { continue };
            for se in iter.flatten() {
                let ctime = (se.ctime_sec, se.ctime_nsec);
                let unchanged = sh.seen.lock().expect("seen lock").get(&se.abs) == Some(&ctime);
                if se.ctime_sec < since || unchanged || in_flight.contains(&se.abs) {
                    continue;
                }
                if !announce(&sh, se, None, &tx) {
                    return announced;
                }
                announced += 1;
            }
        }
        announced
    })
    .await
    .expect("rescan task panicked")
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
        };
        let mut fl = Followed::new(&se, 0);
        let t = SystemTime::now();
        for i in 0..(2 * MAX_GROWTH_RECORDS as u64) {
            fl.record_growth(i + 1, t);
        }
        assert_eq!(fl.growth.len(), MAX_GROWTH_RECORDS);
        assert_eq!(fl.growth.back().unwrap().0, 2 * MAX_GROWTH_RECORDS as u64);
    }

    #[test]
    fn a_file_with_writers_is_seen_open_and_one_without_is_not() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        let w = std::fs::File::create(&p).unwrap();
        let r = std::fs::File::open(&p).unwrap();
        assert!(open_for_writing(&r));
        drop(w);
        assert!(!open_for_writing(&r));
    }
}
