//! Flags of streaming transfers (`hetch cp --follow`, `hetch watch`).

use std::time::Duration;

use clap::Args;
use hetch_engine::{glob_filter, EntryFilter, Follow, Options, Schedule};

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
