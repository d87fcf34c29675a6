//! Compare-only sessions (`hetch verify SRC DST`): every announced entry is checked
//! against the destination — type, size, symlink target, whole-file digest — and
//! nothing is written. Each difference comes back to the source as a failed file, one
//! line naming the destination path. At the end, destination entries the source did
//! not announce are reported too (see [`super::mirror`]); to find them the sink
//! remembers every announced path, so memory grows with the number of entries (unlike
//! a transfer).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

use hetch_integrity::to_hex;
use hetch_proto::{Entry, EntryKind};
use hetch_storage::confined::OpenHow;

use super::SinkShared;
use crate::progress::Progress;
use crate::sum::sum_open_with;

/// Checks one entry; `Err` is the difference, one line.
pub(crate) fn compare_entry(sh: &SinkShared, e: &Entry) -> Result<(), String> {
    let at = sh.target(&e.path).map_err(|e| e.to_string())?;
    sh.seen.lock().expect("seen lock").insert(at.rel.clone());
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

/// Dry runs of mirroring sessions: a change frame when the entry would be copied
/// (missing, another type, another link target, or a file whose size or mtime differ:
/// the rule a transfer skips by). Looks through the destination handle only.
pub(crate) fn would_copy(sh: &SinkShared, e: &Entry) -> Option<hetch_proto::Frame> {
    use hetch_proto::{Change, ChangeAction, Frame};
    let at = sh.target(&e.path).ok()?;
    sh.seen.lock().expect("seen lock").insert(at.rel.clone());
    let same = match (sh.fs().stat(&at.rel), &e.kind) {
        (Ok(Some(md)), EntryKind::Dir) => md.is_dir(),
        (Ok(Some(md)), EntryKind::Symlink { target }) => {
            md.file_type().is_symlink()
                && sh
                    .fs()
                    .parent(&at.rel)
                    .and_then(|(dir, name)| dir.read_link(&name))
                    .is_ok_and(|t| t.as_bytes() == target.as_slice())
        }
        (Ok(Some(md)), EntryKind::File { size, .. }) => {
            md.is_file()
                && md.size() == *size
                && md.mtime() == e.mtime_sec
                && md.mtime_nsec() as u32 == e.mtime_nsec
        }
        _ => false,
    };
    if same {
        return None;
    }
    let path = sh.manifest_path(&at.shown);
    sh.progress.change(ChangeAction::WouldCopy, &path);
    Some(Frame::Change(Change {
        action: ChangeAction::WouldCopy,
        path,
    }))
}
