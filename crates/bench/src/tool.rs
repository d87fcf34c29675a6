//! The tools a benchmark compares: hetch, its peers, and iperf3 as the limit.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::place::Place;

/// What every tool is told about the run it takes part in.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The hetch binary (for hetch itself).
    pub hetch: PathBuf,
    /// The client side (sends the data).
    pub client: Place,
    /// The server side (receives it).
    pub server: Place,
    /// A private directory for the tool's keys, configuration and logs; it lives as long
    /// as the benchmark and is removed after it.
    pub scratch: PathBuf,
    /// Parallel streams (or transfers) each tool is asked to use, where it has such a
    /// setting.
    pub streams: u32,
}

/// How a streaming copy decides that a growing file is complete, and when it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowSettings {
    /// A file unchanged this long is complete; the copy ends once every file is
    /// complete and nothing new has appeared for this long.
    pub idle: Duration,
    /// A file `NAME` is complete as soon as `NAME` + this suffix appears next to it
    /// (the writer makes it after closing the file); the marker is copied too.
    pub done_suffix: String,
}

/// A data mover under test (or the memory-to-memory limit).
pub trait Tool {
    /// Its name in results and reports.
    fn name(&self) -> &'static str;

    /// Its version, as `PROGRAM --version` prints it (first line).
    fn version(&self) -> String;

    /// The flags it runs with and why, for the report (one line).
    fn flags(&self) -> String;

    /// Whether this is a limit (iperf3) rather than a data mover: it moves memory, not
    /// files, and the report shows data movers as a fraction of it.
    fn is_limit(&self) -> bool {
        false
    }

    /// Starts whatever server the tool needs on `ctx.server`; called once per link
    /// configuration before any run, and again after [`Tool::stop`].
    fn start(&mut self, ctx: &ToolContext) -> anyhow::Result<()>;

    /// The command that copies the contents of directory `src` (read by the client) into
    /// the existing, empty directory `dst` (written by the server), so that afterwards
    /// `dst/REL` is a copy of `src/REL` for every file. `bytes` is the dataset's size
    /// (a limit tool sends that many bytes instead).
    fn copy(&self, ctx: &ToolContext, src: &Path, dst: &Path, bytes: u64) -> Command;

    /// Whether the tool can copy files that are still being written ([`Tool::follow`]).
    fn can_follow(&self) -> bool {
        false
    }

    /// The command that copies directory `src` as [`Tool::copy`] does, but while a
    /// writer is still creating and appending to its files, following them until each
    /// is complete (`follow`), and then exits; it prints a JSON summary on stdout, with
    /// a `lag` object when it saw files grow. `None` for a tool that cannot follow
    /// growing files (every peer: they copy what is there when they look).
    fn follow(
        &self,
        _ctx: &ToolContext,
        _src: &Path,
        _dst: &Path,
        _follow: &FollowSettings,
    ) -> Option<Command> {
        None
    }

    /// Stops its server (also called on drop by the runner); idempotent.
    fn stop(&mut self);
}
