//! Compare-only sessions (`hetch verify SRC DST`): every announced entry is checked
//! against the destination — type, size, symlink target, whole-file digest — and
//! nothing is written. Each difference comes back to the source as a failed file, one
//! line naming the destination path. At the end, destination entries the source did
//! not announce are reported too (see [`super::mirror`]); to find them the sink
//! remembers every announced path, so memory grows with the number of entries (unlike
//! a transfer).

use std::os::unix::ffi::OsStrExt;

use hetch_integrity::to_hex;
use hetch_proto::{Entry, EntryKind};

use super::SinkShared;
use crate::progress::Progress;
use crate::store::Kind;

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
        EntryKind::Dir if found.kind == Kind::Dir => Ok(()),
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

/// Dry runs: a change frame when the entry would be copied (the destination has
/// nothing there) or would replace what is there (another type, another link target,
/// or a file whose size or mtime differ: the rule a transfer skips by); a file that
/// would be skipped is counted as skipped. Looks through the store only.
pub(crate) fn would_copy(sh: &SinkShared, e: &Entry) -> Option<hetch_proto::Frame> {
    use hetch_proto::{Change, ChangeAction, Frame};
    let at = sh.place(&e.path).ok()?;
    // Only a mirror's deletion phase needs every path: a plain dry run keeps none.
    if sh.opts.delete.is_some() {
        sh.seen.lock().expect("seen lock").insert(at.rel.clone());
    }
    let found = sh.store.stat(&at.rel);
    let missing = matches!(found, Ok(None));
    let same = match (found, &e.kind) {
        (_, EntryKind::Dir) if !sh.caps.directories => true,
        (Ok(Some(p)), EntryKind::Dir) => p.kind == Kind::Dir,
        (Ok(Some(p)), EntryKind::Symlink { target }) => {
            p.kind == Kind::Symlink
                && sh
                    .store
                    .read_link(&at.rel)
                    .is_ok_and(|t| t.as_bytes() == target.as_slice())
        }
        (Ok(Some(p)), EntryKind::File { size, .. }) => {
            p.is_copy_of(*size, (e.mtime_sec, e.mtime_nsec))
        }
        _ => false,
    };
    let size = match e.kind {
        EntryKind::File { size, .. } => size,
        _ => 0,
    };
    if same {
        if matches!(e.kind, EntryKind::File { .. }) {
            Progress::add(&sh.progress.skipped, 1);
            Progress::add(&sh.progress.skipped_bytes, size);
        }
        return None;
    }
    let action = match missing {
        true => ChangeAction::WouldCopy,
        false => ChangeAction::WouldReplace,
    };
    let path = sh.store.manifest_path(&at);
    sh.progress.change(action, &path, size);
    Some(Frame::Change(Change { action, path, size }))
}
