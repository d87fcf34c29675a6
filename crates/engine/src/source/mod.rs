//! The sending side of a session.
//!
//! Tasks: a walker (blocking thread) lists the operands; an announcer batches entries
//! onto the control stream; the control reader turns the sink's plans and resend
//! requests into block jobs; readers read, hash and queue blocks; one writer per data
//! stream sends whatever block is ready next. Entries in flight are bounded by a window,
//! blocks in flight by the buffer pool.

mod control;
pub(crate) mod listing;
mod repair;
mod stream;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use hetch_integrity as integrity;
use hetch_proto::{DataHeader, Entry, EntryKind, Frame, Summary};
use hetch_storage::walk::{self, Identity, SourceEntry, SourceKind};
use hetch_storage::StorageError;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

use crate::changed::CachedFile;
use crate::compress::{Backoff, Packer};
use crate::error::EngineError;
use crate::follow::{Followed, Follower};
use crate::gate::Gate;
use crate::operand::Operand;
use crate::pool::{BufferPool, PooledBuf};
use crate::progress::{Progress, Report};
use crate::rate::RateLimiter;
use crate::session::{is_zero, run_tasks};
use crate::store::origin::{Found, OriginFile};
use crate::store::Size;
use crate::{Options, Transport};
use listing::{Announce, Listing, Once, OpenEnd};

/// Entries announced but not yet finished, at most. It bounds what the sink keeps per
/// file (about 1 KiB each): 16 Ki entries took 15 MiB of a sink's 88 MiB peak on
/// 200,000 files of 1 KiB, 4 Ki keeps it near 4 MiB and is still far more files in
/// flight than a disk finishes in a round trip. (A sink refuses more than
/// [`crate::MAX_OPEN_FILES`].)
const ENTRY_WINDOW: usize = 4 * 1024;
/// Entries per control frame, at most.
const ENTRY_BATCH: usize = 1024;
/// Bytes of entries after which a batch goes out: an entry adds at most a path and its
/// attributes (`hetch_proto::MAX_ENTRY_XATTRS`), so a batch stays well within a
/// control frame.
const ENTRY_BATCH_BYTES: usize = hetch_proto::MAX_CONTROL_BODY / 2;
/// Blocks a reader takes from one job before putting the rest back, so that the blocks
/// of one big file are read by all readers at once.
pub(crate) const BLOCKS_PER_TURN: u64 = 4;

/// An entry the sink has not finished yet.
pub(crate) struct Announced {
    pub abs: PathBuf,
    /// Its wire path, to list it again when it changed while being read.
    pub rel: Vec<u8>,
    /// What the listing saw of a local file, which every read must still find (`None`
    /// for an origin's files, growing files and other kinds).
    pub identity: Option<Identity>,
    /// A local file the listing saw with fewer bytes allocated than its size: its
    /// readers look for holes block by block (see `hetch_storage::holes`).
    pub sparse: bool,
    /// The file opened for its blocks, kept while more of them are to be read.
    pub handle: Option<CachedFile>,
    /// Times it was listed again after changing while being read.
    pub attempts: u32,
    /// What reads the file instead of `abs`, for an origin's operands.
    pub origin: Option<Arc<dyn OriginFile>>,
    /// Size to read blocks by: growing until a followed file is sealed.
    pub size: Size,
    pub is_file: bool,
    /// A read error was already reported (several readers may hit the same file).
    pub failed: bool,
    /// A growing file being followed.
    pub follow: Option<Box<Followed>>,
    /// The sink skipped it (already there); it stays until the sink's `FileDone`
    /// confirms it, so that `remove_source` only deletes what is verified there.
    pub skipped: bool,
}

/// Blocks `start..end` of one file to read and send.
pub(crate) struct Job {
    pub file: u64,
    pub start: u64,
    pub end: u64,
    /// Pieces already carried these blocks' bytes: send each block's digest (a
    /// `Cover`) instead of its bytes.
    pub cover: bool,
    /// The sink holds a damaged copy of the (one) block: send the patches that
    /// differ from it (see `repair.rs`).
    pub repair: Option<Arc<repair::RepairAsk>>,
}

/// A block ready for a data stream.
pub(crate) struct OutBlock {
    header: DataHeader,
    len: u64,
    payload: Option<PooledBuf>,
    /// When not empty, only these patches of the payload go (a repair's answer),
    /// except on a lane, where no damage can happen and the block goes whole.
    patches: Vec<repair::OutPatch>,
    /// The repair the patches answer (to answer it again if they are lost).
    repair: Option<Arc<repair::RepairAsk>>,
}

pub(crate) struct Shared {
    pub opts: Options,
    pub peer: String,
    pub progress: Arc<Progress>,
    pub announced: Mutex<HashMap<u64, Announced>>,
    pub window: Semaphore,
    pub jobs: (async_channel::Sender<Job>, async_channel::Receiver<Job>),
    pub(crate) pool: BufferPool,
    /// Compresses blocks on the wire, when the session asks for it.
    packer: Option<Packer>,
    corrupt_left: crate::faults::Countdown,
    /// Bounds the threads hashing at once.
    pub(crate) gate: Gate,
    /// The next entry id.
    pub next_id: AtomicU64,
    /// What is listed beyond one walk (see [`listing`]).
    pub listing: Arc<dyn Listing>,
    /// Where entries listed after the walk go.
    pub open_end: OpenEnd,
    /// First names of files with several (`--hard-links`).
    links: crate::links::SourceLinks,
    /// Open files kept with their entries (see [`CachedFile`]), and their bound.
    handles: Arc<AtomicUsize>,
    handle_cap: usize,
}

impl Shared {
    /// Reports a file that cannot be read, once, however many readers hit the error.
    pub(crate) async fn read_failed(&self, id: u64, message: String, ctl: &mpsc::Sender<Frame>) {
        let first = {
            let mut ann = self.announced.lock().expect("announced lock");
            match ann.get_mut(&id) {
                Some(a) if !a.failed => {
                    a.failed = true;
                    true
                }
                _ => false,
            }
        };
        if first {
            let _ = ctl.send(Frame::FileError { file: id, message }).await;
        }
    }

    /// Marks an entry finished; returns whether it was still pending.
    pub(crate) fn complete(&self, id: u64) -> Option<Announced> {
        let a = self.announced.lock().expect("announced lock").remove(&id);
        if a.is_some() {
            self.window.add_permits(1);
            crate::changed::end_listing_if_settled(self);
        }
        a
    }
}

/// Sends `operands` (local paths) to the sink at the other end of `transport`.
///
/// Per-file problems (unreadable file, refused at the destination) are reported in the
/// returned [`Report`] and do not stop the session; a broken connection or a fatal error
/// at the sink does.
pub async fn run_source(
    opts: Options,
    operands: Vec<PathBuf>,
    transport: Transport,
    progress: Arc<Progress>,
) -> Result<Report, EngineError> {
    let operands = operands.into_iter().map(Operand::Local).collect();
    run_source_from(opts, operands, transport, progress).await
}

/// Sends `operands` (local paths or object store locations) to the sink at the other
/// end of `transport`; see [`run_source`].
pub async fn run_source_from(
    opts: Options,
    operands: Vec<Operand>,
    transport: Transport,
    progress: Arc<Progress>,
) -> Result<Report, EngineError> {
    let (mut session, ctl_tx) = crate::session::open(transport, &opts);
    let peer = session.peer.clone();
    let pool = BufferPool::new(opts.effective_buffer_memory());
    // An origin's reads may wait a round trip each: it says how many to keep in
    // flight. Each reader holds a pool buffer while its read is out, so the buffer
    // budget bounds their memory whatever their number.
    let n_readers = operands
        .iter()
        .filter_map(|o| match o {
            Operand::Origin(o) => Some(o.concurrent_reads()),
            Operand::Local(_) | Operand::Entries { .. } => None,
        })
        .fold(opts.concurrency, usize::max)
        .max(1);
    let listing: Arc<dyn Listing> = match &opts.follow {
        Some(f) => Arc::new(Follower::new(f.clone(), local_operands(&operands))),
        None => Arc::new(Once),
    };
    let (entry_tx, entry_rx) = mpsc::channel(ENTRY_BATCH * 4);
    // Followed trees and files listed again after changing announce after the walk.
    let stays_open = opts.follow.is_some() || opts.retry_changed;
    let shared = Arc::new(Shared {
        corrupt_left: crate::faults::hooks(&opts).0,
        packer: Packer::new(opts.compression, opts.hash_threads),
        gate: Gate::new(opts.hash_threads),
        opts,
        peer: peer.clone(),
        progress: progress.clone(),
        announced: Mutex::default(),
        window: Semaphore::new(ENTRY_WINDOW),
        jobs: async_channel::unbounded(),
        pool,
        next_id: AtomicU64::new(0),
        listing,
        open_end: OpenEnd::new(stays_open.then(|| entry_tx.clone())),
        links: Default::default(),
        handles: Arc::default(),
        // Each reader holds the file it reads; beyond those, as many kept for their
        // next turn: one per reader is enough for every reader to work on its own
        // big file.
        handle_cap: n_readers,
    });
    let (data_tx, data_rx) = async_channel::bounded::<OutBlock>(64);
    let limiter = match &shared.opts.shared_rate {
        Some(shared) => Some(shared.clone()),
        None => RateLimiter::new(shared.opts.rate_limit).map(Arc::new),
    };
    let summary = Arc::new(Mutex::new(Summary::default()));

    let mut tasks = JoinSet::new();
    {
        let shared = shared.clone();
        tasks.spawn_blocking(move || {
            let r = walker(&shared, operands, entry_tx);
            shared.open_end.walk_done();
            crate::changed::end_listing_if_settled(&shared);
            r
        });
    }
    if let Some(watch) = shared.listing.clone().watch(shared.clone(), ctl_tx.clone()) {
        tasks.spawn(watch);
    }
    tasks.spawn(announcer(entry_rx, ctl_tx.clone()));
    // The sink's word on each data stream's lost connections, from the control reader
    // to the stream's writer.
    let (lost_tx, lost_rx): (Vec<_>, Vec<_>) = (0..session.data.len())
        .map(|_| tokio::sync::watch::channel(Default::default()))
        .unzip();
    let reading = tasks.spawn(control::control_reader(
        shared.clone(),
        session.control,
        (ctl_tx.clone(), lost_tx),
        summary.clone(),
    ));
    session.end.reads_control(reading.id());
    // Readers and stream writers run in a nested set so that the data channel closes
    // exactly when the last reader is done.
    let mut readers = JoinSet::new();
    for _ in 0..n_readers {
        readers.spawn(crate::readers::reader(
            shared.clone(),
            data_tx.clone(),
            ctl_tx.clone(),
        ));
    }
    drop(data_tx);
    tasks.spawn(async move {
        while let Some(r) = readers.join_next().await {
            r.expect("reader panicked")?;
        }
        Ok(())
    });
    for ((index, data), lost) in session.data.into_iter().enumerate().zip(lost_rx) {
        let writer = stream::Writer {
            index: index as u16,
            rx: data_rx.clone(),
            limiter: limiter.clone(),
            shared: shared.clone(),
            lost,
            rejoining: session.rejoin.clone(),
        };
        tasks.spawn(writer.run(data));
    }
    drop(data_rx);

    let result = run_tasks(tasks, ctl_tx, session.end).await;
    shared.window.close();
    result?;
    let summary = *summary.lock().expect("summary lock");
    Ok(Report {
        summary,
        ..progress.report()
    })
}

/// The local paths among `operands` (those a follower watches).
fn local_operands(operands: &[Operand]) -> Vec<PathBuf> {
    operands
        .iter()
        .filter_map(|o| match o {
            Operand::Local(p) => Some(p.clone()),
            Operand::Origin(_) | Operand::Entries { .. } => None,
        })
        .collect()
}

/// What the walker hands the announcer.
pub(crate) enum Listed {
    Entry(Entry),
    /// An entry that could not be listed: reported through the sink like a failed file
    /// (under an id of its own), so that the client side reports it in push and pull.
    Error(u64, String),
}

fn walker(
    shared: &Shared,
    operands: Vec<Operand>,
    tx: mpsc::Sender<Listed>,
) -> Result<(), EngineError> {
    let report = |e: StorageError| {
        let id = shared.next_id.fetch_add(1, Relaxed);
        tx.blocking_send(Listed::Error(id, e.to_string())).is_ok()
    };
    for op in operands {
        let op = match op {
            Operand::Local(p) => p,
            Operand::Origin(o) => {
                let mut going = true;
                o.list(&mut |found| {
                    going = match found {
                        Found::Entry(se, file) => announce(shared, se, file, &tx),
                        Found::Error(message) => {
                            let id = shared.next_id.fetch_add(1, Relaxed);
                            tx.blocking_send(Listed::Error(id, message)).is_ok()
                        }
                    };
                    going
                })?;
                if !going {
                    return Ok(());
                }
                continue;
            }
            Operand::Entries { operand, entries } => {
                let below = match shared.opts.within_of(&operand) {
                    Some(within) => walk::EntriesBelow::within(within, &operand),
                    None => walk::EntriesBelow::new(&operand),
                };
                let mut below = match below {
                    Ok(b) => b,
                    Err(e) => match report(e) {
                        true => continue,
                        false => return Ok(()),
                    },
                };
                for rel in entries {
                    let going = match below.entry(&rel) {
                        Ok(se) => announce(shared, se, None, &tx),
                        Err(e) => report(e),
                    };
                    if !going {
                        return Ok(());
                    }
                }
                continue;
            }
        };
        type Walk = Box<dyn Iterator<Item = Result<SourceEntry, StorageError>>>;
        let listing = match shared.opts.within_of(&op) {
            Some(within) => walk::walk_within(within, &op).map(|w| Box::new(w) as Walk),
            None => walk::walk(&op).map(|w| Box::new(w) as Walk),
        };
        let iter = match listing {
            Ok(it) => it,
            Err(e) => {
                if !report(e) {
                    return Ok(());
                }
                continue;
            }
        };
        for item in iter {
            let keep_going = match item {
                Ok(se) => announce(shared, se, None, &tx),
                Err(e) => report(e),
            };
            if !keep_going {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Announces one listed entry (on a blocking thread): waits for room in the window,
/// registers it, and queues it for the announcer. `origin` reads an origin's file (see
/// [`crate::store::origin`]). False when the session is over.
pub(crate) fn announce(
    shared: &Shared,
    se: SourceEntry,
    origin: Option<Arc<dyn OriginFile>>,
    tx: &mpsc::Sender<Listed>,
) -> bool {
    announce_attempt(shared, se, origin, tx, 0)
}

/// [`announce`] for a file listed again after changing `attempts` times.
pub(crate) fn announce_attempt(
    shared: &Shared,
    se: SourceEntry,
    origin: Option<Arc<dyn OriginFile>>,
    tx: &mpsc::Sender<Listed>,
    attempts: u32,
) -> bool {
    let rt = tokio::runtime::Handle::current();
    let mut digest_buf = Vec::new();
    if let Some(f) = &shared.opts.filter {
        if !f.accepts(&se.rel, matches!(se.kind, SourceKind::Dir)) {
            return true;
        }
    }
    if let SourceKind::Special(special) = se.kind {
        if !crate::special::wanted(&shared.opts, special) {
            // Skipped, as rsync without -D does: a warning, not a failure, so that a
            // mirror's deletions still go ahead.
            let shown = se.abs.display().to_string();
            shared
                .progress
                .warn(&crate::special::skipped(&shown, special));
            return true;
        }
    }
    let link_to = match shared.opts.hard_links {
        true => shared.links.name(&se),
        false => crate::links::LinkOrNot::Itself,
    };
    let link_to = match link_to {
        crate::links::LinkOrNot::LinkTo(target) => Some(target),
        crate::links::LinkOrNot::Itself => None,
        crate::links::LinkOrNot::TableFull => {
            let why = "more files with several names than hard links are kept for; \
                       further names are copied as separate files";
            shared.progress.warn(why);
            None
        }
    };
    let (followed, idle) = match shared.listing.classify(shared, &se) {
        Announce::Held => return true,
        Announce::Plain => (None, true),
        Announce::Growing { state, idle } => (Some(state), idle),
    };
    let growing = followed.is_some();
    // Wait for room in the window; a closed window means the session ended.
    match rt.block_on(shared.window.acquire()) {
        Ok(p) => p.forget(),
        Err(_) => return false,
    }
    let id = shared.next_id.fetch_add(1, Relaxed);
    let mut entry = to_entry(id, &se, growing);
    if let Some(target) = link_to {
        entry.kind = EntryKind::HardLink { target };
    }
    let kept = crate::xattrs::kept(&shared.opts);
    if kept.any()
        && origin.is_none()
        && matches!(entry.kind, EntryKind::File { .. } | EntryKind::Dir)
    {
        match crate::xattrs::of_source(&se.abs, shared.opts.read_confinement(), kept) {
            Ok(attrs) => entry.xattrs = attrs,
            Err(e) => {
                shared.window.add_permits(1);
                return tx.blocking_send(Listed::Error(id, e)).is_ok();
            }
        }
    }
    let is_file = matches!(entry.kind, EntryKind::File { .. });
    if let (EntryKind::File { digest, .. }, true, true) = (
        &mut entry.kind,
        shared.opts.checksum_skip || shared.opts.compare_only,
        idle,
    ) {
        // The sink skips (or, comparing, accepts) a file only on a matching
        // whole-file digest, so it must travel with the entry.
        let algo = shared.opts.checksum;
        let bs = shared.opts.block_size;
        let sum = match (&origin, &se.kind) {
            (Some(o), SourceKind::File { size }) => rt.block_on(o.digest(*size, algo, bs)),
            _ => crate::sum::sum_file_with(algo, &se.abs, bs, &mut digest_buf)
                .map_err(|e| e.to_string()),
        };
        match sum {
            Ok(d) => *digest = Some(d),
            Err(e) => {
                shared.window.add_permits(1);
                return tx.blocking_send(Listed::Error(id, e)).is_ok();
            }
        }
    }
    let size = match se.kind {
        SourceKind::File { size } if is_file => {
            Progress::add(&shared.progress.total_files, 1);
            Progress::add(&shared.progress.total_bytes, size);
            size
        }
        _ => 0,
    };
    // Growing files change by design; an origin checks its files itself.
    let identity = (!growing && origin.is_none() && is_file)
        .then(|| Identity::of_entry(&se))
        .flatten();
    shared.announced.lock().expect("announced lock").insert(
        id,
        Announced {
            abs: se.abs,
            rel: se.rel,
            identity,
            sparse: se.sparse && identity.is_some(),
            handle: None,
            attempts,
            origin,
            size: Size::announced(size, growing),
            is_file,
            failed: false,
            follow: followed,
            skipped: false,
        },
    );
    tx.blocking_send(Listed::Entry(entry)).is_ok()
}

fn to_entry(id: u64, se: &SourceEntry, growing: bool) -> Entry {
    Entry {
        id,
        path: se.rel.clone(),
        kind: match &se.kind {
            SourceKind::File { size } => EntryKind::File {
                size: *size,
                digest: None,
                growing,
            },
            SourceKind::Dir => EntryKind::Dir,
            SourceKind::Symlink { target } => EntryKind::Symlink {
                target: target.clone(),
            },
            SourceKind::Special(s) => EntryKind::Special(crate::special::to_wire(*s)),
        },
        mode: se.mode,
        mtime_sec: se.mtime_sec,
        mtime_nsec: se.mtime_nsec,
        xattrs: Vec::new(),
    }
}

/// Batches entries into control frames without waiting: whatever is queued goes out.
async fn announcer(
    mut rx: mpsc::Receiver<Listed>,
    ctl: mpsc::Sender<Frame>,
) -> Result<(), EngineError> {
    let mut batch = Vec::new();
    let mut bytes = 0;
    while let Some(first) = rx.recv().await {
        let mut item = Some(first);
        // Take whatever is already queued, without waiting, up to one batch.
        while let Some(listed) = item {
            match listed {
                Listed::Entry(e) => {
                    bytes += e.wire_len();
                    batch.push(e);
                }
                Listed::Error(file, message) => {
                    // Keep order: entries listed before the error go first.
                    let error = Frame::FileError { file, message };
                    bytes = 0;
                    if !flush(&ctl, &mut batch).await || ctl.send(error).await.is_err() {
                        return Ok(());
                    }
                }
            }
            item = if batch.len() < ENTRY_BATCH && bytes < ENTRY_BATCH_BYTES {
                rx.try_recv().ok()
            } else {
                None
            };
        }
        bytes = 0;
        if !flush(&ctl, &mut batch).await {
            return Ok(());
        }
    }
    let _ = ctl.send(Frame::EndOfEntries).await;
    Ok(())
}

/// Sends the entries batched so far, if any; false when the control stream is gone.
async fn flush(ctl: &mpsc::Sender<Frame>, batch: &mut Vec<Entry>) -> bool {
    batch.is_empty()
        || ctl
            .send(Frame::Entries(std::mem::take(batch)))
            .await
            .is_ok()
}

/// Opens a listed file (on a blocking thread): never through a symlink, and where
/// sources are confined (a server's root, a service user's read paths: see
/// `Options::read_within`) only below one of the directories `within`. Whether it is
/// still the file the listing saw is checked after each block is read (see
/// `changed.rs`): that check compares the whole identity, inode included, so checking
/// at the open too would only cost a syscall.
pub(crate) fn open_source(
    abs: &std::path::Path,
    within: &[PathBuf],
) -> std::io::Result<std::fs::File> {
    let f = hetch_storage::walk::open_listed(abs)?;
    if !within.is_empty() {
        hetch_storage::confined::check_below_any(&f, within)?;
    }
    Ok(f)
}

/// Keeps `file` with its entry while more of its blocks are to be read (`more`), so
/// that they are read through the same handle; lets it go with the job's last turn.
/// Handles kept are bounded: beyond the bound, the next turn opens the file again
/// (and checks that it is still the one listed).
pub(crate) fn keep_open(shared: &Shared, id: u64, file: &Arc<std::fs::File>, more: bool) {
    let mut ann = shared.announced.lock().expect("announced lock");
    let Some(a) = ann.get_mut(&id) else { return };
    if !more {
        a.handle = None;
    } else if a.handle.is_none() {
        a.handle = CachedFile::keep(file, &shared.handles, shared.handle_cap);
    }
}

/// A block read and hashed.
pub(crate) struct ReadBlock {
    pub index: u64,
    pub len: u64,
    pub buf: PooledBuf,
    pub zero: bool,
    /// The source file has holes in the block (see [`DataHeader::sparse`]).
    pub sparse: bool,
    /// `buf` holds the block compressed (see `compress.rs`).
    pub packed: bool,
    pub digest: integrity::Digest,
}

/// Whether to try compressing the next block of `file`: the session compresses, its
/// mode wants it now (`auto`: blocks wait for the network, a quarter of the blocks the
/// queue can hold being in it: what the buffer budget allows, at most the queue's
/// capacity), and this reader's back-off from blocks that did not shrink allows.
pub(crate) fn wants_pack(
    sh: &Shared,
    data: &async_channel::Sender<OutBlock>,
    backoff: &mut Backoff,
    file: u64,
) -> bool {
    let Some(p) = &sh.packer else { return false };
    let budget = sh.opts.effective_buffer_memory() as u64 / sh.opts.block_size.max(1);
    let room = (budget as usize).clamp(1, data.capacity().unwrap_or(usize::MAX));
    let queued = 4 * data.len() >= room;
    p.wants(queued, sh.progress.wire_bytes.load(Relaxed)) && backoff.wants(file)
}

/// Compresses a read and hashed block in place if that pays (under the hashing gate:
/// it is CPU work of the same kind). True if it did.
pub(crate) fn pack(sh: &Shared, buf: &mut PooledBuf) -> bool {
    let Some(p) = &sh.packer else { return false };
    match sh.gate.run(|| p.pack(buf)) {
        Some(len) => {
            buf.truncate(len);
            true
        }
        None => false,
    }
}

/// Hands a read block on: to the data streams, or as a `Cover` when pieces carried its
/// bytes already. False when the session is over.
pub(crate) async fn queue_block(
    shared: &Arc<Shared>,
    job: &Job,
    size: Size,
    block: ReadBlock,
    data: &async_channel::Sender<OutBlock>,
    ctl: &mpsc::Sender<Frame>,
) -> bool {
    let ReadBlock {
        index,
        len,
        mut buf,
        zero,
        sparse,
        packed,
        digest,
    } = block;
    if size.is_growing() {
        shared.listing.sent(shared, job.file, index, &digest);
    }
    if job.cover {
        let cover = Frame::Cover {
            file: job.file,
            block: index,
            digest,
        };
        return ctl.send(cover).await.is_ok();
    }
    // (A compressed payload is damaged only to fail inflating: the hook damages blocks
    // sent as they are.)
    if !zero && !packed && shared.corrupt_left.fire() {
        buf[0] ^= 0x01; // test-only fault hook: damage after hashing
    }
    let header = DataHeader {
        file: job.file,
        block: index,
        digest,
        zero,
        compressed: packed,
        raw_len: if zero || packed { len as u32 } else { 0 },
        sparse: sparse && !zero,
        patch: None,
    };
    let (payload, patches) = match &job.repair {
        // A compressed block cannot be cut into patches of its bytes: it goes whole.
        Some(ask) if !zero && !packed => repair::patches(shared, &header, buf, ask.clone()).await,
        _ => ((!zero).then_some(buf), Vec::new()),
    };
    let repair = job.repair.clone().filter(|_| !patches.is_empty());
    data.send(OutBlock {
        header,
        len,
        payload,
        patches,
        repair,
    })
    .await
    .is_ok()
}

/// Bytes one read of an origin asks for at most: a run of consecutive blocks of one
/// file in one request (a ranged GET), so that a service a round trip away is asked
/// once per run instead of once per block. Bounded here, not by the file's size; the
/// run is shorter when the pool has fewer buffers free.
const ORIGIN_RUN: u64 = 16 << 20;

/// Reads blocks `job.start..job.end` of an origin's file in runs, hashes and queues
/// them. False when the session is over.
pub(crate) async fn read_origin(
    shared: &Arc<Shared>,
    job: &Job,
    size: Size,
    o: &dyn OriginFile,
    data: &async_channel::Sender<OutBlock>,
    ctl: &mpsc::Sender<Frame>,
    backoff: &mut Backoff,
) -> bool {
    let bs = shared.opts.block_size;
    let mut index = job.start;
    while index < job.end {
        let mut bufs = run_buffers(shared, size, index, job.end).await;
        let mut into: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        if let Err(e) = o.read_run(index * bs, &mut into).await {
            shared.read_failed(job.file, e, ctl).await;
            return true;
        }
        for mut buf in bufs {
            let sh = shared.clone();
            let try_pack = wants_pack(shared, data, backoff, job.file);
            let (buf, zero, digest, packed) = tokio::task::spawn_blocking(move || {
                let zero = is_zero(&buf);
                let algo = sh.opts.checksum;
                let digest = sh
                    .gate
                    .run(|| algo.block_digest(size.digest_len(), bs, index, &buf));
                let packed = (try_pack && !zero).then(|| pack(&sh, &mut buf));
                (buf, zero, digest, packed)
            })
            .await
            .expect("hash task panicked");
            packed.inspect(|&p| backoff.tried(p));
            let block = ReadBlock {
                index,
                len: size.block_len(bs, index),
                buf,
                zero,
                sparse: false, // an origin tells of no holes
                packed: packed == Some(true),
                digest,
            };
            if !queue_block(shared, job, size, block, data, ctl).await {
                return false;
            }
            index += 1;
        }
    }
    true
}

/// Pool buffers for a run of blocks of a file from block `from` (before `end`): the
/// first waits for the pool, which then also bounds the reads in flight whatever the
/// number of readers. The next ones are taken only while the pool has them at once and
/// the run stays within [`ORIGIN_RUN`]: readers that each held part of the budget and
/// waited for more would wait for each other forever.
async fn run_buffers(shared: &Shared, size: Size, from: u64, end: u64) -> Vec<PooledBuf> {
    let bs = shared.opts.block_size;
    let len = |index| size.block_len(bs, index) as usize;
    let mut bufs = vec![shared.pool.get(len(from)).await];
    let mut bytes = len(from) as u64;
    for index in from + 1..end {
        bytes += len(index) as u64;
        if bytes > ORIGIN_RUN {
            break;
        }
        match shared.pool.try_get(len(index)) {
            Some(buf) => bufs.push(buf),
            None => break,
        }
    }
    bufs
}
