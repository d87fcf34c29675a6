//! Deciding, per announced entry, what the source must send; creating directories and
//! symlinks on the spot; applying directory metadata at the end.

use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use hetch_proto::{Entry, EntryKind, Frame, PlanAction, PlanItem, Xattr};
use hetch_storage::part::FinalMeta;
use hetch_storage::StorageError;

use super::core::{FileCore, Setup};
use super::recheck::Recheck;
use super::{IncomingFile, SinkShared};
use crate::error::EngineError;
use crate::progress::Progress;
use crate::store::{FileSpec, Kind, Place, Present, Size};

/// A directory whose metadata is applied once its contents are in place.
pub(crate) struct DirToFinish {
    /// Relative to the destination directory.
    pub rel: std::path::PathBuf,
    /// Its mode and mtime.
    pub meta: FinalMeta,
    /// Its attributes, where the session keeps them and had room to hold them (see
    /// `plan_dir`).
    pub xattrs: Option<crate::xattrs::Held>,
}

/// What planning a batch produced: the plan, frames that follow it, and the resumed
/// files whose journaled blocks are to be read back.
pub(crate) type Planned = (Vec<PlanItem>, Vec<Frame>, Vec<Recheck>);

/// Plans a batch. Per-entry problems become a `Skip` plus a `FileDone` error frame;
/// errors that make the whole destination unusable end the session.
pub(crate) fn plan_batch(sh: &SinkShared, batch: Vec<Entry>) -> Result<Planned, EngineError> {
    let mut plan = Vec::with_capacity(batch.len());
    let mut follow = Vec::new();
    let mut rechecks = Vec::new();
    let files = batch
        .iter()
        .filter(|e| !matches!(e.kind, EntryKind::Dir))
        .count();
    // Bounded before anything is looked up or kept for them.
    let open = sh.files.lock().expect("files lock").len();
    if open + files > super::MAX_OPEN_FILES {
        return Err(EngineError::unexpected(
            &sh.peer,
            format!(
                "{} files announced and not finished, more than {}",
                open + files,
                super::MAX_OPEN_FILES
            ),
        ));
    }
    if let Some(first) = batch.first() {
        sh.resolve(&first.path)?;
    }
    // A store across a network looks the batch up at once, not entry by entry.
    let wires: Vec<&[u8]> = batch
        .iter()
        .filter(|e| sh.caps.directories || !matches!(e.kind, EntryKind::Dir))
        .map(|e| e.path.as_slice())
        .collect();
    sh.store.prefetch(&wires);
    if sh.opts.compare_only {
        for e in batch {
            plan.push(PlanItem {
                id: e.id,
                action: PlanAction::Skip,
            });
            if let Err(message) = super::compare::compare_entry(sh, &e) {
                sh.progress.fail(message.clone());
                follow.push(Frame::FileDone {
                    file: e.id,
                    error: Some(message),
                    digest: None,
                });
            }
        }
        return Ok((plan, follow, rechecks));
    }
    sh.announced.fetch_add(files as u64, SeqCst);
    if sh.opts.dry_run {
        for e in batch {
            plan.push(PlanItem {
                id: e.id,
                action: PlanAction::Skip,
            });
            super::compare::would_copy(sh, &e, &mut follow);
        }
        return Ok((plan, follow, rechecks));
    }
    let mirroring = sh.opts.delete.is_some();
    for e in batch {
        if mirroring {
            // Even an entry that fails below: its destination is no extra.
            if let Ok(at) = sh.place(&e.path) {
                sh.seen.lock().expect("seen lock").insert(at.rel);
            }
        }
        let top_level = !e.path.contains(&b'/');
        match plan_entry(sh, &e, &mut follow, &mut rechecks) {
            Ok(action) => plan.push(PlanItem { id: e.id, action }),
            Err(err) if sh.stops_session(&err, top_level) => {
                let at = sh.place(&e.path).map(|t| t.shown);
                return Err(sh.stop(err, &at.unwrap_or_default()));
            }
            Err(err) if top_level && is_wrong_type(&err) => return Err(err.into()),
            Err(err) => {
                let message = err.to_string();
                sh.progress.fail(message.clone());
                plan.push(PlanItem {
                    id: e.id,
                    action: PlanAction::Skip,
                });
                follow.push(Frame::FileDone {
                    file: e.id,
                    error: Some(message),
                    digest: None,
                });
            }
        }
    }
    Ok((plan, follow, rechecks))
}

fn is_wrong_type(e: &StorageError) -> bool {
    matches!(e, StorageError::WrongType { .. })
}

/// The mode and mtime entry `e` gets at the destination.
pub(crate) fn final_meta(sh: &SinkShared, e: &Entry) -> FinalMeta {
    // Setuid, setgid and sticky bits only on request: a receiver running as root must
    // not create setuid files a peer chose. (Ownership is never copied.)
    let keep = if sh.opts.preserve_special_modes {
        0o7777
    } else {
        0o777
    };
    FinalMeta {
        mode: e.mode & keep,
        mtime_sec: e.mtime_sec,
        mtime_nsec: e.mtime_nsec,
    }
}

/// The kind of destination entry that entry `e` makes.
pub(crate) fn kind_of(e: &Entry) -> Kind {
    match e.kind {
        EntryKind::Dir => Kind::Dir,
        EntryKind::Symlink { .. } => Kind::Symlink,
        EntryKind::File { .. } | EntryKind::HardLink { .. } => Kind::File,
        EntryKind::Special(_) => Kind::Other,
    }
}

/// Whether an entry of kind `needed` can take the place of one of kind `found` only
/// once that is removed (see `make_way`): a directory and anything else. (A file or
/// symlink is renamed over any other non-directory.)
pub(crate) fn in_the_way(found: Kind, needed: Kind) -> bool {
    (found == Kind::Dir) != (needed == Kind::Dir)
}

fn plan_entry(
    sh: &SinkShared,
    e: &Entry,
    follow: &mut Vec<Frame>,
    rechecks: &mut Vec<Recheck>,
) -> Result<PlanAction, StorageError> {
    if sh.opts.hard_links && matches!(e.kind, EntryKind::File { .. }) {
        sh.links.announced(&e.path);
    }
    let at = sh.place(&e.path)?;
    let fm = final_meta(sh, e);
    let top_level = !e.path.contains(&b'/');
    let needed = kind_of(e);
    if needed == Kind::Dir && !sh.caps.directories {
        // Object stores have no directories: keys with '/' stand for them.
        return Ok(PlanAction::Skip);
    }
    // What stands in the way of an entry of another type goes first.
    let found = match sh.store.stat(&at.rel)? {
        Some(p) if in_the_way(p.kind, needed) => {
            let made = super::make_way::make_way(sh, &at, p.kind, needed, top_level)?;
            follow.extend(made);
            None
        }
        found => found,
    };
    match &e.kind {
        EntryKind::Dir => {
            let action = plan_dir(sh, &at, fm, &e.xattrs, found)?;
            // Mark a directory copied *as* its operand, so that the same command run
            // again resumes into it instead of nesting a copy inside it.
            if !e.path.contains(&b'/') {
                sh.store.mark_copy(&at.rel, &e.path);
            }
            Ok(action)
        }
        EntryKind::Symlink { target: link } => plan_symlink(sh, &at, link, fm, found),
        EntryKind::Special(kind) => plan_special(sh, &at, *kind, fm, found),
        EntryKind::HardLink { target } => plan_link(sh, at, target),
        EntryKind::File {
            size,
            digest,
            growing,
        } => {
            let src = FileToPlan {
                id: e.id,
                size: *size,
                digest: digest.as_deref(),
                growing: *growing,
                meta: fm,
                xattrs: &e.xattrs,
            };
            plan_file(sh, &src, at, found, follow, rechecks)
        }
    }
}

/// Plans a directory entry at `at`, where the destination has `found` (nothing, or a
/// directory: anything else was removed by `make_way`).
fn plan_dir(
    sh: &SinkShared,
    at: &Place,
    fm: FinalMeta,
    attrs: &[Xattr],
    found: Option<Present>,
) -> Result<PlanAction, StorageError> {
    match found {
        Some(_) => {}
        // Owner-writable until the end, so that a read-only source directory can still
        // be filled; its real mode is applied by `finish_dirs`.
        None => sh.store.make_shared_dir(&at.rel)?,
    }
    // A followed tree announces a directory again whenever something appears in it:
    // its metadata is applied once, at the end.
    if sh
        .dirs_seen
        .lock()
        .expect("dirs lock")
        .insert(at.rel.clone())
    {
        // Attributes go on with the mode, at the end: an access ACL sets the mode
        // too, and a read-only one would keep the directory from being filled. Past
        // what may be held, they are set now.
        let kept = crate::xattrs::kept(&sh.opts);
        let xattrs = match kept.any() {
            false => None,
            true => match crate::xattrs::Held::hold(attrs.to_vec(), kept, &sh.held_xattrs) {
                Ok(held) => Some(held),
                Err(attrs) => {
                    sh.store.set_xattrs(&at.rel, &attrs, kept)?;
                    None
                }
            },
        };
        sh.dirs.lock().expect("dirs lock").push(DirToFinish {
            rel: at.rel.clone(),
            meta: fm,
            xattrs,
        });
    }
    Ok(PlanAction::Skip)
}

/// Creates a symlink as announced. Its target is stored as it is and never followed
/// here: no later entry is written through it, because every path below the
/// destination is resolved with no symlink on the way (see `hetch_storage::confined`).
fn plan_symlink(
    sh: &SinkShared,
    at: &Place,
    link: &[u8],
    fm: FinalMeta,
    found: Option<Present>,
) -> Result<PlanAction, StorageError> {
    if !sh.caps.symlinks {
        return Err(StorageError::Refused {
            path: at.shown.display().to_string(),
            reason: "is a symbolic link, which this destination cannot hold; not copied",
        });
    }
    match found {
        Some(p)
            if p.kind == Kind::Symlink
                && sh
                    .store
                    .read_link(&at.rel)
                    .is_ok_and(|t| t.as_bytes() == link) =>
        {
            if !sh.opts.no_clobber && p.stale_meta(&fm, false) {
                sh.store.refresh_meta(&at.rel, Kind::Symlink, fm)?;
            }
            Progress::add(&sh.progress.skipped, 1);
            return Ok(PlanAction::Skip);
        }
        // Something else, or a link pointing elsewhere: replaced, unless told not to.
        Some(p) if sh.opts.no_clobber => return Err(not_replaced(at, p.kind)),
        _ => {}
    }
    sh.store.make_symlink(&at.rel, link, fm)?;
    Progress::add(&sh.progress.files, 1);
    Ok(PlanAction::Skip)
}

/// Creates a special file as announced, unless the same one is there (then only its
/// mode and mtime are brought in step). One the session did not ask for (a source
/// that sends it anyway), or a device a receiver may not make (not root), is skipped
/// with a warning, as rsync skips it.
fn plan_special(
    sh: &SinkShared,
    at: &Place,
    kind: hetch_proto::SpecialKind,
    fm: FinalMeta,
    found: Option<Present>,
) -> Result<PlanAction, StorageError> {
    let special = crate::special::from_wire(kind);
    // Raw: whoever shows the log escapes it.
    let shown = || at.shown.display().to_string();
    if !crate::special::wanted(&sh.opts, special) {
        sh.progress
            .warn(&crate::special::skipped(&shown(), special));
        return Ok(PlanAction::Skip);
    }
    if let Some(p) = found {
        if sh.store.special_at(&at.rel)? == Some(special) {
            if !sh.opts.no_clobber && p.stale_meta(&fm, true) {
                sh.store.refresh_meta(&at.rel, Kind::Other, fm)?;
            }
            Progress::add(&sh.progress.skipped, 1);
            return Ok(PlanAction::Skip);
        }
        if sh.opts.no_clobber {
            return Err(not_replaced(at, p.kind));
        }
    }
    match sh.store.make_special(&at.rel, special, fm) {
        Ok(()) => Progress::add(&sh.progress.files, 1),
        Err(e) if special.is_device() && e.errno() == Some(libc::EPERM) => {
            let why = format!(
                "{}: is {}; skipped: only root can make devices",
                shown(),
                special.name()
            );
            sh.progress.warn(&why);
        }
        Err(e) => return Err(e),
    }
    Ok(PlanAction::Skip)
}

/// A further name of a file announced earlier in the session: linked to it at the end
/// (`links::make_links`), once that file is in place.
fn plan_link(sh: &SinkShared, at: Place, target: &[u8]) -> Result<PlanAction, StorageError> {
    let refused = |reason| StorageError::Refused {
        path: at.shown.display().to_string(),
        reason,
    };
    if !sh.opts.hard_links {
        return Err(refused(
            "is a hard link, which this session did not ask for",
        ));
    }
    if !sh.links.was_announced(target) {
        return Err(refused(
            "is a hard link to a file not copied earlier in this session; not linked",
        ));
    }
    let target = sh.place(target)?;
    let shown = at.shown.display().to_string();
    if !sh.links.defer(at, target) {
        return Err(StorageError::Refused {
            path: shown,
            reason: "is one hard link more than a session makes (4 Mi); not linked",
        });
    }
    Ok(PlanAction::Skip)
}

/// `--no-clobber`: the destination has a different entry of type `found` where an
/// entry goes. Its type is named when it is not a file, so that a planted symlink is
/// not mistaken for a differing file.
fn not_replaced(at: &Place, found: Kind) -> StorageError {
    let reason = match found {
        Kind::Symlink => "is a symlink that differs; not replaced (--no-clobber)",
        Kind::File => "exists and differs; not replaced (--no-clobber)",
        _ => "is a special file; not replaced (--no-clobber)",
    };
    StorageError::Refused {
        path: at.shown.display().to_string(),
        reason,
    }
}

/// A file entry as announced by the source.
struct FileToPlan<'a> {
    id: u64,
    size: u64,
    /// Whole-file digest (checksum-skip sessions).
    digest: Option<&'a [u8]>,
    /// Still being written at the source.
    growing: bool,
    meta: FinalMeta,
    /// Its attributes (where the session keeps them).
    xattrs: &'a [Xattr],
}

/// Whole-file digest of a destination file, as the session's algorithm computes it.
fn digest_of(sh: &SinkShared, at: &Place) -> Result<Vec<u8>, StorageError> {
    sh.store
        .digest(&at.rel, sh.opts.checksum, sh.opts.block_size)
}

/// Reports a file that needs no transfer, with its digest when the session wants them.
fn report_present(
    sh: &SinkShared,
    id: u64,
    at: &Place,
    known: Option<Vec<u8>>,
    follow: &mut Vec<Frame>,
) -> Result<(), StorageError> {
    if !sh.opts.file_digests {
        return Ok(());
    }
    let digest = match known {
        Some(d) => d,
        None => digest_of(sh, at)?,
    };
    if let Some(m) = super::finish::manifest_entry(sh, at, Some(digest)) {
        follow.push(Frame::FileDone {
            file: id,
            error: None,
            digest: Some(m),
        });
    }
    Ok(())
}

fn plan_file(
    sh: &SinkShared,
    src: &FileToPlan<'_>,
    at: Place,
    found: Option<Present>,
    follow: &mut Vec<Frame>,
    rechecks: &mut Vec<Recheck>,
) -> Result<PlanAction, StorageError> {
    let (id, size, fm) = (src.id, src.size, src.meta);
    if Size::too_large(size) {
        // No file system holds it; refused before anything is sized by it.
        return Err(StorageError::Refused {
            path: at.shown.display().to_string(),
            reason: "announced size is beyond the largest possible file",
        });
    }
    if let Some(p) = found {
        let same_size = p.kind == Kind::File && p.size == size;
        let mut known = None;
        let same = if sh.opts.checksum_skip {
            // Only a matching digest counts; size and mtime are not trusted.
            match src.digest {
                Some(theirs) if same_size => {
                    let ours = digest_of(sh, &at)?;
                    let equal = ours == theirs;
                    known = Some(ours);
                    equal
                }
                _ => false,
            }
        } else {
            p.is_copy_of(size, (fm.mtime_sec, fm.mtime_nsec))
        };
        if same {
            // Current contents; changed attributes, mode (or, after a contents check,
            // mtime) are applied to the file as it is, as rsync does. Attributes first:
            // an access ACL sets the mode too.
            let kept = crate::xattrs::kept(&sh.opts);
            if !sh.opts.no_clobber && kept.any() {
                sh.store.set_xattrs(&at.rel, src.xattrs, kept)?;
            }
            if !sh.opts.no_clobber && p.stale_meta(&fm, true) {
                sh.store.refresh_meta(&at.rel, Kind::File, fm)?;
            }
            Progress::add(&sh.progress.skipped, 1);
            Progress::add(&sh.progress.skipped_bytes, size);
            report_present(sh, id, &at, known, follow)?;
            return Ok(PlanAction::Skip);
        }
        if sh.opts.no_clobber {
            return Err(not_replaced(&at, p.kind));
        }
    }
    if src.growing && !sh.caps.random_access {
        return Err(StorageError::Refused {
            path: at.shown.display().to_string(),
            reason: "following growing files into this destination is not supported; not copied",
        });
    }
    let bs = sh.opts.block_size;
    let spec = FileSpec {
        size: Size::announced(size, src.growing),
        block_size: bs,
        meta: fm,
        checksum: sh.opts.checksum,
        read_back_follows: sh.opts.verify == hetch_proto::Verify::Written,
    };
    let opened = sh.store.open(&at, &spec)?;
    let kept = crate::xattrs::kept(&sh.opts);
    if kept.any() {
        if let Err(e) = opened.file.keep_xattrs(src.xattrs.to_vec(), kept) {
            opened.file.abort();
            return Err(e);
        }
    }
    let mut core = FileCore::new(Setup {
        size: spec.size,
        block_size: bs,
        checksum: sh.opts.checksum,
        max_retries: sh.opts.max_retries,
        // In file order, reading back blocks that arrived early; a store that cannot
        // read back is read whole once the file is in place instead.
        ordered: sh.opts.file_digests && !sh.opts.checksum.merges_blocks() && sh.caps.read_back,
        meta: fm,
    });
    // Journaled blocks to read back before they count (see `recheck.rs`); a growing
    // file's are taken as they are (its whole-file digest is checked at its seal).
    // A store that cannot read back vouches for what it recorded (S3 checked each
    // part's checksum when it took it).
    let check = !sh.opts.trust_journal && !src.growing && sh.caps.read_back;
    let mut claimed = super::BlockSet::default();
    let mut journaled = Vec::new();
    for (i, d) in opened.recorded.unwrap_or_default() {
        if check {
            if claimed.insert(i) {
                journaled.push((i, d));
            }
        } else if core.taken_up(i, d) {
            Progress::add(&sh.progress.skipped_bytes, core.block_len(i));
        }
    }
    let out = opened.file;
    if core.remaining() == 0 {
        // Everything arrived before an interruption; only the rename was missing.
        let whole = super::finish::commit(sh, &*out, &at, core.complete(), sh.opts.fsync)?;
        Progress::add(&sh.progress.files, 1);
        if let Some(m) = super::finish::manifest_entry(sh, &at, whole) {
            follow.push(Frame::FileDone {
                file: id,
                error: None,
                digest: Some(m),
            });
        }
        return Ok(PlanAction::Skip);
    }
    // A growing file's plan covers the blocks that were full when it was announced;
    // the source sends later ones as they fill.
    let planned = if src.growing {
        super::growing::full_blocks(src.size, bs)
    } else {
        spec.blocks()
    };
    let ranges = if journaled.is_empty() {
        core.missing(planned)
    } else {
        // Nothing is done yet: the source sends all but the journaled blocks.
        core.recheck(journaled.len() as u64);
        rechecks.push(Recheck {
            file: id,
            blocks: journaled,
        });
        claimed.gaps(planned)
    };
    let inc = IncomingFile::new(at, out, &spec, core);
    sh.files
        .lock()
        .expect("files lock")
        .insert(id, Arc::new(inc));
    sh.planned();
    Ok(PlanAction::Send(ranges))
}

/// Applies directory modes and mtimes (deepest first, after their contents changed
/// them) and flushes the destination. A directory that could not be finished is a
/// failure reported to the source like a file's (so that it is named wherever the user
/// looks), in the returned frames.
pub(crate) fn finish_dirs(sh: &SinkShared) -> Result<Vec<Frame>, EngineError> {
    let dirs = std::mem::take(&mut *sh.dirs.lock().expect("dirs lock"));
    // Before the directories get their times: removing changes them. A comparison
    // changes nothing, and a mirroring session's deletion phase has already dealt
    // with leftovers (and must leave everything alone when it refused to delete).
    if !sh.opts.compare_only && sh.opts.delete.is_none() && !sh.opts.chosen_entries {
        remove_leftovers(sh, &dirs);
    }
    let mut failed = Vec::new();
    for d in dirs.iter().rev() {
        let xattrs = d.xattrs.as_ref().map_or(Ok(false), |held| {
            sh.store.set_xattrs(&d.rel, &held.attrs, held.kept)
        });
        if let Err(e) = xattrs.and_then(|_| sh.store.finish_dir(&d.rel, d.meta)) {
            failed.push(sh.failure(u64::MAX, e.to_string()));
        }
    }
    if sh.is_resolved() {
        sh.store.sync()?;
    }
    Ok(failed)
}

/// Removes the part files and journals that earlier, interrupted runs left in the
/// directories this session copied, and that no transfer holds (see
/// `hetch_storage::leftovers`). Every entry of such a directory came from the source
/// and has been settled by now (its own part file renamed or removed), so what is
/// left belongs to a file the source no longer has, or to another hetch writing here
/// right now, which holds its files and keeps them. The destination directory itself
/// is left alone: other transfers into it may be paused, to be resumed later.
fn remove_leftovers(sh: &SinkShared, dirs: &[DirToFinish]) {
    for DirToFinish { rel, .. } in dirs {
        sh.store.clean_leftovers(rel, &mut |e| {
            sh.progress.warn(&format!("leftover not removed: {e}"));
        });
    }
}
