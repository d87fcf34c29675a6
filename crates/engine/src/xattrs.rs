//! Keeping extended attributes (`--xattrs`) and POSIX ACLs (`--acls`), as
//! `rsync -X -A` keeps them.
//!
//! Only files and directories carry them (Linux allows user attributes on nothing
//! else, and ACLs are not defined on symlinks). The source reads the kept ones with
//! each entry; the sink brings the destination's in step: sets what differs, removes
//! kept ones the source lacks, and leaves alone hetch's own (`user.hetch.*`) and every
//! namespace the session does not keep. ACLs travel in the binary form Linux stores
//! them in, so they name users and groups by number (rsync's `--numeric-ids`).
//!
//! Order matters for ACLs: setting an access ACL also sets the mode's permission bits,
//! and setting the mode then sets the ACL's mask. Attributes are therefore applied
//! before the mode, which (equal to the source's) leaves the mask the source has.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use hetch_proto::{KeptXattrs, Xattr, MAX_ENTRY_XATTRS, MAX_XATTR_VALUE};
use hetch_storage::xattr::{self as x, Handle};
use hetch_storage::StorageError;

use crate::options::Options;

/// The attributes a session with `opts` keeps.
pub(crate) fn kept(opts: &Options) -> KeptXattrs {
    KeptXattrs {
        user: opts.xattrs,
        acls: opts.acls,
    }
}

/// Bytes of attributes the files of one destination hold until their commits, at most
/// (see [`Held`]): a peer announcing thousands of files with the largest attributes
/// allowed cannot make a sink keep gigabytes of them.
const HELD_BUDGET: usize = 32 << 20;

/// Attributes a file holds until its commit, counted in its store's total while held.
pub(crate) struct Held {
    /// The attributes, sorted by name.
    pub attrs: Vec<Xattr>,
    /// The classes they bring in step.
    pub kept: KeptXattrs,
    bytes: usize,
    total: Arc<AtomicUsize>,
}

impl Held {
    /// Holds `attrs` if `total` stays within [`HELD_BUDGET`]; gives them back if not.
    pub fn hold(
        attrs: Vec<Xattr>,
        kept: KeptXattrs,
        total: &Arc<AtomicUsize>,
    ) -> Result<Held, Vec<Xattr>> {
        let bytes = hetch_proto::xattrs_size(&attrs);
        let before = total.fetch_add(bytes, Relaxed);
        if before + bytes > HELD_BUDGET {
            total.fetch_sub(bytes, Relaxed);
            return Err(attrs);
        }
        Ok(Held {
            attrs,
            kept,
            bytes,
            total: total.clone(),
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.total.fetch_sub(self.bytes, Relaxed);
    }
}

/// The kept attributes of the object behind `h`, sorted by name. More than an entry
/// may carry ([`MAX_ENTRY_XATTRS`]) is an error: copying the entry without them would
/// not be a faithful copy.
pub(crate) fn read(h: Handle<'_>, kept: KeptXattrs) -> io::Result<Vec<Xattr>> {
    let mut attrs = Vec::new();
    let mut total = 0usize;
    for name in x::names(h)? {
        if !kept.keeps(&name) {
            continue;
        }
        let Some(value) = x::get(h, &name, MAX_XATTR_VALUE)? else {
            continue; // removed since it was listed
        };
        total += name.len() + value.len();
        if total > MAX_ENTRY_XATTRS {
            return Err(io::Error::other(format!(
                "extended attributes larger than {} KiB together, more than hetch carries",
                MAX_ENTRY_XATTRS >> 10
            )));
        }
        attrs.push(Xattr { name, value });
    }
    attrs.sort();
    Ok(attrs)
}

/// Brings the kept attributes of the object behind `h` in step with `theirs` (sorted,
/// as decoded); true if anything changed.
pub(crate) fn apply(h: Handle<'_>, theirs: &[Xattr], kept: KeptXattrs) -> io::Result<bool> {
    let mut changed = false;
    for name in x::names(h)? {
        if kept.keeps(&name) && theirs.binary_search_by(|a| a.name.cmp(&name)).is_err() {
            x::remove(h, &name)?;
            changed = true;
        }
    }
    for a in theirs.iter().filter(|a| kept.keeps(&a.name)) {
        // A value longer than any the source may send differs anyway.
        let ours = match x::get(h, &a.name, MAX_XATTR_VALUE) {
            Err(e) if e.raw_os_error() == Some(libc::E2BIG) => None,
            other => other?,
        };
        if ours.as_deref() != Some(&a.value[..]) {
            x::set(h, &a.name, &a.value)?;
            changed = true;
        }
    }
    Ok(changed)
}

/// The names of the attributes that differ between `theirs` and `ours` (both sorted),
/// each with the side that has it, or none when they are the same.
pub(crate) fn differing(theirs: &[Xattr], ours: &[Xattr]) -> Option<String> {
    let name = |a: &Xattr| String::from_utf8_lossy(&a.name).into_owned();
    let mut out = Vec::new();
    for t in theirs {
        match ours.iter().find(|o| o.name == t.name) {
            None => out.push(format!("{} only at the source", name(t))),
            Some(o) if o.value != t.value => out.push(format!("{} has another value", name(t))),
            Some(_) => {}
        }
    }
    for o in ours
        .iter()
        .filter(|o| !theirs.iter().any(|t| t.name == o.name))
    {
        out.push(format!("{} only at the destination", name(o)));
    }
    (!out.is_empty()).then(|| out.join(", "))
}

/// The kept attributes of a listed source file or directory at `abs`: reached without
/// following a symlink in its place, and, where sources are confined, only below one
/// of `within` (as its data is: see `source::open_source`). The message names `abs`.
pub(crate) fn of_source(
    abs: &Path,
    within: &[std::path::PathBuf],
    kept: KeptXattrs,
) -> Result<Vec<Xattr>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |e: io::Error| {
        let e = io::Error::new(e.kind(), format!("reading extended attributes: {e}"));
        StorageError::io(abs, e).to_string()
    };
    // O_PATH: no permission on the entry is needed, and its atime is left alone.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(abs)
        .map_err(fail)?;
    if !within.is_empty() {
        hetch_storage::confined::check_below_any(&file, within).map_err(fail)?;
    }
    let ft = file.metadata().map_err(fail)?.file_type();
    if !(ft.is_file() || ft.is_dir()) {
        return Ok(Vec::new()); // replaced by another kind since it was listed
    }
    read(Handle::Path(file.as_fd()), kept).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(name: &str, value: &str) -> Xattr {
        Xattr {
            name: name.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
        }
    }

    #[test]
    fn only_kept_attributes_are_read_and_brought_in_step() {
        let t = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(t.path().join("f")).unwrap();
        let h = Handle::Open(f.as_fd());
        if x::set(h, b"user.old", b"1").is_err() {
            return; // no user attributes on this file system
        }
        x::set(h, b"user.hetch.top", b"mine").unwrap();
        x::set(h, b"user.same", b"s").unwrap();
        let users = KeptXattrs {
            user: true,
            acls: false,
        };
        let theirs = vec![attr("user.new", "2"), attr("user.same", "s")];
        assert!(apply(h, &theirs, users).unwrap());
        assert_eq!(
            read(h, users).unwrap(),
            theirs,
            "user.old removed, user.new set"
        );
        assert!(!apply(h, &theirs, users).unwrap(), "nothing left to change");
        assert_eq!(
            x::get(h, b"user.hetch.top", 16).unwrap(),
            Some(b"mine".to_vec()),
            "hetch's own attribute is left alone"
        );
        let none = KeptXattrs::default();
        assert!(read(h, none).unwrap().is_empty());
        assert!(
            !apply(h, &[], none).unwrap(),
            "an unkept class is not touched"
        );
        assert_eq!(read(h, users).unwrap().len(), 2);
    }

    #[test]
    fn held_attributes_are_bounded_and_given_back() {
        let total = Arc::new(AtomicUsize::new(0));
        let big = || vec![attr("user.v", &"x".repeat(60 << 10))];
        let kept = KeptXattrs::default();
        let mut held = Vec::new();
        while let Ok(h) = Held::hold(big(), kept, &total) {
            held.push(h);
        }
        assert!(total.load(Relaxed) <= HELD_BUDGET);
        assert_eq!(held.len(), HELD_BUDGET / (60 << 10 | 6));
        held.pop();
        assert!(
            Held::hold(big(), kept, &total).is_ok(),
            "room again once one is gone"
        );
        held.clear();
        assert_eq!(total.load(Relaxed), 0);
    }

    #[test]
    fn a_source_over_the_bound_is_refused_with_its_name() {
        // tmpfs holds values of 64 KiB (ext4 keeps one block of attributes per file).
        let t = tempfile::tempdir_in("/dev/shm").unwrap();
        let p = t.path().join("big");
        let f = std::fs::File::create(&p).unwrap();
        let h = Handle::Open(f.as_fd());
        let value = vec![7u8; 60 << 10];
        for i in 0..5 {
            x::set(h, format!("user.v{i}").as_bytes(), &value).unwrap();
        }
        let users = KeptXattrs {
            user: true,
            acls: false,
        };
        let err = of_source(&p, &[], users).unwrap_err();
        assert!(err.contains("big") && err.contains("256 KiB"), "{err}");
    }
}
