//! Reading and writing frames on async streams (the I/O half of `hetch-proto`).
//!
//! Data payloads are read straight into pooled buffers and written straight from them,
//! without an intermediate copy; control frames are small and go through a scratch
//! buffer.
//!
//! Plain (`--no-encrypt`) data streams carry a MAC per frame ([`FrameMac`]): a
//! [`MAC_LEN`]-byte tag after the header and fixed fields of a data frame (before its
//! payload), or after the body of a control frame. The tag covers those bytes and the
//! frame's sequence number on its stream, so a frame cannot be changed, dropped,
//! repeated, reordered or moved to another stream unnoticed. A data payload is not
//! covered itself: the block digest is, and the sink checks the payload against it
//! (unless `--verify none`, which therefore leaves plain payloads unprotected).
//!
//! A data stream whose two ends are in one process has a [`Lane`] as well: its frames
//! are handed over on it as they are, the payload's pooled buffer by reference, and its
//! bytes carry nothing (see `lane.rs`).

use hetch_proto::{self as proto, DataHeader, Frame, FrameKind};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};

use crate::error::EngineError;
use crate::pool::{BufferPool, PooledBuf};
use crate::Lane;

/// Buffer size of frame readers and writers.
const IO_BUF: usize = 256 << 10;

/// Bytes buffered for a stream whose peer is in this process: its frames come on a
/// lane, or its bytes from an in-memory pipe. A unit of one small file runs a whole
/// session, and zeroing [`IO_BUF`] for each of its streams cost more than its copy.
const LOCAL_BUF: usize = 8 << 10;

/// The buffer for a stream: small where the peer is in this process (`local`).
pub(crate) fn buffer_for(local: bool) -> usize {
    match local {
        true => LOCAL_BUF,
        false => IO_BUF,
    }
}

/// Bytes of the tag after each frame on a MAC-protected stream (128 bits).
pub const MAC_LEN: usize = 16;

/// The per-frame MAC state of one direction of one stream.
#[derive(Clone)]
pub struct FrameMac {
    key: [u8; 32],
    seq: u64,
}

impl std::fmt::Debug for FrameMac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameMac")
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl FrameMac {
    /// The MAC of connection `generation` of data stream `index` of a session whose
    /// data-frame key is `session_key`: every stream, and every connection of a stream
    /// joined again, gets its own key, so frames cannot move between streams or be
    /// replayed on a stream's next connection.
    pub fn for_stream(session_key: &[u8; 32], index: usize, generation: u32) -> Self {
        let mut material = session_key.to_vec();
        material.extend_from_slice(&(index as u64).to_le_bytes());
        material.extend_from_slice(&generation.to_le_bytes());
        FrameMac {
            key: blake3::derive_key("hetch 2025-06 data-stream frame MAC", &material),
            seq: 0,
        }
    }

    /// The tag of the next frame, whose authenticated bytes are `parts`.
    fn next_tag(&mut self, parts: &[&[u8]]) -> [u8; MAC_LEN] {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(&self.seq.to_le_bytes());
        for p in parts {
            h.update(p);
        }
        self.seq += 1;
        let mut tag = [0u8; MAC_LEN];
        tag.copy_from_slice(&h.finalize().as_bytes()[..MAC_LEN]);
        tag
    }
}

/// Constant-time tag comparison.
fn tags_equal(a: &[u8; MAC_LEN], b: &[u8; MAC_LEN]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// A frame as received.
#[derive(Debug)]
pub enum Incoming {
    /// A control frame.
    Frame(Frame),
    /// A data block; `None` payload for an all-zero block.
    Data(DataHeader, Option<PooledBuf>),
}

/// Reads frames from a stream.
pub struct FrameReader<R> {
    r: BufReader<R>,
    peer: String,
    mac: Option<FrameMac>,
    /// Longest block taken, as sent or once inflated (the session's block size).
    max_block: usize,
    /// A compressed payload, read here before it is inflated into a pooled buffer: a
    /// reader holds at most one, so it cannot wait for the pool while holding pool
    /// buffers others wait for.
    packed: Vec<u8>,
    /// Payload bytes of data frames read so far, as they were on the wire.
    wire_bytes: u64,
    /// Where frames come from instead of the bytes, in one process.
    lane: Option<tokio::sync::mpsc::Receiver<Incoming>>,
    /// The block whose payload the connection broke in, as far as it came.
    torn: Option<Torn>,
}

/// A block frame whose header arrived whole and whose payload the connection broke
/// in: the bytes that did arrive, for a repair to start from (see
/// [`FrameReader::take_torn`]).
pub struct Torn {
    /// The frame's header (authenticated: by TLS, or by the frame MAC).
    pub header: DataHeader,
    /// The payload's buffer; its first `got` bytes arrived.
    pub buf: PooledBuf,
    /// Bytes of the payload that arrived.
    pub got: usize,
}

/// Compressed blocks up to this long are inflated on the reading task itself; longer
/// ones on a blocking thread (a 4 MiB block takes milliseconds).
const INLINE_UNPACK: usize = 256 << 10;

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wraps a stream; `peer` names it in errors.
    pub fn new(r: R, peer: &str) -> Self {
        Self::with_buffer(r, peer, IO_BUF)
    }

    /// [`FrameReader::new`] reading `capacity` bytes at a time.
    pub(crate) fn with_buffer(r: R, peer: &str, capacity: usize) -> Self {
        FrameReader {
            r: BufReader::with_capacity(capacity, r),
            peer: peer.to_string(),
            mac: None,
            max_block: proto::MAX_BLOCK,
            packed: Vec::new(),
            wire_bytes: 0,
            lane: None,
            torn: None,
        }
    }

    /// The block frame the last error broke off, if it was one sent as it is whose
    /// header had arrived (see [`Torn`]).
    pub fn take_torn(&mut self) -> Option<Torn> {
        self.torn.take()
    }

    /// Takes frames from `lane` (when there is one) instead of reading bytes: the
    /// stream's writer is in this process and hands them over.
    pub fn with_lane(mut self, lane: Option<Lane>) -> Self {
        self.lane = lane.map(|l| l.rx);
        self
    }

    /// Refuses data frames whose block (as sent, or once inflated) is longer than
    /// `max_block` bytes, before any buffer is taken for it: the session's block size.
    pub fn with_block_limit(mut self, max_block: u64) -> Self {
        self.max_block = max_block.min(proto::MAX_BLOCK as u64) as usize;
        self
    }

    /// Payload bytes of the data frames read so far, as they crossed the wire.
    pub fn wire_bytes(&self) -> u64 {
        self.wire_bytes
    }

    /// Checks every frame's tag with `mac` (plain data streams); `None` for streams
    /// that TLS protects.
    pub fn with_mac(mut self, mac: Option<FrameMac>) -> Self {
        self.mac = mac;
        self
    }

    /// Reads the tag that follows `parts` and checks it.
    async fn check_tag(&mut self, parts: &[&[u8]], what: &str) -> Result<(), EngineError> {
        let Some(mac) = &mut self.mac else {
            return Ok(());
        };
        let expected = mac.next_tag(parts);
        let mut tag = [0u8; MAC_LEN];
        self.r
            .read_exact(&mut tag)
            .await
            .map_err(|e| EngineError::Connection {
                peer: self.peer.clone(),
                cause: e,
            })?;
        if !tags_equal(&tag, &expected) {
            return Err(EngineError::Tampered {
                peer: self.peer.clone(),
                what: format!("{what} has a wrong MAC"),
            });
        }
        Ok(())
    }

    fn conn(&self, e: std::io::Error) -> EngineError {
        EngineError::Connection {
            peer: self.peer.clone(),
            cause: e,
        }
    }

    /// A frame header that does not decode. On a plain data stream that is damage
    /// the frame's MAC would have caught had it got that far (its length, kind or
    /// flags were altered on the way): [`EngineError::Tampered`], which a new session
    /// gets past. Elsewhere (TLS delivers what the peer sent) the peer broke the
    /// protocol.
    fn undecodable_header(&self, e: proto::ProtoError) -> EngineError {
        match self.mac {
            Some(_) => EngineError::Tampered {
                peer: self.peer.clone(),
                what: format!("a frame header does not decode: {e}"),
            },
            None => self.proto(e),
        }
    }

    fn proto(&self, e: proto::ProtoError) -> EngineError {
        EngineError::Proto {
            peer: self.peer.clone(),
            source: e,
        }
    }

    /// The next frame; `Ok(None)` on a clean end of stream between frames. Data frames
    /// need a `pool` to read their payload into; without one they are a protocol error.
    /// Keep-alives are skipped here: they only show the peer is there (and reading
    /// them is what the stall watch counts).
    pub async fn next(
        &mut self,
        pool: Option<&BufferPool>,
    ) -> Result<Option<Incoming>, EngineError> {
        loop {
            match self.next_any(pool).await? {
                Some(Incoming::Frame(Frame::KeepAlive)) => continue,
                other => return Ok(other),
            }
        }
    }

    /// [`FrameReader::next`], keep-alives included: for a reader that bounds the
    /// silence between any two frames itself (a range's server, by its stall timeout).
    pub async fn next_or_keepalive(
        &mut self,
        pool: Option<&BufferPool>,
    ) -> Result<Option<Incoming>, EngineError> {
        self.next_any(pool).await
    }

    async fn next_any(
        &mut self,
        pool: Option<&BufferPool>,
    ) -> Result<Option<Incoming>, EngineError> {
        if self.lane.is_some() {
            return self.next_handed(pool).await;
        }
        let mut h = [0u8; proto::HEADER_LEN];
        // Distinguish a clean close (no byte of a new frame) from a torn frame.
        let n = self.r.read(&mut h[..1]).await.map_err(|e| self.conn(e))?;
        if n == 0 {
            return Ok(None);
        }
        self.r
            .read_exact(&mut h[1..])
            .await
            .map_err(|e| self.conn(e))?;
        let header = proto::decode_header(&h).map_err(|e| self.undecodable_header(e))?;
        if header.kind == FrameKind::Data {
            let Some(pool) = pool else {
                return Err(EngineError::Unexpected {
                    peer: self.peer.clone(),
                    what: "data frame on the control connection".into(),
                });
            };
            let mut fixed = [0u8; proto::DATA_FIXED_LEN];
            self.r
                .read_exact(&mut fixed)
                .await
                .map_err(|e| self.conn(e))?;
            // Checked before anything is decoded or a buffer taken for the payload.
            self.check_tag(&[&h, &fixed], "a data frame").await?;
            let dh = proto::decode_data_fixed(&fixed).map_err(|e| self.proto(e))?;
            let len = header.len as usize - proto::DATA_FIXED_LEN;
            self.take_data(&dh, len)?;
            if dh.zero {
                return Ok(Some(Incoming::Data(dh, None)));
            }
            if dh.compressed {
                return self.inflate(dh, len, pool).await;
            }
            let mut buf = pool.get(len).await;
            let mut got = 0;
            while got < len {
                let e = match self.r.read(&mut buf[got..]).await {
                    Ok(0) => std::io::ErrorKind::UnexpectedEof.into(),
                    Ok(n) => {
                        got += n;
                        continue;
                    }
                    Err(e) => e,
                };
                self.torn = Some(Torn {
                    header: dh,
                    buf,
                    got,
                });
                return Err(self.conn(e));
            }
            return Ok(Some(Incoming::Data(dh, Some(buf))));
        }
        let mut body = vec![0u8; header.len as usize];
        self.r
            .read_exact(&mut body)
            .await
            .map_err(|e| self.conn(e))?;
        self.check_tag(&[&h, &body], &format!("a {} frame", header.kind.name()))
            .await?;
        let frame = proto::decode_body(header.kind, &body).map_err(|e| self.proto(e))?;
        Ok(Some(Incoming::Frame(frame)))
    }

    /// Checks a data frame with a payload of `len` bytes (as sent) against the session's
    /// limits before anything is taken for it, and counts its bytes.
    fn take_data(&mut self, dh: &DataHeader, len: usize) -> Result<(), EngineError> {
        proto::check_data_payload(dh, len).map_err(|e| self.proto(e))?;
        if len.max(dh.raw_len as usize) > self.max_block {
            return Err(EngineError::Unexpected {
                peer: self.peer.clone(),
                what: format!(
                    "block {} of file {} longer than the session's {}-byte blocks",
                    dh.block, dh.file, self.max_block
                ),
            });
        }
        self.wire_bytes += len as u64;
        Ok(())
    }

    /// The next frame handed over on the lane: checked and counted as one read from the
    /// bytes would be, its payload the buffer the writer filled (inflated into one of
    /// `pool`'s when it was sent compressed).
    async fn next_handed(
        &mut self,
        pool: Option<&BufferPool>,
    ) -> Result<Option<Incoming>, EngineError> {
        let lane = self.lane.as_mut().expect("called with a lane");
        let Some(item) = lane.recv().await else {
            return Ok(None);
        };
        let Incoming::Data(dh, payload) = item else {
            return Ok(Some(item));
        };
        let Some(pool) = pool else {
            return Err(EngineError::Unexpected {
                peer: self.peer.clone(),
                what: "data frame on the control connection".into(),
            });
        };
        self.take_data(&dh, payload.as_ref().map_or(0, |p| p.len()))?;
        match payload {
            Some(sent) if dh.compressed => {
                let mut packed = std::mem::take(&mut self.packed);
                packed.clear();
                packed.extend_from_slice(&sent);
                drop(sent);
                self.unpack(dh, packed, pool).await
            }
            payload => Ok(Some(Incoming::Data(dh, payload))),
        }
    }

    /// Reads a compressed payload of `len` bytes and inflates it into a pooled buffer of
    /// the block's length.
    async fn inflate(
        &mut self,
        dh: DataHeader,
        len: usize,
        pool: &BufferPool,
    ) -> Result<Option<Incoming>, EngineError> {
        let mut packed = std::mem::take(&mut self.packed);
        packed.resize(len, 0);
        self.r
            .read_exact(&mut packed)
            .await
            .map_err(|e| self.conn(e))?;
        self.unpack(dh, packed, pool).await
    }

    /// Inflates the compressed payload `packed` of the block `dh` into a pooled buffer
    /// of the block's length (keeping `packed` for the next one); a payload that does
    /// not inflate to exactly that length ends the session (a peer bug or attack: over
    /// TLS nothing else can damage it).
    async fn unpack(
        &mut self,
        dh: DataHeader,
        packed: Vec<u8>,
        pool: &BufferPool,
    ) -> Result<Option<Incoming>, EngineError> {
        let len = packed.len();
        let mut buf = pool.get(dh.raw_len as usize).await;
        let (packed, buf, r) = if len <= INLINE_UNPACK {
            let r = crate::compress::unpack(&packed, &mut buf[..]);
            (packed, buf, r)
        } else {
            tokio::task::spawn_blocking(move || {
                let r = crate::compress::unpack(&packed, &mut buf[..]);
                (packed, buf, r)
            })
            .await
            .expect("inflate task panicked")
        };
        self.packed = packed;
        match r {
            Ok(()) => Ok(Some(Incoming::Data(dh, Some(buf)))),
            Err(why) => Err(EngineError::Unexpected {
                peer: self.peer.clone(),
                what: format!("block {} of file {}: {why}", dh.block, dh.file),
            }),
        }
    }

    /// The next control frame, `Ok(None)` on a clean end of stream (for control
    /// connections, which never carry data frames).
    pub async fn next_control(&mut self) -> Result<Option<Frame>, EngineError> {
        match self.next(None).await? {
            Some(Incoming::Frame(f)) => Ok(Some(f)),
            Some(Incoming::Data(..)) => unreachable!("no pool was given"),
            None => Ok(None),
        }
    }
}

/// Writes frames to a stream (buffered: call [`FrameWriter::flush`]).
pub struct FrameWriter<W> {
    w: BufWriter<W>,
    scratch: Vec<u8>,
    peer: String,
    mac: Option<FrameMac>,
    /// Where frames go instead of the bytes, in one process.
    lane: Option<tokio::sync::mpsc::Sender<Incoming>>,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// Wraps a stream; `peer` names it in errors.
    pub fn new(w: W, peer: &str) -> Self {
        Self::with_buffer(w, peer, IO_BUF)
    }

    /// The stream underneath (what is still buffered is dropped: flush first).
    pub fn into_inner(self) -> W {
        self.w.into_inner()
    }

    /// [`FrameWriter::new`] writing `capacity` bytes at a time.
    pub(crate) fn with_buffer(w: W, peer: &str, capacity: usize) -> Self {
        FrameWriter {
            w: BufWriter::with_capacity(capacity, w),
            scratch: Vec::new(),
            peer: peer.to_string(),
            mac: None,
            lane: None,
        }
    }

    /// Hands frames over on `lane` (when there is one) instead of writing bytes: the
    /// stream's reader is in this process.
    pub fn with_lane(mut self, lane: Option<Lane>) -> Self {
        self.lane = lane.map(|l| l.tx);
        self
    }

    /// Hands `frame` over on the lane; the reader having gone is a closed connection.
    async fn hand(&mut self, frame: Incoming) -> Result<(), EngineError> {
        let lane = self.lane.as_ref().expect("called with a lane");
        match lane.send(frame).await {
            Ok(()) => Ok(()),
            Err(_) => Err(self.conn(std::io::ErrorKind::BrokenPipe.into())),
        }
    }

    /// Appends a tag made with `mac` to every frame (plain data streams); `None` for
    /// streams that TLS protects.
    pub fn with_mac(mut self, mac: Option<FrameMac>) -> Self {
        self.mac = mac;
        self
    }

    fn conn(&self, e: std::io::Error) -> EngineError {
        EngineError::Connection {
            peer: self.peer.clone(),
            cause: e,
        }
    }

    /// Writes a control frame.
    pub async fn send(&mut self, frame: &Frame) -> Result<(), EngineError> {
        if self.lane.is_some() {
            // On the lane too, behind the data frames sent before it (a stream end).
            return self.hand(Incoming::Frame(frame.clone())).await;
        }
        self.scratch.clear();
        proto::encode(frame, &mut self.scratch);
        if let Some(mac) = &mut self.mac {
            let tag = mac.next_tag(&[&self.scratch]);
            self.scratch.extend_from_slice(&tag);
        }
        let r = self.w.write_all(&self.scratch).await;
        r.map_err(|e| self.conn(e))
    }

    /// Writes a data frame with `payload` (empty for a zero block).
    pub async fn send_data(&mut self, h: &DataHeader, payload: &[u8]) -> Result<(), EngineError> {
        let prefix = proto::encode_data_prefix(h, payload.len());
        self.w.write_all(&prefix).await.map_err(|e| self.conn(e))?;
        if let Some(mac) = &mut self.mac {
            let tag = mac.next_tag(&[&prefix]);
            self.w.write_all(&tag).await.map_err(|e| self.conn(e))?;
        }
        self.w.write_all(payload).await.map_err(|e| self.conn(e))
    }

    /// Sends a data frame whose payload (`None` for a zero block) is in a pooled
    /// buffer: handed over as it is on a lane, its bytes written otherwise (and the
    /// buffer returned to its pool).
    pub async fn send_block(
        &mut self,
        h: &DataHeader,
        payload: Option<PooledBuf>,
    ) -> Result<(), EngineError> {
        if self.lane.is_some() {
            return self.hand(Incoming::Data(*h, payload)).await;
        }
        self.send_data(h, payload.as_deref().unwrap_or(&[])).await
    }

    /// Whether frames are handed over on a lane (in one process) rather than written.
    pub fn has_lane(&self) -> bool {
        self.lane.is_some()
    }

    /// Pushes buffered bytes to the stream.
    pub async fn flush(&mut self) -> Result<(), EngineError> {
        self.w.flush().await.map_err(|e| self.conn(e))
    }

    /// Flushes and closes the writing side (the lane too: the reader sees the end once
    /// it has taken every frame handed over before).
    pub async fn shutdown(&mut self) -> Result<(), EngineError> {
        self.lane = None;
        self.w.shutdown().await.map_err(|e| self.conn(e))
    }
}

/// Reads exactly one control frame without read-ahead, for handshakes: bytes after the
/// frame stay in the stream for whoever reads it next.
pub async fn read_frame_exact<R: AsyncRead + Unpin>(
    r: &mut R,
    peer: &str,
) -> Result<Frame, EngineError> {
    read_frame_limited(r, peer, usize::MAX).await
}

/// [`read_frame_exact`] refusing bodies longer than `max_len` before reading them, for
/// peers that have not authenticated yet. The body buffer grows with the bytes that
/// actually arrive, never with what the header announces.
pub async fn read_frame_limited<R: AsyncRead + Unpin>(
    r: &mut R,
    peer: &str,
    max_len: usize,
) -> Result<Frame, EngineError> {
    let conn = |e: std::io::Error| EngineError::Connection {
        peer: peer.to_string(),
        cause: e,
    };
    let proto_err = |e| EngineError::Proto {
        peer: peer.to_string(),
        source: e,
    };
    let mut h = [0u8; proto::HEADER_LEN];
    r.read_exact(&mut h).await.map_err(conn)?;
    let header = proto::decode_header(&h).map_err(proto_err)?;
    if header.kind == FrameKind::Data {
        return Err(EngineError::Unexpected {
            peer: peer.to_string(),
            what: "data frame during the handshake".into(),
        });
    }
    if header.len as usize > max_len {
        return Err(proto_err(proto::ProtoError::TooLong {
            kind: header.kind as u8,
            len: header.len,
            max: max_len,
        }));
    }
    let mut body = Vec::new();
    let got = r
        .take(u64::from(header.len))
        .read_to_end(&mut body)
        .await
        .map_err(conn)?;
    if got != header.len as usize {
        return Err(conn(std::io::ErrorKind::UnexpectedEof.into()));
    }
    proto::decode_body(header.kind, &body).map_err(proto_err)
}

/// Reads and checks a peer's preamble without read-ahead.
pub async fn read_preamble_exact<R: AsyncRead + Unpin>(
    r: &mut R,
    peer: &str,
) -> Result<(), EngineError> {
    let mut b = [0u8; proto::PREAMBLE_LEN];
    match r.read_exact(&mut b).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(EngineError::Proto {
                peer: peer.to_string(),
                source: proto::ProtoError::BadMagic,
            })
        }
        Err(e) => {
            return Err(EngineError::Connection {
                peer: peer.to_string(),
                cause: e,
            })
        }
    }
    proto::check_preamble(&b).map_err(|e| EngineError::Proto {
        peer: peer.to_string(),
        source: e,
    })
}

/// Writes this build's preamble, unbuffered and flushed.
pub async fn write_preamble_exact<W: AsyncWrite + Unpin>(
    w: &mut W,
    peer: &str,
) -> Result<(), EngineError> {
    let conn = |e: std::io::Error| EngineError::Connection {
        peer: peer.to_string(),
        cause: e,
    };
    w.write_all(&proto::preamble()).await.map_err(conn)?;
    w.flush().await.map_err(conn)
}

/// Writes the preamble (if `preamble`) and one control frame, unbuffered and flushed.
pub async fn write_frame_exact<W: AsyncWrite + Unpin>(
    w: &mut W,
    peer: &str,
    preamble: bool,
    frame: &Frame,
) -> Result<(), EngineError> {
    let mut bytes = Vec::new();
    if preamble {
        bytes.extend_from_slice(&proto::preamble());
    }
    proto::encode(frame, &mut bytes);
    let conn = |e: std::io::Error| EngineError::Connection {
        peer: peer.to_string(),
        cause: e,
    };
    w.write_all(&bytes).await.map_err(conn)?;
    w.flush().await.map_err(conn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetch_proto::DIGEST_LEN;

    /// Before authentication a header announcing more than the limit is refused at
    /// once, without waiting for (or allocating) the body.
    #[tokio::test]
    async fn limited_read_refuses_long_frames_from_the_header() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&(1u32 << 24).to_le_bytes());
        bytes.push(proto::FrameKind::Hello as u8);
        let mut r = &bytes[..];
        let err = read_frame_limited(&mut r, "peer", 64 << 10)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                EngineError::Proto {
                    source: proto::ProtoError::TooLong { .. },
                    ..
                }
            ),
            "{err}"
        );
        // A body that ends early is a connection error, not a frame.
        let mut short = Vec::new();
        short.extend_from_slice(&10u32.to_le_bytes());
        short.push(proto::FrameKind::Hello as u8);
        short.extend_from_slice(&[0; 4]);
        let mut r = &short[..];
        let err = read_frame_limited(&mut r, "peer", 64 << 10)
            .await
            .unwrap_err();
        assert!(matches!(err, EngineError::Connection { .. }), "{err}");
    }

    fn block(i: u64) -> (DataHeader, Vec<u8>) {
        let payload = vec![i as u8; 100];
        let h = DataHeader {
            file: 7,
            block: i,
            digest: *blake3::hash(&payload).as_bytes(),
            zero: false,
            compressed: false,
            raw_len: 0,
            sparse: false,
            patch: None,
        };
        (h, payload)
    }

    /// The bytes a MAC-protected writer puts on stream `index` for blocks 0 and 1 and a
    /// stream end.
    async fn written(index: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = FrameWriter::new(&mut out, "test")
            .with_mac(Some(FrameMac::for_stream(&[5; 32], index, 0)));
        for i in 0..2 {
            let (h, p) = block(i);
            w.send_data(&h, &p).await.unwrap();
        }
        w.send(&Frame::StreamEnd).await.unwrap();
        w.flush().await.unwrap();
        drop(w);
        out
    }

    /// Reads every frame of `bytes` as stream `index`; the error if one is refused.
    async fn read_all(bytes: &[u8], index: usize) -> Result<Vec<u64>, EngineError> {
        let pool = BufferPool::new(1 << 20);
        let mut r = FrameReader::new(bytes, "peer")
            .with_mac(Some(FrameMac::for_stream(&[5; 32], index, 0)));
        let mut blocks = Vec::new();
        while let Some(f) = r.next(Some(&pool)).await? {
            match f {
                Incoming::Data(h, p) => {
                    assert_eq!(&p.unwrap()[..], &block(h.block).1[..]);
                    blocks.push(h.block);
                }
                Incoming::Frame(f) => assert_eq!(f, Frame::StreamEnd),
            }
        }
        Ok(blocks)
    }

    fn tampered(r: Result<Vec<u64>, EngineError>) -> String {
        match r {
            Err(e @ EngineError::Tampered { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("peer"), "{msg}");
                msg
            }
            other => panic!("not refused as tampered: {other:?}"),
        }
    }

    /// On a lane a data frame arrives in the very buffer it was sent in (by reference,
    /// not copied), behind it the stream end, and nothing goes through the bytes.
    #[tokio::test]
    async fn lanes_hand_blocks_over_by_reference() {
        let (ours, theirs) = Lane::pair();
        let (bytes, _keep) = tokio::io::duplex(1 << 10);
        let mut w = FrameWriter::new(Vec::new(), "test").with_lane(Some(ours));
        let mut r = FrameReader::new(bytes, "peer").with_lane(Some(theirs));
        let pool = BufferPool::new(1 << 20);
        let (h, payload) = block(3);
        let mut buf = pool.get(payload.len()).await;
        buf.copy_from_slice(&payload);
        let sent_at = buf.as_ptr();
        let reading = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(f) = r.next(Some(&pool)).await.unwrap() {
                got.push(f);
            }
            (got, r.wire_bytes())
        });
        w.send_block(&h, Some(buf)).await.unwrap();
        w.send(&Frame::StreamEnd).await.unwrap();
        w.shutdown().await.unwrap();
        let (got, wire_bytes) = reading.await.unwrap();
        match &got[..] {
            [Incoming::Data(dh, Some(p)), Incoming::Frame(Frame::StreamEnd)] => {
                assert_eq!(*dh, h);
                assert_eq!(&p[..], &payload[..]);
                assert_eq!(p.as_ptr(), sent_at, "the block was copied");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(wire_bytes, 100);
        assert!(w.w.get_ref().is_empty(), "bytes went out on the stream");
    }

    #[tokio::test]
    async fn protected_frames_round_trip() {
        let bytes = written(0).await;
        let plain_len = 2 * (proto::HEADER_LEN + proto::DATA_FIXED_LEN + 100) + proto::HEADER_LEN;
        assert_eq!(bytes.len(), plain_len + 3 * MAC_LEN);
        assert_eq!(read_all(&bytes, 0).await.unwrap(), [0, 1]);
    }

    /// Changing a block and its digest together is caught by the MAC.
    #[tokio::test]
    async fn block_and_digest_changed_together_is_refused() {
        let mut bytes = written(0).await;
        let digest_at = proto::HEADER_LEN + 16;
        let payload_at = proto::HEADER_LEN + proto::DATA_FIXED_LEN + MAC_LEN;
        bytes[payload_at] ^= 1;
        let forged = blake3::hash(&bytes[payload_at..payload_at + 100]);
        bytes[digest_at..digest_at + DIGEST_LEN].copy_from_slice(forged.as_bytes());
        let msg = tampered(read_all(&bytes, 0).await);
        assert!(msg.contains("data frame"), "{msg}");
    }

    /// Any bit of a frame's header flipped on a plain stream (its length, kind or
    /// flags, some of which fail to decode before the MAC is read) is damage that a
    /// new session gets past, never a broken protocol; without a MAC (TLS) the same
    /// bytes are the peer's.
    #[tokio::test]
    async fn any_damaged_header_bit_is_damage_on_a_plain_stream() {
        let clean = written(0).await;
        let mut undecodable = 0;
        for at in 0..proto::HEADER_LEN {
            for bit in 0..8 {
                let mut bytes = clean.clone();
                bytes[at] ^= 1 << bit;
                let msg = tampered(read_all(&bytes, 0).await);
                undecodable += usize::from(msg.contains("does not decode"));
            }
        }
        assert!(
            undecodable > 0,
            "no flip failed to decode: the case is not tested"
        );
        let mut bytes = clean;
        bytes[proto::HEADER_LEN - 1] ^= 0x80;
        let mut r = FrameReader::new(&bytes[..], "peer");
        let pool = BufferPool::new(1 << 20);
        match r.next(Some(&pool)).await {
            Err(e @ EngineError::Proto { .. }) => assert!(!e.is_transient(), "{e}"),
            other => panic!("not a protocol error: {other:?}"),
        }
    }

    #[tokio::test]
    async fn dropped_reordered_or_moved_frames_are_refused() {
        let bytes = written(0).await;
        let frame = proto::HEADER_LEN + proto::DATA_FIXED_LEN + MAC_LEN + 100;
        // Block 1 without block 0, and block 1 before block 0.
        tampered(read_all(&bytes[frame..], 0).await);
        let mut swapped = bytes[frame..2 * frame].to_vec();
        swapped.extend_from_slice(&bytes[..frame]);
        swapped.extend_from_slice(&bytes[2 * frame..]);
        tampered(read_all(&swapped, 0).await);
        // The same frames on another stream of the session.
        tampered(read_all(&bytes, 1).await);
        // A stream end that was not sent.
        let mut cut = bytes[..frame].to_vec();
        cut.extend_from_slice(&[0, 0, 0, 0, proto::FrameKind::StreamEnd as u8]);
        cut.extend_from_slice(&[0; MAC_LEN]);
        tampered(read_all(&cut, 0).await);
    }
}
