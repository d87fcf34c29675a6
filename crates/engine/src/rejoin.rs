//! Keeping a session through a lost data stream.
//!
//! A data stream can break while the rest of the session is fine: a TLS record
//! damaged on the way (TCP's checksum let it through, TLS refuses it and the
//! connection is over), a reset on one connection, a plain stream's frame that fails
//! its MAC. Ending the whole session for it loses every block in flight on every
//! stream, and on a link that damages one TLS record in a few megabytes most sessions
//! then end before a block is through. So the sink says how many whole frames arrived
//! on the broken connection ([`Frame::StreamLost`]), the client of the session joins
//! the stream again on a new connection (its next *generation*, with a proof of its
//! own), and the source sends again the frames after those, from what it remembers
//! sending ([`Sent`]). Both ends bound it: the source remembers [`SENT_WINDOW`]
//! frames per stream, and a stream lost [`MAX_FRUITLESS`] times in a row without a
//! frame getting through ends the session as before (a new session then resumes from
//! what the destination verified).
//!
//! [`Frame::StreamLost`]: hetch_proto::Frame::StreamLost

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::error::EngineError;
use crate::wire::FrameMac;
use crate::{BoxStream, DataStream};

/// How a side gets a new connection for a data stream that was lost: the client of
/// the session opens one (TCP, TLS, and the stream's hello for its generation); the
/// server waits for the client's. Implemented by the session layer.
///
/// A client's attempt can fail too (its handshake crosses the same bad link): it
/// tries again with the generation after, so generations may be skipped, at most
/// [`MAX_SKIPPED`] in a row. The sink tells the source each skipped one was lost with
/// nothing through, so that a source that had taken one (the server, which accepted
/// its hello before the client gave up on it) sends what it wrote there again.
pub trait Rejoin: Send + Sync {
    /// A connection of data stream `index` of a generation after `after`, ready for
    /// frames, with its generation.
    fn rejoin(&self, index: u16, after: u32) -> Joining<'_>;
}

/// What [`Rejoin::rejoin`] returns: the new connection and its generation, to come.
pub type Joining<'a> =
    Pin<Box<dyn Future<Output = Result<(BoxStream, u32), EngineError>> + Send + 'a>>;

/// Generations a client may skip at once (its failed attempts to join again).
pub const MAX_SKIPPED: u32 = 8;

/// Frames per data stream the source remembers having sent (what it would send again
/// after a loss): a loss that took more than that ends the session. A frame is at
/// least a small file's block, so this is a few MiB of small files in flight per
/// stream, and any number of big blocks.
pub(crate) const SENT_WINDOW: usize = 4096;

/// Losses of one stream in a row without a whole frame arriving in between, at most.
pub(crate) const MAX_FRUITLESS: u32 = 8;

/// Longest wait for a lost stream's new connection, or for the sink's word on what
/// arrived: a client that does not come back within it has gone.
const REJOIN_TIMEOUT: Duration = Duration::from_secs(30);

/// What a session side needs to join its data streams again.
#[derive(Clone)]
pub(crate) struct Rejoining {
    rejoin: Arc<dyn Rejoin>,
    /// The data-frame MAC key, for plain streams.
    key: Option<[u8; 32]>,
    peer: String,
}

impl Rejoining {
    /// For a transport that can join streams again (`rejoin`), whose plain streams
    /// have MAC key `key`.
    pub(crate) fn new(rejoin: Arc<dyn Rejoin>, key: Option<[u8; 32]>, peer: &str) -> Self {
        Rejoining {
            rejoin,
            key,
            peer: peer.to_string(),
        }
    }

    /// A connection of data stream `index` of a generation after `after`, with its
    /// own frame MAC, and its generation.
    pub(crate) async fn connect(
        &self,
        index: u16,
        after: u32,
    ) -> Result<(DataStream, u32), EngineError> {
        let (stream, generation) =
            tokio::time::timeout(REJOIN_TIMEOUT, self.rejoin.rejoin(index, after))
                .await
                .map_err(|_| self.not_back(index))??;
        if generation <= after || generation - after > MAX_SKIPPED + 1 {
            return Err(EngineError::unexpected(
                &self.peer,
                format!(
                    "data stream {index} joined again as generation {generation} after {after}"
                ),
            ));
        }
        let stream = DataStream {
            stream,
            mac: self
                .key
                .as_ref()
                .map(|k| FrameMac::for_stream(k, index.into(), generation)),
            lane: None,
        };
        Ok((stream, generation))
    }

    /// The error when stream `index` does not come back in time.
    pub(crate) fn not_back(&self, index: u16) -> EngineError {
        EngineError::Connection {
            peer: self.peer.clone(),
            cause: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("data stream {index} was not joined again within {REJOIN_TIMEOUT:?}"),
            ),
        }
    }

    /// How long to wait for the sink's word on a lost stream.
    pub(crate) fn timeout(&self) -> Duration {
        REJOIN_TIMEOUT
    }
}

/// Whether `e`, ending a data stream, is a broken connection that a new one can
/// replace (rather than a peer breaking the protocol, or a local failure).
pub(crate) fn is_loss(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::Connection { .. } | EngineError::Tampered { .. }
    )
}

/// Counts a stream's losses in a row without a frame getting through.
#[derive(Default)]
pub(crate) struct Fruitless(u32);

impl Fruitless {
    /// A connection was lost after `frames` whole frames arrived on it: whether to
    /// join again (false once [`MAX_FRUITLESS`] losses in a row delivered nothing).
    pub(crate) fn again(&mut self, frames: u64) -> bool {
        self.0 = if frames > 0 { 0 } else { self.0 + 1 };
        self.0 <= MAX_FRUITLESS
    }
}

/// What one connection of a source's data stream sent, the last [`SENT_WINDOW`]
/// frames of it, so that what a loss took can be sent again.
pub(crate) struct Sent<T> {
    /// Each item with the number of its first frame and how many frames it took.
    items: VecDeque<(u64, u32, T)>,
    /// Frames written on this connection.
    frames: u64,
    /// Frames in `items`.
    held: u64,
}

impl<T> Default for Sent<T> {
    fn default() -> Self {
        Sent {
            items: VecDeque::new(),
            frames: 0,
            held: 0,
        }
    }
}

/// Why the frames a loss took cannot be sent again.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unsendable {
    /// The sink says more arrived than was sent: it is lying or broken.
    MoreThanSent {
        /// What it said.
        arrived: u64,
        /// What was sent.
        sent: u64,
    },
    /// What was lost goes back further than the window.
    Forgotten,
}

impl<T> Sent<T> {
    /// `item` went out as `frames` frames (a block is one, a repair's answer one per
    /// patch).
    pub(crate) fn record(&mut self, frames: u32, item: T) {
        self.items.push_back((self.frames, frames, item));
        self.frames += u64::from(frames);
        self.held += u64::from(frames);
        while self.items.len() > SENT_WINDOW {
            if let Some((_, n, _)) = self.items.pop_front() {
                self.held -= u64::from(n);
            }
        }
    }

    /// Frames written on this connection.
    #[cfg(test)]
    pub(crate) fn frames(&self) -> u64 {
        self.frames
    }

    /// The connection was lost after `arrived` whole frames reached the sink: the
    /// items not wholly among them, to send again. With `torn`, the sink kept the part
    /// of the next frame that arrived and asks for its repair: that item, a one-frame
    /// block, is not sent again.
    pub(crate) fn lost(self, arrived: u64, torn: bool) -> Result<Vec<T>, Unsendable> {
        if arrived > self.frames {
            return Err(Unsendable::MoreThanSent {
                arrived,
                sent: self.frames,
            });
        }
        if arrived < self.frames - self.held {
            return Err(Unsendable::Forgotten);
        }
        Ok(self
            .items
            .into_iter()
            .filter(|(first, n, _)| first + u64::from(*n) > arrived)
            .filter(|(first, n, _)| !(torn && *first == arrived && *n == 1))
            .map(|(_, _, item)| item)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_loss_took_is_what_did_not_arrive_whole() {
        let mut sent = Sent::default();
        sent.record(1, "a");
        sent.record(3, "patches");
        sent.record(1, "b");
        assert_eq!(sent.frames(), 5);
        let again = |arrived| {
            let mut s = Sent::default();
            s.record(1, "a");
            s.record(3, "patches");
            s.record(1, "b");
            s.lost(arrived, false)
        };
        assert_eq!(again(0), Ok(vec!["a", "patches", "b"]));
        assert_eq!(again(1), Ok(vec!["patches", "b"]));
        assert_eq!(
            again(3),
            Ok(vec!["patches", "b"]),
            "an answer half through goes again"
        );
        assert_eq!(again(4), Ok(vec!["b"]));
        assert_eq!(again(5), Ok(vec![]));
        assert_eq!(
            again(6),
            Err(Unsendable::MoreThanSent {
                arrived: 6,
                sent: 5
            })
        );
    }

    #[test]
    fn a_block_the_sink_keeps_torn_is_not_sent_again_whole() {
        let sent = || {
            let mut s = Sent::default();
            s.record(1, "a");
            s.record(1, "b");
            s.record(2, "patches");
            s
        };
        assert_eq!(sent().lost(1, true), Ok(vec!["patches"]), "b is repaired");
        assert_eq!(sent().lost(1, false), Ok(vec!["b", "patches"]));
        assert_eq!(
            sent().lost(2, true),
            Ok(vec!["patches"]),
            "a patch is never kept torn: its answer goes again"
        );
    }

    #[test]
    fn a_loss_deeper_than_the_window_cannot_be_made_good() {
        let mut sent = Sent::default();
        for i in 0..SENT_WINDOW as u64 + 10 {
            sent.record(1, i);
        }
        let frames = sent.frames();
        let mut copy = Sent::default();
        for i in 0..frames {
            copy.record(1, i);
        }
        assert_eq!(copy.lost(9, false), Err(Unsendable::Forgotten));
        let tail = sent.lost(10, false).unwrap();
        assert_eq!(tail.len(), SENT_WINDOW, "the whole window, from frame 10");
        assert_eq!(tail[0], 10);
    }

    #[test]
    fn losses_without_a_frame_through_are_bounded_and_progress_resets_them() {
        let mut f = Fruitless::default();
        for _ in 0..MAX_FRUITLESS {
            assert!(f.again(0));
        }
        assert!(!f.again(0), "one too many in a row");
        let mut f = Fruitless::default();
        for _ in 0..MAX_FRUITLESS {
            assert!(f.again(0));
        }
        assert!(f.again(1), "a frame got through");
        assert!(f.again(0));
    }
}
