//! Block ranges of one large file written by several nodes into a server
//! ([`Op::Range`]): each worker of a transfer service reads its range of the source
//! where it is and sends it to a `hetch serve` node of the destination, which writes it
//! into the one shared part file (the POSIX store's ranges, see
//! `hetch_engine::store::split`); once every range is recorded, one worker asks a node
//! to commit the file, which is checked as a whole from the ranges' records and
//! renamed once. The destination nodes share the storage, so any node takes any range.
//!
//! A range session has no data streams: the server answers the request with a
//! [`Frame::Plan`] of the blocks it lacks (an earlier attempt's recorded blocks that
//! read back intact are kept), the client sends them as [`Frame::Data`] on the control
//! connection, each with the digest it computed as it read the block, then
//! [`Frame::EndOfEntries`]. The server checks each block's digest on arrival, puts it,
//! reads it back and checks it again where `--verify written` asks, records it, and
//! answers [`Frame::Finished`] once the range is durable and recorded.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail};
use hetch_engine::ranges::{
    self, RangeControl, RangeOutcome, RangeSink, RangeSource, RangeWriter, Taken,
};
use hetch_engine::store::posix::PosixStore;
use hetch_engine::store::{FileSpec, Place, Size, Store};
use hetch_engine::wire::{FrameReader, FrameWriter, Incoming};
use hetch_engine::{
    BoxStream, BufferPool, DestSpec, EngineError, Options, Progress, Report, Verify,
};
use hetch_integrity::{block_len, Algorithm, Digest};
use hetch_proto::{
    DataHeader, Frame, PlanAction, PlanItem, RangeRequest, RangeStep, SessionRequest, Summary,
};
use hetch_storage::part::FinalMeta;
use hetch_storage::StorageError;
use tokio::sync::mpsc;

use crate::client::{open_control, ClientConfig};

/// How long the client waits for the server's next frame (its answers follow a
/// read-back or a durability barrier), and the server for the client's when it has no
/// stall timeout of its own.
const RANGE_SILENCE: Duration = Duration::from_secs(120);

/// A client sends a keep-alive after this long without a block, as peers of other
/// sessions do (a stall timeout is at least 2 s), while its rate share holds blocks
/// back, so that the server can tell a client that went silent (a worker paused,
/// a process stopped) within its stall timeout: until then that client's session
/// holds the file's part file, and no commit of the file can go through.
const RANGE_KEEPALIVE: Duration = Duration::from_secs(1);

/// Blocks a client holds queued for its connection while it reads the next.
const QUEUED_BLOCKS: usize = 4;

/// Rounds of blocks a client sends at most in one range session: the planned ones,
/// then those the server asks for again. The server gives up on a block after its
/// own retry limit; this bounds what a server that keeps asking can make it do.
const MAX_ROUNDS: u32 = 16;

// ---------------------------------------------------------------------------------
// Server side.

/// What the server needs to serve one range session.
pub(crate) struct RangeRun {
    /// The client's control connection.
    pub control: BoxStream,
    /// The client, for messages.
    pub peer: String,
    /// The file and step.
    pub req: RangeRequest,
    /// The session's block size.
    pub block_size: u64,
    /// The session's engine settings (its check and special-mode policy).
    pub opts: Options,
    /// The destination directory, confined to the root, and the root.
    pub dest: PathBuf,
    /// The server's root.
    pub root: PathBuf,
    /// The welcome to send once the file is open.
    pub welcome: Frame,
    /// What the range moves, as it goes (read by the server's metrics too).
    pub progress: Arc<Progress>,
}

/// The file of a range session, opened in the store below the server's root.
struct Target {
    store: Arc<dyn Store>,
    place: Place,
    spec: FileSpec,
}

/// Serves one range session: writes the client's blocks, or commits the file.
pub(crate) async fn serve(run: RangeRun) -> Result<Report, EngineError> {
    let RangeRun {
        mut control,
        peer,
        req,
        block_size,
        opts,
        dest,
        root,
        welcome,
        progress,
    } = run;
    let target = {
        let req = req.clone();
        let verify = opts.verify;
        let preserve = opts.preserve_special_modes;
        blocking(move || open_target(&req, dest, root, block_size, verify, preserve)).await
    };
    let served_root = opts.served_root.clone();
    let target = match target {
        Ok(t) => t,
        Err(e) => return Err(refuse(&mut control, &peer, e, served_root.as_deref()).await),
    };
    match req.step {
        RangeStep::Blocks { first, end } => {
            if end > target.spec.blocks() {
                let e = EngineError::Unexpected {
                    peer: peer.clone(),
                    what: format!(
                        "blocks {first}..{end} of a file of {}",
                        target.spec.blocks()
                    ),
                };
                return Err(refuse(&mut control, &peer, e, served_root.as_deref()).await);
            }
            let (verify, retries) = (opts.verify, opts.max_retries);
            let opened = blocking(move || {
                let w = RangeWriter::open(
                    &*target.store,
                    &target.place,
                    &target.spec,
                    first..end,
                    verify,
                    retries,
                )?;
                Ok::<_, StorageError>((w, target))
            })
            .await;
            let (writer, target) = match opened {
                Ok(o) => o,
                Err(e) => return Err(refuse(&mut control, &peer, e, served_root.as_deref()).await),
            };
            hetch_engine::wire::write_frame_exact(&mut control, &peer, false, &welcome).await?;
            let mut session = ServedRange {
                peer: peer.clone(),
                silence: opts.stall_timeout.unwrap_or(RANGE_SILENCE),
                target,
                writer: Some(writer),
                progress,
            };
            let (rd, wr) = tokio::io::split(control);
            let mut w = FrameWriter::new(wr, &peer);
            let result = session.receive(rd, &mut w).await;
            if let Some(writer) = session.writer.take() {
                writer.keep_for_retry();
            }
            answer(&mut w, result, served_root.as_deref()).await
        }
        RangeStep::Commit { parent } => {
            let parent = match commit_parent(&req, &target.place, parent, &opts) {
                Ok(p) => p,
                Err(e) => return Err(refuse(&mut control, &peer, e, served_root.as_deref()).await),
            };
            hetch_engine::wire::write_frame_exact(&mut control, &peer, false, &welcome).await?;
            let fsync = true;
            let result = blocking(move || {
                target
                    .store
                    .commit_ranges(&target.place, &target.spec, fsync)?;
                if let Some((dir, meta)) = parent {
                    target.store.finish_dir(&dir, meta)?;
                }
                Ok::<_, StorageError>(Summary {
                    files: 1,
                    ..Summary::default()
                })
            })
            .await;
            let mut w = FrameWriter::new(control, &peer);
            answer(&mut w, result, served_root.as_deref()).await
        }
    }
}

/// Sends the session's outcome to the client: its summary, or the error.
async fn answer<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut FrameWriter<W>,
    result: Result<Summary, EngineError>,
    served_root: Option<&std::path::Path>,
) -> Result<Report, EngineError> {
    match result {
        Ok(summary) => {
            w.send(&Frame::Finished(summary)).await?;
            w.flush().await?;
            Ok(Report {
                summary,
                ..Report::default()
            })
        }
        Err(e) => {
            let _ = w.send(&error_frame(&e, served_root)).await;
            let _ = w.shutdown().await;
            Err(e)
        }
    }
}

/// `e` as the client is told it: paths under the server's root named relative to it
/// (the client, a job's worker, passes it on to the job's owner).
fn error_frame(e: &EngineError, served_root: Option<&std::path::Path>) -> Frame {
    let mut frame = Frame::Error(e.to_frame());
    hetch_engine::below_served_root(&mut frame, served_root);
    frame
}

/// Tells the client why its range session cannot start, and returns that error.
async fn refuse(
    control: &mut BoxStream,
    peer: &str,
    e: EngineError,
    served_root: Option<&std::path::Path>,
) -> EngineError {
    let frame = error_frame(&e, served_root);
    let _ = hetch_engine::wire::write_frame_exact(control, peer, false, &frame).await;
    use tokio::io::AsyncWriteExt;
    let _ = control.shutdown().await;
    e
}

/// Runs `f` on a blocking thread.
async fn blocking<T: Send + 'static, E: Into<EngineError> + Send + 'static>(
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, EngineError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(Into::into),
        Err(e) => Err(EngineError::Storage(StorageError::io(
            Path::new("range"),
            std::io::Error::other(e.to_string()),
        ))),
    }
}

/// The directory a commit gives the mode and mtime `parent` carries (the source's
/// parent directory's), with the mode it gets: the committed file's own parent, as a
/// push would finish it, never the destination's base (the destination itself, or
/// the served root). A file directly in the base has no parent that is a copy, so a
/// commit carrying one is refused: the operator's directory is not the client's to
/// chmod. Special bits as for the file ([`ranges::kept_mode`]).
fn commit_parent(
    req: &RangeRequest,
    place: &Place,
    parent: Option<(u32, i64, u32)>,
    opts: &Options,
) -> Result<Option<(PathBuf, FinalMeta)>, EngineError> {
    let Some((mode, mtime_sec, mtime_nsec)) = parent else {
        return Ok(None);
    };
    // The place's path is validated, relative, of normal components only: a
    // non-empty parent is a directory strictly below the base, on the file's path.
    let Some(dir) = place.rel.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Err(StorageError::Refused {
            path: String::from_utf8_lossy(&req.path).into_owned(),
            reason: "the commit carries a parent directory's mode, but the file lies \
                     directly in the destination, whose mode is not the client's to set",
        }
        .into());
    };
    let meta = FinalMeta {
        mode: ranges::kept_mode(mode, opts.preserve_special_modes),
        mtime_sec,
        mtime_nsec,
    };
    Ok(Some((dir.to_path_buf(), meta)))
}

/// Resolves the request's file below `dest` (inside `root`) as a push into `dest/`
/// would place it, with the parent directories it needs (made as another writer of
/// the same tree may make them at the same moment).
fn open_target(
    req: &RangeRequest,
    dest: PathBuf,
    root: PathBuf,
    block_size: u64,
    verify: Verify,
    preserve_special_modes: bool,
) -> Result<Target, EngineError> {
    let store: Arc<dyn Store> = Arc::new(PosixStore::new(DestSpec {
        path: dest,
        sources: req.sources,
        trailing_slash: true,
        confine_to: Some(root),
        as_operand: false,
    }));
    store.resolve(&req.top, true)?;
    let wire = &req.path;
    for (i, _) in wire.iter().enumerate().filter(|(_, b)| **b == b'/') {
        let parent = store.place(&wire[..i])?;
        if store.stat(&parent.rel)?.is_none() {
            store.make_shared_dir(&parent.rel)?;
        }
    }
    let place = store.place(wire)?;
    if Size::too_large(req.size) {
        return Err(StorageError::Refused {
            path: place.shown.display().to_string(),
            reason: "announced size is beyond the largest possible file",
        }
        .into());
    }
    let spec = FileSpec {
        size: Size::Known(req.size),
        block_size,
        meta: FinalMeta {
            // As a push would: special bits only where both ends asked for them.
            mode: ranges::kept_mode(req.mode, preserve_special_modes),
            mtime_sec: req.mtime_sec,
            mtime_nsec: req.mtime_nsec,
        },
        checksum: Algorithm::Blake3,
        read_back_follows: verify == Verify::Written,
    };
    Ok(Target { store, place, spec })
}

/// A range session being received.
struct ServedRange {
    peer: String,
    /// How long the client may say nothing: the server's stall timeout.
    silence: Duration,
    target: Target,
    /// Taken while a block is written on a blocking thread, and when the range ends.
    writer: Option<RangeWriter>,
    progress: Arc<Progress>,
}

impl ServedRange {
    fn unexpected(&self, what: String) -> EngineError {
        EngineError::Unexpected {
            peer: self.peer.clone(),
            what,
        }
    }

    /// Runs `f` with the writer on a blocking thread.
    async fn with_writer<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut RangeWriter) -> Result<T, StorageError> + Send + 'static,
    ) -> Result<T, EngineError> {
        let mut writer = self.writer.take().expect("open writer");
        let (writer, out) = blocking(move || {
            let out = f(&mut writer);
            Ok::<_, StorageError>((writer, out))
        })
        .await?;
        self.writer = Some(writer);
        Ok(out?)
    }

    /// Plans the writer's blocks, takes them from `rd` (asking again for those that
    /// fail their checks, after each [`Frame::EndOfEntries`]) and makes them durable.
    async fn receive<R, W>(&mut self, rd: R, w: &mut FrameWriter<W>) -> Result<Summary, EngineError>
    where
        R: tokio::io::AsyncRead + Unpin,
        W: tokio::io::AsyncWrite + Unpin,
    {
        // What an earlier attempt recorded and still reads back intact is kept.
        let bs = self.target.spec.block_size;
        let kept = self.with_writer(RangeWriter::keep_intact).await?;
        let mut ask = self.writer.as_ref().expect("open writer").missing();
        let pool = BufferPool::new(2 * bs as usize);
        let zeros: Arc<[u8]> = vec![0u8; bs as usize].into();
        let mut r = FrameReader::new(rd, &self.peer);
        let mut bytes = 0;
        loop {
            w.send(&Frame::Plan(vec![PlanItem {
                id: 0,
                action: PlanAction::Send(std::mem::take(&mut ask)),
            }]))
            .await?;
            w.flush().await?;
            let mut again = BTreeSet::new();
            while let Some((h, buf)) = self.next_block(&mut r, &pool).await? {
                let len = buf.as_ref().map_or(h.raw_len as usize, |b| b.len());
                let writer = self.writer.as_ref().expect("open writer");
                if h.file != 0 {
                    return Err(self.unexpected(format!("block {} not asked for", h.block)));
                }
                if let Err(refused) = writer.admit(h.block, len as u64) {
                    return Err(self.unexpected(refused.to_string()));
                }
                let zeros = zeros.clone();
                let taken = self
                    .with_writer(move |writer| {
                        let data = buf.as_deref().map_or(&zeros[..len], |b| b);
                        match writer.arrived_intact(h.block, data, &h.digest)? {
                            true => writer.take(h.block, data, &h.digest),
                            false => Ok(Taken::Again),
                        }
                    })
                    .await?;
                match taken {
                    Taken::Done => {
                        bytes += len as u64;
                        Progress::add(&self.progress.bytes, len as u64);
                    }
                    Taken::Again => {
                        Progress::add(&self.progress.retried_blocks, 1);
                        again.insert(h.block);
                    }
                }
            }
            if again.is_empty() {
                break;
            }
            ask = runs(&again);
        }
        let writer = self.writer.as_ref().expect("open writer");
        if let Some(&(missing, _)) = writer.missing().first() {
            return Err(self.unexpected(format!("the range ended without block {missing}")));
        }
        let meta = self.target.spec.meta;
        self.with_writer(move |writer| writer.finish(meta)).await?;
        Ok(Summary {
            bytes,
            reverified: kept,
            ..Summary::default()
        })
    }

    /// The client's next block, or `None` at its [`Frame::EndOfEntries`].
    async fn next_block<R: tokio::io::AsyncRead + Unpin>(
        &self,
        r: &mut FrameReader<R>,
        pool: &BufferPool,
    ) -> Result<Option<(DataHeader, Option<hetch_engine::PooledBuf>)>, EngineError> {
        let next = loop {
            let next = tokio::time::timeout(self.silence, r.next_or_keepalive(Some(pool)))
                .await
                .map_err(|_| EngineError::Stalled {
                    peer: self.peer.clone(),
                    secs: self.silence.as_secs(),
                })??;
            if !matches!(next, Some(Incoming::Frame(Frame::KeepAlive))) {
                break next;
            }
        };
        match next {
            // A range asks for whole blocks only (it repairs none).
            Some(Incoming::Data(h, _)) if h.patch.is_some() => Err(self.unexpected(format!(
                "a patch of block {} in a range, which asked for none",
                h.block
            ))),
            Some(Incoming::Data(h, buf)) => Ok(Some((h, buf))),
            Some(Incoming::Frame(Frame::EndOfEntries)) => Ok(None),
            Some(Incoming::Frame(Frame::Error(e))) => Err(EngineError::Peer {
                peer: self.peer.clone(),
                code: e.code,
                message: hetch_proto::escape_text(&e.message),
            }),
            Some(Incoming::Frame(f)) => {
                Err(self.unexpected(format!("{} frame in a range", f.kind().name())))
            }
            None => Err(EngineError::ClosedEarly {
                peer: self.peer.clone(),
            }),
        }
    }
}

/// `set` as half-open runs of consecutive numbers.
fn runs(set: &BTreeSet<u64>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &i in set {
        match out.last_mut() {
            Some(last) if last.1 == i => last.1 = i + 1,
            _ => out.push((i, i + 1)),
        }
    }
    out
}

// ---------------------------------------------------------------------------------
// Client side.

/// A range's file as the client sends it: the request fields that describe the
/// source file, for [`range_request`].
pub fn range_request(
    dest: &[u8],
    sources: u32,
    top: &[u8],
    path: &[u8],
    src: &RangeSource,
    step: RangeStep,
) -> RangeRequest {
    let meta = src.meta();
    RangeRequest {
        dest: dest.to_vec(),
        sources,
        top: top.to_vec(),
        path: path.to_vec(),
        size: src.size(),
        mode: meta.mode,
        mtime_sec: meta.mtime_sec,
        mtime_nsec: meta.mtime_nsec,
        step,
    }
}

/// What paces a range sent to a server (owned, to travel to a blocking thread).
#[derive(Clone, Default)]
pub struct RangePacing {
    /// Once raised, the range stops between blocks.
    pub stop: Option<hetch_engine::StopSignal>,
    /// Each block read passes through it first.
    pub rate: Option<Arc<hetch_engine::RateLimiter>>,
    /// Counts the bytes sent.
    pub progress: Option<Arc<Progress>>,
}

/// Sends blocks `first..end` (the request's step) of `src` to the server at `host`,
/// which writes them into the file's shared part file (`req.op` is an [`Op::Range`]
/// with [`RangeStep::Blocks`]). Blocks the server holds from an earlier attempt are
/// not sent again.
///
/// [`Op::Range`]: hetch_proto::Op::Range
pub async fn push_range(
    host: &str,
    cfg: &ClientConfig,
    req: SessionRequest,
    src: Arc<RangeSource>,
    pacing: RangePacing,
) -> anyhow::Result<RangeOutcome> {
    let (blocks, shown) = match &req.op {
        hetch_proto::Op::Range(r) => match r.step {
            RangeStep::Blocks { first, end } => (
                first..end,
                PathBuf::from(format!("{host}:{}", String::from_utf8_lossy(&r.path))),
            ),
            RangeStep::Commit { .. } => bail!("push_range of a commit"),
        },
        _ => bail!("push_range of another op"),
    };
    let block_size = u64::from(req.block_size);
    let control = open_control(host, cfg, req).await?;
    let (rd, wr) = tokio::io::split(control);
    let mut r = FrameReader::new(rd, host);
    let mut needed = match next_frame(&mut r, host).await? {
        Frame::Plan(items) => planned(host, &items, &blocks)?,
        other => return Err(answer_error(host, other)),
    };
    let (tx, mut rx) = mpsc::channel::<Frame>(QUEUED_BLOCKS);
    let peer = host.to_string();
    let sender = tokio::spawn(async move {
        let mut w = FrameWriter::new(wr, &peer);
        loop {
            let f = match tokio::time::timeout(RANGE_KEEPALIVE, rx.recv()).await {
                Ok(Some(f)) => f,
                Ok(None) => break,
                // Nothing to send for a while: said, so that the server does not take
                // this client for gone.
                Err(_) => Frame::KeepAlive,
            };
            match &f {
                Frame::Data(h, data) => w.send_data(h, data).await?,
                other => w.send(other).await?,
            }
            if rx.is_empty() {
                w.flush().await?;
            }
        }
        Ok::<_, EngineError>(())
    });
    // Rounds: the planned blocks, then those the server asks for again (they failed
    // a check there), until it answers with its summary or an error.
    let mut total = RangeOutcome::default();
    let mut tx = Some(tx);
    let mut round = 0;
    let answer = loop {
        let (src, pacing, shown, range) =
            (src.clone(), pacing.clone(), shown.clone(), blocks.clone());
        let sink_tx = tx.take().expect("the sender's queue");
        let (read, back) = tokio::task::spawn_blocking(move || {
            let mut sink = RemoteRange {
                needed,
                tx: sink_tx,
                size: src.size(),
                block_size,
            };
            let control = RangeControl {
                stop: pacing.stop.as_ref(),
                rate: pacing.rate.as_deref(),
                progress: pacing.progress.as_deref(),
                ..Default::default()
            };
            let read = ranges::read_range(&src, block_size, range, control, &mut sink, &shown)
                .and_then(|done| sink.send(Frame::EndOfEntries).map(|()| done));
            (read, sink.tx)
        })
        .await
        .map_err(|e| anyhow!("range task: {e}"))?;
        match read {
            Ok(done) => {
                total.bytes += done.bytes;
                if round == 0 {
                    total.kept = done.kept; // later rounds send only what is asked
                }
            }
            Err(e) => break Err(e),
        }
        tx = Some(back);
        round += 1;
        match next_frame(&mut r, host).await {
            Ok(Frame::Plan(_)) if round >= MAX_ROUNDS => {
                bail!("{host}: asked for blocks again after {MAX_ROUNDS} rounds")
            }
            Ok(Frame::Plan(items)) => needed = planned(host, &items, &blocks)?,
            other => break Ok(other),
        }
    };
    drop(tx);
    let sent = sender.await.map_err(|e| anyhow!("range sender: {e}"))?;
    match (answer, sent) {
        // The server took every block: a keep-alive that found the connection closed
        // after its answer changes nothing.
        (Ok(Ok(Frame::Finished(_))), _) => Ok(total),
        (Ok(Ok(Frame::Error(e))), _) => Err(peer_error(host, e)),
        (Ok(Ok(other)), Ok(())) => Err(answer_error(host, other)),
        (Ok(Err(e)), Ok(())) => Err(e),
        (read, sent) => {
            // Reading or sending failed: the server's answer (why it stopped taking
            // blocks, which is what failed sending shows up as) comes first.
            let answer = tokio::time::timeout(Duration::from_secs(5), r.next_control()).await;
            if let Ok(Ok(Some(Frame::Error(e)))) = answer {
                return Err(peer_error(host, e));
            }
            if let Err(e) = read {
                return Err(e.into());
            }
            sent?;
            Err(anyhow!("{host}: unexpected answer"))
        }
    }
}

/// Asks the server at `host` to commit the file of `req` (an [`Op::Range`] with
/// [`RangeStep::Commit`]): its ranges' records must cover it.
///
/// [`Op::Range`]: hetch_proto::Op::Range
pub async fn commit_ranges(
    host: &str,
    cfg: &ClientConfig,
    req: SessionRequest,
) -> anyhow::Result<()> {
    let control = open_control(host, cfg, req).await?;
    let mut r = FrameReader::new(control, host);
    match next_frame(&mut r, host).await? {
        Frame::Finished(_) => Ok(()),
        other => Err(answer_error(host, other)),
    }
}

/// The server's next control frame, within [`RANGE_SILENCE`].
async fn next_frame<R: tokio::io::AsyncRead + Unpin>(
    r: &mut FrameReader<R>,
    host: &str,
) -> anyhow::Result<Frame> {
    tokio::time::timeout(RANGE_SILENCE, r.next_control())
        .await
        .map_err(|_| EngineError::Stalled {
            peer: host.to_string(),
            secs: RANGE_SILENCE.as_secs(),
        })??
        .ok_or_else(|| {
            EngineError::ClosedEarly {
                peer: host.to_string(),
            }
            .into()
        })
}

fn peer_error(host: &str, e: hetch_proto::ErrorFrame) -> anyhow::Error {
    EngineError::Peer {
        peer: host.to_string(),
        code: e.code,
        message: hetch_proto::escape_text(&e.message),
    }
    .into()
}

fn answer_error(host: &str, f: Frame) -> anyhow::Error {
    match f {
        Frame::Error(e) => peer_error(host, e),
        other => anyhow!(
            "{host}: unexpected {} frame in a range",
            other.kind().name()
        ),
    }
}

/// The blocks a server's plan asks for, which must lie in `blocks`.
fn planned(host: &str, items: &[PlanItem], blocks: &Range<u64>) -> anyhow::Result<BTreeSet<u64>> {
    let mut needed = BTreeSet::new();
    for item in items {
        let PlanAction::Send(runs) = &item.action else {
            continue;
        };
        for &(a, b) in runs {
            if item.id != 0 || a >= b || a < blocks.start || b > blocks.end {
                bail!("{host}: asked for blocks {a}..{b} of a range {blocks:?}");
            }
            needed.extend(a..b);
        }
    }
    Ok(needed)
}

/// The client's end of a range: sends the blocks the server asked for.
struct RemoteRange {
    needed: BTreeSet<u64>,
    tx: mpsc::Sender<Frame>,
    size: u64,
    block_size: u64,
}

impl RemoteRange {
    fn send(&self, f: Frame) -> Result<(), StorageError> {
        self.tx.blocking_send(f).map_err(|_| {
            StorageError::io(
                Path::new("range"),
                std::io::Error::other("the connection to the server closed"),
            )
        })
    }
}

impl RangeSink for RemoteRange {
    fn keeps(&mut self, i: u64, _len: usize) -> Result<bool, StorageError> {
        Ok(!self.needed.contains(&i))
    }

    fn take(&mut self, i: u64, data: &[u8], digest: &Digest) -> Result<Taken, StorageError> {
        debug_assert_eq!(data.len() as u64, block_len(self.size, self.block_size, i));
        let zero = ranges::is_zero(data);
        let h = DataHeader {
            file: 0,
            block: i,
            digest: *digest,
            zero,
            compressed: false,
            raw_len: if zero { data.len() as u32 } else { 0 },
            // Ranges land in one file shared by their writers, never holed there
            // (see `RangeFile::put_zeros`): no use telling of holes.
            sparse: false,
            patch: None,
        };
        self.send(Frame::Data(
            h,
            if zero { Vec::new() } else { data.to_vec() },
        ))
        .map(|()| Taken::Done)
    }
}

#[cfg(test)]
mod tests {
    //! A hostile client of a range session, speaking frames the real client never
    //! sends: each is refused with one line, and nothing gets a final name.

    use super::*;
    use hetch_engine::wire::FrameWriter;
    use hetch_integrity::block_digest;

    const BS: u64 = 16 << 10;

    /// A server's side of a range of blocks `0..4` of a 4-block file below `t`,
    /// receiving what `frames` sends; returns the outcome and the server's answers.
    async fn serve_frames(
        t: &Path,
        frames: Vec<Frame>,
    ) -> (Result<Summary, EngineError>, Vec<Frame>) {
        let req = RangeRequest {
            dest: b"copy".to_vec(),
            sources: 1,
            top: b"f".to_vec(),
            path: b"f".to_vec(),
            size: 4 * BS,
            mode: 0o644,
            mtime_sec: 1_600_000_000,
            mtime_nsec: 0,
            step: RangeStep::Blocks { first: 0, end: 4 },
        };
        let root = t.to_path_buf();
        let target =
            open_target(&req, root.join("copy"), root, BS, Verify::Written, false).unwrap();
        let writer = RangeWriter::open(
            &*target.store,
            &target.place,
            &target.spec,
            0..4,
            Verify::Written,
            1,
        )
        .unwrap();
        let mut served = ServedRange {
            peer: "test".into(),
            silence: RANGE_SILENCE,
            target,
            writer: Some(writer),
            progress: Arc::default(),
        };
        let (client, server) = tokio::io::duplex(1 << 20);
        let (srd, swr) = tokio::io::split(server);
        let (crd, cwr) = tokio::io::split(client);
        let sending = tokio::spawn(async move {
            let mut w = FrameWriter::new(cwr, "server");
            for f in frames {
                match &f {
                    Frame::Data(h, d) => w.send_data(h, d).await?,
                    other => w.send(other).await?,
                }
            }
            w.flush().await
        });
        let mut w = FrameWriter::new(swr, "client");
        let result = served.receive(srd, &mut w).await;
        let _ = w.flush().await;
        drop(w);
        let _ = sending.await;
        let mut r = FrameReader::new(crd, "server");
        let mut answers = Vec::new();
        while let Ok(Ok(Some(f))) =
            tokio::time::timeout(Duration::from_millis(200), r.next_control()).await
        {
            answers.push(f);
        }
        (result, answers)
    }

    fn block(i: u64, data: &[u8]) -> Frame {
        let digest = block_digest(4 * BS, BS, i, data);
        let h = DataHeader {
            file: 0,
            block: i,
            digest,
            zero: false,
            compressed: false,
            raw_len: 0,
            sparse: false,
            patch: None,
        };
        Frame::Data(h, data.to_vec())
    }

    fn fill(i: u64) -> Vec<u8> {
        vec![i as u8 + 1; BS as usize]
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_client_sends_the_plans_blocks_and_the_range_is_recorded() {
        let t = tempfile::tempdir().unwrap();
        let mut frames: Vec<Frame> = (0..4).map(|i| block(i, &fill(i))).collect();
        frames.push(Frame::EndOfEntries);
        let (result, answers) = serve_frames(t.path(), frames).await;
        assert_eq!(result.unwrap().bytes, 4 * BS);
        assert!(
            matches!(answers.first(), Some(Frame::Plan(_))),
            "{answers:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_block_damaged_on_the_way_is_asked_for_again_not_the_whole_range() {
        let t = tempfile::tempdir().unwrap();
        let Frame::Data(h, mut bad) = block(2, &fill(2)) else {
            unreachable!()
        };
        bad[9] ^= 1;
        let frames = vec![
            block(0, &fill(0)),
            block(1, &fill(1)),
            Frame::Data(h, bad),
            block(3, &fill(3)),
            Frame::EndOfEntries,
            block(2, &fill(2)),
            Frame::EndOfEntries,
        ];
        let (result, answers) = serve_frames(t.path(), frames).await;
        assert_eq!(result.unwrap().bytes, 4 * BS);
        let plans: Vec<_> = answers
            .iter()
            .filter_map(|f| match f {
                Frame::Plan(items) => Some(items[0].action.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            plans,
            vec![
                PlanAction::Send(vec![(0, 4)]),
                PlanAction::Send(vec![(2, 3)])
            ]
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn crafted_blocks_are_refused_with_one_line() {
        let damaged = {
            let Frame::Data(h, mut d) = block(1, &fill(1)) else {
                unreachable!()
            };
            d[7] ^= 1;
            Frame::Data(h, d)
        };
        let cases: Vec<(&str, Vec<Frame>)> = vec![
            (
                "not asked for",
                vec![block(0, &fill(0)), block(0, &fill(0))],
            ),
            (
                "block 1 arrived damaged 2 times",
                vec![
                    damaged.clone(),
                    Frame::EndOfEntries,
                    damaged.clone(),
                    Frame::EndOfEntries,
                ],
            ),
            ("expected 16384", {
                let Frame::Data(h, mut d) = block(2, &fill(2)) else {
                    unreachable!()
                };
                d.truncate(100);
                vec![Frame::Data(h, d)]
            }),
            (
                "without block 1",
                vec![block(0, &fill(0)), Frame::EndOfEntries],
            ),
            (
                "not asked for",
                vec![Frame::Data(
                    DataHeader {
                        file: 9,
                        block: 0,
                        digest: [0; 32],
                        zero: true,
                        compressed: false,
                        raw_len: BS as u32,
                        sparse: false,
                        patch: None,
                    },
                    Vec::new(),
                )],
            ),
            ("keep_alive", vec![Frame::Abandon { file: 0 }]),
        ];
        for (want, frames) in cases {
            let t = tempfile::tempdir().unwrap();
            let (result, _) = serve_frames(t.path(), frames).await;
            let e = result.unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
            assert!(
                e.contains(want) || want == "keep_alive" && e.contains("frame in a range"),
                "{want}: {e}"
            );
            let names: Vec<_> = std::fs::read_dir(t.path().join("copy"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert!(
                !names.iter().any(|n| n == "f"),
                "{want}: a final name: {names:?}"
            );
        }
    }
}
