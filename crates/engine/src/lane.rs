//! Data streams between two ends in one process, carrying frames by reference.
//!
//! A local copy, or a copy to or from an object store, runs the source and the sink in
//! the same process. Through a byte pipe every block would be encoded, copied into the
//! pipe and copied out again into a second buffer: two copies of every byte for
//! nothing. A [`Lane`] hands the frame itself over instead: the block's pooled buffer
//! travels from the source's reader to the sink's writer, and returns to the source's
//! pool when the sink has written it.
//!
//! Lanes sit behind the same seams as the bytes ([`crate::wire::FrameWriter`] and
//! [`crate::wire::FrameReader`]), so neither side's logic knows which it has. They are
//! bounded, so a slow sink holds the source back as a full pipe did; and every block on
//! one holds a buffer of the source's pool, whose budget bounds their memory.

use tokio::sync::mpsc;

use crate::wire::Incoming;

/// Frames queued on one direction of a lane, at most. The pool bounds the bytes; this
/// only keeps one stream from taking every buffer while the others idle (a 4 MiB pipe
/// held one block of the default size).
const DEPTH: usize = 2;

/// One end of an in-process data stream: frames go out on one channel and come in on
/// the other, by reference.
pub struct Lane {
    pub(crate) tx: mpsc::Sender<Incoming>,
    pub(crate) rx: mpsc::Receiver<Incoming>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lane")
    }
}

impl Lane {
    /// The two ends of one lane.
    pub fn pair() -> (Lane, Lane) {
        let (a_tx, b_rx) = mpsc::channel(DEPTH);
        let (b_tx, a_rx) = mpsc::channel(DEPTH);
        (Lane { tx: a_tx, rx: a_rx }, Lane { tx: b_tx, rx: b_rx })
    }
}
