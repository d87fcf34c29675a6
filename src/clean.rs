//! `hetch clean DIR [--dry-run] [--split]`: lists and removes the part files and
//! journals that interrupted transfers left under DIR and that no running transfer
//! holds (with `--split`, also those of large files a transfer service moved in
//! ranges).

use std::path::Path;
use std::process::ExitCode;

use hetch_proto::escape_text;
use hetch_storage::leftovers::{clean_tree, Clean, Outcome};

use crate::units::human_bytes;
use crate::usage::usage_error;
use crate::CleanArgs;

/// `hetch clean` with its flags: `a.dir` must be a directory (bad usage otherwise).
pub async fn command(a: CleanArgs) -> anyhow::Result<ExitCode> {
    let md = std::fs::metadata(&a.dir).map_err(|e| anyhow::anyhow!("{}: {e}", a.dir.display()))?;
    if !md.is_dir() {
        return Ok(usage_error(&format!(
            "{}: not a directory",
            a.dir.display()
        )));
    }
    let (dir, dry_run, split) = (a.dir, a.dry_run, a.split);
    Ok(tokio::task::spawn_blocking(move || run(&dir, dry_run, split)).await?)
}

/// Cleans `dir`: one line per leftover on stdout (what was, or with `dry_run` would
/// be, removed; what a running transfer holds and was kept), a total on stderr, each
/// error on stderr. Exit 0, or 3 when something could not be looked at or removed.
pub fn run(dir: &Path, dry_run: bool, split: bool) -> ExitCode {
    let how = Clean {
        dry_run,
        symlinks: true,
        split,
    };
    let (mut count, mut bytes, mut kept, mut errors) = (0u64, 0u64, 0u64, 0u64);
    clean_tree(dir, how, &mut |r| match r {
        Ok(l) => {
            let shown = escape_text(&l.path.display().to_string());
            let what = match l.outcome {
                Outcome::Removed => "removed",
                Outcome::Stale => "would remove",
                Outcome::InUse => {
                    kept += 1;
                    crate::out::or_say(outln!("in use, kept {shown}"));
                    return;
                }
            };
            count += 1;
            bytes += l.bytes;
            crate::out::or_say(outln!("{what} {shown} ({})", human_bytes(l.bytes as f64)));
        }
        Err(e) => {
            errors += 1;
            errln!("hetch: error: {}", escape_text(&e.to_string()));
        }
    });
    let verb = if dry_run { "would remove" } else { "removed" };
    errln!(
        "hetch clean: {verb} {count} leftover files ({}); {kept} in use by a running transfer",
        human_bytes(bytes as f64)
    );
    if errors > 0 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}
