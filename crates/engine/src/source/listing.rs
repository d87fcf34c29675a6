//! What a source session lists beyond one walk of its operands.
//!
//! A copy lists its operands once ([`Once`]). `cp --follow` and `watch` decorate that
//! listing with [`crate::follow::Follower`]: growing files stay in the session after
//! their first blocks, and what appears in a followed tree is listed as it appears. The
//! session calls its [`Listing`] at the points named by the trait's methods and nowhere
//! else, so everything a followed file needs beyond a copied one lives behind it.
//!
//! [`OpenEnd`] is the listing's open end: where entries listed after the walk go (files
//! listed again after changing, followed trees), and when no more will come.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use hetch_integrity::Digest;
use hetch_proto::Frame;
use hetch_storage::walk::SourceEntry;
use tokio::sync::mpsc;

use super::{Announced, Job, Listed, Shared};
use crate::error::EngineError;
use crate::follow::Followed;

/// How a listed entry is announced.
pub(crate) enum Announce {
    /// As it is now.
    Plain,
    /// As a growing file, followed with `state`. `idle`: it has not changed for the
    /// follower's idle time, so its whole-file digest may be computed up front (for a
    /// checksum skip).
    Growing { state: Box<Followed>, idle: bool },
    /// Not now: a done-marker of a file being followed, listed after that file.
    Held,
}

/// A source session's listing, as the session sees it. The defaults are a copy's:
/// every entry as it is now, nothing after the walk.
pub(crate) trait Listing: Send + Sync {
    /// How `se` is announced (on the walker's thread).
    fn classify(&self, _sh: &Shared, _se: &SourceEntry) -> Announce {
        Announce::Plain
    }

    /// The jobs for the sink's plan of file `id` when this listing handles that plan
    /// (a growing file's first one); `None` leaves it to the session.
    fn first_plan(&self, _sh: &Shared, _id: u64, _ranges: &[(u64, u64)]) -> Option<Vec<Job>> {
        None
    }

    /// A reader sent block `index` of growing file `file` with `digest`.
    fn sent(&self, _sh: &Shared, _file: u64, _index: u64, _digest: &Digest) {}

    /// The sink acknowledged bytes `0..offset` of `file` as durable.
    fn durable(&self, _sh: &Shared, _file: u64, _offset: u64) {}

    /// `entry` is finished at the sink (`ok`: verified there); whatever goes next in
    /// its place is listed before this returns.
    fn finished<'a>(
        &'a self,
        _sh: &'a Arc<Shared>,
        _entry: &'a Announced,
        _ok: bool,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// The task that lists what appears after the walk, if any; it ends the listing
    /// (see [`OpenEnd::close`]) when no more entries will come.
    fn watch(
        self: Arc<Self>,
        _sh: Arc<Shared>,
        _ctl: mpsc::Sender<Frame>,
    ) -> Option<BoxFuture<'static, Result<(), EngineError>>> {
        None
    }

    /// Whether each finished file is logged: a watch runs for days and says what it
    /// moved; a copy of many small files need not format a line per file nobody reads.
    fn logs_files(&self) -> bool {
        false
    }
}

/// A copy's listing: the operands, once.
pub(crate) struct Once;

impl Listing for Once {}

/// Where entries listed after the walk go, while the listing is open.
pub(crate) struct OpenEnd {
    tx: Mutex<Option<mpsc::Sender<Listed>>>,
    /// The first walk is done.
    walked: AtomicBool,
    /// Files on their way to being listed again (see `changed.rs`).
    relisting: AtomicUsize,
}

impl OpenEnd {
    /// An open end sending to `tx`, or a listing that ends with its walk (`None`).
    pub(crate) fn new(tx: Option<mpsc::Sender<Listed>>) -> Self {
        OpenEnd {
            tx: Mutex::new(tx),
            walked: AtomicBool::new(false),
            relisting: AtomicUsize::new(0),
        }
    }

    /// Where to send an entry listed now; `None` once the listing has ended.
    pub(crate) fn sender(&self) -> Option<mpsc::Sender<Listed>> {
        self.tx.lock().expect("open end lock").clone()
    }

    /// No more entries after the walk: the announcer ends the list once the walker is
    /// done too.
    pub(crate) fn close(&self) {
        self.tx.lock().expect("open end lock").take();
    }

    /// The first walk is done.
    pub(crate) fn walk_done(&self) {
        self.walked.store(true, SeqCst);
    }

    /// Whether the first walk is done.
    pub(crate) fn walked(&self) -> bool {
        self.walked.load(SeqCst)
    }

    /// A file is on its way to being listed again: the listing stays open for it.
    pub(crate) fn relist_begins(&self) {
        self.relisting.fetch_add(1, SeqCst);
    }

    /// A file counted by [`Self::relist_begins`] was listed again (or could not be).
    pub(crate) fn relist_ends(&self) {
        self.relisting.fetch_sub(1, SeqCst);
    }

    /// Whether no file is on its way to being listed again.
    pub(crate) fn nothing_relisting(&self) -> bool {
        self.relisting.load(SeqCst) == 0
    }
}
