//! The source's control reader: the sink's plans and resend requests become block
//! jobs; its verdicts finish entries.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use hetch_proto::{Frame, PlanAction, PlanItem, Summary};
use tokio::sync::{mpsc, watch};

use super::{Job, Shared};
use crate::error::EngineError;
use crate::progress::Progress;
use crate::store::Size;
use crate::wire::FrameReader;
use crate::BoxStream;

/// Reads the sink's frames on the control stream; `lost` tells each data stream's
/// writer what the sink said of its lost connections (and, dropped when this ends,
/// that the session is over).
pub(super) async fn control_reader(
    shared: Arc<Shared>,
    mut r: FrameReader<tokio::io::ReadHalf<BoxStream>>,
    (ctl, lost): (mpsc::Sender<Frame>, Vec<watch::Sender<super::stream::Lost>>),
    summary: Arc<Mutex<Summary>>,
) -> Result<(), EngineError> {
    loop {
        let frame = match r.next_control().await? {
            Some(f) => f,
            None => return Err(EngineError::closed_early(&shared.peer)),
        };
        match frame {
            Frame::Plan(items) => {
                for item in items {
                    plan(&shared, item).await?;
                }
            }
            Frame::Resend { file, block } => resend(&shared, file, block).await?,
            Frame::Repair {
                file,
                block,
                round,
                patch_len,
                digests,
            } => {
                let ask = super::repair::RepairAsk {
                    round,
                    patch_len: patch_len as usize,
                    digests,
                };
                super::repair::asked(&shared, file, block, ask).await?
            }
            Frame::FileDone {
                file,
                error,
                digest,
            } => {
                if let (Some(m), Some(manifest)) = (&digest, &shared.opts.manifest) {
                    manifest.add(&m.digest, &m.path);
                }
                file_done(&shared, file, error).await;
            }
            Frame::StreamLost {
                index,
                generation,
                frames,
                torn,
            } => match lost.get(usize::from(index)) {
                Some(tx) => tx.send_modify(|l| {
                    l.push_back((generation, frames, torn));
                    if l.len() > super::stream::LOST_KEPT {
                        l.pop_front();
                    }
                }),
                None => {
                    let what = format!("data stream {index} lost, of {}", lost.len());
                    return Err(EngineError::unexpected(&shared.peer, what));
                }
            },
            Frame::Durable { file, offset } => shared.listing.durable(&shared, file, offset),
            Frame::Change(c) if shared.opts.delete.is_some() || shared.opts.dry_run => {
                shared.progress.change(c.action, &c.path, c.size)
            }
            Frame::Finished(s) => {
                *summary.lock().expect("summary lock") = s;
                // No more jobs will come: let readers drain and stop.
                shared.jobs.0.close();
                drop(ctl);
                return Ok(());
            }
            Frame::Error(e) => return Err(EngineError::from_peer(&shared.peer, e)),
            other => {
                let what = format!("unexpected frame {other:?}");
                return Err(EngineError::unexpected(&shared.peer, what));
            }
        }
    }
}

/// The sink's plan for one entry: skip it, or queue the block ranges it asks for.
async fn plan(shared: &Shared, item: PlanItem) -> Result<(), EngineError> {
    let ranges = match item.action {
        PlanAction::Skip => {
            skip(shared, item.id);
            return Ok(());
        }
        PlanAction::Send(ranges) => ranges,
    };
    if let Some(jobs) = shared.listing.first_plan(shared, item.id, &ranges) {
        for job in jobs {
            let _ = shared.jobs.0.send(job).await;
        }
        return Ok(());
    }
    let unexpected = |what: String| EngineError::unexpected(&shared.peer, what);
    let (size, known) = {
        let ann = shared.announced.lock().expect("announced lock");
        ann.get(&item.id)
            .map(|a| (a.size, a.is_file))
            .unwrap_or((Size::Known(0), false))
    };
    if !known {
        return Err(unexpected(format!("plan for unknown file {}", item.id)));
    }
    let blocks = size.blocks(shared.opts.block_size);
    let mut planned = 0;
    // Ascending and disjoint within the file: a plan can ask for each block once, so it
    // cannot queue more jobs than the file has blocks.
    let mut floor = 0;
    for (start, end) in ranges {
        if start < floor || start >= end || end > blocks {
            return Err(unexpected(format!(
                "bad block range {start}..{end} for file {} of {blocks} blocks",
                item.id
            )));
        }
        floor = end;
        planned += end - start;
        let job = Job {
            file: item.id,
            start,
            end,
            cover: false,
            repair: None,
        };
        let _ = shared.jobs.0.send(job).await;
    }
    let skipped = blocks.saturating_sub(planned);
    Progress::add(
        &shared.progress.skipped_bytes,
        skipped
            .saturating_mul(shared.opts.block_size)
            .min(size.known().unwrap_or(0)),
    );
    Ok(())
}

/// The sink has entry `id` already.
fn skip(shared: &Shared, id: u64) {
    let held = {
        let mut ann = shared.announced.lock().expect("announced lock");
        match ann.get_mut(&id) {
            // Its `FileDone` says whether it is verified there.
            Some(a) if shared.opts.remove_source && a.is_file => {
                a.skipped = true;
                a.size.known()
            }
            _ => None,
        }
    };
    let skipped = match held {
        Some(size) => Some(size),
        None => shared
            .complete(id)
            .filter(|a| a.is_file)
            .and_then(|a| a.size.known()),
    };
    if let Some(size) = skipped {
        Progress::add(&shared.progress.skipped, 1);
        Progress::add(&shared.progress.skipped_bytes, size);
    }
}

/// The sink asks for block `block` of `file` again (it arrived damaged).
async fn resend(shared: &Shared, file: u64, block: u64) -> Result<(), EngineError> {
    // A file finished or failed meanwhile has nothing to resend.
    let Some(size) = announced_size(shared, file) else {
        return Ok(());
    };
    let blocks = size.blocks(shared.opts.block_size);
    if block >= blocks {
        return Err(EngineError::unexpected(
            &shared.peer,
            format!("resend of block {block} of file {file}, beyond its {blocks} blocks"),
        ));
    }
    send_again(shared, file, block, None).await;
    Ok(())
}

/// The size of file `file` while it is announced (not finished or failed).
pub(super) fn announced_size(shared: &Shared, file: u64) -> Option<Size> {
    let ann = shared.announced.lock().expect("announced lock");
    ann.get(&file).map(|a| a.size)
}

/// Queues block `block` of `file` to be read and sent again (whole, or the patches
/// `repair` asks for), counted as retried.
pub(super) async fn send_again(
    shared: &Shared,
    file: u64,
    block: u64,
    repair: Option<Arc<super::repair::RepairAsk>>,
) {
    Progress::add(&shared.progress.retried_blocks, 1);
    let job = Job {
        file,
        start: block,
        end: block + 1,
        cover: false,
        repair,
    };
    let _ = shared.jobs.0.send(job).await;
}

/// The sink finished `file`: in place and verified, or failed with `error`.
async fn file_done(shared: &Arc<Shared>, file: u64, error: Option<String>) {
    let was = shared.complete(file);
    if let Some(a) = &was {
        shared.listing.finished(shared, a, error.is_none()).await;
    }
    match (error, was) {
        (None, Some(a)) => {
            if !a.skipped {
                Progress::add(&shared.progress.files, 1);
            }
            if a.is_file && shared.listing.logs_files() {
                shared.progress.note(&format!("done {}", a.abs.display()));
            }
            if a.is_file && shared.opts.remove_source {
                remove_source(shared, a.abs).await;
            }
        }
        (None, None) => {}
        (Some(message), _) => shared.progress.fail(message),
    }
}

/// Deletes a source file whose copy the sink verified.
async fn remove_source(shared: &Shared, abs: PathBuf) {
    let path = abs.clone();
    let r = tokio::task::spawn_blocking(move || std::fs::remove_file(&path))
        .await
        .expect("remove task panicked");
    match r {
        Ok(()) => shared.progress.note(&format!("removed {}", abs.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => shared.progress.warn(&format!(
            "{}: copied and verified, but not removed: {e}",
            abs.display()
        )),
    }
}
