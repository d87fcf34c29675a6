//! inotify wake-ups for the follower: a change under a followed tree (a write, a close,
//! a new or renamed-in entry) wakes it at once instead of at its next poll, and a new
//! entry triggers a scan for new files. Polling stays the fallback: where inotify is
//! missing or runs out of watches (network file systems do not report remote writes at
//! all), the follower simply polls.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;

use futures_util::StreamExt;
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::Notify;

/// What the follower learns from inotify.
#[derive(Default)]
pub(crate) struct Wakeups {
    /// Something changed: check the followed files now.
    pub changed: Notify,
    /// Entries appeared: scan for new files now.
    pub appeared: AtomicBool,
    /// inotify covers every directory of the tree.
    pub active: AtomicBool,
}

const MASK: WatchMask = WatchMask::MODIFY
    .union(WatchMask::CLOSE_WRITE)
    .union(WatchMask::CREATE)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::DELETE);

/// Watches every directory under `operands` (and the parent directory of a file
/// operand) until the session ends; reports through `wake`.
pub(crate) async fn watch(operands: Vec<PathBuf>, wake: Arc<Wakeups>) {
    let Ok(inotify) = Inotify::init() else { return };
    let mut watches = inotify.watches();
    let dirs = tokio::task::spawn_blocking(move || directories(&operands))
        .await
        .unwrap_or_default();
    let mut paths: HashMap<WatchDescriptor, PathBuf> = HashMap::new();
    for d in dirs {
        if !add(&mut watches, &mut paths, d) {
            return; // out of watches: polling only
        }
    }
    let Ok(mut events) = inotify.into_event_stream(vec![0u8; 64 * 1024]) else {
        return;
    };
    wake.active.store(true, SeqCst);
    while let Some(Ok(ev)) = events.next().await {
        if ev.mask.contains(EventMask::Q_OVERFLOW) {
            wake.appeared.store(true, SeqCst);
        }
        if ev.mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
            wake.appeared.store(true, SeqCst);
            if ev.mask.contains(EventMask::ISDIR) {
                let dir = paths
                    .get(&ev.wd)
                    .zip(ev.name.as_ref())
                    .map(|(p, n)| p.join(n));
                if let Some(dir) = dir {
                    if !add(&mut watches, &mut paths, dir) {
                        wake.active.store(false, SeqCst);
                    }
                }
            }
        }
        wake.changed.notify_one();
    }
    wake.active.store(false, SeqCst);
}

fn add(watches: &mut Watches, paths: &mut HashMap<WatchDescriptor, PathBuf>, dir: PathBuf) -> bool {
    match watches.add(&dir, MASK) {
        Ok(wd) => {
            paths.insert(wd, dir);
            true
        }
        // Gone meanwhile: nothing to watch there.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(_) => false,
    }
}

/// The directories to watch: every directory of a directory operand, the parent of a
/// file operand.
fn directories(operands: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for op in operands {
        if op.is_dir() {
            let dirs = walkdir::WalkDir::new(op)
                .follow_links(false)
                .into_iter()
                .flatten()
                .filter(|e| e.file_type().is_dir())
                .map(|e| e.into_path());
            out.extend(dirs);
        } else {
            let parent = op.parent().filter(|p| !p.as_os_str().is_empty());
            out.push(parent.unwrap_or(Path::new(".")).to_path_buf());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_write_and_a_new_file_wake_the_follower() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("sub")).unwrap();
        let wake = Arc::new(Wakeups::default());
        let task = tokio::spawn(watch(vec![t.path().to_path_buf()], wake.clone()));
        while !wake.active.load(SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let woken = wake.changed.notified();
        std::fs::write(t.path().join("sub/new"), b"x").unwrap();
        tokio::time::timeout(Duration::from_secs(60), woken)
            .await
            .expect("woken by the new file");
        assert!(wake.appeared.load(SeqCst));
        task.abort();
    }
}
