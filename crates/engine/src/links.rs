//! Hard links (`--hard-links`, rsync's `-H`): the names of one file kept as one inode
//! at the destination.
//!
//! The source remembers, per inode with more than one name, the wire path of the first
//! name it announced ([`SourceLinks`]); a later name goes on the wire as a link to that
//! path ([`hetch_proto::EntryKind::HardLink`]) and carries no data. The sink accepts a
//! link only to a file announced earlier in the same session ([`SinkLinks`]: it keeps
//! a 16-byte digest of each announced file's path), and makes the links once every
//! file is in place, before the deletion phase. Both tables are bounded by
//! [`MAX_LINKED`]: past it, further names are copied as separate files (source) or
//! fail naming the bound (sink), and memory stays bounded whatever the tree holds.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use hetch_storage::walk::{SourceEntry, SourceKind};

use crate::store::Place;

/// Most inodes (source) or file paths (sink) a session remembers for hard links.
pub(crate) const MAX_LINKED: usize = 4 << 20;

/// The source's table: first names of inodes with several names.
#[derive(Default)]
pub(crate) struct SourceLinks {
    first: Mutex<HashMap<(u64, u64), Vec<u8>>>,
    /// The table was found full once (and said so).
    full: std::sync::atomic::AtomicBool,
}

/// What [`SourceLinks::name`] decided for an entry.
pub(crate) enum LinkOrNot {
    /// Announce it as it is.
    Itself,
    /// Announce it as a link to this earlier entry.
    LinkTo(Vec<u8>),
    /// As it is, and the table just became full (warn once).
    TableFull,
}

impl SourceLinks {
    /// Whether `se` is a further name of a file announced before.
    pub(crate) fn name(&self, se: &SourceEntry) -> LinkOrNot {
        if !matches!(se.kind, SourceKind::File { .. }) || se.nlink < 2 || se.id == (0, 0) {
            return LinkOrNot::Itself;
        }
        let mut first = self.first.lock().expect("links lock");
        if let Some(target) = first.get(&se.id) {
            return LinkOrNot::LinkTo(target.clone());
        }
        if first.len() >= MAX_LINKED {
            return match self.full.swap(true, std::sync::atomic::Ordering::Relaxed) {
                false => LinkOrNot::TableFull,
                true => LinkOrNot::Itself,
            };
        }
        first.insert(se.id, se.rel.clone());
        LinkOrNot::Itself
    }
}

/// The sink's bookkeeping: which files the session announced, and the links to make.
#[derive(Default)]
pub(crate) struct SinkLinks {
    files: Mutex<HashSet<[u8; 16]>>,
    pending: Mutex<Vec<(Place, Place)>>,
}

fn key(wire: &[u8]) -> [u8; 16] {
    let h = blake3::hash(wire);
    h.as_bytes()[..16].try_into().expect("16 bytes")
}

impl SinkLinks {
    /// File `wire` was announced (a later link may name it).
    pub(crate) fn announced(&self, wire: &[u8]) {
        let mut files = self.files.lock().expect("links lock");
        if files.len() < MAX_LINKED {
            files.insert(key(wire));
        }
    }

    /// Whether file `wire` was announced in this session (as far as the bound keeps).
    pub(crate) fn was_announced(&self, wire: &[u8]) -> bool {
        self.files.lock().expect("links lock").contains(&key(wire))
    }

    /// `at` is to become a name of the file at `target` once that is in place;
    /// false when [`MAX_LINKED`] links wait already (a peer's count is bounded too).
    pub(crate) fn defer(&self, at: Place, target: Place) -> bool {
        let mut pending = self.pending.lock().expect("links lock");
        if pending.len() >= MAX_LINKED {
            return false;
        }
        pending.push((at, target));
        true
    }

    /// The links to make, taken.
    pub(crate) fn take(&self) -> Vec<(Place, Place)> {
        std::mem::take(&mut *self.pending.lock().expect("links lock"))
    }
}

/// Makes the links a session deferred (see [`SinkLinks`]), once every file is in
/// place; returns a failure frame for each that could not be made.
pub(crate) fn make_links(sh: &crate::sink::SinkShared) -> Vec<hetch_proto::Frame> {
    use crate::progress::Progress;
    let mut failed = Vec::new();
    for (at, target) in sh.links.take() {
        let made = sh.store.linked(&target.rel, &at.rel).and_then(|already| {
            match already {
                true => Progress::add(&sh.progress.skipped, 1),
                false => {
                    sh.store.hard_link(&target.rel, &at.rel)?;
                    Progress::add(&sh.progress.files, 1);
                }
            }
            Ok(())
        });
        if let Err(e) = made {
            failed.push(sh.failure(u64::MAX, format!("not linked: {e}")));
        }
    }
    failed
}
