//! The source's data streams: one writer each sends whatever block is ready next, and
//! when its connection is lost and the session can join it again (see
//! [`crate::rejoin`]), sends again what the loss took, on the stream's next connection.

use std::sync::Arc;

use tokio::sync::watch;

use super::repair::{self, RepairAsk};
use super::{OutBlock, Shared};
use crate::error::EngineError;
use crate::progress::Progress;
use crate::rate::RateLimiter;
use crate::rejoin::{self, Fruitless, Rejoining, Sent, Unsendable};
use crate::wire::FrameWriter;
use crate::DataStream;
use hetch_proto::Frame;

/// What the sink said of a stream's lost connections, the latest [`LOST_KEPT`]: each
/// one's generation, the whole frames that arrived on it, and whether it keeps the
/// next one torn ([`Frame::StreamLost`]).
pub(super) type Lost = std::collections::VecDeque<(u32, u64, bool)>;

/// Reports on a stream's lost connections kept: a few, since one about a skipped
/// generation and one about the next may come close together.
pub(super) const LOST_KEPT: usize = 2 * rejoin::MAX_SKIPPED as usize;

/// The sink's report on connection `generation` among `lost`.
fn report_on(lost: &Lost, generation: u32) -> Option<(u64, bool)> {
    lost.iter()
        .find(|(g, _, _)| *g == generation)
        .map(|(_, frames, torn)| (*frames, *torn))
}

/// One data stream's writer.
pub(super) struct Writer {
    /// The stream's index.
    pub index: u16,
    /// The blocks ready to go, shared by every stream.
    pub rx: async_channel::Receiver<OutBlock>,
    pub limiter: Option<Arc<RateLimiter>>,
    pub shared: Arc<Shared>,
    /// The sink's word on lost connections, from the control reader (closed when it
    /// ends: the session is over).
    pub lost: watch::Receiver<Lost>,
    /// How the stream is joined again, when it can be.
    pub rejoining: Option<Rejoining>,
}

/// A block sent, as what to ask the readers for if it is lost.
struct Again {
    file: u64,
    block: u64,
    repair: Option<Arc<RepairAsk>>,
}

impl Writer {
    /// Sends blocks on `data` and, after a loss, on the stream's next connections,
    /// until every block is sent and the sink has them or the session is over.
    pub(super) async fn run(mut self, mut data: DataStream) -> Result<(), EngineError> {
        let mut generation = 0;
        let mut fruitless = Fruitless::default();
        loop {
            let mut sent = Sent::default();
            let e = match self.connection(data, generation, &mut sent).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let Some(rejoining) = self.rejoining.clone().filter(|_| rejoin::is_loss(&e)) else {
                return Err(e);
            };
            // The sink says what arrived (it saw the loss too, or caused it).
            let Some((arrived, torn)) = self.word_on(generation, rejoining.timeout()).await else {
                return Err(e);
            };
            let again = match sent.lost(arrived, torn) {
                Ok(again) => again,
                Err(Unsendable::Forgotten) => return Err(e),
                Err(Unsendable::MoreThanSent { arrived, sent }) => {
                    return Err(EngineError::unexpected(
                        &self.shared.peer,
                        format!(
                            "data stream {} lost after {arrived} frames arrived, of {sent} sent",
                            self.index
                        ),
                    ))
                }
            };
            if !fruitless.again(arrived + u64::from(torn)) {
                return Err(e);
            }
            for a in again {
                super::control::send_again(&self.shared, a.file, a.block, a.repair).await;
            }
            // The session may end meanwhile (the stream's end was all that was lost):
            // then nothing is owed.
            (data, generation) = tokio::select! {
                joined = rejoining.connect(self.index, generation) => joined?,
                () = session_over(&mut self.lost) => return Ok(()),
            };
        }
    }

    /// Sends blocks on connection `generation` until there are no more (then ends the
    /// stream and waits for the session's end, which a loss may still interrupt), or
    /// the connection is lost: a write fails, or the sink says so.
    async fn connection(
        &mut self,
        data: DataStream,
        generation: u32,
        sent: &mut Sent<Again>,
    ) -> Result<(), EngineError> {
        let local = crate::wire::buffer_for(data.lane.is_some());
        let mut w = FrameWriter::with_buffer(data.stream, &self.shared.peer, local)
            .with_mac(data.mac)
            .with_lane(data.lane);
        // Whether the sink can still say the connection was lost (not once the
        // session is over, or when it cannot be joined again).
        let mut watching = self.rejoining.is_some();
        loop {
            let block = match self.rx.try_recv() {
                Ok(b) => b,
                Err(_) => {
                    // Nothing ready: push out what is buffered before waiting.
                    w.flush().await?;
                    let next = tokio::select! {
                        b = self.rx.recv() => Some(b),
                        lost = lost_now(&mut self.lost, generation), if watching => {
                            if lost {
                                return Err(self.said_lost());
                            }
                            watching = false;
                            None
                        }
                    };
                    match next {
                        Some(Ok(b)) => b,
                        Some(Err(_)) => break,
                        None => continue,
                    }
                }
            };
            self.send(&mut w, block, sent).await?;
        }
        w.send(&Frame::StreamEnd).await?;
        w.shutdown().await?;
        // The stream's end may be lost with its connection too: then the sink says so
        // and what did not arrive goes again. Otherwise the writer is done when the
        // session is (the control reader ends).
        if watching && lost_now(&mut self.lost, generation).await {
            return Err(self.said_lost());
        }
        Ok(())
    }

    /// Sends `block` on `w`, remembered in `sent`.
    async fn send<W: tokio::io::AsyncWrite + Unpin>(
        &self,
        w: &mut FrameWriter<W>,
        block: OutBlock,
        sent: &mut Sent<Again>,
    ) -> Result<(), EngineError> {
        let shared = &self.shared;
        let (file, at) = (block.header.file, block.header.block);
        if !block.patches.is_empty() && !w.has_lane() {
            if self.rejoining.is_some() {
                // Lost, the answer goes again whole: the sink takes each patch once.
                let again = Again {
                    file,
                    block: at,
                    repair: block.repair.clone(),
                };
                sent.record(block.patches.len() as u32, again);
            }
            return repair::send_patches(w, &block, self.limiter.as_deref(), shared).await;
        }
        let wire = block.payload.as_ref().map_or(0, |p| p.len());
        if let Some(rl) = &self.limiter {
            rl.acquire(wire + 64).await;
        }
        if self.rejoining.is_some() {
            let again = Again {
                file,
                block: at,
                repair: None,
            };
            sent.record(1, again);
        }
        w.send_block(&block.header, block.payload).await?;
        Progress::add(&shared.progress.bytes, block.len);
        Progress::add(&shared.progress.wire_bytes, wire as u64);
        if block.header.compressed {
            Progress::add(&shared.progress.compressed_blocks, 1);
        }
        Ok(())
    }

    /// The sink's count of whole frames on lost connection `generation` and whether it
    /// keeps the next one torn, once it says (`None` if it does not within `timeout`,
    /// or the session ends first).
    async fn word_on(
        &mut self,
        generation: u32,
        timeout: std::time::Duration,
    ) -> Option<(u64, bool)> {
        tokio::time::timeout(timeout, async {
            loop {
                if let Some(word) = report_on(&self.lost.borrow_and_update(), generation) {
                    return Some(word);
                }
                self.lost.changed().await.ok()?;
            }
        })
        .await
        .ok()
        .flatten()
    }

    /// The loss the sink reported.
    fn said_lost(&self) -> EngineError {
        EngineError::Connection {
            peer: self.shared.peer.clone(),
            cause: std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                format!("data stream {} lost on the way", self.index),
            ),
        }
    }
}

/// Returns once the session is over (the control reader ended).
async fn session_over(lost: &mut watch::Receiver<Lost>) {
    while lost.changed().await.is_ok() {}
}

/// True once the sink says connection `generation` was lost; false once the session
/// is over (the control reader ended).
async fn lost_now(lost: &mut watch::Receiver<Lost>, generation: u32) -> bool {
    loop {
        if report_on(&lost.borrow(), generation).is_some() {
            return true;
        }
        if lost.changed().await.is_err() {
            return false;
        }
    }
}
