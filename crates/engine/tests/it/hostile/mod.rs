//! A hostile peer for engine tests: the test plays one side of a session frame by
//! frame, against the real engine on the other side, through in-memory streams.
//!
//! - [`FakeSource`] runs a real sink ([`hetch_engine::run_sink`]) into a destination
//!   directory; the test sends whatever `Entries`, `Data`, `Seal`, `Piece`... frames it
//!   likes and reads the sink's answers (`Plan`, `FileDone`, `Error`...).
//! - [`FakeSink`] runs a real source ([`hetch_engine::run_source`]) on local paths; the
//!   test reads its entries and blocks and answers with crafted `Plan`, `Resend`...
//!
//! Use it from a test module with `use crate::hostile;` and, for example:
//!
//! ```ignore
//! let mut s = hostile::FakeSource::start(opts(), dest(&out, 1));
//! s.send(Frame::Entries(vec![hostile::file(1, "f", 5)])).await;
//! let plan = s.recv().await;             // the sink's plan for the batch
//! s.send_data(1, 0, b"hello").await;      // block 0 of file 1, digest computed here
//! s.send(Frame::EndOfEntries).await;
//! let err = s.expect_error().await;       // or s.recv() until `Finished`
//! let result = s.end().await;             // the sink's own result
//! ```
//!
//! Every wait is bounded by [`PATIENCE`] so that a sink that hangs fails the test
//! instead of stalling it; no test asserts on how long anything took.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hetch_engine::wire::{FrameReader, FrameWriter, Incoming};
use hetch_engine::{BoxStream, BufferPool, DestSpec, EngineError, Options, Report, Transport};
use hetch_proto::{DataHeader, Entry, EntryKind, Frame};
use tokio::io::{split, ReadHalf, WriteHalf};
use tokio::task::JoinHandle;

/// How long a wait may take before the test fails as hung (a guard, not a measure).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Bytes each in-memory stream buffers.
const PIPE: usize = 4 << 20;

/// The name the engine under test gives the hostile peer in its errors.
pub const PEER: &str = "hostile peer";

/// How the test's ends name the engine under test in errors.
const ENGINE: &str = "engine under test";

/// Spawns one side of the engine (`run`) on in-memory streams with one data stream;
/// returns its task and the test's ends of the control and data streams.
fn engine<F>(run: impl FnOnce(Transport) -> F) -> (JoinHandle<F::Output>, Control, Vec<BoxStream>)
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (ours, theirs) = Transport::in_memory_pair(1, PIPE, (ENGINE, PEER));
    (
        tokio::spawn(run(theirs)),
        Control::new(ours.control),
        ours.data,
    )
}

/// A data stream the engine joined again: its index, generation and the test's end.
pub type Rejoined = (u16, u32, BoxStream);

/// Joins the engine's lost data streams again on new in-memory pipes, handing the
/// test its end of each (see [`FakeSource::rejoined`]).
struct PipeRejoin(tokio::sync::mpsc::UnboundedSender<Rejoined>);

impl hetch_engine::Rejoin for PipeRejoin {
    fn rejoin(&self, index: u16, after: u32) -> hetch_engine::Joining<'_> {
        let (ours, theirs) = tokio::io::duplex(PIPE);
        let _ = self.0.send((index, after + 1, Box::new(ours)));
        Box::pin(async move { Ok((Box::new(theirs) as BoxStream, after + 1)) })
    }
}

/// The test's side of the control stream.
pub struct Control {
    r: FrameReader<ReadHalf<BoxStream>>,
    w: FrameWriter<WriteHalf<BoxStream>>,
}

impl Control {
    fn new(s: BoxStream) -> Self {
        let (r, w) = split(s);
        Control {
            r: FrameReader::new(r, "engine under test"),
            w: FrameWriter::new(w, "engine under test"),
        }
    }

    /// Sends a frame; false when the engine has closed the stream.
    pub async fn send(&mut self, f: Frame) -> bool {
        self.w.send(&f).await.is_ok() && self.w.flush().await.is_ok()
    }

    /// The engine's next control frame; `None` once it closed the stream.
    pub async fn recv(&mut self) -> Option<Frame> {
        match tokio::time::timeout(PATIENCE, self.r.next_control()).await {
            Ok(r) => r.ok().flatten(),
            Err(_) => panic!("the engine under test sent nothing for {PATIENCE:?}"),
        }
    }

    /// Reads frames until an `Error` frame (returning its message), skipping the
    /// others; panics when the stream ends without one.
    pub async fn expect_error(&mut self) -> String {
        loop {
            match self.recv().await {
                Some(Frame::Error(e)) => return e.message,
                Some(_) => continue,
                None => panic!("the stream ended without an Error frame"),
            }
        }
    }
}

/// A test-driven source against a real sink.
pub struct FakeSource {
    /// The control stream.
    pub ctl: Control,
    data: Vec<FrameWriter<BoxStream>>,
    /// Data streams the sink joined again, once it can ([`FakeSource::start_rejoining`]).
    rejoined: Option<tokio::sync::mpsc::UnboundedReceiver<Rejoined>>,
    sink: JoinHandle<Result<Report, EngineError>>,
    /// Block size of the session (from the options given to [`FakeSource::start`]).
    pub bs: u64,
}

impl FakeSource {
    /// Starts a real sink receiving into `dest`, with one data stream.
    pub fn start(opts: Options, dest: DestSpec) -> Self {
        Self::start_with(opts, dest, None)
    }

    /// [`FakeSource::start`] with a sink that joins a lost data stream again (the
    /// test takes the new connection with [`FakeSource::rejoined`]).
    pub fn start_rejoining(opts: Options, dest: DestSpec) -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Self::start_with(opts, dest, Some((PipeRejoin(tx), rx)))
    }

    fn start_with(
        opts: Options,
        dest: DestSpec,
        rejoin: Option<(PipeRejoin, tokio::sync::mpsc::UnboundedReceiver<Rejoined>)>,
    ) -> Self {
        let bs = opts.block_size;
        let (rejoin, rejoined) = rejoin.map_or((None, None), |(r, rx)| (Some(r), Some(rx)));
        let (sink, ctl, data) = engine(|mut t| {
            t.rejoin = rejoin.map(|r| Arc::new(r) as Arc<dyn hetch_engine::Rejoin>);
            hetch_engine::run_sink(opts, dest, t, Arc::default())
        });
        FakeSource {
            ctl,
            data: data
                .into_iter()
                .map(|s| FrameWriter::new(s, ENGINE))
                .collect(),
            rejoined,
            sink,
            bs,
        }
    }

    /// Breaks data stream 0 after writing `bytes` raw (a frame's first bytes, say).
    pub async fn break_stream(&mut self, bytes: &[u8]) {
        let gone: BoxStream = Box::new(tokio::io::duplex(1).0);
        let w = std::mem::replace(&mut self.data[0], FrameWriter::new(gone, ENGINE));
        let mut s = w.into_inner();
        let _ = tokio::io::AsyncWriteExt::write_all(&mut s, bytes).await;
        let _ = tokio::io::AsyncWriteExt::flush(&mut s).await;
    }

    /// The next data stream the sink joined again: it becomes the stream of its
    /// index; its index and generation.
    pub async fn rejoined(&mut self) -> (u16, u32) {
        let rx = self
            .rejoined
            .as_mut()
            .expect("started with start_rejoining");
        let next = tokio::time::timeout(PATIENCE, rx.recv()).await;
        let (index, generation, s) = next
            .expect("the sink joined no stream again")
            .expect("the sink is gone");
        self.data[usize::from(index)] = FrameWriter::new(s, ENGINE);
        (index, generation)
    }

    /// Sends a control frame; false when the sink has closed the stream.
    pub async fn send(&mut self, f: Frame) -> bool {
        self.ctl.send(f).await
    }

    /// The sink's next control frame.
    pub async fn recv(&mut self) -> Option<Frame> {
        self.ctl.recv().await
    }

    /// Reads until the sink's `Error` frame; its message.
    pub async fn expect_error(&mut self) -> String {
        self.ctl.expect_error().await
    }

    /// Sends block `block` of file `file` with `payload`, digested as a file of
    /// `file_len` bytes (the digest a real source would send).
    pub async fn send_block(&mut self, file: u64, block: u64, file_len: u64, payload: &[u8]) {
        let digest = hetch_integrity::block_digest(file_len, self.bs, block, payload);
        self.send_raw_block(file, block, digest, payload).await;
    }

    /// Sends a data frame with any header numbers (no digest check here).
    pub async fn send_raw_block(&mut self, file: u64, block: u64, digest: [u8; 32], p: &[u8]) {
        let h = DataHeader {
            file,
            block,
            digest,
            zero: false,
            compressed: false,
            raw_len: 0,
            sparse: false,
            patch: None,
        };
        self.send_header(&h, p).await;
    }

    /// Sends a data frame with exactly this header and payload.
    pub async fn send_header(&mut self, h: &DataHeader, p: &[u8]) {
        let w = &mut self.data[0];
        let _ = w.send_data(h, p).await;
        let _ = w.flush().await;
    }

    /// Closes the streams the way a source does after the sink's summary, and returns
    /// the sink's result.
    pub async fn end(mut self) -> Result<Report, EngineError> {
        for w in &mut self.data {
            let _ = w.send(&Frame::StreamEnd).await;
            let _ = w.shutdown().await;
        }
        drop(self.ctl);
        match tokio::time::timeout(PATIENCE, self.sink).await {
            Ok(r) => r.expect("the sink panicked"),
            Err(_) => panic!("the sink did not end within {PATIENCE:?}"),
        }
    }
}

/// A test-driven sink against a real source.
pub struct FakeSink {
    /// The control stream.
    pub ctl: Control,
    data: Vec<FrameReader<BoxStream>>,
    source: JoinHandle<Result<Report, EngineError>>,
    pool: BufferPool,
}

impl FakeSink {
    /// Starts a real source sending `operands`, with one data stream.
    pub fn start(opts: Options, operands: Vec<PathBuf>) -> Self {
        let (source, ctl, data) =
            engine(|t| hetch_engine::run_source(opts, operands, t, Arc::default()));
        FakeSink {
            ctl,
            data: data
                .into_iter()
                .map(|s| FrameReader::new(s, ENGINE))
                .collect(),
            source,
            pool: BufferPool::new(64 << 20),
        }
    }

    /// The next data frame from the source: its header and payload length.
    pub async fn recv_block(&mut self) -> Option<(DataHeader, usize)> {
        let next = self.data[0].next(Some(&self.pool));
        match tokio::time::timeout(PATIENCE, next).await {
            Ok(Ok(Some(Incoming::Data(h, p)))) => Some((h, p.map_or(0, |b| b.len()))),
            Ok(_) => None,
            Err(_) => panic!("the source sent no block for {PATIENCE:?}"),
        }
    }

    /// The source's result, once it ended (the test closes nothing first: a source
    /// that broke off the session has ended by itself).
    pub async fn result(self) -> Result<Report, EngineError> {
        match tokio::time::timeout(PATIENCE, self.source).await {
            Ok(r) => r.expect("the source panicked"),
            Err(_) => panic!("the source did not end within {PATIENCE:?}"),
        }
    }
}

/// A file entry.
pub fn file(id: u64, path: &str, size: u64) -> Entry {
    file_entry(id, path, size, false)
}

/// A file entry announced as growing.
pub fn growing(id: u64, path: &str, size: u64) -> Entry {
    file_entry(id, path, size, true)
}

fn file_entry(id: u64, path: &str, size: u64, growing: bool) -> Entry {
    let kind = EntryKind::File {
        size,
        digest: None,
        growing,
    };
    entry(id, path, kind, 0o644)
}

/// A directory entry.
pub fn dir(id: u64, path: &str) -> Entry {
    entry(id, path, EntryKind::Dir, 0o755)
}

/// Any entry, with mode `mode` and a fixed mtime.
pub fn entry(id: u64, path: &str, kind: EntryKind, mode: u32) -> Entry {
    Entry {
        id,
        path: path.as_bytes().to_vec(),
        kind,
        mode,
        mtime_sec: 1_700_000_000,
        mtime_nsec: 0,
        xattrs: Vec::new(),
    }
}

/// This process's peak resident memory, in bytes (from `/proc/self/status`).
pub fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
