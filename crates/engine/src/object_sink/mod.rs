//! The receiving side when the destination is an object store.
//!
//! The wire protocol is the same as for files; what differs is where blocks go. Each
//! block's digest is checked on arrival (there is nothing to read back cheaply), then
//! the block is copied into its part: objects of one part go up in a single PUT with
//! their metadata, larger ones as multipart uploads whose parts upload in parallel as
//! soon as their blocks are in. Every request carries an `x-amz-checksum-sha256`
//! header, so the store checks what it stores too. A local journal records each
//! uploaded part, so an interrupted transfer resumes its uploads; a file that fails
//! has its upload aborted, so no parts are left behind. Nothing appears under the
//! final key until the object is complete (S3 makes an object visible only when its
//! PUT or its multipart completion succeeds).

mod mirror;
mod plan;
mod upload;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use hetch_proto::{Frame, ManifestEntry};
use tokio::io::split;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;

use crate::error::EngineError;
use crate::gate::Gate;
use crate::operand::ObjectDest;
use crate::pool::BufferPool;
use crate::progress::{Progress, Report};
use crate::session::{control_writer, run_tasks, Watch, CONTROL_QUEUE};
use crate::wire::{FrameReader, FrameWriter};
use crate::{Options, Transport};

use upload::Upload;

/// Writers (so part uploads in flight), at least.
const OBJECT_WRITERS: usize = 16;

pub(crate) struct ObjectShared {
    pub opts: Options,
    pub peer: String,
    pub progress: Arc<Progress>,
    pub dest: ObjectDest,
    /// Files being uploaded, by entry id.
    pub files: Mutex<HashMap<u64, Arc<Upload>>>,
    /// Files planned for sending and not finished yet.
    pub pending: AtomicU64,
    pub end_of_entries: AtomicBool,
    pub finished_sent: AtomicBool,
    pub changed: Notify,
    /// Bounds the threads hashing at once.
    pub gate: Gate,
    /// Keys of the files being uploaded: two entries mapping to one key at once (two
    /// operands of the same name) would race for it and its journal. Bounded by the
    /// files in flight.
    pub keys: Mutex<HashSet<String>>,
    /// Part buffers for reuse.
    pub buffers: PartBuffers,
    /// A pull's entries must lie under the operands asked for (`None`: not a pull).
    pub tops: Option<crate::tops::TopCheck>,
    /// Mirroring sessions: the keys of every announced entry (grows with the entries).
    pub seen: Mutex<HashSet<String>>,
    /// Mirroring sessions: the prefixes of the directory operands, listed at the end.
    pub dir_tops: Mutex<std::collections::BTreeSet<String>>,
}

/// Part buffers kept for reuse, up to a byte budget: a fresh 8 MiB allocation costs a
/// page fault per 4 KiB, about a tenth of the upload's CPU time.
pub(crate) struct PartBuffers {
    free: Mutex<Vec<Vec<u8>>>,
    max_bytes: usize,
}

impl PartBuffers {
    fn new(max_bytes: usize) -> Self {
        PartBuffers {
            free: Mutex::default(),
            max_bytes,
        }
    }

    /// A buffer of `len` bytes (zeros where a reused one is not overwritten).
    pub fn get(&self, len: usize) -> Vec<u8> {
        let reused = {
            let mut free = self.free.lock().expect("buffers lock");
            let i = free.iter().position(|b| b.capacity() >= len);
            i.map(|i| free.swap_remove(i))
        };
        let mut v = reused.unwrap_or_else(|| Vec::with_capacity(len));
        v.clear();
        v.resize(len, 0);
        v
    }

    /// Takes back the buffer of an uploaded part, if nothing else holds it and the
    /// budget allows.
    pub fn put(&self, b: bytes::Bytes) {
        let Ok(m) = b.try_into_mut() else { return };
        let v: Vec<u8> = m.into();
        let mut free = self.free.lock().expect("buffers lock");
        let held: usize = free.iter().map(Vec::capacity).sum();
        if held + v.capacity() <= self.max_bytes {
            free.push(v);
        }
    }
}

impl ObjectShared {
    /// Takes file `id` out of the files in flight; whoever gets it settles it.
    pub fn take(&self, id: u64) -> Option<Arc<Upload>> {
        let up = self.files.lock().expect("files lock").remove(&id)?;
        self.keys.lock().expect("keys lock").remove(&up.key);
        Some(up)
    }

    /// `s3://bucket/key`, for messages.
    pub fn url(&self, key: &str) -> String {
        self.dest.location.bucket.url(key)
    }

    /// A file ended (done or failed): its `FileDone` is queued before it stops being
    /// pending, so the summary never overtakes it.
    pub async fn settle(&self, ctl: &mpsc::Sender<Frame>, frame: Frame) {
        let _ = ctl.send(frame).await;
        self.pending.fetch_sub(1, SeqCst);
        self.changed.notify_one();
    }

    /// Records a per-file failure and makes its report.
    pub fn failure(&self, id: u64, message: String) -> Frame {
        self.progress.fail(message.clone());
        Frame::FileDone {
            file: id,
            error: Some(message),
            digest: None,
        }
    }

    /// A key relative to the destination prefix (for manifests and change lines).
    pub fn rel_path(&self, key: &str) -> Vec<u8> {
        let base = self.dest.location.url.trimmed();
        let rel = key
            .strip_prefix(base)
            .map(|r| r.trim_start_matches('/'))
            .filter(|r| !r.is_empty() && !base.is_empty())
            .unwrap_or(key);
        rel.as_bytes().to_vec()
    }

    /// The manifest entry of a key, relative to the destination prefix (when the
    /// session asked for digests).
    pub fn manifest_entry(&self, key: &str, digest: Option<Vec<u8>>) -> Option<ManifestEntry> {
        if !self.opts.file_digests {
            return None;
        }
        let digest = digest?;
        let path = self.rel_path(key);
        if let Some(m) = &self.opts.manifest {
            m.add(&digest, &path);
        }
        Some(ManifestEntry { digest, path })
    }
}

/// Receives into the object store location `dest` whatever the source at the other
/// end of `transport` sends.
pub async fn run_object_sink(
    opts: Options,
    dest: ObjectDest,
    transport: Transport,
    progress: Arc<Progress>,
) -> Result<Report, EngineError> {
    let (transport, watch) = Watch::new(transport, &opts);
    let peer = transport.peer.clone();
    // One request before anything else: bad credentials or a missing bucket end the
    // session with one clear error instead of failing every file.
    dest.location
        .bucket
        .probe(dest.location.url.trimmed())
        .await?;
    let (ctl_r, ctl_w) = split(transport.control);
    let (ctl_tx, ctl_rx) = mpsc::channel(CONTROL_QUEUE);
    let ctl_writer = tokio::spawn(control_writer(
        FrameWriter::new(ctl_w, &peer),
        ctl_rx,
        opts.served_root.clone(),
    ));
    let opts_memory = opts.effective_buffer_memory();
    let shared = Arc::new(ObjectShared {
        gate: Gate::new(opts.hash_threads),
        tops: crate::tops::TopCheck::new(opts.pulled.as_deref()),
        opts,
        peer: peer.clone(),
        progress: progress.clone(),
        dest,
        files: Mutex::default(),
        pending: AtomicU64::new(0),
        end_of_entries: AtomicBool::new(false),
        finished_sent: AtomicBool::new(false),
        changed: Notify::new(),
        keys: Mutex::default(),
        buffers: PartBuffers::new(opts_memory),
        seen: Mutex::default(),
        dir_tops: Mutex::default(),
    });
    let pool = BufferPool::new(shared.opts.effective_buffer_memory());
    let (block_tx, block_rx) = async_channel::bounded(64);
    let mut tasks = JoinSet::new();
    tasks.spawn(control_reader(
        shared.clone(),
        FrameReader::new(ctl_r, &peer),
        ctl_tx.clone(),
    ));
    tasks.spawn(finisher(shared.clone(), ctl_tx.clone()));
    for (stream, mac) in Transport::data_streams(transport.data, transport.data_mac) {
        let sh = shared.clone();
        tasks.spawn(crate::sink::data_reader(
            peer.clone(),
            move || sh.finished_sent.load(SeqCst),
            FrameReader::new(stream, &peer).with_mac(mac),
            pool.clone(),
            block_tx.clone(),
        ));
    }
    drop(block_tx);
    for _ in 0..shared.opts.writers.max(OBJECT_WRITERS) {
        tasks.spawn(upload::writer(
            shared.clone(),
            block_rx.clone(),
            ctl_tx.clone(),
        ));
    }
    drop(block_rx);
    run_tasks(tasks, ctl_tx, ctl_writer, watch).await?;
    Ok(progress.report())
}

async fn control_reader(
    shared: Arc<ObjectShared>,
    mut r: FrameReader<tokio::io::ReadHalf<crate::BoxStream>>,
    ctl: mpsc::Sender<Frame>,
) -> Result<(), EngineError> {
    let unexpected = |what: String| EngineError::unexpected(&shared.peer, what);
    loop {
        let finished = &shared.finished_sent;
        let Some(frame) = crate::sink::next_control(&mut r, finished, &shared.peer).await? else {
            return Ok(());
        };
        match frame {
            Frame::Entries(batch) => {
                if shared.end_of_entries.load(SeqCst) {
                    return Err(unexpected("entries after the end of entries".into()));
                }
                if let Some(tops) = &shared.tops {
                    tops.check(&shared.peer, &batch)?;
                }
                let (items, follow) = plan::plan_batch(&shared, batch, &ctl).await?;
                for frame in crate::sink::plan_frames(items) {
                    if ctl.send(frame).await.is_err() {
                        return Ok(());
                    }
                }
                for f in follow {
                    let _ = ctl.send(f).await;
                }
                shared.changed.notify_one();
            }
            Frame::FileError { file, message } => {
                let up = shared.take(file);
                let frame = shared.failure(file, message);
                match up {
                    Some(up) => {
                        up.abandon(&shared).await;
                        shared.settle(&ctl, frame).await;
                    }
                    None => {
                        let _ = ctl.send(frame).await;
                    }
                }
            }
            Frame::Abandon { file } => {
                // A source file that changed while being read, sent again under a new
                // id (`--retry-changed`): its upload goes, without a failure.
                if let Some(up) = shared.take(file) {
                    up.abandon(&shared).await;
                    let done = Frame::FileDone {
                        file,
                        error: None,
                        digest: None,
                    };
                    shared.settle(&ctl, done).await;
                }
            }
            Frame::EndOfEntries => {
                shared.end_of_entries.store(true, SeqCst);
                shared.changed.notify_one();
            }
            Frame::Error(e) => return Err(EngineError::from_peer(&shared.peer, e)),
            other => return Err(unexpected(format!("unexpected frame {other:?}"))),
        }
    }
}

/// Waits until every file is settled, then sends the summary.
async fn finisher(shared: Arc<ObjectShared>, ctl: mpsc::Sender<Frame>) -> Result<(), EngineError> {
    loop {
        let changed = shared.changed.notified();
        if shared.end_of_entries.load(SeqCst) && shared.pending.load(SeqCst) == 0 {
            break;
        }
        changed.await;
    }
    for f in mirror::delete_extras(&shared).await {
        let _ = ctl.send(f).await;
    }
    shared.finished_sent.store(true, SeqCst);
    let _ = ctl.send(Frame::Finished(shared.progress.summary())).await;
    Ok(())
}
