//! The follower's loop: each followed file probed every poll, its growth sent as blocks
//! and pieces, and the trees scanned again for what appears.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hetch_proto::{Frame, Piece, MAX_PIECE};
use tokio::sync::mpsc;

use super::{marker_of, Follower};
use crate::error::EngineError;
use crate::notify::Wakeups;
use crate::progress::Progress;
use crate::sink::full_blocks;
use crate::source::{Job, Shared};

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

/// Status-change times have one-second resolution here, and clocks of network file
/// systems drift: a rescan looks this far before the previous one started.
const RESCAN_SLACK: Duration = Duration::from_secs(2);

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

impl Follower {
    /// Follows growing files until the session ends (watch) or until every file is
    /// complete and nothing new has appeared for `idle` (cp --follow).
    pub(super) async fn follow_until_done(
        self: Arc<Self>,
        shared: Arc<Shared>,
        ctl: mpsc::Sender<Frame>,
    ) -> Result<(), EngineError> {
        let f = &self.follow;
        let operands = &self.operands;
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
            self.poll_files(&shared, &ctl, run_done).await;
            let walked = shared.open_end.walked();
            let appeared = Instant::now() + f.rescan >= next_rescan + MIN_RESCAN_GAP
                && wake.appeared.swap(false, SeqCst);
            if walked && (appeared || Instant::now() >= next_rescan) {
                let started = SystemTime::now();
                let since = last_scan.checked_sub(RESCAN_SLACK).unwrap_or(UNIX_EPOCH);
                let found = self.rescan(&shared, since).await;
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
        shared.open_end.close();
        Ok(())
    }

    /// Checks every followed file once and acts on what changed.
    async fn poll_files(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        ctl: &mpsc::Sender<Frame>,
        run_done: bool,
    ) {
        let f = &self.follow;
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
                Ok(Some(p)) => self.observe(shared, id, p, run_done),
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
                    self.restart(shared, id, ctl).await;
                }
                Action::Seal => {
                    tokio::spawn(self.clone().seal(shared.clone(), id, ctl.clone()));
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
            repair: None,
        };
        let _ = shared.jobs.0.send(job).await;
    }
}

impl Follower {
    /// Updates a followed file from a probe; queues its new full blocks.
    fn observe(&self, shared: &Shared, id: u64, p: Probe, run_done: bool) -> Action {
        let f = &self.follow;
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
                    repair: None,
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

    /// Drops a file at the sink and announces it again under a new id.
    pub(super) async fn restart(&self, shared: &Arc<Shared>, id: u64, ctl: &mpsc::Sender<Frame>) {
        let Some(a) = shared.complete(id) else {
            return;
        };
        let _ = ctl.send(Frame::Abandon { file: id }).await;
        if let Some(fl) = a.follow {
            self.announce_path(shared, a.abs, fl.rel).await;
        }
    }
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
