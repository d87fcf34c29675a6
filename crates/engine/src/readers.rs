//! The source's readers: they take jobs (blocks of a file to send), read and hash
//! the blocks on blocking threads, and queue them for the data streams.
//!
//! A job of one block (a small file, or the last block of a larger one) is read
//! together with the other one-block jobs waiting at that moment, in one trip to a
//! blocking thread that opens, reads and hashes them all: on small files the trips
//! themselves (waking a blocking thread, then the task awaiting it) cost more than
//! reading the file.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hetch_integrity::{self as integrity, Digest};
use hetch_proto::Frame;
use hetch_storage::holes::{self, Extent};
use hetch_storage::walk::Identity;
use tokio::sync::mpsc;

use crate::compress::Backoff;
use crate::error::EngineError;
use crate::pool::PooledBuf;
use crate::source::{
    keep_open, open_source, pack, queue_block, read_origin, wants_pack, Job, OutBlock, ReadBlock,
    Shared, BLOCKS_PER_TURN,
};
use crate::store::Size;

/// Most one-block jobs read in one trip.
const SMALL_BATCH: usize = 32;
/// ... and most bytes: what a batch holds in pool buffers before any is sent.
const SMALL_BATCH_BYTES: u64 = 1 << 20;

/// Reads jobs until the job queue closes.
pub(crate) async fn reader(
    shared: Arc<Shared>,
    data: async_channel::Sender<OutBlock>,
    ctl: mpsc::Sender<Frame>,
) -> Result<(), EngineError> {
    let mut backoff = Backoff::default();
    let mut next: Option<Job> = None;
    loop {
        let job = match next.take() {
            Some(j) => j,
            None => match shared.jobs.1.recv().await {
                Ok(j) => j,
                Err(_) => return Ok(()),
            },
        };
        let going = if job.end - job.start == 1 {
            let mut batch = vec![job];
            while batch.len() < SMALL_BATCH {
                match shared.jobs.1.try_recv() {
                    Ok(j) if j.end - j.start == 1 => batch.push(j),
                    Ok(j) => {
                        next = Some(j);
                        break;
                    }
                    Err(_) => break,
                }
            }
            read_small(&shared, batch, &data, &ctl, &mut backoff).await
        } else {
            read_turn(&shared, job, &data, &ctl, &mut backoff).await
        };
        if !going {
            return Ok(());
        }
    }
}

/// What the source knows of a job's file.
struct Target {
    abs: PathBuf,
    size: Size,
    identity: Option<Identity>,
    /// Blocks are probed for holes before they are read (see `Announced::sparse`).
    sparse: bool,
    kept: Option<Arc<File>>,
}

/// The file of `job`, unless it finished or failed meanwhile. A file read from an
/// origin (an object store) is read there at once, and is `None` here too.
async fn target(
    shared: &Arc<Shared>,
    job: &Job,
    data: &async_channel::Sender<OutBlock>,
    ctl: &mpsc::Sender<Frame>,
    backoff: &mut Backoff,
) -> Result<Option<Target>, ()> {
    let (t, origin) = {
        let ann = shared.announced.lock().expect("announced lock");
        let Some(a) = ann.get(&job.file) else {
            return Ok(None);
        };
        let t = Target {
            abs: a.abs.clone(),
            size: a.size,
            identity: a.identity,
            sparse: a.sparse,
            kept: a.handle.as_ref().map(|h| h.file.clone()),
        };
        (t, a.origin.clone())
    };
    match origin {
        Some(o) => match read_origin(shared, job, t.size, &*o, data, ctl, backoff).await {
            true => Ok(None),
            false => Err(()),
        },
        None => Ok(Some(t)),
    }
}

/// Reads one turn (up to [`BLOCKS_PER_TURN`] blocks) of `job`, queueing the rest of
/// the job for the next reader. False when the session is over.
async fn read_turn(
    shared: &Arc<Shared>,
    job: Job,
    data: &async_channel::Sender<OutBlock>,
    ctl: &mpsc::Sender<Frame>,
    backoff: &mut Backoff,
) -> bool {
    let bs = shared.opts.block_size;
    let job_end = job.end;
    let turn_end = job.end.min(job.start + BLOCKS_PER_TURN);
    if turn_end < job.end {
        let rest = Job {
            start: turn_end,
            repair: job.repair.clone(),
            ..job
        };
        let _ = shared.jobs.0.send(rest).await;
    }
    let job = Job {
        end: turn_end,
        ..job
    };
    let Ok(t) = target(shared, &job, data, ctl, backoff).await else {
        return false;
    };
    let Some(t) = t else { return true };
    let opened = {
        let abs = t.abs.clone();
        let kept = t.kept.clone();
        let size = t.size;
        // Ask for this turn's blocks and the next turn's at once, so that the disk
        // works ahead while blocks are hashed and sent (one big file is read by all
        // readers, each at its own offset, which defeats ordinary readahead).
        let ahead = (
            job.start * bs,
            (turn_end + BLOCKS_PER_TURN).min(job_end) * bs,
        );
        let turn = (job.start * bs, turn_end * bs);
        let sh = shared.clone();
        tokio::task::spawn_blocking(move || {
            let f = match kept {
                Some(f) => f,
                None => Arc::new(open_source(&abs, sh.opts.read_confinement())?),
            };
            let direct = direct_reads(&f, size, bs, turn);
            if direct.is_none() && size.known().is_none_or(|n| n > bs) {
                hetch_storage::meta::advise_willneed(&f, ahead.0, ahead.1 - ahead.0);
            }
            Ok::<_, std::io::Error>((f, direct.map(Arc::new)))
        })
        .await
        .expect("open task panicked")
    };
    let (file, direct) = match opened {
        Ok(f) => f,
        Err(e) => {
            let message = format!("{}: {e}", t.abs.display());
            shared.read_failed(job.file, message, ctl).await;
            return true;
        }
    };
    if t.identity.is_some() {
        keep_open(shared, job.file, &file, turn_end < job_end);
    }
    for index in job.start..job.end {
        let len = t.size.block_len(bs, index);
        let buf = shared.pool.get(len as usize).await;
        let try_pack = wants_pack(shared, data, backoff, job.file);
        let (sh, f, abs) = (shared.clone(), file.clone(), t.abs.clone());
        let direct = direct.clone();
        let (identity, sparse) = (t.identity, t.sparse);
        let read = tokio::task::spawn_blocking(move || {
            read_block(
                &sh,
                (&f, direct.as_deref()),
                &abs,
                t.size.digest_len(),
                index,
                (identity, sparse),
                try_pack,
                buf,
            )
        })
        .await
        .expect("read task panicked");
        match queue_read(shared, &job, &t, index, read, data, ctl, backoff).await {
            Flow::Next => {}
            Flow::FileDone => break,
            Flow::Over => return false,
        }
    }
    true
}

/// Reads a batch of one-block jobs in one trip to a blocking thread: each file is
/// opened (unless kept open), read and hashed there. False when the session is over.
async fn read_small(
    shared: &Arc<Shared>,
    batch: Vec<Job>,
    data: &async_channel::Sender<OutBlock>,
    ctl: &mpsc::Sender<Frame>,
    backoff: &mut Backoff,
) -> bool {
    let bs = shared.opts.block_size;
    let mut work = Vec::with_capacity(batch.len());
    let mut bytes = 0;
    let mut jobs = batch.into_iter();
    for job in jobs.by_ref() {
        let Ok(t) = target(shared, &job, data, ctl, backoff).await else {
            return false;
        };
        let Some(t) = t else { continue };
        let len = t.size.block_len(bs, job.start);
        // The first buffer is waited for; later ones only if free now, so that a
        // batch never waits holding buffers that others need.
        let buf = match work.is_empty() {
            true => shared.pool.get(len as usize).await,
            false => match shared.pool.try_get(len as usize) {
                Some(b) if bytes + len <= SMALL_BATCH_BYTES => b,
                _ => {
                    // Read on its own turn after this batch.
                    let _ = shared.jobs.0.send(job).await;
                    break;
                }
            },
        };
        bytes += len;
        let try_pack = wants_pack(shared, data, backoff, job.file);
        work.push((job, t, buf, try_pack));
    }
    for job in jobs {
        let _ = shared.jobs.0.send(job).await;
    }
    if work.is_empty() {
        return true;
    }
    let sh = shared.clone();
    let done = tokio::task::spawn_blocking(move || read_together(&sh, work))
        .await
        .expect("read task panicked");
    for (job, t, read) in done {
        let read = match read {
            Ok((file, read)) => {
                if t.identity.is_some() {
                    keep_open(shared, job.file, &file, false); // its only block
                }
                read
            }
            Err(e) => {
                let message = format!("{}: {e}", t.abs.display());
                shared.read_failed(job.file, message, ctl).await;
                continue;
            }
        };
        if let Flow::Over = queue_read(shared, &job, &t, job.start, read, data, ctl, backoff).await
        {
            return false;
        }
    }
    true
}

/// A batch of one-block jobs on a blocking thread: every file is opened, then all
/// their reads are submitted together (see [`hetch_storage::uring::read`]), so that a
/// cold batch reaches the device at once instead of one wait per file; then each is
/// hashed and checked.
#[allow(clippy::type_complexity)]
fn read_together(
    sh: &Shared,
    work: Vec<(Job, Target, PooledBuf, bool)>,
) -> Vec<(
    Job,
    Target,
    std::io::Result<(Arc<File>, std::io::Result<Read>)>,
)> {
    use hetch_storage::direct::ALIGN;
    let bs = sh.opts.block_size;
    let mut open = Vec::with_capacity(work.len());
    for (job, t, mut buf, try_pack) in work {
        let opened = match &t.kept {
            Some(f) => Ok(f.clone()),
            None => open_source(&t.abs, sh.opts.read_confinement()).map(Arc::new),
        };
        let opened = opened.map(|f| {
            let len = t.size.known().unwrap_or(0);
            let direct = direct_reads(&f, t.size, bs, (0, len));
            let want = buf.len();
            if direct.is_some() {
                buf.resize(want.div_ceil(ALIGN) * ALIGN); // whole pages, cut after
            }
            let at = job.start * bs;
            let extent = match t.sparse {
                true => holes::probe(&f, at, at + want as u64),
                false => Extent::Data,
            };
            (f, direct, want, extent)
        });
        open.push((job, t, buf, try_pack, opened));
    }
    let results = {
        let mut reads: Vec<hetch_storage::uring::Read<'_>> = Vec::new();
        for (job, _, buf, _, opened) in open.iter_mut() {
            // A block all hole is not read (see `hole_read`).
            if let Ok((f, direct, _, Extent::Data | Extent::Mixed)) = opened {
                reads.push(hetch_storage::uring::Read {
                    file: direct.as_ref().unwrap_or(f),
                    offset: job.start * bs,
                    buf: &mut buf[..],
                });
            }
        }
        hetch_storage::uring::read(&mut reads)
    };
    let mut results = results.map(Vec::into_iter);
    open.into_iter()
        .map(|(job, t, mut buf, try_pack, opened)| {
            let read = opened.map(|(f, direct, want, extent)| {
                let got = match extent {
                    Extent::Hole => None,
                    Extent::Data | Extent::Mixed => results.as_mut().and_then(|r| r.next()),
                };
                let r = match got {
                    _ if extent == Extent::Hole => {
                        buf.truncate(want);
                        hole_read(&mut buf)
                    }
                    Some(Ok(n)) if n >= want => {
                        buf.truncate(want);
                        Ok(())
                    }
                    Some(Ok(_)) => Err(std::io::ErrorKind::UnexpectedEof.into()),
                    // Not read (no io_uring), or refused directly: the usual way.
                    Some(Err(e)) if direct.is_none() || e.raw_os_error() != Some(libc::EINVAL) => {
                        Err(e)
                    }
                    _ => {
                        buf.truncate(want);
                        read_exact_at((&f, direct.as_ref()), job.start * bs, &mut buf)
                    }
                };
                let size = t.size.digest_len();
                let read = (r, buf);
                let read =
                    checked_read(sh, &f, &t.abs, size, job.start, t.identity, try_pack, read)
                        .map(|r| r.with_holes(extent));
                (f, read)
            });
            (job, t, read)
        })
        .collect()
}

/// A block read and hashed on a blocking thread, before it is queued.
pub(crate) struct Read {
    buf: PooledBuf,
    zero: bool,
    /// The file has holes in the block, and it is not all zeros.
    sparse: bool,
    digest: Digest,
    /// Whether compressing it was tried, and did pay.
    packed: Option<bool>,
    /// The file changed while it was read: why.
    changed: Option<String>,
}

impl Read {
    /// Notes what [`holes::probe`] found of the block (where the file is sparse).
    fn with_holes(mut self, extent: Extent) -> Self {
        self.sparse = extent == Extent::Mixed && !self.zero;
        self
    }
}

/// Reads a block that lies in a hole of its file: it is all zeros, which the pool's
/// buffer may not be (a reused one). Its digest is taken over these zeros as over
/// any block's bytes; whether the file is still the one listed is checked after, as
/// for any block.
fn hole_read(buf: &mut PooledBuf) -> std::io::Result<()> {
    buf.fill(0);
    Ok(())
}

/// A descriptor that reads `f` directly, past the page cache, for the blocks of one
/// turn (`turn`, a byte range) of a large file, unless the cache holds them
/// already (read there, they cost a copy from memory; read from the device, a read
/// that was not needed) or the file system cannot. A cold large file read through the
/// cache costs the kernel far more CPU than the copy it makes (see
/// `hetch_storage::direct`).
fn direct_reads(f: &File, size: Size, bs: u64, turn: (u64, u64)) -> Option<File> {
    use hetch_storage::direct;
    let large = matches!(size, Size::Known(n) if n >= direct::MIN_FILE);
    let aligned = bs % direct::ALIGN as u64 == 0;
    if !large || !aligned || direct::cached(f, turn.0, turn.1 - turn.0) {
        return None;
    }
    direct::reopen(f, false)
}

/// Reads `buf.len()` bytes at `offset` of `file`: directly through `direct` where
/// given, into the buffer rounded up to whole pages (the last block of a file), else
/// through the cache.
fn read_exact_at(
    (file, direct): (&File, Option<&File>),
    offset: u64,
    buf: &mut PooledBuf,
) -> std::io::Result<()> {
    use hetch_storage::direct::{self, ALIGN};
    use std::os::unix::fs::FileExt;
    if let Some(d) = direct.filter(|_| offset % ALIGN as u64 == 0) {
        let len = buf.len();
        buf.resize(len.div_ceil(ALIGN) * ALIGN);
        let read = direct::read_at(d, offset, &mut buf[..]);
        buf.truncate(len);
        match read {
            Ok(n) if n >= len => return Ok(()),
            Ok(_) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    file.read_exact_at(&mut buf[..], offset)
}

/// Reads block `index` of `f` (the file at `path`, `size` bytes, listed as `identity`;
/// with a descriptor that reads it directly, if any) into `buf`, hashes it and, if
/// `try_pack`, compresses it. Checks after the read that the file is still the one
/// listed, so that a torn copy cannot finish. Where the listing saw a `sparse` file,
/// a block all hole is not read at all (see [`hole_read`]).
#[allow(clippy::too_many_arguments)]
fn read_block(
    sh: &Shared,
    (f, direct): (&File, Option<&File>),
    path: &Path,
    size: u64,
    index: u64,
    (identity, sparse): (Option<Identity>, bool),
    try_pack: bool,
    mut buf: PooledBuf,
) -> std::io::Result<Read> {
    let offset = index * sh.opts.block_size;
    let extent = match sparse {
        true => holes::probe(f, offset, offset + buf.len() as u64),
        false => Extent::Data,
    };
    let r = match extent {
        Extent::Hole => hole_read(&mut buf),
        Extent::Data | Extent::Mixed => read_exact_at((f, direct), offset, &mut buf),
    };
    checked_read(sh, f, path, size, index, identity, try_pack, (r, buf))
        .map(|r| r.with_holes(extent))
}

/// Hashes block `index` of `f` once read into `buf` (`r`: how the read went; see
/// [`read_block`]), compresses it if `try_pack`, and checks that the file is still
/// the one listed.
#[allow(clippy::too_many_arguments)]
fn checked_read(
    sh: &Shared,
    f: &File,
    path: &Path,
    size: u64,
    index: u64,
    identity: Option<Identity>,
    try_pack: bool,
    (r, mut buf): (std::io::Result<()>, PooledBuf),
) -> std::io::Result<Read> {
    let bs = sh.opts.block_size;
    let zero = r.is_ok() && crate::session::is_zero(&buf);
    let algo = sh.opts.checksum;
    let digest = sh.gate.run(|| algo.block_digest(size, bs, index, &buf));
    let packed = (try_pack && r.is_ok() && !zero).then(|| pack(sh, &mut buf));
    let last = index + 1 == integrity::block_count(size, bs);
    let changed = match (&r, identity) {
        (Err(e), Some(_)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Some(format!("{} (shrank)", crate::changed::CHANGED))
        }
        (Ok(()), Some(listed)) => crate::changed::check_open(f, &listed)
            .unwrap_or_else(|e| Some(e.to_string()))
            .or_else(|| {
                last.then(|| crate::changed::check_path(path, &listed))
                    .flatten()
            }),
        _ => None,
    };
    r.map(|_| Read {
        buf,
        zero,
        sparse: false,
        digest,
        packed,
        changed,
    })
}

/// What a reader does after a block.
enum Flow {
    /// Goes on with the next block.
    Next,
    /// Stops reading this file (it failed or changed).
    FileDone,
    /// Stops: the session is over.
    Over,
}

/// Queues a block read by [`read_block`], or reports why its file cannot be sent.
#[allow(clippy::too_many_arguments)]
async fn queue_read(
    shared: &Arc<Shared>,
    job: &Job,
    t: &Target,
    index: u64,
    read: std::io::Result<Read>,
    data: &async_channel::Sender<OutBlock>,
    ctl: &mpsc::Sender<Frame>,
    backoff: &mut Backoff,
) -> Flow {
    let read = match read {
        Ok(r) => r,
        Err(e) => {
            let why = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "file shrank while being read".to_string()
            } else {
                e.to_string()
            };
            let message = format!("{}: {why}", t.abs.display());
            shared.read_failed(job.file, message, ctl).await;
            return Flow::FileDone;
        }
    };
    if let Some(why) = read.changed {
        crate::changed::changed(shared, job.file, &t.abs, &why, ctl).await;
        return Flow::FileDone;
    }
    if let Some(p) = read.packed {
        backoff.tried(p);
    }
    let block = ReadBlock {
        index,
        len: t.size.block_len(shared.opts.block_size, index),
        buf: read.buf,
        zero: read.zero,
        sparse: read.sparse,
        packed: read.packed == Some(true),
        digest: read.digest,
    };
    match queue_block(shared, job, t.size, block, data, ctl).await {
        true => Flow::Next,
        false => Flow::Over,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::BufferPool;
    use hetch_storage::direct::cached;
    use std::os::unix::fs::FileExt;

    #[tokio::test]
    async fn a_cold_large_file_is_read_past_the_cache_and_a_cached_one_through_it() {
        // On a disk: /tmp may be a tmpfs.
        let target = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target");
        std::fs::create_dir_all(target).unwrap();
        let dir = tempfile::tempdir_in(target).unwrap();
        let path = dir.path().join("big");
        let bs = 64 << 10;
        let data: Vec<u8> = (0..3 * bs + 1000).map(|i| (i % 251) as u8).collect();
        let len = data.len() as u64;
        std::fs::write(&path, &data).unwrap();
        let f = File::open(&path).unwrap();
        f.sync_all().unwrap();
        hetch_storage::meta::drop_cached_range(&f, 0, len);
        let turn = (0, 4 * bs);
        assert!(
            direct_reads(&f, Size::Known(bs), bs, turn).is_none(),
            "one block"
        );
        let Some(d) = direct_reads(&f, Size::Known(len), bs, turn) else {
            eprintln!("SKIPPED: no direct I/O (or no cachestat) for {path:?}");
            return;
        };
        let pool = BufferPool::new(1 << 20);
        for i in 0..4 {
            let range = i * bs as usize..((i + 1) * bs as usize).min(data.len());
            let mut buf = pool.get(range.len()).await;
            read_exact_at((&f, Some(&d)), i as u64 * bs, &mut buf).unwrap();
            assert_eq!(
                buf.len(),
                range.len(),
                "the last block is cut to its length"
            );
            assert!(buf[..] == data[range], "block {i} differs");
        }
        assert!(!cached(&f, 0, len), "direct reads filled the cache");
        // A file that shrank under the reader is an end of file, as through the cache.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(3 * bs + 10)
            .unwrap();
        let mut buf = pool.get(1000).await;
        let e = read_exact_at((&f, Some(&d)), 3 * bs, &mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        // Once the cache holds the file, it is read there.
        let mut all = vec![0; (3 * bs) as usize];
        f.read_exact_at(&mut all, 0).unwrap();
        assert!(direct_reads(&f, Size::Known(len), bs, (0, 3 * bs)).is_none());
    }
}
