//! Telling a quiet session from a dead one, and ending sessions on request.
//!
//! A peer that stops answering (its process stopped, its host gone, the path cut
//! without a reset) leaves TCP waiting for minutes or, on a connection with nothing
//! to send, forever. So every byte read from the peer, on any stream, is noted; each
//! side sends a [`Frame::KeepAlive`] on the control stream every second (or a quarter
//! of its stall timeout, if shorter), so a healthy peer is always heard from well
//! within any timeout of a few seconds, however idle the session; and a session that hears nothing for the whole timeout ends as
//! [`EngineError::Stalled`], which the client treats like a lost connection.
//!
//! Only reads count: a stalled peer still lets us write until its socket buffers are
//! full, which can take long, and a write tells nothing about the peer being there.
//!
//! [`Frame::KeepAlive`]: hetch_proto::Frame::KeepAlive

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::EngineError;
use crate::{BoxStream, Transport};

/// Keep-alives go out this many times per stall timeout, and at least every
/// [`MAX_KEEPALIVE_GAP`]: the peer's own timeout may be shorter than ours.
const KEEPALIVES_PER_TIMEOUT: u32 = 4;
/// Longest gap between two keep-alives.
const MAX_KEEPALIVE_GAP: Duration = Duration::from_secs(1);

/// When the peer was last heard from.
#[derive(Clone)]
pub(crate) struct Liveness {
    epoch: Instant,
    /// Milliseconds after `epoch` of the last read that returned bytes.
    last_read_ms: Arc<AtomicU64>,
    stall: Duration,
    peer: String,
}

impl Liveness {
    /// Wraps every stream of `transport` so that reads are noted; `None` (nothing
    /// watched) without a stall timeout.
    pub(crate) fn watch(
        transport: Transport,
        stall: Option<Duration>,
    ) -> (Transport, Option<Self>) {
        let Some(stall) = stall.filter(|d| !d.is_zero()) else {
            return (transport, None);
        };
        let live = Liveness {
            epoch: Instant::now(),
            last_read_ms: Arc::new(AtomicU64::new(0)),
            stall,
            peer: transport.peer.clone(),
        };
        let wrap = |s: BoxStream| -> BoxStream {
            Box::new(Watched {
                inner: s,
                live: live.clone(),
            })
        };
        let transport = Transport {
            control: wrap(transport.control),
            data: transport.data.into_iter().map(wrap).collect(),
            ..transport
        };
        (transport, Some(live))
    }

    /// How often to send a keep-alive and check the peer.
    pub(crate) fn tick(&self) -> Duration {
        (self.stall / KEEPALIVES_PER_TIMEOUT).clamp(Duration::from_millis(10), MAX_KEEPALIVE_GAP)
    }

    /// The stall timeout.
    pub(crate) fn stall(&self) -> Duration {
        self.stall
    }

    /// The error to end the session with, if nothing was heard for the whole timeout.
    pub(crate) fn check(&self) -> Result<(), EngineError> {
        let now = self.epoch.elapsed().as_millis() as u64;
        let quiet = Duration::from_millis(now.saturating_sub(self.last_read_ms.load(Relaxed)));
        if quiet < self.stall {
            return Ok(());
        }
        Err(EngineError::Stalled {
            peer: self.peer.clone(),
            secs: quiet.as_secs(),
        })
    }

    fn heard(&self) {
        self.last_read_ms
            .store(self.epoch.elapsed().as_millis() as u64, Relaxed);
    }
}

/// A stream whose reads are noted in a [`Liveness`].
struct Watched {
    inner: BoxStream,
    live: Liveness,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.live.heard();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Ends sessions from outside (a server shutting down): every session holding a
/// receiver tells its peer and stops once [`StopSender::stop`] is called.
#[derive(Debug, Clone)]
pub struct StopSignal(tokio::sync::watch::Receiver<bool>);

/// The sending side of a [`StopSignal`].
#[derive(Debug)]
pub struct StopSender(tokio::sync::watch::Sender<bool>);

impl StopSignal {
    /// A new signal and the handle that raises it.
    pub fn new() -> (StopSender, StopSignal) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (StopSender(tx), StopSignal(rx))
    }

    /// Whether the signal has been raised (for work that checks between steps).
    pub fn is_raised(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the signal is raised (never, if its sender is dropped unraised).
    pub async fn raised(mut self) {
        if self.0.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl StopSender {
    /// Tells every session holding a receiver to stop.
    pub fn stop(&self) {
        let _ = self.0.send(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reads_count_as_heard_and_a_peer_silent_for_the_timeout_is_stalled() {
        let (a, mut b) = Transport::in_memory_pair(1, 1024, ("b", "a"));
        let (mut a, live) = Liveness::watch(a, Some(Duration::from_secs(8)));
        let mut live = live.expect("watched");
        assert_eq!(live.tick(), Duration::from_secs(1));
        // As if the session had started ten seconds ago and nothing had come since.
        live.epoch -= Duration::from_secs(10);
        let err = live.check().unwrap_err();
        assert!(err.to_string().contains("b stopped answering"), "{err}");
        // A read on a watched stream stores its time in the shared counter.
        live.last_read_ms.store(u64::MAX, Relaxed);
        b.control.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        a.control.read_exact(&mut one).await.unwrap();
        assert_ne!(
            live.last_read_ms.load(Relaxed),
            u64::MAX,
            "the read was noted"
        );
        live.heard();
        assert!(live.check().is_ok(), "just heard from");
    }

    #[test]
    fn no_timeout_watches_nothing() {
        let (a, _b) = Transport::in_memory_pair(1, 1024, ("b", "a"));
        assert!(Liveness::watch(a, None).1.is_none());
        let (a, _b) = Transport::in_memory_pair(1, 1024, ("b", "a"));
        assert!(Liveness::watch(a, Some(Duration::ZERO)).1.is_none());
    }

    #[tokio::test]
    async fn a_stop_signal_reaches_every_holder() {
        let (tx, rx) = StopSignal::new();
        let (a, b) = (rx.clone(), rx);
        let waiting = tokio::spawn(async move { tokio::join!(a.raised(), b.raised()) });
        tx.stop();
        waiting.await.unwrap();
    }
}
