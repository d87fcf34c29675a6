//! The transfer engine: everything between "these files" and "those bytes on a stream".
//!
//! A session has a *source* side ([`run_source`]) and a *sink* side ([`run_sink`]),
//! joined by a [`Transport`]: one ordered control stream plus N data streams. The engine
//! does not know about sockets or TLS; the caller hands it streams (TCP/TLS for remote
//! transfers, in-memory pipes and [`Lane`]s that hand blocks over by reference for
//! [`copy_local`]), so the whole engine runs in tests without a network.
//!
//! Flow: the source walks its operands and announces entries in batches on the control
//! stream; the sink answers each batch with a plan (skip, send everything, or send the
//! blocks its journal does not have). Source readers cut files into blocks, hash each
//! block as it is read, and put them on whichever data stream is free; sink writers check
//! each block's digest, write it at its offset into a part file, record it in the
//! journal, and rename the file into place once every block is there. Buffers come from
//! a bounded pool on both sides, so memory does not grow with the dataset.

#![deny(missing_docs)]

mod changed;
mod compress;
mod dest;
mod error;
pub mod faults;
mod filter;
mod follow;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod gate;
mod lag;
mod lane;
mod links;
mod liveness;
mod local;
mod manifest;
mod notify;
mod operand;
mod options;
mod pool;
mod progress;
pub mod ranges;
mod rate;
mod readers;
mod rejoin;
mod session;
mod sink;
mod source;
mod special;
pub mod store;
pub mod sum;
mod tally;
mod tops;
pub mod wire;
mod xattrs;

pub use dest::DestSpec;
pub use error::EngineError;
pub use filter::glob_filter;
pub use lag::{LagHistogram, LagSummary};
pub use lane::Lane;
pub use liveness::{StopSender, StopSignal};
pub use local::{copy_between, copy_local};
pub use manifest::Manifest;
pub use operand::{Destination, Operand};
pub use options::{
    default_hash_threads, Algorithm, Compression, DeleteRequest, EntryFilter, Follow, Options,
    Schedule, Verify,
};
pub use pool::{BufferPool, PooledBuf};
pub use progress::{Progress, Report, CHANGE_VERBS};
pub use rate::RateLimiter;
pub use rejoin::{Joining, Rejoin, MAX_SKIPPED};
pub use session::below_served_root;
pub use sink::{run_sink, run_sink_into, MAX_OPEN_FILES};
pub use source::{run_source, run_source_from};
pub use tally::{Tally, Tracked};

pub use hetch_proto::{BoxStream, Stream};

/// The connections of one session, after the handshake.
pub struct Transport {
    /// The ordered control stream.
    pub control: BoxStream,
    /// The data streams (at least one).
    pub data: Vec<BoxStream>,
    /// Name of the peer for error messages ("host:port" or "local").
    pub peer: String,
    /// Key of the per-frame MAC on the data streams, when they are plain TCP
    /// (`--no-encrypt`); `None` when TLS (or a local pipe) protects them.
    pub data_mac: Option<[u8; 32]>,
    /// Where both ends run in one process, one [`Lane`] per data stream: data frames
    /// go on it by reference instead of as bytes on the stream. Empty otherwise.
    pub lanes: Vec<Lane>,
    /// How a lost data stream is joined again on a new connection, when it can be
    /// (see [`Rejoin`]); `None` ends the session with the stream.
    pub rejoin: Option<std::sync::Arc<dyn Rejoin>>,
}

impl Transport {
    /// Two ends of one session joined by in-memory pipes of `capacity` bytes each, with
    /// `streams` data streams: tests or fuzzers that play one side frame by frame (local
    /// copies use [`Transport::in_process_pair`]). Each end names the other as given in `peers` (first end's peer,
    /// second end's peer).
    pub fn in_memory_pair(
        streams: usize,
        capacity: usize,
        peers: (&str, &str),
    ) -> (Transport, Transport) {
        let (c1, c2) = tokio::io::duplex(capacity);
        let mut one: Vec<BoxStream> = Vec::new();
        let mut two: Vec<BoxStream> = Vec::new();
        for _ in 0..streams.max(1) {
            let (a, b) = tokio::io::duplex(capacity);
            one.push(Box::new(a));
            two.push(Box::new(b));
        }
        let end = |control: tokio::io::DuplexStream, data, peer: &str| Transport {
            control: Box::new(control),
            data,
            peer: peer.into(),
            data_mac: None,
            lanes: Vec::new(),
            rejoin: None,
        };
        (end(c1, one, peers.0), end(c2, two, peers.1))
    }

    /// [`Transport::in_memory_pair`] whose data streams carry blocks by reference, on
    /// a [`Lane`] each (the byte pipes are there for the streams' lifetimes and carry
    /// nothing): the two ends of an in-process copy.
    pub fn in_process_pair(
        streams: usize,
        capacity: usize,
        peers: (&str, &str),
    ) -> (Transport, Transport) {
        let (mut one, mut two) = Self::in_memory_pair(streams, capacity, peers);
        (one.lanes, two.lanes) = one.data.iter().map(|_| Lane::pair()).unzip();
        (one, two)
    }

    /// The data streams, each with its frame MAC (if any) and its lane (if any).
    pub(crate) fn data_streams(
        data: Vec<BoxStream>,
        key: Option<[u8; 32]>,
        lanes: Vec<Lane>,
    ) -> impl Iterator<Item = DataStream> {
        let mut lanes = lanes.into_iter();
        data.into_iter()
            .enumerate()
            .map(move |(i, stream)| DataStream {
                stream,
                mac: key.as_ref().map(|k| wire::FrameMac::for_stream(k, i, 0)),
                lane: lanes.next(),
            })
    }
}

/// One data stream of a session as its side uses it.
pub(crate) struct DataStream {
    /// The stream's bytes.
    pub stream: BoxStream,
    /// The frame MAC, when plain TCP carries the stream.
    pub mac: Option<wire::FrameMac>,
    /// The lane that carries its frames instead, in one process.
    pub lane: Option<Lane>,
}
