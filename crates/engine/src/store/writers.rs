//! One writer per destination file in this process.
//!
//! A transfer resumed while an older session of it still runs on this server (the
//! server has not yet noticed that the old connection is gone, or its last segments
//! are still arriving after a cut link came back) would otherwise write one part file
//! from two sessions: the older could write into the file after the newer renamed it
//! into place (changing its bytes or its mtime), or remove the newer one's part file
//! and journal when it gives up. So the newer writer takes the file over: it waits for
//! the older one's operation in progress, if any, to end, and from then on every
//! write, commit or abort of the older one is refused or does nothing.
//!
//! A file is known by its destination directory (device, inode) and its path below
//! it, as sessions to the same destination name it; its parent directories need not
//! exist yet. Only writers in this process are seen: two processes writing one
//! destination file at once are not told apart (as with `cp` or rsync).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, Weak};

/// A destination file: the destination directory (device, inode) and the path below.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    base: (u64, u64),
    rel: PathBuf,
}

type Claims = Mutex<HashMap<Key, Weak<Claim>>>;

fn claims() -> &'static Claims {
    static CLAIMS: OnceLock<Claims> = OnceLock::new();
    CLAIMS.get_or_init(Default::default)
}

/// A writer's claim on a destination file; released when dropped.
#[derive(Debug)]
pub(crate) struct Claim {
    key: Key,
    /// True once a newer writer took the file over. Each operation of this writer
    /// holds the read side, so the takeover (the write side) waits for it to end.
    taken_over: RwLock<bool>,
}

/// Why an operation of a writer whose file was taken over is refused.
pub(crate) const TAKEN_OVER: &str = "taken over by a newer transfer of the same file";

/// Claims file `rel` below destination directory `base` (device, inode) for a new writer, taking it
/// over from the writer holding it, if any: returns once that writer's operation in
/// progress has ended.
pub(crate) fn claim(base: (u64, u64), rel: &Path) -> Arc<Claim> {
    let key = Key {
        base,
        rel: rel.to_path_buf(),
    };
    let new = Arc::new(Claim {
        key: key.clone(),
        taken_over: RwLock::new(false),
    });
    let old = {
        let mut map = claims().lock().expect("claims lock");
        map.insert(key, Arc::downgrade(&new))
            .and_then(|w| w.upgrade())
    };
    if let Some(old) = old {
        // Not under the map's lock: the old writer may be mid-write for a while.
        *old.taken_over.write().unwrap_or_else(|e| e.into_inner()) = true;
    }
    new
}

impl Claim {
    /// Holds the file against a takeover for as long as the guard lives; `None` when
    /// it was taken over already.
    pub(crate) fn hold(&self) -> Option<RwLockReadGuard<'_, bool>> {
        let guard = self.taken_over.read().unwrap_or_else(|e| e.into_inner());
        (!*guard).then_some(guard)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut map = claims().lock().expect("claims lock");
        // Only our own entry: a newer writer's stays.
        let ours = map
            .get(&self.key)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), self));
        if ours {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_claim_takes_over_and_the_older_one_then_holds_nothing() {
        let dir = (1, 2);
        let old = claim(dir, Path::new("f"));
        assert!(old.hold().is_some());
        let other = claim(dir, Path::new("g"));
        let new = claim(dir, Path::new("f"));
        assert!(old.hold().is_none(), "the older writer still holds f");
        assert!(new.hold().is_some() && other.hold().is_some());
        // The older one going away leaves the newer one's entry alone.
        drop(old);
        let key = new.key.clone();
        assert!(claims().lock().unwrap().contains_key(&key));
        drop(new);
        assert!(!claims().lock().unwrap().contains_key(&key));
    }

    #[test]
    fn a_takeover_waits_for_the_operation_in_progress() {
        let dir = (1, 3);
        let old = claim(dir, Path::new("f"));
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let guard = old.hold().unwrap();
            let taker = s.spawn(|| {
                let new = claim(dir, Path::new("f"));
                // Only after the old writer's operation ended.
                assert!(done.load(std::sync::atomic::Ordering::SeqCst));
                new
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            drop(guard);
            let _new = taker.join().unwrap();
        });
        assert!(old.hold().is_none());
    }
}
