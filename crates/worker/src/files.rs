//! A unit of files: a batch of rows of its job's listing, copied as one `hetch cp` of
//! each source's share into the destination.

use std::sync::Arc;

use anyhow::{anyhow, bail};
use hetch_copy::CopyJob;
use hetch_engine::{RateLimiter, StopSignal};
use hetch_jobs::UnitSpec;
use hetch_service_api::ClaimedUnit;
use hetch_session::location::Location;

use crate::unit::{unit_options, Done, Pace, Runner, Running, UnitContext};

/// Runs units of files ([`UnitSpec::Files`]).
pub(crate) struct FilesUnit;

impl Runner for FilesUnit {
    fn run<'a>(&'a self, ctx: &'a UnitContext, u: &'a ClaimedUnit, p: Pace) -> Running<'a> {
        Box::pin(ctx.files_unit(u, p))
    }
}

impl UnitContext {
    /// Copies a batch of files: its rows of the listing, each source's share as listed
    /// entries (with their parent directories, which may be in another unit), into
    /// the destination.
    async fn files_unit(&self, u: &ClaimedUnit, p: Pace) -> anyhow::Result<Done> {
        let Pace {
            stop,
            rate,
            progress,
        } = p;
        let (first, end, bytes) = match u.unit {
            UnitSpec::Files { first, end, bytes } => (first, end, bytes),
            _ => bail!("not a unit of files"),
        };
        // What the service sent is bounded before it sizes or names anything.
        let count = end
            .checked_sub(first)
            .filter(|&n| n <= hetch_service_api::MAX_FILES)
            .ok_or_else(|| anyhow!("the service sent a unit of files {first}..{end}"))?;
        let rows = self.listing(&u.job, first, end, &stop).await?;
        if rows.len() as u64 != count {
            bail!("the service sent {} listing rows of {count}", rows.len());
        }
        let spec = &u.spec;
        let mut per_source: Vec<Vec<Vec<u8>>> = vec![Vec::new(); spec.sources.len()];
        for r in &rows {
            let list = usize::try_from(r.operand)
                .ok()
                .and_then(|op| per_source.get_mut(op))
                .ok_or_else(|| {
                    anyhow!(
                        "listing row names source {} of {}",
                        r.operand,
                        spec.sources.len()
                    )
                })?;
            with_parents(list, &r.path);
        }
        let mut job = self.copy_job(u, None, stop, rate)?;
        job.entries = Some(per_source);
        job.opts.chosen_entries = true;
        crate::unit::copy_through(&job, &progress).await?;
        Ok(Done::moved(end - first, bytes))
    }
    /// The `hetch cp` of a job's spec: of all its sources, or of source operand
    /// `only` alone.
    pub(crate) fn copy_job(
        &self,
        u: &ClaimedUnit,
        only: Option<usize>,
        stop: StopSignal,
        rate: Arc<RateLimiter>,
    ) -> anyhow::Result<CopyJob> {
        let spec = &u.spec;
        // Checked when the job was submitted, and again here: a symlink put in the
        // path since must not make a job read from outside the root.
        let mut sources = Vec::with_capacity(spec.sources.len());
        let mut within = Vec::new();
        let chosen = spec.sources.iter().enumerate();
        for (_, s) in chosen.filter(|(i, _)| only.is_none_or(|o| o == *i)) {
            let (dir, path) = self.source_within(spec, s)?;
            sources.push(Location::Local(path));
            if !within.contains(&dir) {
                within.push(dir);
            }
        }
        let dest = self.dest_of(u)?;
        let mut opts = unit_options(spec, stop, rate)?;
        opts.read_within = within;
        let client = match &dest {
            Location::Remote { host, .. } => {
                Some(self.client_config(host, self.dest_token.as_ref())?)
            }
            _ => None,
        };
        let floor = match u.unit {
            UnitSpec::Files { bytes, .. } if bytes < crate::unit::SMALL_UNIT => self.stream_floor,
            _ => hetch_copy::DEFAULT_STREAMS,
        };
        self.unit_copy(spec, sources, dest, opts, (client, floor))
    }
}

/// Appends `path` to `list` after those of its parent directories that are not in it
/// yet (a unit's first entries may live in directories another unit lists).
fn with_parents(list: &mut Vec<Vec<u8>>, path: &str) {
    let mut at = 0;
    while let Some(i) = path[at..].find('/') {
        let parent = &path.as_bytes()[..at + i];
        if !list.iter().any(|e| e == parent) {
            list.push(parent.to_vec());
        }
        at += i + 1;
    }
    if !list.iter().any(|e| e == path.as_bytes()) {
        list.push(path.as_bytes().to_vec());
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn parents_come_first_once() {
        let mut l = Vec::new();
        for p in ["run/a/b/f", "run/a/b/g", "run/c"] {
            super::with_parents(&mut l, p);
        }
        let l: Vec<String> = l
            .into_iter()
            .map(|e| String::from_utf8(e).unwrap())
            .collect();
        assert_eq!(
            l,
            ["run", "run/a", "run/a/b", "run/a/b/f", "run/a/b/g", "run/c"]
        );
    }
}
