//! A worker's stream units: one source operand of a streaming job, followed while its
//! files are written (`hetch cp --follow` of that operand, or `hetch watch` of it for
//! a job that follows for ever). A run after a lost lease, here or on another worker,
//! resumes each file from what the destination verified, as `hetch watch` does after
//! a lost session. The lag from appended to durable comes with each heartbeat (see
//! `claim_loop.rs`), from the run's progress.

use std::time::Duration;

use anyhow::{anyhow, bail};
use hetch_engine::{Follow, Schedule};
use hetch_jobs::UnitSpec;
use hetch_service_api::{ClaimedUnit, StreamSpec};

use crate::unit::{Done, Pace, Runner, Running, UnitContext};

/// Runs stream units ([`UnitSpec::Stream`]).
pub(crate) struct StreamUnit;

impl Runner for StreamUnit {
    fn run<'a>(&'a self, ctx: &'a UnitContext, u: &'a ClaimedUnit, p: Pace) -> Running<'a> {
        Box::pin(async move {
            let UnitSpec::Stream { operand } = u.unit else {
                bail!("not a stream unit");
            };
            ctx.stream_unit(u, operand, p).await
        })
    }
}

impl UnitContext {
    /// Follows source operand `operand` of the unit's job into its destination until
    /// every file is complete (or, following for ever, until the unit is stopped);
    /// returns the files and bytes moved by this run.
    async fn stream_unit(&self, u: &ClaimedUnit, operand: u64, p: Pace) -> anyhow::Result<Done> {
        let spec = &u.spec;
        let st = spec
            .options
            .stream
            .as_ref()
            .ok_or_else(|| anyhow!("the service sent a stream of a job that is not one"))?;
        let operand = usize::try_from(operand)
            .ok()
            .filter(|&i| i < spec.sources.len())
            .ok_or_else(|| anyhow!("the service sent a stream of source {operand}"))?;
        let Pace {
            stop,
            rate,
            progress,
        } = p;
        let mut job = self.copy_job(u, Some(operand), stop.clone(), rate)?;
        if job.opts.schedule != Schedule::Block {
            bail!("following growing files checks each block as it is written");
        }
        job.opts.follow = Some(follow_of(st));
        if st.forever {
            // Only a stop ends it: its lease lost or its job cancelled (the report is
            // then refused), or this worker shutting down, when the stream must go
            // back to the service for another worker, not end the job as done.
            hetch_copy::forever(&job, &progress, stop.raised()).await;
            bail!("stopped following (the worker stops, or the stream is no longer its)");
        } else {
            let (result, _) = hetch_copy::recover(&job, &progress, None).await;
            let report = result?;
            if let Some(e) = report.errors.first() {
                bail!("{e}");
            }
        }
        let s = progress.summary();
        if s.failed > 0 {
            bail!("{} files failed", s.failed);
        }
        Ok(Done::moved(s.files, s.bytes))
    }
}

/// The engine's following settings of a job's stream settings (bounded when the job
/// was submitted).
fn follow_of(st: &StreamSpec) -> Follow {
    Follow {
        idle: Duration::from_millis(st.idle_ms),
        poll: Duration::from_millis(st.poll_ms),
        rescan: Duration::from_millis(st.rescan_ms),
        flush: Duration::from_millis(st.flush_ms),
        done_suffix: (!st.done_suffix.is_empty()).then(|| st.done_suffix.clone()),
        forever: st.forever,
    }
}
