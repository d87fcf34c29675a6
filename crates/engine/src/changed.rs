//! Source files that change while they are read.
//!
//! A file is opened once and read through that handle for all its blocks (the handle is
//! kept with its entry while blocks are outstanding, within a small bound). After every
//! block is read the handle is described again and must be the file the listing saw
//! (same device, inode, size, mtime and ctime): any difference means the file opened
//! is another one, or the bytes read may mix two versions, so the file fails ("changed
//! while being read") before that block is queued, and the sink, which never completes a file with a
//! block missing, discards its part file. After the file's last block, its path must
//! still name the same inode (not replaced while being read).
//!
//! With `--retry-changed` such a file is not failed but dropped at the sink (`Abandon`)
//! and listed again, with a fresh stat, under a new entry id, up to
//! [`MAX_CHANGED_ATTEMPTS`] times. Growing files under `--follow` are not checked here:
//! they are followed by design (see `follow/`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use hetch_proto::Frame;
use hetch_storage::walk::{self, Identity};
use tokio::sync::mpsc;

use crate::source::{Listed, Shared};

/// How often one file is sent, at most, while it keeps changing as it is read.
pub(crate) const MAX_CHANGED_ATTEMPTS: u32 = 3;

/// What a changed file's message says, whatever the change.
pub(crate) const CHANGED: &str = "changed while being read";

/// An open source file kept with its entry while blocks of it are outstanding; counts
/// itself in the session's open handles so that their number stays bounded.
pub(crate) struct CachedFile {
    pub file: Arc<File>,
    open: Arc<AtomicUsize>,
}

impl CachedFile {
    /// Keeps `file` if fewer than `cap` handles are kept already.
    pub(crate) fn keep(file: &Arc<File>, open: &Arc<AtomicUsize>, cap: usize) -> Option<Self> {
        open.fetch_update(SeqCst, SeqCst, |n| (n < cap).then_some(n + 1))
            .ok()?;
        Some(CachedFile {
            file: file.clone(),
            open: open.clone(),
        })
    }
}

impl Drop for CachedFile {
    fn drop(&mut self) {
        self.open.fetch_sub(1, SeqCst);
    }
}

/// Why a file being read is not the one listed: `None` when it is.
pub(crate) fn difference(listed: &Identity, now: &Identity) -> Option<String> {
    if listed == now {
        return None;
    }
    Some(if listed.id != now.id {
        format!("{CHANGED} (replaced by another file)")
    } else if listed.size != now.size {
        format!(
            "{CHANGED} (size {} when listed, now {})",
            listed.size, now.size
        )
    } else {
        CHANGED.to_string()
    })
}

/// Checks an open file against its listing (on a blocking thread): an error message
/// when it differs.
pub(crate) fn check_open(f: &File, listed: &Identity) -> std::io::Result<Option<String>> {
    Ok(difference(listed, &Identity::of_metadata(&f.metadata()?)))
}

/// Checks that `abs` still names the file listed (after its last block was read): a
/// file renamed over it since is another inode.
pub(crate) fn check_path(abs: &Path, listed: &Identity) -> Option<String> {
    match std::fs::symlink_metadata(abs) {
        Ok(md) if Identity::of_metadata(&md).id == listed.id => None,
        Ok(_) => Some(format!("{CHANGED} (replaced by another file)")),
        Err(e) => Some(format!("{CHANGED} ({e})")),
    }
}

/// Handles a file found changed: sends it again under a new id when `--retry-changed`
/// allows another attempt, otherwise fails it with `why`.
pub(crate) async fn changed(
    shared: &Arc<Shared>,
    id: u64,
    abs: &Path,
    why: &str,
    ctl: &mpsc::Sender<Frame>,
) {
    let message = format!("{}: {why}", abs.display());
    let retry = {
        let mut ann = shared.announced.lock().expect("announced lock");
        match ann.get_mut(&id) {
            Some(a) if !a.failed => {
                let again = shared.opts.retry_changed && a.attempts + 1 < MAX_CHANGED_ATTEMPTS;
                if again {
                    // Other readers of this file stop at once.
                    a.failed = true;
                    // Counted before the entry goes, so that the listing is not
                    // declared over while the file is on its way to being listed again.
                    shared.open_end.relist_begins();
                }
                again.then(|| (a.rel.clone(), a.attempts + 1))
            }
            _ => return,
        }
    };
    let Some((rel, attempts)) = retry else {
        let message = if shared.opts.retry_changed {
            format!("{message} (sent {MAX_CHANGED_ATTEMPTS} times)")
        } else {
            message
        };
        shared.read_failed(id, message, ctl).await;
        return;
    };
    shared.progress.warn(&format!(
        "{message}; sending it again (attempt {} of {MAX_CHANGED_ATTEMPTS})",
        attempts + 1
    ));
    if shared.complete(id).is_some() {
        let _ = ctl.send(Frame::Abandon { file: id }).await;
    }
    let sh = shared.clone();
    let abs: PathBuf = abs.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let tx = sh.open_end.sender();
        let again = match sh.opts.within_of(&abs) {
            Some(within) => walk::entry_within(within, &abs, rel),
            None => walk::entry(&abs, rel),
        };
        match (again, tx) {
            (Ok(se), Some(tx)) => {
                crate::source::announce_attempt(&sh, se, None, &tx, attempts);
            }
            (Err(e), Some(tx)) => {
                let id = sh.next_id.fetch_add(1, SeqCst);
                let _ = tx.blocking_send(Listed::Error(id, e.to_string()));
            }
            (_, None) => {}
        }
        sh.open_end.relist_ends();
        end_listing_if_settled(&sh);
    })
    .await
    .expect("relist task panicked");
}

/// With `--retry-changed` (and without `--follow`) the listing stays open after the
/// walk, for files listed again; it ends once the walk is done and no entry is pending
/// or being listed again, so that the sink learns that no entries follow.
pub(crate) fn end_listing_if_settled(shared: &Shared) {
    if !shared.opts.retry_changed || shared.opts.follow.is_some() {
        return;
    }
    let settled = shared.open_end.walked()
        && shared.open_end.nothing_relisting()
        && shared.announced.lock().expect("announced lock").is_empty();
    if settled {
        shared.open_end.close();
    }
}
