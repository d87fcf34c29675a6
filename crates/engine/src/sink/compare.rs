//! Compare-only sessions (`hetch verify SRC DST`): every announced entry is checked
//! against the destination — type, size, symlink target, whole-file digest — and
//! nothing is written. Each difference comes back to the source as a failed file, one
//! line naming the destination path. At the end, destination entries the source did
//! not announce are reported too; to find them the sink remembers every announced
//! path, so memory grows with the number of entries (unlike a transfer).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use hetch_integrity::to_hex;
use hetch_proto::{Entry, EntryKind, Frame};
use hetch_storage::confined::OpenHow;
use hetch_storage::walk;

use super::SinkShared;
use crate::progress::Progress;
use crate::sum::sum_open_with;

/// Checks one entry; `Err` is the difference, one line.
pub(crate) fn compare_entry(sh: &SinkShared, e: &Entry) -> Result<(), String> {
    let at = sh.target(&e.path).map_err(|e| e.to_string())?;
    sh.seen.lock().expect("seen lock").insert(at.shown.clone());
    let shown = at.shown.display();
    // Through the destination handle like a transfer: a symlink on the way is not
    // followed, so nothing outside the compared tree is read or even looked at.
    let md = match sh.fs().stat(&at.rel) {
        Ok(Some(md)) => md,
        Ok(None) => return Err(format!("{shown}: missing at the destination")),
        Err(err) => return Err(err.to_string()),
    };
    let kind = |md: &std::fs::Metadata| hetch_storage::kind_name(md.file_type());
    match &e.kind {
        EntryKind::Dir if md.is_dir() => Ok(()),
        EntryKind::Dir => Err(format!(
            "{shown}: is {} where the source has a directory",
            kind(&md)
        )),
        EntryKind::Symlink { target: link } => {
            if !md.file_type().is_symlink() {
                return Err(format!(
                    "{shown}: is {} where the source has a symlink",
                    kind(&md)
                ));
            }
            let (dir, name) = sh.fs().parent(&at.rel).map_err(|e| e.to_string())?;
            let got = dir.read_link(&name).map_err(|err| err.to_string())?;
            if got.as_os_str() != OsStr::from_bytes(link) {
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
            if !md.is_file() {
                return Err(format!(
                    "{shown}: is {} where the source has a file",
                    kind(&md)
                ));
            }
            if md.size() != *size {
                return Err(format!(
                    "{shown}: size differs (source {size} bytes, destination {})",
                    md.size()
                ));
            }
            let algo = sh.opts.checksum;
            let mut buf = Vec::new();
            let ours = sh
                .fs()
                .open_file(&at.rel, OpenHow::READ)
                .and_then(|f| sum_open_with(algo, &f, &at.shown, sh.opts.block_size, &mut buf))
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

/// Compare-only sessions: destination entries under the compared tree that the source
/// did not announce, as failed-file frames. Empty for transfers.
pub(crate) fn extras(sh: &SinkShared) -> Vec<Frame> {
    if !sh.opts.compare_only {
        return Vec::new();
    }
    let Some(map) = sh.map.get() else {
        return Vec::new();
    };
    let root = match &map.rename_top {
        Some(name) => map.base.join(name),
        None => map.base.clone(),
    };
    let seen = std::mem::take(&mut *sh.seen.lock().expect("seen lock"));
    let mut out = Vec::new();
    let Ok(iter) = walk::walk(&root) else {
        return out;
    };
    for item in iter {
        let Ok(entry) = item else { continue };
        let path = entry.abs;
        let name = path.file_name().unwrap_or_default().as_bytes();
        if hetch_storage::part::is_temporary_name(name) {
            continue;
        }
        if seen.contains(&path) || is_inside_unseen(&path, &root, &seen) {
            continue;
        }
        let message = format!("{}: not in the source", path.display());
        sh.progress.fail(message.clone());
        out.push(Frame::FileDone {
            file: u64::MAX,
            error: Some(message),
            digest: None,
        });
    }
    out
}

/// Whether an ancestor of `path` (below `root`) was itself reported as extra: only the
/// top of an extra subtree is listed.
fn is_inside_unseen(
    path: &Path,
    root: &Path,
    seen: &std::collections::HashSet<std::path::PathBuf>,
) -> bool {
    let mut p = path.parent();
    while let Some(dir) = p {
        if dir == root || !dir.starts_with(root) {
            return false;
        }
        if !seen.contains(dir) {
            return true;
        }
        p = dir.parent();
    }
    false
}
