//! Compare-only sessions (`hetch verify SRC DST`): every announced entry is checked
//! against the destination — type, size, symlink target, whole-file digest — and
//! nothing is written. Each difference comes back to the source as a failed file, one
//! line naming the destination path. At the end, destination entries the source did
//! not announce are reported too (see [`super::mirror`]); to find them the sink
//! remembers every announced path, so memory grows with the number of entries (unlike
//! a transfer).

use std::os::unix::ffi::OsStrExt;

use hetch_integrity::to_hex;
use hetch_proto::{Change, ChangeAction, Entry, EntryKind, Frame};

use super::SinkShared;
use crate::progress::Progress;
use crate::store::{Kind, Place};

/// Checks one entry; `Err` is the difference, one line.
pub(crate) fn compare_entry(sh: &SinkShared, e: &Entry) -> Result<(), String> {
    let at = sh.place(&e.path).map_err(|e| e.to_string())?;
    sh.seen.lock().expect("seen lock").insert(at.rel.clone());
    let shown = at.shown.display();
    if matches!(e.kind, EntryKind::Dir) && !sh.caps.directories {
        return Ok(()); // keys with '/' stand for directories
    }
    // Through the store like a transfer: a symlink on the way is not followed, so
    // nothing outside the compared tree is read or even looked at.
    let found = match sh.store.stat(&at.rel) {
        Ok(Some(p)) => p,
        Ok(None) => return Err(format!("{shown}: missing at the destination")),
        Err(err) => return Err(err.to_string()),
    };
    let kind = found.kind.name();
    match &e.kind {
        EntryKind::HardLink { target } => {
            let to = sh.place(target).map_err(|err| err.to_string())?;
            if !sh
                .store
                .linked(&to.rel, &at.rel)
                .map_err(|err| err.to_string())?
            {
                return Err(format!(
                    "{shown}: is not a hard link to {}",
                    to.shown.display()
                ));
            }
            Progress::add(&sh.progress.files, 1);
            Ok(())
        }
        EntryKind::Special(k) => {
            let special = crate::special::from_wire(*k);
            let there = sh
                .store
                .special_at(&at.rel)
                .map_err(|err| err.to_string())?;
            if there != Some(special) {
                return Err(format!(
                    "{shown}: is {kind} where the source has {}",
                    special.name()
                ));
            }
            Progress::add(&sh.progress.files, 1);
            Ok(())
        }
        EntryKind::Dir if found.kind == Kind::Dir => same_xattrs(sh, e, &at),
        EntryKind::Dir => Err(format!(
            "{shown}: is {kind} where the source has a directory"
        )),
        EntryKind::Symlink { target: link } => {
            if found.kind != Kind::Symlink {
                return Err(format!("{shown}: is {kind} where the source has a symlink"));
            }
            let got = sh.store.read_link(&at.rel).map_err(|err| err.to_string())?;
            if got.as_bytes() != link.as_slice() {
                return Err(format!(
                    "{shown}: symlink points to {} where the source's points to {}",
                    std::path::Path::new(&got).display(),
                    String::from_utf8_lossy(link)
                ));
            }
            Progress::add(&sh.progress.files, 1);
            Ok(())
        }
        EntryKind::File { size, digest, .. } => {
            if found.kind != Kind::File {
                return Err(format!("{shown}: is {kind} where the source has a file"));
            }
            if found.size != *size {
                return Err(format!(
                    "{shown}: size differs (source {size} bytes, destination {})",
                    found.size
                ));
            }
            let algo = sh.opts.checksum;
            let ours = sh
                .store
                .digest(&at.rel, algo, sh.opts.block_size)
                .map_err(|err| err.to_string())?;
            match digest {
                Some(theirs) if *theirs == ours => {
                    same_xattrs(sh, e, &at)?;
                    Progress::add(&sh.progress.files, 1);
                    Progress::add(&sh.progress.bytes, *size);
                    Ok(())
                }
                Some(theirs) => Err(format!(
                    "{shown}: content differs ({algo} source {}, destination {})",
                    to_hex(theirs),
                    to_hex(&ours)
                )),
                None => Err(format!("{shown}: the source sent no digest to compare")),
            }
        }
    }
}

/// Checks the kept attributes of the file or directory at `at` against the entry's;
/// `Err` names the attributes that differ.
fn same_xattrs(sh: &SinkShared, e: &Entry, at: &Place) -> Result<(), String> {
    let kept = crate::xattrs::kept(&sh.opts);
    if !kept.any() {
        return Ok(());
    }
    let ours = sh
        .store
        .xattrs(&at.rel, kept)
        .map_err(|err| err.to_string())?;
    match crate::xattrs::differing(&e.xattrs, &ours) {
        None => Ok(()),
        Some(names) => Err(format!(
            "{}: extended attributes differ ({names})",
            at.shown.display()
        )),
    }
}

/// Dry runs: a change frame when the entry would be copied (the destination has
/// nothing there), would replace what is there (another type, another link target, or
/// a file whose size or mtime differ: the rule a transfer skips by) or would only get
/// its mode and mtime (a current file whose mode changed, or whose mtime did where a
/// contents check is asked for, as it then has no digest to compare here). What would
/// go to make way for another type is listed before it, or the entry fails as the run
/// would fail it (see `make_way`). A file that would be skipped is counted as skipped.
/// Looks through the store only.
pub(crate) fn would_copy(sh: &SinkShared, e: &Entry, follow: &mut Vec<Frame>) {
    let Ok(at) = sh.place(&e.path) else {
        return;
    };
    // Only a mirror's deletion phase needs every path: a plain dry run keeps none.
    if sh.opts.delete.is_some() {
        sh.seen.lock().expect("seen lock").insert(at.rel.clone());
    }
    if matches!(e.kind, EntryKind::Dir) && !sh.caps.directories {
        return;
    }
    if let EntryKind::Special(k) = e.kind {
        if !crate::special::wanted(&sh.opts, crate::special::from_wire(k)) {
            return; // skipped with a warning by the run
        }
    }
    let fm = super::plan::final_meta(sh, e);
    let found = sh.store.stat(&at.rel);
    let missing = matches!(found, Ok(None));
    let kept = crate::xattrs::kept(&sh.opts);
    let xattrs_stale = || {
        kept.any()
            && !sh.opts.no_clobber
            && sh
                .store
                .xattrs(&at.rel, kept)
                .map_or(true, |ours| ours != e.xattrs)
    };
    let (same, stale) = match (&found, &e.kind) {
        (Ok(Some(p)), EntryKind::Dir) => {
            let same = p.kind == Kind::Dir;
            (same, same && xattrs_stale())
        }
        (Ok(Some(p)), EntryKind::Symlink { target }) => {
            let same = p.kind == Kind::Symlink
                && sh
                    .store
                    .read_link(&at.rel)
                    .is_ok_and(|t| t.as_bytes() == target.as_slice());
            (same, false)
        }
        (Ok(Some(p)), EntryKind::File { size, .. }) => {
            let same = p.is_copy_of(*size, (e.mtime_sec, e.mtime_nsec));
            let stale = !sh.opts.no_clobber && p.stale_meta(&fm, true) || xattrs_stale();
            (same, same && stale)
        }
        (Ok(Some(_)), EntryKind::HardLink { target }) => {
            let linked = sh
                .place(target)
                .ok()
                .map(|to| sh.store.linked(&to.rel, &at.rel));
            (matches!(linked, Some(Ok(true))), false)
        }
        (Ok(Some(p)), EntryKind::Special(k)) => {
            let there = sh.store.special_at(&at.rel).ok().flatten();
            let same = there == Some(crate::special::from_wire(*k));
            (same, same && !sh.opts.no_clobber && p.stale_meta(&fm, true))
        }
        _ => (false, false),
    };
    let size = match e.kind {
        EntryKind::File { size, .. } => size,
        _ => 0,
    };
    if same && !stale {
        if matches!(e.kind, EntryKind::File { .. }) {
            Progress::add(&sh.progress.skipped, 1);
            Progress::add(&sh.progress.skipped_bytes, size);
        }
        return;
    }
    if let Ok(Some(p)) = found {
        let needed = super::plan::kind_of(e);
        if super::plan::in_the_way(p.kind, needed) {
            let top_level = !e.path.contains(&b'/');
            match super::make_way::make_way(sh, &at, p.kind, needed, top_level) {
                Ok(frames) => follow.extend(frames),
                Err(err) => {
                    follow.push(sh.failure(e.id, err.to_string()));
                    return;
                }
            }
        }
    }
    let (action, size) = match (missing, stale) {
        (true, _) => (ChangeAction::WouldCopy, size),
        (false, true) => (ChangeAction::WouldUpdate, 0),
        (false, false) => (ChangeAction::WouldReplace, size),
    };
    let path = sh.store.manifest_path(&at);
    sh.progress.change(action, &path, size);
    follow.push(Frame::Change(Change { action, path, size }));
}
