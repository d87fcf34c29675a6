//! Where a copy's operands land: the rules of `cp -r`, written once for every store
//! (each store finds what its destination names; these rules decide what follows).
//!
//! - An existing directory: each operand is copied *into* it, under its own name
//!   (`cp -r a b dir` makes `dir/a` and `dir/b`).
//! - Nothing there, one operand: the operand is copied *as* the destination (`cp -r a
//!   new` makes `new` with a's contents); its parent must exist.
//! - Nothing there and a trailing `/`: the destination is created as a directory and
//!   the operands are copied into it (as rsync does; `cp` would refuse).
//! - A directory made *as* the copy of a single operand is marked with that operand's
//!   name, and is copied *as* again, so that a rerun resumes instead of nesting a
//!   second copy inside the first.
//! - An existing file: one operand replaces it; several operands, or a trailing `/`,
//!   are refused.

use std::path::Path;

use crate::StoreError;

/// What the destination names, as the rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Nothing.
    Nothing,
    /// A directory; `marked` when it was made as the copy of an operand of the first
    /// operand's name (looked at only for a single operand).
    Dir {
        /// Marked as the copy of the first operand.
        marked: bool,
    },
    /// A file, or anything else that is not a directory.
    NotDir,
}

/// Where the operands go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Each operand into the destination, under its own name.
    Into,
    /// Into the destination, which is created first (a dry run creates nothing).
    CreateThenInto,
    /// The single operand as the destination: the destination's name replaces the
    /// operand's own, in its parent (which must exist).
    As,
}

/// The rules applied to destination `shown`, which holds `found`, for `sources`
/// operands; `trailing_slash` when the destination was written ending with `/`. A
/// refusal is one line naming `shown`.
pub fn place(
    found: Found,
    sources: u32,
    trailing_slash: bool,
    shown: &Path,
) -> Result<Placement, StoreError> {
    let shown = shown.display();
    match found {
        Found::Dir { marked: true } if sources == 1 => Ok(Placement::As),
        Found::Dir { .. } => Ok(Placement::Into),
        Found::NotDir if sources > 1 || trailing_slash => Err(StoreError::Destination(format!(
            "{shown}: is a file where a directory is needed"
        ))),
        Found::NotDir => Ok(Placement::As),
        Found::Nothing if trailing_slash => Ok(Placement::CreateThenInto),
        Found::Nothing if sources > 1 => Err(StoreError::Destination(format!(
            "{shown}: does not exist; with several sources the destination must be a directory (end it with '/' to create it)"
        ))),
        Found::Nothing => Ok(Placement::As),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_of_cp_r() {
        let p = Path::new("dst");
        let ok = |found, sources, slash| place(found, sources, slash, p).unwrap();
        let refused = |found, sources, slash| place(found, sources, slash, p).unwrap_err();
        let dir = Found::Dir { marked: false };
        let marked = Found::Dir { marked: true };
        for slash in [false, true] {
            assert_eq!(ok(dir, 1, slash), Placement::Into);
            assert_eq!(ok(dir, 3, slash), Placement::Into);
            assert_eq!(ok(marked, 1, slash), Placement::As);
            assert_eq!(ok(marked, 2, slash), Placement::Into);
        }
        assert_eq!(ok(Found::NotDir, 1, false), Placement::As);
        for (sources, slash) in [(2, false), (1, true), (2, true)] {
            let e = refused(Found::NotDir, sources, slash).to_string();
            assert_eq!(e, "dst: is a file where a directory is needed");
        }
        assert_eq!(ok(Found::Nothing, 1, false), Placement::As);
        assert_eq!(ok(Found::Nothing, 1, true), Placement::CreateThenInto);
        assert_eq!(ok(Found::Nothing, 4, true), Placement::CreateThenInto);
        let e = refused(Found::Nothing, 2, false).to_string();
        assert!(
            e.starts_with("dst: does not exist; with several sources"),
            "{e}"
        );
    }
}
