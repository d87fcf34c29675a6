//! Sealing a followed file that stopped changing: read once more, compared with what
//! was sent, and its final size and whole-file digest sent.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

use hetch_integrity::{self as integrity, Algorithm, Digest, FileDigest};
use hetch_proto::{Frame, Seal, MAX_REWRITTEN, MAX_TAIL_BLOCKS};
use tokio::sync::mpsc;

use super::Follower;
use crate::source::Shared;
use crate::store::Size;

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

impl Follower {
    /// Seals a file that stopped changing: waits until the sink acknowledged everything
    /// sent, reads the file once more, and sends its final size and digest.
    pub(super) async fn seal(
        self: Arc<Self>,
        shared: Arc<Shared>,
        id: u64,
        ctl: mpsc::Sender<Frame>,
    ) {
        let bs = shared.opts.block_size;
        loop {
            let acked = self.acks.notified();
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
            self.restart(&shared, id, &ctl).await;
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
                self.follow.idle
            ));
        }
        {
            let mut ann = shared.announced.lock().expect("announced lock");
            let Some(a) = ann.get_mut(&id) else { return };
            a.size = Size::Known(size);
        }
        // Scans announce it again only if it changes after this.
        self.remember(abs.clone(), r.ctime);
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

#[cfg(test)]
mod tests {
    use super::*;

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
