//! Checks on the raw-byte paths that travel in frames.

use crate::codec::ProtoError;

/// Checks that `p` is a safe, normalised relative path: the form of [`crate::Entry::path`].
///
/// Accepted: a non-empty, `/`-separated sequence of non-empty components, none of which
/// is `.` or `..`, with no NUL byte anywhere. So `a`, `a/b` and `a/.b..` pass, while
/// ``, `/a`, `a/`, `a//b`, `./a`, `a/../b` and anything holding `\0` are refused. Bytes
/// need not be UTF-8. Joining an accepted path under a directory can never leave that
/// directory lexically (symlinks inside the tree are the caller's business).
///
/// The error is [`ProtoError::Malformed`] with `what = "path"` and a `why` naming the rule
/// broken; frame decoders report the same `why` under their own frame's name.
pub fn validate_rel_path(p: &[u8]) -> Result<(), ProtoError> {
    match rel_path_problem(p) {
        None => Ok(()),
        Some(why) => Err(ProtoError::Malformed { what: "path", why }),
    }
}

/// Checks a path operand a client names under a server's root ([`crate::Op::Pull`]
/// sources): looser than [`validate_rel_path`] because operands are what the user typed.
///
/// Refused: a NUL byte, a leading `/`, a `..` component. Accepted besides normal
/// relative paths: the empty path and `.` (the root itself), and empty or `.`
/// components such as the trailing slash of `dir/`, which the server's path resolution
/// skips. Nothing accepted can leave the root lexically. The error is
/// [`ProtoError::Malformed`] with `what = "path"`.
pub fn validate_operand_path(p: &[u8]) -> Result<(), ProtoError> {
    match operand_path_problem(p) {
        None => Ok(()),
        Some(why) => Err(ProtoError::Malformed { what: "path", why }),
    }
}

/// What is wrong with `p` as a path operand, if anything.
pub(crate) fn operand_path_problem(p: &[u8]) -> Option<&'static str> {
    if p.contains(&0) {
        Some("path contains a NUL byte")
    } else if p.first() == Some(&b'/') {
        Some("path is absolute")
    } else if p.split(|&b| b == b'/').any(|c| c == b"..") {
        Some("path has a '..' component")
    } else {
        None
    }
}

/// What is wrong with `p` as a relative path, if anything.
pub(crate) fn rel_path_problem(p: &[u8]) -> Option<&'static str> {
    if p.is_empty() {
        return Some("path is empty");
    }
    if p.contains(&0) {
        return Some("path contains a NUL byte");
    }
    if p[0] == b'/' {
        return Some("path is absolute");
    }
    p.split(|&b| b == b'/')
        .find_map(|component| match component {
            b"" => Some("path has an empty component"),
            b"." => Some("path has a '.' component"),
            b".." => Some("path has a '..' component"),
            _ => None,
        })
}

/// What is wrong with `t` as a symlink target, if anything. Targets are stored as-is
/// (they may be absolute or climb with `..`), but an empty one cannot be created and a
/// NUL byte cannot be passed to the system.
pub(crate) fn link_target_problem(t: &[u8]) -> Option<&'static str> {
    if t.is_empty() {
        Some("symlink target is empty")
    } else if t.contains(&0) {
        Some("symlink target contains a NUL byte")
    } else {
        None
    }
}
