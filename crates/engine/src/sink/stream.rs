//! The sink's data streams: one reader each takes blocks off the wire into pooled
//! buffers and queues them for the writers; when its connection is lost and the
//! session can join it again (see [`crate::rejoin`]), it tells the source how many
//! whole frames arrived ([`Frame::StreamLost`]) and goes on on the stream's next
//! connection, where the source sends the rest again. A block whose payload the loss
//! cut short is kept as far as it came, as a damaged copy whose repair asks only for
//! the patches that differ: on a link that breaks connections every megabyte or two,
//! a big block never crosses one whole, but every part of it that did is kept.

use std::sync::Arc;

use hetch_proto::{DataHeader, Frame, MIN_PATCH};
use tokio::sync::mpsc;

use super::SinkShared;
use crate::error::EngineError;
use crate::pool::{BufferPool, PooledBuf};
use crate::progress::Progress;
use crate::rejoin::{self, Fruitless, Rejoining};
use crate::wire::{FrameReader, Incoming, Torn};
use crate::DataStream;

/// One data stream's reader.
pub(super) struct Reader {
    /// The stream's index.
    pub index: u16,
    pub shared: Arc<SinkShared>,
    pub pool: BufferPool,
    /// Where blocks go, for the writers.
    pub tx: async_channel::Sender<(DataHeader, Option<PooledBuf>)>,
    /// The control stream, to say a connection was lost.
    pub ctl: mpsc::Sender<Frame>,
    /// How the stream is joined again, when it can be.
    pub rejoining: Option<Rejoining>,
}

impl Reader {
    /// Reads `data` and, after a loss, the stream's next connections, until the
    /// source ends the stream or the session is over.
    pub(super) async fn run(self, mut data: DataStream) -> Result<(), EngineError> {
        let mut generation = 0;
        let mut fruitless = Fruitless::default();
        loop {
            let (mut frames, mut torn) = (0, None);
            let e = match self.connection(data, &mut frames, &mut torn).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let Some(rejoining) = self.rejoining.as_ref().filter(|_| rejoin::is_loss(&e)) else {
                return Err(e);
            };
            let repair = torn.and_then(|t| self.keep(t));
            if !fruitless.again(frames + u64::from(repair.is_some())) {
                return Err(e);
            }
            let lost = Frame::StreamLost {
                index: self.index,
                generation,
                frames,
                torn: repair.is_some(),
            };
            for f in std::iter::once(lost).chain(repair) {
                if self.ctl.send(f).await.is_err() {
                    return Err(e);
                }
            }
            Progress::add(&self.shared.progress.streams_rejoined, 1);
            // Once the summary is out nothing more is needed from the stream (what
            // was lost was its end): the source need not come back.
            let after = generation;
            (data, generation) = tokio::select! {
                joined = rejoining.connect(self.index, after) => joined?,
                () = self.finished() => return Ok(()),
            };
            // Generations skipped (a client's attempts that failed) delivered nothing.
            for skipped in after + 1..generation {
                let lost = Frame::StreamLost {
                    index: self.index,
                    generation: skipped,
                    frames: 0,
                    torn: false,
                };
                if self.ctl.send(lost).await.is_err() {
                    return Err(e);
                }
            }
        }
    }

    /// Keeps what arrived of block frame `t` as a damaged copy to repair; the
    /// [`Frame::Repair`] that asks for the rest, or `None` when it is not kept (a patch,
    /// a compressed block, less than a patch of it, or copies all taken).
    fn keep(&self, t: Torn) -> Option<Frame> {
        let h = &t.header;
        if h.patch.is_some() || h.compressed || h.zero || t.got < MIN_PATCH as usize {
            return None;
        }
        let mut copy = t.buf[..].to_vec();
        copy[t.got..].fill(0);
        let bs = self.shared.opts.block_size;
        self.shared
            .repairs
            .start(h.file, h.block, bs, &h.digest, copy.into())
    }

    /// Reads one connection until the source ends the stream (or it closes once the
    /// summary went out); counts the whole data frames that arrived in `frames`, and
    /// leaves in `torn` a block the connection broke in.
    async fn connection(
        &self,
        data: DataStream,
        frames: &mut u64,
        torn: &mut Option<Torn>,
    ) -> Result<(), EngineError> {
        let sh = &self.shared;
        let peer = &sh.peer;
        let mut r = FrameReader::with_buffer(
            data.stream,
            peer,
            crate::wire::buffer_for(data.lane.is_some()),
        )
        .with_mac(data.mac)
        .with_lane(data.lane)
        .with_block_limit(sh.opts.block_size);
        let progress = &sh.progress;
        let mut wire = 0;
        loop {
            match r.next(Some(&self.pool)).await {
                Ok(Some(Incoming::Data(h, payload))) => {
                    *frames += 1;
                    Progress::add(&progress.wire_bytes, r.wire_bytes() - wire);
                    wire = r.wire_bytes();
                    if h.compressed {
                        Progress::add(&progress.compressed_blocks, 1);
                    }
                    if self.tx.send((h, payload)).await.is_err() {
                        return Ok(());
                    }
                }
                Ok(Some(Incoming::Frame(Frame::StreamEnd))) => return Ok(()),
                Ok(Some(Incoming::Frame(other))) => {
                    let what = format!("unexpected frame on a data stream: {other:?}");
                    return Err(EngineError::unexpected(peer, what));
                }
                Ok(None) | Err(EngineError::Connection { .. }) if sh.finished() => return Ok(()),
                Ok(None) => {
                    return Err(EngineError::Connection {
                        peer: peer.clone(),
                        cause: std::io::ErrorKind::UnexpectedEof.into(),
                    })
                }
                Err(e) => {
                    *torn = r.take_torn();
                    return Err(e);
                }
            }
        }
    }

    /// Returns once the summary went out.
    async fn finished(&self) {
        loop {
            let changed = self.shared.changed.notified();
            if self.shared.finished() {
                return;
            }
            changed.await;
        }
    }
}
