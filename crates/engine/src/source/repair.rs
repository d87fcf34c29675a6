//! The source's side of a block's repair (see the sink's `repair.rs`): the sink sends
//! the hashes of its damaged copy cut into patches; the block is read again, cut the
//! same way, and only the patches whose hashes differ are sent, each a data frame
//! whose authenticated header carries the patch's own hash.

use std::sync::Arc;

use hetch_proto::{BlockDigest, DataHeader, Patch};

use super::{OutBlock, Shared};
use crate::error::EngineError;
use crate::pool::PooledBuf;
use crate::progress::Progress;
use crate::rate::RateLimiter;
use crate::wire::FrameWriter;

/// The sink's damaged copy of a block, as its patches' hashes.
pub(crate) struct RepairAsk {
    /// The repair's round, which the answer's patches carry back.
    pub round: u32,
    /// Bytes per patch.
    pub patch_len: usize,
    /// BLAKE3 hash of each patch of the sink's copy.
    pub digests: Vec<BlockDigest>,
}

/// One patch of a block to send.
pub(crate) struct OutPatch {
    header: DataHeader,
    at: usize,
    len: usize,
}

/// The sink asks to repair block `block` of `file`, its copy described by `ask`:
/// queues the block's read, whose answer is the patches that differ. A file finished
/// or failed meanwhile has nothing to repair; a block beyond the file, or a copy of
/// another length than the block's, is the sink's error.
pub(super) async fn asked(
    shared: &Shared,
    file: u64,
    block: u64,
    ask: RepairAsk,
) -> Result<(), EngineError> {
    let (patch_len, digests) = (ask.patch_len as u64, &ask.digests);
    let Some(size) = super::control::announced_size(shared, file) else {
        return Ok(());
    };
    let bs = shared.opts.block_size;
    let blocks = size.blocks(bs);
    let len = size.block_len(bs, block);
    let patches = len.div_ceil(patch_len);
    if block >= blocks || digests.len() as u64 != patches {
        return Err(EngineError::unexpected(
            &shared.peer,
            format!(
                "repair of block {block} of file {file} in {} patches of {patch_len} bytes: \
                 the file has {blocks} blocks, that one {len} bytes",
                digests.len()
            ),
        ));
    }
    super::control::send_again(shared, file, block, Some(Arc::new(ask))).await;
    Ok(())
}

/// The patches of block `whole` (bytes `buf`) that differ from the sink's copy
/// `ask`, with the buffer they are cut from. None when none differs (the source's
/// bytes changed to the sink's copy since, or the copy was never damaged): the block
/// then goes whole, with its digest, for the sink to judge.
pub(super) async fn patches(
    shared: &Arc<Shared>,
    whole: &DataHeader,
    buf: PooledBuf,
    ask: Arc<RepairAsk>,
) -> (Option<PooledBuf>, Vec<OutPatch>) {
    let sh = shared.clone();
    let (file, block) = (whole.file, whole.block);
    tokio::task::spawn_blocking(move || {
        let ours = sh
            .gate
            .run(|| crate::sink::repair::patch_digests(&buf, ask.patch_len));
        let differ: Vec<usize> = (0..ours.len())
            .filter(|i| ask.digests.get(*i) != Some(&ours[*i]))
            .collect();
        let count = differ.len() as u32;
        let patches = differ
            .into_iter()
            .map(|i| {
                let at = i * ask.patch_len;
                let len = ask.patch_len.min(buf.len() - at);
                let header = DataHeader {
                    file,
                    block,
                    digest: ours[i],
                    zero: false,
                    compressed: false,
                    raw_len: 0,
                    sparse: false,
                    patch: Some(Patch {
                        at: at as u32,
                        count,
                        round: ask.round,
                    }),
                };
                OutPatch { header, at, len }
            })
            .collect();
        (Some(buf), patches)
    })
    .await
    .expect("patch task panicked")
}

/// Sends the patches of `block` on `w`, paced by `limiter`.
pub(super) async fn send_patches<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut FrameWriter<W>,
    block: &OutBlock,
    limiter: Option<&RateLimiter>,
    shared: &Shared,
) -> Result<(), EngineError> {
    let payload = block.payload.as_deref().unwrap_or_default();
    for p in &block.patches {
        if let Some(rl) = limiter {
            rl.acquire(p.len + 64).await;
        }
        w.send_data(&p.header, &payload[p.at..p.at + p.len]).await?;
        Progress::add(&shared.progress.wire_bytes, p.len as u64);
    }
    Ok(())
}
