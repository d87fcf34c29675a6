//! Flags of streaming transfers (`hetch cp --follow`, `hetch watch`).

use std::time::Duration;

use clap::Args;
use hetch_engine::{EntryFilter, Follow, Options, Schedule};

use hetch_units::parse_duration;

/// When a growing file counts as complete, and how closely it is followed.
#[derive(Args, Clone)]
pub struct FollowArgs {
    /// A file unchanged for this long is complete (shipped and renamed into place),
    /// even if its writer still has it open (a warning says so).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub idle: Duration,
    /// A file NAME is complete as soon as NAME + this suffix appears next to it; the
    /// marker is copied after NAME is in place. Empty: no markers.
    #[arg(long, default_value = ".done")]
    pub done_suffix: String,
    /// How often growing files are checked for new data.
    #[arg(long, default_value = "50ms", value_parser = parse_duration)]
    pub poll: Duration,
    /// Bytes of a block that has not filled for this long are sent anyway, so that a
    /// slow writer's data need not wait for the block.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    pub flush: Duration,
    /// How often directories are scanned for new files.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub rescan: Duration,
}

impl FollowArgs {
    /// Turns following on in `opts`; `forever` for `watch`. Refuses settings that
    /// cannot follow a growing file.
    pub fn apply(&self, opts: &mut Options, forever: bool) -> Result<(), String> {
        if opts.schedule != Schedule::Block {
            return Err(
                "following growing files checks each block as it is written: \
                        --verify-schedule must be block"
                    .into(),
            );
        }
        if opts.compare_only {
            return Err("--follow does not apply to comparisons".into());
        }
        if self.poll.is_zero() || self.rescan.is_zero() {
            return Err("--poll and --rescan must be longer than 0".into());
        }
        opts.follow = Some(Follow {
            idle: self.idle,
            poll: self.poll,
            rescan: self.rescan,
            flush: self.flush,
            done_suffix: (!self.done_suffix.is_empty()).then(|| self.done_suffix.clone()),
            forever,
        });
        Ok(())
    }
}

/// `--include`/`--exclude` (`cp`, `sync`, `watch`).
#[derive(Args, Clone, Default)]
pub struct FilterArgs {
    /// Copy only files whose path below the operand matches one of these globs
    /// (`*.h5`, `run*/**`); a pattern without '/' matches the file name. Directories
    /// are still entered.
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// Never copy what matches these globs (a matching directory is not entered).
    /// Mirroring keeps what they leave out at the destination (see --delete-excluded).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
}

impl FilterArgs {
    /// The entry filter, or the usage error (a bad glob).
    pub fn filter(&self) -> Result<Option<EntryFilter>, String> {
        glob_filter(&self.include, &self.exclude)
    }

    /// The patterns as a session request carries them (a server applies them itself).
    pub fn request(&self) -> hetch_proto::FilterRequest {
        hetch_proto::FilterRequest {
            include: self.include.clone(),
            exclude: self.exclude.clone(),
        }
    }
}

/// A set of globs: those without '/' match an entry's name, the others its whole path
/// below the operand.
struct Globs {
    names: globset::GlobSet,
    paths: globset::GlobSet,
}

impl Globs {
    fn new(patterns: &[String], flag: &str) -> Result<Globs, String> {
        let mut names = globset::GlobSetBuilder::new();
        let mut paths = globset::GlobSetBuilder::new();
        for p in patterns {
            let glob = globset::GlobBuilder::new(p)
                .literal_separator(true)
                .build()
                .map_err(|e| format!("{flag} '{p}': {e}"))?;
            if p.contains('/') {
                paths.add(glob);
            } else {
                names.add(glob);
            }
        }
        let done = |b: globset::GlobSetBuilder| b.build().map_err(|e| format!("{flag}: {e}"));
        Ok(Globs {
            names: done(names)?,
            paths: done(paths)?,
        })
    }

    fn matches(&self, rel: &std::path::Path) -> bool {
        let name = rel.file_name().unwrap_or_default();
        self.names.is_match(name) || self.paths.is_match(rel)
    }

    fn is_empty(&self) -> bool {
        self.names.is_empty() && self.paths.is_empty()
    }
}

/// The entry filter of `--include`/`--exclude`: a file is sent when it matches an
/// include (if there are any) and no exclude; a directory is entered unless excluded.
pub fn glob_filter(include: &[String], exclude: &[String]) -> Result<Option<EntryFilter>, String> {
    if include.is_empty() && exclude.is_empty() {
        return Ok(None);
    }
    let include = Globs::new(include, "--include")?;
    let exclude = Globs::new(exclude, "--exclude")?;
    Ok(Some(EntryFilter(std::sync::Arc::new(
        move |rel: &[u8], is_dir: bool| {
            use std::os::unix::ffi::OsStrExt;
            let rel = std::path::Path::new(std::ffi::OsStr::from_bytes(rel));
            if exclude.matches(rel) {
                return false;
            }
            is_dir || include.is_empty() || include.matches(rel)
        },
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names_or_paths_and_excludes_win() {
        let f = glob_filter(&["*.h5".into(), "keep/**".into()], &["tmp*".into()])
            .unwrap()
            .unwrap();
        assert!(f.accepts(b"top/run1/scan.h5", false));
        assert!(f.accepts(b"top/keep/a/b.txt", false));
        assert!(!f.accepts(b"top/run1/notes.txt", false));
        assert!(f.accepts(b"top/run1", true), "directories are entered");
        assert!(
            !f.accepts(b"top/tmp1", true),
            "an excluded directory is not"
        );
        assert!(!f.accepts(b"top/run1/tmp.h5", false));
        assert!(f.accepts(b"top", true), "the operand itself is always sent");
        assert!(glob_filter(&[], &[]).unwrap().is_none());
        assert!(glob_filter(&["a[".into()], &[]).is_err());
    }
}
