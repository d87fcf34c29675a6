//! What followed trees list after the walk: entries whose status-change time is new,
//! and paths listed again (a done-marker, a file started over).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hetch_storage::walk::{self, SourceEntry};

use super::Follower;
use crate::source::{announce, Shared};

/// Followed trees: the status-change time of recently changed entries when they were
/// last listed or sealed.
pub(super) type Seen = Mutex<HashMap<PathBuf, (i64, u32)>>;

/// Whether `se` is in flight, or was listed with the same status-change time.
fn already_announced(shared: &Shared, seen: &Seen, se: &SourceEntry) -> bool {
    let in_flight = {
        let ann = shared.announced.lock().expect("announced lock");
        ann.values().any(|a| a.abs == se.abs)
    };
    in_flight
        || seen.lock().expect("seen lock").get(&se.abs) == Some(&(se.ctime_sec, se.ctime_nsec))
}

/// How far back [`Follower::seen`] remembers entries: further than any scan looks.
const SEEN_HORIZON: Duration = Duration::from_secs(60);

fn secs(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Follower {
    /// Remembers the status-change time an entry had when it was listed (recent ones
    /// only: a scan looks a few seconds back at most).
    pub(super) fn listed(&self, se: &SourceEntry) {
        if se.ctime_sec >= secs(SystemTime::now() - SEEN_HORIZON) {
            self.remember(se.abs.clone(), (se.ctime_sec, se.ctime_nsec));
        }
    }

    pub(super) fn remember(&self, abs: PathBuf, ctime: (i64, u32)) {
        self.seen.lock().expect("seen lock").insert(abs, ctime);
    }

    /// Scans the operands for entries that changed since `since` and announces those that
    /// are not in flight and changed since they were last listed or sealed. Returns how
    /// many were announced.
    pub(super) async fn rescan(&self, shared: &Arc<Shared>, since: SystemTime) -> usize {
        let Some(tx) = shared.open_end.sender() else {
            return 0;
        };
        let in_flight: HashSet<PathBuf> = {
            let ann = shared.announced.lock().expect("announced lock");
            ann.values().map(|a| a.abs.clone()).collect()
        };
        let since = secs(since);
        // What changed before `since` is never looked at again: forget it.
        self.seen
            .lock()
            .expect("seen lock")
            .retain(|_, (s, _)| *s + 1 >= since);
        let (sh, seen) = (shared.clone(), self.seen.clone());
        let ops = self.operands.clone();
        tokio::task::spawn_blocking(move || {
            let mut announced = 0;
            for op in ops {
                let Ok(iter) = walk::walk(&op) else { continue };
                for se in iter.flatten() {
                    let ctime = (se.ctime_sec, se.ctime_nsec);
                    let unchanged = seen.lock().expect("seen lock").get(&se.abs) == Some(&ctime);
                    if se.ctime_sec < since || unchanged || in_flight.contains(&se.abs) {
                        continue;
                    }
                    if !announce(&sh, se, None, &tx) {
                        return announced;
                    }
                    announced += 1;
                }
            }
            announced
        })
        .await
        .expect("rescan task panicked")
    }

    /// Lists one path again and announces it (a marker, or a file started over).
    pub(super) async fn announce_path(&self, shared: &Arc<Shared>, abs: PathBuf, rel: Vec<u8>) {
        let Some(tx) = shared.open_end.sender() else {
            return;
        };
        let (sh, seen) = (shared.clone(), self.seen.clone());
        let _ = tokio::task::spawn_blocking(move || match walk::entry(&abs, rel) {
            // A scan may have announced it meanwhile: never two entries for one path.
            Ok(se) if !already_announced(&sh, &seen, &se) => {
                announce(&sh, se, None, &tx);
            }
            Ok(_) => {}
            Err(e) => sh.progress.fail(e.to_string()),
        })
        .await;
    }
}
