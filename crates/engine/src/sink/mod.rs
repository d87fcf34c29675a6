//! The receiving side of a session.
//!
//! Tasks: the control reader plans each batch of entries (skip, send all, or send what
//! the journal lacks) on a blocking thread; one reader per data stream takes blocks off
//! the wire into pooled buffers; writers write each block at its offset (checking the
//! received bytes first with `--verify received`); verifiers read written blocks back
//! from storage and check them (`--verify written`, per block, per file or after
//! everything, as the schedule says); a block that passed its check is journaled and
//! counted (`finish`), and the last one finishes its file; a finisher sends the summary
//! once the source has announced everything and every file is done.

mod batch;
mod blocks;
mod compare;
pub(crate) mod core;
mod finish;
mod growing;
pub(crate) mod ledger;
mod make_way;
pub(crate) mod mirror;
mod plan;
mod recheck;
pub(crate) mod repair;
pub(crate) mod settle;
mod stream;
mod verify;
mod write;

pub(crate) use blocks::BlockSet;
pub(crate) use core::IncomingFile;
pub(crate) use growing::{full_blocks, piece_digest};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};

use hetch_proto::{Frame, Schedule};
use hetch_storage::StorageError;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;

use crate::dest::DestSpec;
use crate::error::EngineError;
use crate::gate::Gate;
use crate::pool::BufferPool;
use crate::progress::{Progress, Report};
use crate::session::run_tasks;
use crate::store::{Capabilities, Place, Store};
use crate::wire::FrameReader;
use crate::{BoxStream, Options, Transport};

/// Files a source may have announced and not yet seen finished, at most: what the
/// sink keeps per file (its place, its state) stays bounded whatever a peer sends. An
/// honest source keeps to a window of a quarter of this (`ENTRY_WINDOW`); the slack
/// is for sources of other versions with larger windows.
pub const MAX_OPEN_FILES: usize = 16 * 1024;

pub(crate) struct SinkShared {
    pub opts: Options,
    pub peer: String,
    pub progress: Arc<Progress>,
    /// Where the files go.
    pub store: Arc<dyn Store>,
    /// The store's capabilities.
    pub caps: Capabilities,
    /// The store resolved the destination (on the first entry).
    resolved: OnceLock<()>,
    pub files: Mutex<HashMap<u64, Arc<IncomingFile>>>,
    /// What the summary waits for (see `settle.rs`).
    settlement: Mutex<settle::Settlement>,
    /// The settlement changed: the finisher looks again.
    changed: Notify,
    /// Directories created or reused (relative to the destination directory), with the
    /// metadata to apply at the end.
    pub dirs: Mutex<Vec<plan::DirToFinish>>,
    /// Bytes of attributes those directories hold until then (see
    /// `crate::xattrs::Held`).
    pub held_xattrs: Arc<std::sync::atomic::AtomicUsize>,
    zeros: OnceLock<Vec<u8>>,
    /// Bounds the threads hashing at once.
    pub gate: Gate,
    /// Written blocks and files waiting to be read back and checked.
    pub verify: (
        async_channel::Sender<verify::Job>,
        async_channel::Receiver<verify::Job>,
    ),
    /// Test hook: written blocks still to damage (see [`crate::faults`]).
    pub corrupt_left: crate::faults::Countdown,
    /// Compare-only and mirroring sessions: destination paths the source announced,
    /// relative to the destination directory (memory grows with the entries).
    pub seen: Mutex<std::collections::HashSet<PathBuf>>,
    /// Growing files with newly done data, for the durability task (`None` once the
    /// session is finishing).
    pub durable: Mutex<Option<mpsc::UnboundedSender<u64>>>,
    /// A pull's entries must lie under the operands asked for (`None`: not a pull).
    pub tops: Option<crate::tops::TopCheck>,
    /// Directories already listed in `dirs` (a followed tree announces them again).
    dirs_seen: Mutex<std::collections::HashSet<PathBuf>>,
    /// Mirroring sessions: entries removed (or, in a dry run, to be removed) with the
    /// directories that entries of another type replaced (see `make_way`), counted
    /// against `--max-delete` with the deletion phase's.
    pub made_way: AtomicU64,
    /// Dry runs of mirroring sessions: directories `make_way` would have removed, whose
    /// contents it listed already (the deletion phase does not list them again).
    pub would_make_way: Mutex<std::collections::HashSet<PathBuf>>,
    /// Hard links: files announced, links to make at the end (`--hard-links`).
    pub links: crate::links::SinkLinks,
    /// Files and symlinks announced so far (for "N files not copied" when stopped).
    pub announced: AtomicU64,
    /// The destination refused writes as a whole: no part file may be created any more.
    pub stopped: AtomicBool,
    /// File schedule: files written and waiting for, or in, their check.
    backlog: Mutex<usize>,
    backlog_shrank: std::sync::Condvar,
    /// Damaged blocks being repaired a patch at a time.
    pub repairs: repair::Repairs,
}

impl SinkShared {
    /// A buffer of zeros at least one block long (for all-zero blocks).
    pub fn zeros(&self) -> &[u8] {
        self.zeros
            .get_or_init(|| vec![0; self.opts.block_size as usize])
    }

    /// Resolves the destination on the first entry, whose first path component is the
    /// operand's name.
    pub fn resolve(&self, first_entry: &[u8]) -> Result<(), EngineError> {
        if self.resolved.get().is_some() {
            return Ok(());
        }
        let top = first_entry.split(|b| *b == b'/').next().unwrap_or_default();
        self.store.resolve(top, !self.opts.dry_run)?;
        if crate::xattrs::kept(&self.opts).any() && !self.caps.xattrs {
            self.progress.warn(
                "this destination keeps no extended attributes or ACLs; --xattrs and --acls \
                 have no effect here",
            );
        }
        let _ = self.resolved.set(());
        Ok(())
    }

    /// Whether an entry resolved the destination.
    pub fn is_resolved(&self) -> bool {
        self.resolved.get().is_some()
    }

    /// Where an entry with wire path `wire` goes.
    pub fn place(&self, wire: &[u8]) -> Result<Place, StorageError> {
        self.store.place(wire)
    }

    /// The session's settlement, locked.
    fn settlement(&self) -> std::sync::MutexGuard<'_, settle::Settlement> {
        self.settlement.lock().expect("settlement lock")
    }

    /// A file is to be received: the summary waits for its report.
    pub fn planned(&self) {
        self.settlement().planned();
    }

    /// File `id` has ended (finished or failed); it stops being pending once its
    /// `FileDone` is queued for the source (see [`SinkShared::reply`]).
    pub fn ended(&self, id: u64) {
        self.settlement().ended(id);
    }

    /// Whether the summary went out.
    pub fn finished(&self) -> bool {
        self.settlement().finished()
    }

    /// Queues a frame for the source. A file's `FileDone` settles it only after it is
    /// queued, so the summary (sent once nothing is pending) can never overtake it.
    /// Returns false when the control stream is gone.
    pub async fn reply(&self, ctl: &mpsc::Sender<Frame>, frame: Frame) -> bool {
        let ending = match &frame {
            Frame::FileDone { file, .. } => Some(*file),
            _ => None,
        };
        let sent = ctl.send(frame).await.is_ok();
        if let Some(id) = ending {
            let now = self.settlement().reported(id);
            self.changed.notify_one();
            self.check_files(now);
        }
        sent
    }

    /// Queues files for their read-back check.
    fn check_files(&self, ids: Vec<u64>) {
        for id in ids {
            let _ = self.verify.0.try_send(verify::Job::File(id));
        }
    }

    /// Queues a completely written file for its read-back check, now (file schedule)
    /// or once every pending file is written (sequential schedule).
    pub fn file_written(&self, id: u64) {
        if self.opts.schedule == Schedule::Sequential {
            let now = self.settlement().written(id);
            self.check_files(now);
        } else {
            *self.backlog.lock().expect("backlog lock") += 1;
            let _ = self.verify.0.try_send(verify::Job::File(id));
        }
    }

    /// File schedule: a file's check is over (whatever its outcome).
    pub fn file_checked(&self) {
        let mut n = self.backlog.lock().expect("backlog lock");
        *n = n.saturating_sub(1);
        self.backlog_shrank.notify_all();
    }

    /// File schedule: waits (on a blocking thread) until at most `hash_threads` files
    /// wait for their check. So file X is checked while file X+1 transfers and X+2
    /// waits for the check, as in a file-level pipeline; without the wait, checks of a
    /// slow algorithm would fall ever further behind the transfer.
    pub fn wait_for_backlog(&self) {
        if self.opts.schedule != Schedule::File || self.opts.verify != hetch_proto::Verify::Written
        {
            return;
        }
        let mut n = self.backlog.lock().expect("backlog lock");
        while *n > self.opts.hash_threads.max(1) {
            n = self.backlog_shrank.wait(n).expect("backlog lock");
        }
    }

    /// Drops a file after a per-file failure: discard its part file, tell the source.
    /// `None` when the file had ended already (another block of it failed first), so
    /// that one file is reported once.
    pub fn fail_file(&self, id: u64, message: String) -> Option<Frame> {
        let inc = self.files.lock().expect("files lock").remove(&id)?;
        // Other threads may still hold the file; its failure stops them from
        // writing, journaling or finishing it.
        inc.drop_all();
        self.ended(id);
        Some(self.failure(id, message))
    }

    /// Whether `e`, met creating or writing an entry (`top_level`: directly in the
    /// destination directory), makes the whole destination unusable: the file system
    /// is read-only, full or over quota, or the destination directory itself refuses
    /// new entries (`EACCES`/`EPERM` there; deeper down such an error belongs to one
    /// directory the user may have protected on purpose, and fails only its entries).
    pub fn stops_session(&self, e: &StorageError, top_level: bool) -> bool {
        e.is_file_system_wide() || (top_level && e.is_permission())
    }

    /// Stops the session for an error that applies to the whole destination (see
    /// [`SinkShared::stops_session`]), met at `at`: every file in flight is dropped
    /// with its part file and journal (they cannot be completed, and on a full disk
    /// they hold the very space that is missing), and no part file is created after.
    pub fn stop(&self, e: StorageError, at: &std::path::Path) -> EngineError {
        self.stopped.store(true, SeqCst);
        let files: Vec<_> = self.files.lock().expect("files lock").drain().collect();
        for (_, inc) in files {
            inc.drop_all();
        }
        let p = &self.progress;
        let settled = p.files.load(SeqCst) + p.skipped.load(SeqCst);
        EngineError::Stopped {
            path: at.to_path_buf(),
            cause: e.short_cause().unwrap_or_else(|| e.to_string()),
            no_space: e.is_no_space(),
            not_copied: self.announced.load(SeqCst).saturating_sub(settled),
        }
    }

    /// A storage error while receiving file `id`: one that makes the whole destination
    /// unusable stops the session; any other fails that file alone (its report, `None`
    /// when it had failed already).
    pub fn file_error(
        &self,
        id: u64,
        inc: &IncomingFile,
        e: StorageError,
    ) -> Result<Option<Frame>, EngineError> {
        if self.stops_session(&e, inc.place.rel.components().count() <= 1) {
            return Err(self.stop(e, &inc.place.shown));
        }
        Ok(self.fail_file(id, e.to_string()))
    }

    /// Records a per-file failure and makes its report for the source.
    pub fn failure(&self, id: u64, message: String) -> Frame {
        self.progress.fail(message.clone());
        Frame::FileDone {
            file: id,
            error: Some(message),
            digest: None,
        }
    }
}

/// Receives into directory `dest` whatever the source at the other end of `transport`
/// sends.
pub async fn run_sink(
    opts: Options,
    dest: DestSpec,
    transport: Transport,
    progress: Arc<Progress>,
) -> Result<Report, EngineError> {
    let store = Arc::new(crate::store::posix::PosixStore::new(dest));
    run_sink_into(opts, store, transport, progress).await
}

/// Receives into `store` whatever the source at the other end of `transport` sends.
pub async fn run_sink_into(
    opts: Options,
    store: Arc<dyn Store>,
    transport: Transport,
    progress: Arc<Progress>,
) -> Result<Report, EngineError> {
    let (mut session, ctl_tx) = crate::session::open(transport, &opts);
    let peer = session.peer.clone();

    // A store that cannot read back checks what it receives instead.
    let caps = store.capabilities();
    let opts = match opts.verify {
        hetch_proto::Verify::Written if !caps.read_back => Options {
            verify: hetch_proto::Verify::Received,
            ..opts
        },
        _ => opts,
    };
    let opts_hash_threads = opts.hash_threads;
    let opts_pulled = opts.pulled.clone();
    let corrupt_written = crate::faults::hooks(&opts).1;
    let shared = Arc::new(SinkShared {
        opts,
        peer: peer.clone(),
        progress: progress.clone(),
        caps,
        store,
        resolved: OnceLock::new(),
        tops: crate::tops::TopCheck::new(opts_pulled.as_deref()),
        files: Mutex::default(),
        settlement: Mutex::default(),
        changed: Notify::new(),
        dirs: Mutex::default(),
        held_xattrs: Arc::default(),
        zeros: OnceLock::new(),
        gate: Gate::new(opts_hash_threads),
        verify: async_channel::unbounded(),
        corrupt_left: corrupt_written,
        seen: Mutex::default(),
        durable: Mutex::new(None),
        dirs_seen: Mutex::default(),
        made_way: AtomicU64::new(0),
        would_make_way: Mutex::default(),
        links: Default::default(),
        announced: AtomicU64::new(0),
        stopped: AtomicBool::new(false),
        backlog: Mutex::new(0),
        backlog_shrank: std::sync::Condvar::new(),
        repairs: repair::Repairs::default(),
    });
    let pool = BufferPool::new(shared.opts.effective_buffer_memory());
    let (block_tx, block_rx) = async_channel::bounded(64);
    let (durable_tx, durable_rx) = mpsc::unbounded_channel();
    *shared.durable.lock().expect("durable lock") = Some(durable_tx);

    let mut tasks = JoinSet::new();
    let reading = tasks.spawn(control_reader(
        shared.clone(),
        session.control,
        ctl_tx.clone(),
    ));
    session.end.reads_control(reading.id());
    tasks.spawn(finisher(shared.clone(), ctl_tx.clone()));
    tasks.spawn(growing::durability(
        shared.clone(),
        durable_rx,
        ctl_tx.clone(),
    ));
    for (index, data) in session.data.into_iter().enumerate() {
        let reader = stream::Reader {
            index: index as u16,
            shared: shared.clone(),
            pool: pool.clone(),
            tx: block_tx.clone(),
            ctl: ctl_tx.clone(),
            rejoining: session.rejoin.clone(),
        };
        tasks.spawn(reader.run(data));
    }
    drop(block_tx);
    for _ in 0..shared.opts.writers.max(shared.caps.concurrent_puts).max(1) {
        tasks.spawn(write::writer(
            shared.clone(),
            block_rx.clone(),
            ctl_tx.clone(),
        ));
    }
    drop(block_rx);
    // Twice as many verifiers as hashing threads: while some wait for the device,
    // others hash (the gate keeps hashing itself to `hash_threads`).
    for _ in 0..2 * shared.opts.hash_threads.max(1) {
        tasks.spawn(verify::verifier(shared.clone(), ctl_tx.clone()));
    }

    run_tasks(tasks, ctl_tx, session.end).await?;
    Ok(progress.report())
}

/// The next frame from the source on the control stream; `None` when it closed after
/// the summary went out, the normal end.
async fn next_control(
    r: &mut FrameReader<tokio::io::ReadHalf<BoxStream>>,
    sh: &SinkShared,
) -> Result<Option<Frame>, EngineError> {
    match r.next_control().await? {
        Some(f) => Ok(Some(f)),
        None if sh.finished() => Ok(None),
        None => Err(EngineError::closed_early(&sh.peer)),
    }
}

async fn control_reader(
    shared: Arc<SinkShared>,
    mut r: FrameReader<tokio::io::ReadHalf<BoxStream>>,
    ctl: mpsc::Sender<Frame>,
) -> Result<(), EngineError> {
    let unexpected = |what: String| EngineError::unexpected(&shared.peer, what);
    loop {
        let Some(frame) = next_control(&mut r, &shared).await? else {
            return Ok(());
        };
        match frame {
            Frame::Entries(batch) => {
                if shared.settlement().entries_over() {
                    return Err(unexpected("entries after the end of entries".into()));
                }
                if let Some(tops) = &shared.tops {
                    tops.check(&shared.peer, &batch)?;
                }
                let sh = shared.clone();
                let (plan, follow, rechecks) =
                    tokio::task::spawn_blocking(move || plan::plan_batch(&sh, batch))
                        .await
                        .expect("plan task panicked")?;
                for frame in plan_frames(plan) {
                    if ctl.send(frame).await.is_err() {
                        return Ok(());
                    }
                }
                // After the plan: the source is sending the missing blocks meanwhile.
                recheck::spawn(&shared, &ctl, rechecks);
                for f in follow {
                    shared.reply(&ctl, f).await;
                }
            }
            Frame::FileError { file, message } => {
                // A file the source could not read; an unknown id is an entry it
                // could not even list: recorded all the same.
                let f = match shared.fail_file(file, message.clone()) {
                    Some(f) => f,
                    None => shared.failure(file, message),
                };
                shared.reply(&ctl, f).await;
            }
            Frame::Seal(seal) => {
                let sh = shared.clone();
                let (reply, rest) = tokio::task::spawn_blocking(move || growing::seal(&sh, seal))
                    .await
                    .expect("seal task panicked")?;
                for f in reply {
                    shared.reply(&ctl, f).await;
                }
                if let Some(rest) = rest {
                    // Reading back and finishing do not hold up the frames behind.
                    let (sh, ctl) = (shared.clone(), ctl.clone());
                    tokio::spawn(async move {
                        let s = sh.clone();
                        let r = tokio::task::spawn_blocking(move || growing::seal_rest(&s, rest))
                            .await
                            .expect("seal task panicked");
                        match r {
                            Ok(frames) => {
                                for f in frames {
                                    sh.reply(&ctl, f).await;
                                }
                            }
                            Err(e) => {
                                let _ = ctl.send(Frame::Error(e.to_frame())).await;
                            }
                        }
                    });
                }
            }
            Frame::Cover {
                file,
                block,
                digest,
            } => {
                let sh = shared.clone();
                let reply =
                    tokio::task::spawn_blocking(move || growing::cover(&sh, file, block, digest))
                        .await
                        .expect("cover task panicked")?;
                if let Some(f) = reply {
                    shared.reply(&ctl, f).await;
                }
            }
            Frame::Abandon { file } => {
                if let Some(f) = growing::abandon(&shared, file) {
                    shared.reply(&ctl, f).await;
                }
            }
            Frame::Piece(piece) => {
                let sh = shared.clone();
                let reply = tokio::task::spawn_blocking(move || growing::piece(&sh, piece))
                    .await
                    .expect("piece task panicked")?;
                if let Some(f) = reply {
                    shared.reply(&ctl, f).await;
                }
            }
            Frame::EndOfEntries => {
                let now = shared.settlement().end_of_entries();
                shared.changed.notify_one();
                shared.check_files(now);
            }
            Frame::Error(e) => return Err(EngineError::from_peer(&shared.peer, e)),
            other => return Err(unexpected(format!("unexpected frame {other:?}"))),
        }
    }
}

/// Most bytes of plan items per control frame: well under the frame limit.
const PLAN_FRAME_BUDGET: usize = hetch_proto::MAX_CONTROL_BODY / 4;

/// Cuts a plan into frames that fit the control frame limit. A file whose missing
/// ranges alone would not fit (a huge, much-fragmented resume) gets several items.
pub(crate) fn plan_frames(items: Vec<hetch_proto::PlanItem>) -> Vec<Frame> {
    use hetch_proto::{PlanAction, PlanItem};
    let mut frames = Vec::new();
    let mut current = Vec::new();
    let mut used = 0;
    let mut push = |item: PlanItem, current: &mut Vec<PlanItem>, used: &mut usize| {
        if *used + item.wire_len() > PLAN_FRAME_BUDGET && !current.is_empty() {
            frames.push(Frame::Plan(std::mem::take(current)));
            *used = 0;
        }
        *used += item.wire_len();
        current.push(item);
    };
    for item in items {
        match item.action {
            PlanAction::Send(ranges) if ranges.len() * 16 > PLAN_FRAME_BUDGET / 2 => {
                for part in ranges.chunks(PLAN_FRAME_BUDGET / 32) {
                    let piece = PlanItem {
                        id: item.id,
                        action: PlanAction::Send(part.to_vec()),
                    };
                    push(piece, &mut current, &mut used);
                }
            }
            action => push(
                PlanItem {
                    id: item.id,
                    action,
                },
                &mut current,
                &mut used,
            ),
        }
    }
    if !current.is_empty() {
        frames.push(Frame::Plan(current));
    }
    frames
}

/// Waits until everything is settled, applies directory metadata, makes the data
/// durable with one `syncfs`, and sends the summary.
async fn finisher(shared: Arc<SinkShared>, ctl: mpsc::Sender<Frame>) -> Result<(), EngineError> {
    loop {
        let changed = shared.changed.notified();
        if shared.settlement().may_finish() {
            break;
        }
        changed.await;
    }
    // Nothing is left to check: let the verifiers and the durability task stop.
    shared.verify.0.close();
    shared.durable.lock().expect("durable lock").take();
    let sh = shared.clone();
    let extras = tokio::task::spawn_blocking(move || {
        // Links once every file is in place, so that a failed one stops deletions;
        // removal comes before directory metadata: it changes the directories' mtimes.
        let mut extras = crate::links::make_links(&sh);
        extras.extend(match sh.opts.compare_only {
            true => mirror::compare_extras(&sh),
            false => mirror::delete_extras(&sh),
        });
        extras.extend(plan::finish_dirs(&sh)?);
        Ok::<_, EngineError>(extras)
    })
    .await
    .expect("finish task panicked")?;
    for f in extras {
        let _ = ctl.send(f).await;
    }
    shared.settlement().finish();
    // Data streams waiting to be joined again need not wait any more.
    shared.changed.notify_waiters();
    let _ = ctl.send(Frame::Finished(shared.progress.summary())).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetch_proto::{PlanAction, PlanItem};

    #[test]
    fn huge_plans_are_cut_into_frames_that_encode() {
        let ranges: Vec<(u64, u64)> = (0..600_000u64).map(|i| (2 * i, 2 * i + 1)).collect();
        let items = vec![
            PlanItem {
                id: 1,
                action: PlanAction::Skip,
            },
            PlanItem {
                id: 2,
                action: PlanAction::Send(ranges.clone()),
            },
        ];
        let frames = plan_frames(items);
        assert!(frames.len() > 1);
        let mut got = Vec::new();
        for f in &frames {
            let mut buf = Vec::new();
            hetch_proto::encode(f, &mut buf); // panics if over the limit
            let Frame::Plan(items) = f else { panic!() };
            for it in items {
                if let (2, PlanAction::Send(r)) = (it.id, &it.action) {
                    got.extend_from_slice(r);
                }
            }
        }
        assert_eq!(got, ranges);
    }
}
