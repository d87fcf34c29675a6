//! A mirroring job's deletion step (`--sync`): once every other unit of the job is
//! done, one `hetch sync` of all its sources into its destination, which copies what
//! changed since the job was listed (usually nothing) and then removes what the
//! destination holds below the copied trees and the sources lack.
//!
//! The worker lists the sources itself rather than reading the job's listing from the
//! service: the engine decides what goes from what its source side announced in this
//! very session, so an entry is deleted only when the sources lack it *now* (a file
//! that appeared since the listing is copied, not deleted), and the deletion is the
//! mover's own (`hetch_engine`'s sink: entries reached through directory handles
//! confined to the destination, a symlink removed as a link and never followed, the
//! destination root never removed, nothing at all removed when more than
//! `--max-delete` entries would go or when any file failed).

use anyhow::bail;
use hetch_engine::DeleteRequest;
use hetch_jobs::UnitSpec;
use hetch_service_api::ClaimedUnit;

use crate::unit::{Pace, Runner, Running, UnitContext};

/// Runs deletion steps ([`UnitSpec::Delete`]).
pub(crate) struct DeleteUnit;

impl Runner for DeleteUnit {
    fn run<'a>(&'a self, ctx: &'a UnitContext, u: &'a ClaimedUnit, p: Pace) -> Running<'a> {
        Box::pin(async move {
            let UnitSpec::Delete {} = u.unit else {
                bail!("not a deletion step");
            };
            if !u.spec.options.sync {
                bail!("the service sent a deletion step of a job that does not mirror");
            }
            let Pace {
                stop,
                rate,
                progress,
            } = p;
            let mut job = ctx.copy_job(u, None, stop, rate)?;
            job.opts.delete = Some(DeleteRequest {
                max_delete: u.spec.options.max_delete,
                delete_excluded: false,
            });
            // Fails with the engine's own line: "deletions skipped: N entries would be
            // deleted, more than --max-delete M", or why an entry was not deleted.
            crate::unit::copy_through(&job, &progress).await?;
            // Its entries were counted by the units that copied them.
            Ok(crate::unit::Done::moved(0, 0))
        })
    }
}
