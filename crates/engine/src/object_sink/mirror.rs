//! Mirroring into an object store: after every upload succeeded, the objects under the
//! prefixes of the copied directories that the source did not announce are deleted
//! (or, in a dry run, listed). The rules are those of a file system destination (see
//! `crate::sink::mirror`): nothing on any failure or beyond `--max-delete`, excluded
//! keys kept unless `--delete-excluded`. The sink remembers every announced key, so
//! memory grows with the number of entries.

use futures_util::StreamExt;
use hetch_proto::{Change, ChangeAction, Frame};

use super::ObjectShared;
use crate::sink::mirror::{excluded_below, failures_stop, too_many};

/// Deletes the extra objects; returns the frames for the source (a change per
/// object, a failure line per object not deleted or for the reason none was).
pub(crate) async fn delete_extras(sh: &ObjectShared) -> Vec<Frame> {
    let Some(del) = sh.opts.delete else {
        return Vec::new();
    };
    if let Some(why) = failures_stop(&sh.progress, &del) {
        return vec![sh.failure(u64::MAX, why)];
    }
    let seen = std::mem::take(&mut *sh.seen.lock().expect("seen lock"));
    let tops = std::mem::take(&mut *sh.dir_tops.lock().expect("tops lock"));
    let bucket = &sh.dest.location.bucket;
    let mut extras = Vec::new();
    for top in &tops {
        let mut listing = bucket.list(top);
        while let Some(item) = listing.next().await {
            let info = match item {
                Ok(i) => i,
                Err(e) => return vec![sh.failure(u64::MAX, format!("deletions skipped: {e}"))],
            };
            if seen.contains(&info.key) {
                continue;
            }
            let rest = match top.is_empty() {
                true => info.key.as_str(),
                false => info.key[top.len()..].trim_start_matches('/'),
            };
            let excluded = sh
                .opts
                .filter
                .as_ref()
                .is_some_and(|f| excluded_below(f, rest));
            if excluded && !del.delete_excluded {
                continue;
            }
            extras.push(info.key);
        }
    }
    if let Some(why) = too_many(extras.len(), &del) {
        return vec![sh.failure(u64::MAX, why)];
    }
    let mut out = Vec::new();
    for key in extras {
        let action = if del.dry_run {
            ChangeAction::WouldDelete
        } else {
            match bucket.delete(&key).await {
                Ok(()) => ChangeAction::Deleted,
                Err(e) => {
                    out.push(sh.failure(u64::MAX, format!("not deleted: {e}")));
                    continue;
                }
            }
        };
        let path = sh.rel_path(&key);
        sh.progress.change(action, &path);
        out.push(Frame::Change(Change { action, path }));
    }
    out
}
