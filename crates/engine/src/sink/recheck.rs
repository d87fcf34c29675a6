//! Resume without trusting the journal: the blocks an earlier run journaled are read
//! back from the part file and hashed before they count as done, because the part file
//! may have been damaged between the runs, or a host crash may have kept a record
//! whose block never reached the disk. The plan asks the source for the other blocks
//! first; the check runs meanwhile on a blocking thread, and a block that fails it is
//! asked for like a damaged block (`Resend`). `--trust-journal` skips all this.

use std::sync::Arc;

use hetch_integrity::Digest;
use hetch_proto::Frame;
use tokio::sync::mpsc;

use super::finish::Arrival;
use super::verify::{checked, lookup, prefetch};
use super::SinkShared;
use crate::error::EngineError;
use crate::pool::Pages;

/// The journaled blocks of one resumed file, to read back.
pub(crate) struct Recheck {
    pub file: u64,
    /// Block index and recorded digest, each block once.
    pub blocks: Vec<(u64, Digest)>,
}

/// Checks the files of one planned batch, in the background: replies go to the source
/// as they arise, so that a failed block is re-sent while the rest is checked.
pub(crate) fn spawn(sh: &Arc<SinkShared>, ctl: &mpsc::Sender<Frame>, rechecks: Vec<Recheck>) {
    if rechecks.is_empty() {
        return;
    }
    let (sh, ctl) = (sh.clone(), ctl.clone());
    tokio::spawn(async move {
        let (s, c) = (sh.clone(), ctl.clone());
        let r = tokio::task::spawn_blocking(move || {
            let rt = tokio::runtime::Handle::current();
            for r in rechecks {
                run(&s, r, &mut |f| rt.block_on(s.reply(&c, f)))?;
            }
            Ok::<_, EngineError>(())
        })
        .await
        .expect("recheck task panicked");
        if let Err(e) = r {
            let _ = ctl.send(Frame::Error(e.to_frame())).await;
        }
    });
}

/// Reads back and checks one file's journaled blocks (on a blocking thread), handing
/// each reply to `reply` (false: the session is gone).
fn run(
    sh: &SinkShared,
    r: Recheck,
    reply: &mut dyn FnMut(Frame) -> bool,
) -> Result<(), EngineError> {
    let Some(inc) = lookup(sh, r.file) else {
        return Ok(()); // failed meanwhile
    };
    let bs = sh.opts.block_size;
    let prepare = |i: usize| {
        if let Some(&(block, _)) = r.blocks.get(i) {
            prefetch(&inc, bs, block);
        }
    };
    let mut scratch = Pages::new();
    prepare(0);
    for (i, &(block, recorded)) in r.blocks.iter().enumerate() {
        // The device reads the next block while this one is hashed.
        prepare(i + 1);
        let outcome = inc
            .read_back(block, &mut scratch, &sh.gate)
            .and_then(|back| {
                inc.event(|c| c.rechecked());
                let how = Arrival::Journaled;
                checked(sh, r.file, &inc, block, &recorded, back, how)
            });
        let frame = match outcome {
            Ok(Some(frame)) => frame,
            Ok(None) => continue,
            Err(e) if e.is_no_space() => return Err(e.into()),
            // Unreadable: the file fails as it would on a read-back during the transfer.
            Err(e) => match sh.fail_file(r.file, e.to_string()) {
                Some(f) => f,
                None => return Ok(()),
            },
        };
        let ended = matches!(frame, Frame::FileDone { .. });
        if !reply(frame) || ended {
            return Ok(());
        }
    }
    Ok(())
}
