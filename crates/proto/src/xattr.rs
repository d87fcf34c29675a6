//! Extended attributes an [`crate::Entry`] carries (`--xattrs`, `--acls`).
//!
//! Only two kinds travel: user attributes (`user.*`, but never hetch's own
//! `user.hetch.*`) and POSIX ACLs, which Linux keeps as the attributes
//! `system.posix_acl_access` and `system.posix_acl_default`. Everything else
//! (`trusted.*`, `security.*`: SELinux labels, file capabilities) grants privilege at
//! the receiver, so no peer may set it: the decoder refuses those names outright.
//! Every length is bounded as the Linux limits bound them (a name of 255 bytes, a value
//! of 64 KiB), and an entry's attributes together by [`MAX_ENTRY_XATTRS`], before
//! anything is allocated for them.

use crate::wire::{Put, Reader};
use crate::ProtoError;

/// One extended attribute: its full name (namespace included) and its value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Xattr {
    /// Full name, e.g. `user.comment` or `system.posix_acl_access`.
    pub name: Vec<u8>,
    /// Value, as the file system stores it (an ACL in its binary xattr form).
    pub value: Vec<u8>,
}

/// Longest attribute name (Linux's `XATTR_NAME_MAX`).
pub const MAX_XATTR_NAME: usize = 255;
/// Largest attribute value (Linux's `XATTR_SIZE_MAX`).
pub const MAX_XATTR_VALUE: usize = 64 << 10;
/// Most bytes (names and values) of one entry's attributes together; an entry with
/// more is not copied (its source names it).
pub const MAX_ENTRY_XATTRS: usize = 256 << 10;
/// The access ACL of a file or directory.
pub const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
/// The default ACL of a directory (what entries created in it inherit).
pub const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";
/// Namespace of user attributes.
const USER: &[u8] = b"user.";
/// hetch's own attributes (which copy a destination is, for instance): kept by each
/// side for itself, never sent or replaced.
const OWN: &[u8] = b"user.hetch.";

/// Which option carries an attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrClass {
    /// A user attribute (`--xattrs`).
    User,
    /// A POSIX ACL (`--acls`).
    Acl,
}

/// Which classes of attributes a session keeps (from its `xattrs` and `acls`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeptXattrs {
    /// User attributes (`--xattrs`).
    pub user: bool,
    /// POSIX ACLs (`--acls`).
    pub acls: bool,
}

impl KeptXattrs {
    /// Whether the session keeps any attribute at all (otherwise none is read,
    /// sent or touched).
    pub fn any(self) -> bool {
        self.user || self.acls
    }

    /// Whether attribute `name` is one the session keeps: read at the source, and
    /// brought in step (set or removed) at the destination.
    pub fn keeps(self, name: &[u8]) -> bool {
        match xattr_class(name) {
            Some(XattrClass::User) => self.user,
            Some(XattrClass::Acl) => self.acls,
            None => false,
        }
    }
}

/// The class of attribute `name`, or none for a name that never travels.
pub fn xattr_class(name: &[u8]) -> Option<XattrClass> {
    if name == ACL_ACCESS || name == ACL_DEFAULT {
        Some(XattrClass::Acl)
    } else if name.starts_with(USER) && name.len() > USER.len() && !name.starts_with(OWN) {
        Some(XattrClass::User)
    } else {
        None
    }
}

/// Bytes `attrs` count against [`MAX_ENTRY_XATTRS`].
pub fn xattrs_size(attrs: &[Xattr]) -> usize {
    attrs.iter().map(|a| a.name.len() + a.value.len()).sum()
}

/// Bytes `attrs` take on the wire.
pub(crate) fn wire_len(attrs: &[Xattr]) -> usize {
    4 + attrs
        .iter()
        .map(|a| 8 + a.name.len() + a.value.len())
        .sum::<usize>()
}

pub(crate) fn encode(attrs: &[Xattr], out: &mut Vec<u8>) {
    out.put_len(attrs.len());
    for a in attrs {
        out.put_bytes(&a.name);
        out.put_bytes(&a.value);
    }
}

/// Reads an entry's attributes: names in strictly ascending order (one encoding per
/// set, no name twice), each of a class that travels, every length within bounds.
pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Vec<Xattr>, ProtoError> {
    let count = r.count(8)?;
    if count > MAX_ENTRY_XATTRS {
        return Err(r.err("more extended attributes than an entry may carry"));
    }
    let mut attrs: Vec<Xattr> = Vec::new();
    let mut total = 0usize;
    for _ in 0..count {
        let name = r.bytes()?;
        let value = r.bytes()?;
        if name.len() > MAX_XATTR_NAME || name.contains(&0) {
            return Err(r.err("extended attribute name too long or with a NUL byte"));
        }
        if xattr_class(&name).is_none() {
            return Err(r.err("extended attribute outside user.* and the POSIX ACLs"));
        }
        if value.len() > MAX_XATTR_VALUE {
            return Err(r.err("extended attribute value longer than 64 KiB"));
        }
        if attrs.last().is_some_and(|last| last.name >= name) {
            return Err(r.err("extended attributes not in ascending order of name"));
        }
        total += name.len() + value.len();
        if total > MAX_ENTRY_XATTRS {
            return Err(r.err("extended attributes of one entry larger than 256 KiB"));
        }
        attrs.push(Xattr { name, value });
    }
    Ok(attrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_user_attributes_and_acls_travel() {
        assert_eq!(xattr_class(b"user.comment"), Some(XattrClass::User));
        assert_eq!(xattr_class(ACL_ACCESS), Some(XattrClass::Acl));
        assert_eq!(xattr_class(ACL_DEFAULT), Some(XattrClass::Acl));
        for refused in [
            &b"user."[..],
            b"user.hetch.copy",
            b"security.capability",
            b"security.selinux",
            b"trusted.overlay.opaque",
            b"system.nfs4_acl",
            b"comment",
        ] {
            assert_eq!(xattr_class(refused), None, "{:?}", refused);
        }
    }

    fn decoded(attrs: &[(&[u8], usize)]) -> Result<Vec<Xattr>, ProtoError> {
        let mut out = Vec::new();
        out.put_len(attrs.len());
        for (name, value_len) in attrs {
            out.put_bytes(name);
            out.put_bytes(&vec![7; *value_len]);
        }
        decode(&mut Reader::new("entry", &out))
    }

    #[test]
    fn hostile_sets_are_refused() {
        assert!(decoded(&[(b"user.a", 1), (b"user.b", 2)]).is_ok());
        let refused = [
            vec![(&b"user.b"[..], 1), (b"user.a", 1)],   // out of order
            vec![(&b"user.a"[..], 1), (b"user.a", 1)],   // twice
            vec![(&b"security.capability"[..], 20)],     // privilege
            vec![(&b"user.hetch.copy"[..], 1)],          // hetch's own
            vec![(&b"user.a"[..], MAX_XATTR_VALUE + 1)], // value too long
        ];
        for set in refused {
            assert!(decoded(&set).is_err(), "{set:?}");
        }
        let long = [b'u', b's', b'e', b'r', b'.']
            .into_iter()
            .chain(std::iter::repeat_n(b'x', MAX_XATTR_NAME))
            .collect::<Vec<u8>>();
        assert!(decoded(&[(&long, 1)]).is_err(), "name too long");
        let names: Vec<Vec<u8>> = (0..5).map(|i| format!("user.{i}").into_bytes()).collect();
        let big: Vec<(&[u8], usize)> = names.iter().map(|n| (&n[..], MAX_XATTR_VALUE)).collect();
        assert!(decoded(&big).is_err(), "more than 256 KiB together");
    }
}
