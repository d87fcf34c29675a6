//! Flags of mirroring (`hetch sync`, `hetch cp --delete`): a normal copy, then the
//! removal of what the destination has below the copied trees and the sources lack.

use clap::Args;
use hetch_engine::DeleteRequest;

/// How a copy mirrors its sources (shared by `cp` and `sync`).
#[derive(Args, Clone, Default)]
pub struct MirrorArgs {
    /// Mirror: after every file was copied without a failure, delete the entries below
    /// the copied trees that the sources lack (what `hetch sync` does).
    #[arg(long)]
    pub delete: bool,
    /// List what would be copied ("would copy PATH": the destination lacks it),
    /// replaced ("would replace PATH": its size or mtime differ) and, with --delete or
    /// sync, deleted ("would delete PATH"), with counts, bytes and a predicted
    /// duration; change nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// With --delete (or sync): if more than N entries would be deleted, delete none
    /// and fail (exit code 3), giving the count.
    #[arg(long, value_name = "N")]
    pub max_delete: Option<u64>,
    /// With --delete (or sync): delete entries the --include/--exclude globs leave out
    /// too (they are kept by default).
    #[arg(long)]
    pub delete_excluded: bool,
}

impl MirrorArgs {
    /// The deletion phase asked for (`sync`: always), or the usage error.
    pub fn request(&self, sync: bool) -> Result<Option<DeleteRequest>, String> {
        if !(sync || self.delete) {
            if self.max_delete.is_some() || self.delete_excluded {
                return Err(
                    "--max-delete and --delete-excluded apply to mirroring: use hetch sync or cp --delete".into(),
                );
            }
            return Ok(None);
        }
        Ok(Some(DeleteRequest {
            max_delete: self.max_delete,
            delete_excluded: self.delete_excluded,
        }))
    }
}

/// `PATH` (relative to the destination directory, escaped) as the user names it: below
/// the destination operand they typed.
pub fn shown_below(dest: &str, rel: &str) -> String {
    let dest = hetch_proto::escape_text(dest.trim_end_matches('/'));
    if dest.is_empty() {
        return format!("/{rel}");
    }
    format!("{dest}/{rel}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirroring_flags_need_mirroring() {
        let capped = MirrorArgs {
            max_delete: Some(3),
            ..Default::default()
        };
        assert!(capped.request(false).is_err());
        assert_eq!(capped.request(true).unwrap().unwrap().max_delete, Some(3));
        // A dry run is for plain copies too.
        let dry = MirrorArgs {
            dry_run: true,
            ..Default::default()
        };
        assert!(dry.request(false).unwrap().is_none());
        assert!(MirrorArgs::default().request(false).unwrap().is_none());
        assert_eq!(shown_below("dst/", "a/x"), "dst/a/x");
        assert_eq!(shown_below("hetch://h/d", "x"), "hetch://h/d/x");
    }
}
