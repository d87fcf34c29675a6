//! Deciding, per announced entry, what the source must send; creating directories and
//! symlinks on the spot; applying directory metadata at the end.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use hetch_integrity::{self as integrity, FileDigest};
use hetch_proto::{Entry, EntryKind, Frame, PlanAction, PlanItem};
use hetch_storage::confined::OpenHow;
use hetch_storage::journal::{Journal, JournalHeader};
use hetch_storage::part::{self, FinalMeta};
use hetch_storage::{meta, StorageError};

use super::recheck::Recheck;
use super::{FileState, IncomingFile, OrderedDigest, SinkShared, Streamed, Target};
use crate::error::EngineError;
use crate::progress::Progress;

/// What planning a batch produced: the plan, frames that follow it, and the resumed
/// files whose journaled blocks are to be read back.
pub(crate) type Planned = (Vec<PlanItem>, Vec<Frame>, Vec<Recheck>);

/// Plans a batch. Per-entry problems become a `Skip` plus a `FileDone` error frame;
/// errors that make the whole destination unusable end the session.
pub(crate) fn plan_batch(sh: &SinkShared, batch: Vec<Entry>) -> Result<Planned, EngineError> {
    let mut plan = Vec::with_capacity(batch.len());
    let mut follow = Vec::new();
    let mut rechecks = Vec::new();
    if let Some(first) = batch.first() {
        sh.resolve(&first.path)?;
    }
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
    let files = batch.iter().filter(|e| !matches!(e.kind, EntryKind::Dir));
    sh.announced.fetch_add(files.count() as u64, SeqCst);
    if sh.opts.delete.is_some_and(|d| d.dry_run) {
        for e in batch {
            plan.push(PlanItem {
                id: e.id,
                action: PlanAction::Skip,
            });
            follow.extend(super::compare::would_copy(sh, &e));
        }
        return Ok((plan, follow, rechecks));
    }
    let mirroring = sh.opts.delete.is_some();
    for e in batch {
        if mirroring {
            // Even an entry that fails below: its destination is no extra.
            if let Ok(at) = sh.target(&e.path) {
                sh.seen.lock().expect("seen lock").insert(at.rel);
            }
        }
        let top_level = !e.path.contains(&b'/');
        match plan_entry(sh, &e, &mut follow, &mut rechecks) {
            Ok(action) => plan.push(PlanItem { id: e.id, action }),
            Err(err) if sh.stops_session(&err, top_level) => {
                let at = sh.target(&e.path).map(|t| t.shown);
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

fn plan_entry(
    sh: &SinkShared,
    e: &Entry,
    follow: &mut Vec<Frame>,
    rechecks: &mut Vec<Recheck>,
) -> Result<PlanAction, StorageError> {
    let at = sh.target(&e.path)?;
    let map = sh.map.get().expect("resolved before planning");
    if part::name_is_reserved(&at.rel) {
        return Err(StorageError::Refused {
            path: at.shown.display().to_string(),
            reason: "name is reserved for hetch's temporary files",
        });
    }
    // Setuid, setgid and sticky bits only on request: a receiver running as root must
    // not create setuid files a peer chose. (Ownership is never copied.)
    let keep = if sh.opts.preserve_special_modes {
        0o7777
    } else {
        0o777
    };
    let fm = FinalMeta {
        mode: e.mode & keep,
        mtime_sec: e.mtime_sec,
        mtime_nsec: e.mtime_nsec,
    };
    match &e.kind {
        EntryKind::Dir => {
            let action = plan_dir(sh, &at, fm)?;
            // Mark a directory copied *as* its operand, so that the same command run
            // again resumes into it instead of nesting a copy inside it.
            if map.rename_top.is_some() && !e.path.contains(&b'/') {
                if let Ok(dir) = sh.fs().open_dir(&at.rel) {
                    crate::dest::DestMap::mark_as_copy(&dir, OsStr::from_bytes(&e.path));
                }
            }
            Ok(action)
        }
        EntryKind::Symlink { target: link } => plan_symlink(sh, &at, link, fm),
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
            };
            plan_file(sh, &src, at, follow, rechecks)
        }
    }
}

fn plan_dir(sh: &SinkShared, at: &Target, fm: FinalMeta) -> Result<PlanAction, StorageError> {
    match sh.fs().stat(&at.rel)? {
        Some(md) if md.is_dir() => {}
        Some(md) => {
            return Err(StorageError::found_where_needed(
                &at.shown,
                md.file_type(),
                "directory",
            ))
        }
        None => {
            // Owner-writable until the end, so that a read-only source directory can
            // still be filled; its real mode is applied by `finish_dirs`.
            let (parent, name) = sh.fs().parent(&at.rel)?;
            parent.mkdir(&name, 0o700)?;
        }
    }
    // A followed tree announces a directory again whenever something appears in it:
    // its metadata is applied once, at the end.
    if sh
        .dirs_seen
        .lock()
        .expect("dirs lock")
        .insert(at.rel.clone())
    {
        sh.dirs
            .lock()
            .expect("dirs lock")
            .push((at.rel.clone(), fm));
    }
    Ok(PlanAction::Skip)
}

/// Creates a symlink as announced. Its target is stored as it is and never followed
/// here: no later entry is written through it, because every path below the
/// destination is resolved with no symlink on the way (see `hetch_storage::confined`).
fn plan_symlink(
    sh: &SinkShared,
    at: &Target,
    link: &[u8],
    fm: FinalMeta,
) -> Result<PlanAction, StorageError> {
    let link = OsStr::from_bytes(link);
    // The parent is resolved once; what is in it is looked at through its handle.
    let (parent, name) = sh.fs().parent(&at.rel)?;
    match parent.stat(Path::new(&name))? {
        Some(md)
            if md.file_type().is_symlink()
                && parent.read_link(&name).is_ok_and(|t| t.as_os_str() == link) =>
        {
            Progress::add(&sh.progress.skipped, 1);
            return Ok(PlanAction::Skip);
        }
        Some(md) if md.is_dir() => {
            return Err(StorageError::found_where_needed(
                &at.shown,
                md.file_type(),
                "symlink",
            ))
        }
        // Something else, or a link pointing elsewhere: replaced, unless told not to.
        Some(md) if sh.opts.no_clobber => return Err(not_replaced(at, md.file_type())),
        _ => {}
    }
    // Create under the temporary name and rename over: replacing is atomic.
    let tmp = part::part_name(&name);
    parent.remove_file(&tmp)?;
    parent.symlink(link, &tmp)?;
    parent.set_times_nofollow(&tmp, fm.mtime_sec, fm.mtime_nsec)?;
    parent.rename(&tmp, &name)?;
    Progress::add(&sh.progress.files, 1);
    Ok(PlanAction::Skip)
}

/// `--no-clobber`: the destination has a different entry of type `found` where an
/// entry goes. Its type is named when it is not a file, so that a planted symlink is
/// not mistaken for a differing file.
fn not_replaced(at: &Target, found: std::fs::FileType) -> StorageError {
    let reason = if found.is_symlink() {
        "is a symlink that differs; not replaced (--no-clobber)"
    } else if found.is_file() {
        "exists and differs; not replaced (--no-clobber)"
    } else {
        "is a special file; not replaced (--no-clobber)"
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
}

/// Whole-file digest of a destination file, as the session's algorithm computes it.
fn digest_of(sh: &SinkShared, at: &Target) -> Result<Vec<u8>, StorageError> {
    let f = sh.fs().open_file(&at.rel, OpenHow::READ)?;
    digest_of_open(sh, &f, &at.shown)
}

/// [`digest_of`] an open file.
fn digest_of_open(sh: &SinkShared, f: &File, shown: &Path) -> Result<Vec<u8>, StorageError> {
    let mut buf = Vec::new();
    crate::sum::sum_open_with(sh.opts.checksum, f, shown, sh.opts.block_size, &mut buf)
}

/// Reports a file that needs no transfer, with its digest when the session wants them.
fn report_present(
    sh: &SinkShared,
    id: u64,
    at: &Target,
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
    if let Some(m) = super::finish::manifest_entry(sh, &at.shown, Some(digest)) {
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
    at: Target,
    follow: &mut Vec<Frame>,
    rechecks: &mut Vec<Recheck>,
) -> Result<PlanAction, StorageError> {
    let (id, size, fm) = (src.id, src.size, src.meta);
    if size > super::MAX_FILE_SIZE {
        // No file system holds it; refused before anything is sized by it.
        return Err(StorageError::Refused {
            path: at.shown.display().to_string(),
            reason: "announced size is beyond the largest possible file",
        });
    }
    match sh.fs().stat(&at.rel)? {
        Some(md) if md.is_dir() => {
            return Err(StorageError::found_where_needed(
                &at.shown,
                md.file_type(),
                "file",
            ))
        }
        Some(md) => {
            let same_size = md.is_file() && md.len() == size;
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
                same_size && md.mtime() == fm.mtime_sec && md.mtime_nsec() as u32 == fm.mtime_nsec
            };
            if same {
                Progress::add(&sh.progress.skipped, 1);
                Progress::add(&sh.progress.skipped_bytes, size);
                report_present(sh, id, &at, known, follow)?;
                return Ok(PlanAction::Skip);
            }
            if sh.opts.no_clobber {
                return Err(not_replaced(&at, md.file_type()));
            }
        }
        None => {}
    }
    let bs = sh.opts.block_size;
    let shown = at.shown.clone();
    let rel = at.rel.clone();
    let mut inc = IncomingFile::new(at, size, src.growing, bs, fm);
    let blocks = inc.blocks();
    let mut state = FileState {
        digest: FileDigest::new(inc.size(), bs),
        remaining: blocks,
        ordered: (sh.opts.file_digests && !sh.opts.checksum.merges_blocks() && !src.growing).then(
            || OrderedDigest {
                hasher: sh.opts.checksum.hasher(),
                next: 0,
            },
        ),
        streamed: src.growing.then(Streamed::default),
        ..FileState::default()
    };
    let mut resumed = false;
    // Journaled blocks to read back before they count (see `recheck.rs`); a growing
    // file's are taken as they are (its whole-file digest is checked at its seal).
    let check = !sh.opts.trust_journal && !src.growing;
    let mut claimed = super::BlockSet::default();
    let mut journaled = Vec::new();
    let name = rel.file_name().unwrap_or_default();
    if blocks > 1 && sh.fs().stat(&part::part_path(&rel))?.is_some() {
        let header = journal_header(sh, &inc, src.growing);
        let mut verified = Vec::new();
        let (dir, _) = sh.fs().parent(&rel)?;
        let journal = Journal::resume(&dir, &part::journal_name(name), &header, |i, d| {
            if i < blocks {
                verified.push((i, d))
            }
        })?;
        if let Some(j) = journal {
            for (i, d) in verified {
                if check {
                    if claimed.insert(i) {
                        journaled.push((i, d));
                    }
                } else if !state.is_done(i) {
                    state.mark_done(i);
                    state.remaining -= 1;
                    match &mut state.streamed {
                        Some(s) => super::growing::keep_digest(s, i, d),
                        None => {
                            let _ = state.digest.add(i, d);
                        }
                    }
                    Progress::add(
                        &sh.progress.skipped_bytes,
                        integrity::block_len(inc.size(), bs, i),
                    );
                }
            }
            state.journal = Some(Arc::new(j));
            resumed = true;
        }
    }
    if state.remaining == 0 {
        // Everything arrived before an interruption; only the rename was missing.
        let merged = state.digest.finish().ok();
        let p = sh.open_part(&inc, true)?;
        p.set_len(size)?;
        let whole = match merged {
            Some(d) if sh.opts.checksum.merges_blocks() => Some(d.to_vec()),
            _ if sh.opts.file_digests => Some(digest_of_open(sh, p.file(), p.path())?),
            _ => None,
        };
        let xattr = merged.filter(|_| sh.opts.checksum.merges_blocks());
        p.finalize(fm, xattr.as_ref(), sh.opts.fsync, true)?;
        Progress::add(&sh.progress.files, 1);
        if let Some(m) = super::finish::manifest_entry(sh, &shown, whole) {
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
        super::growing::full_blocks(size, bs)
    } else {
        blocks
    };
    let ranges = if journaled.is_empty() {
        missing_ranges(&state, planned)
    } else {
        // Nothing is done yet: the source sends all but the journaled blocks.
        state.rechecking = journaled.len() as u64;
        state.part = Some(Arc::new(sh.open_part(&inc, true)?));
        rechecks.push(Recheck {
            file: id,
            blocks: journaled,
        });
        claimed.gaps(planned)
    };
    inc.resumed = resumed;
    *inc.state.get_mut().expect("file lock") = state;
    sh.files
        .lock()
        .expect("files lock")
        .insert(id, Arc::new(inc));
    sh.pending.fetch_add(1, SeqCst);
    Ok(PlanAction::Send(ranges))
}

/// The journal header for a file: a growing file's journal names no size or mtime
/// (both change while it grows), so a restarted follower resumes it.
pub(crate) fn journal_header(sh: &SinkShared, inc: &IncomingFile, growing: bool) -> JournalHeader {
    JournalHeader {
        block_size: sh.opts.block_size,
        file_size: if growing { super::GROWING } else { inc.size() },
        mtime_sec: if growing { 0 } else { inc.meta.mtime_sec },
        mtime_nsec: if growing { 0 } else { inc.meta.mtime_nsec },
        checksum: sh.opts.checksum.id(),
    }
}

/// The ranges of blocks in `0..blocks` not done yet: O(fragments), whatever the size.
pub(crate) fn missing_ranges(state: &FileState, blocks: u64) -> Vec<(u64, u64)> {
    state.done.gaps(blocks)
}

/// Applies directory modes and mtimes (deepest first, after their contents changed
/// them) and flushes the destination file system. A directory that could not be
/// finished is a failure reported to the source like a file's (so that it is named
/// wherever the user looks), in the returned frames.
pub(crate) fn finish_dirs(sh: &SinkShared) -> Result<Vec<Frame>, EngineError> {
    let dirs = std::mem::take(&mut *sh.dirs.lock().expect("dirs lock"));
    // Before the directories get their times: removing changes them. A comparison
    // changes nothing, and a mirroring session's deletion phase has already dealt
    // with leftovers (and must leave everything alone when it refused to delete).
    if !sh.opts.compare_only && sh.opts.delete.is_none() {
        remove_leftovers(sh, &dirs);
    }
    let mut failed = Vec::new();
    for (rel, fm) in dirs.iter().rev() {
        // Through the directory itself, opened with no symlink on the way: a
        // directory swapped for a link since it was made is not followed.
        let shown = sh.fs().path().join(rel);
        let r = sh.fs().open_dir(rel).and_then(|d| {
            let md = d.metadata().map_err(|e| StorageError::io(&shown, e))?;
            // Already right (a run that skipped everything): nothing to write, which
            // also spares a read-only copy an error.
            let same_time = md.mtime() == fm.mtime_sec && md.mtime_nsec() == fm.mtime_nsec as i64;
            if md.mode() & 0o7777 == fm.mode && same_time {
                return Ok(());
            }
            d.set_permissions(std::fs::Permissions::from_mode(fm.mode))
                .map_err(|e| StorageError::io(&shown, e))?;
            meta::set_file_mtime(&d, &shown, fm.mtime_sec, fm.mtime_nsec)
        });
        if let Err(e) = r {
            failed.push(sh.failure(u64::MAX, e.to_string()));
        }
    }
    if let Some(fs) = sh.fs.get() {
        fs.sync_fs()?;
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
fn remove_leftovers(sh: &SinkShared, dirs: &[(std::path::PathBuf, FinalMeta)]) {
    use hetch_storage::confined::Links;
    use hetch_storage::leftovers::{clean_dir, Clean};
    for (rel, _) in dirs {
        let Ok(dir) = sh.fs().subdir(rel, Links::Refuse) else {
            continue; // replaced meanwhile: not ours to look into
        };
        clean_dir(&dir, Clean::default(), &mut |r| {
            if let Err(e) = r {
                sh.progress.warn(&format!("leftover not removed: {e}"));
            }
        });
    }
}
