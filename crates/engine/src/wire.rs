//! Reading and writing frames on async streams (the I/O half of `hetch-proto`).
//!
//! Data payloads are read straight into pooled buffers and written straight from them,
//! without an intermediate copy; control frames are small and go through a scratch
//! buffer.

use hetch_proto::{self as proto, DataHeader, Frame, FrameKind};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};

use crate::error::EngineError;
use crate::pool::{BufferPool, PooledBuf};

/// Buffer size of frame readers and writers.
const IO_BUF: usize = 256 << 10;

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
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wraps a stream; `peer` names it in errors.
    pub fn new(r: R, peer: &str) -> Self {
        FrameReader {
            r: BufReader::with_capacity(IO_BUF, r),
            peer: peer.to_string(),
        }
    }

    fn conn(&self, e: std::io::Error) -> EngineError {
        EngineError::Connection {
            peer: self.peer.clone(),
            source: e,
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
    pub async fn next(
        &mut self,
        pool: Option<&BufferPool>,
    ) -> Result<Option<Incoming>, EngineError> {
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
        let header = proto::decode_header(&h).map_err(|e| self.proto(e))?;
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
            let dh = proto::decode_data_fixed(&fixed).map_err(|e| self.proto(e))?;
            let len = header.len as usize - proto::DATA_FIXED_LEN;
            proto::check_data_payload(&dh, len).map_err(|e| self.proto(e))?;
            if dh.zero {
                return Ok(Some(Incoming::Data(dh, None)));
            }
            let mut buf = pool.get(len).await;
            self.r
                .read_exact(&mut buf[..])
                .await
                .map_err(|e| self.conn(e))?;
            return Ok(Some(Incoming::Data(dh, Some(buf))));
        }
        let mut body = vec![0u8; header.len as usize];
        self.r
            .read_exact(&mut body)
            .await
            .map_err(|e| self.conn(e))?;
        let frame = proto::decode_body(header.kind, &body).map_err(|e| self.proto(e))?;
        Ok(Some(Incoming::Frame(frame)))
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
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// Wraps a stream; `peer` names it in errors.
    pub fn new(w: W, peer: &str) -> Self {
        FrameWriter {
            w: BufWriter::with_capacity(IO_BUF, w),
            scratch: Vec::new(),
            peer: peer.to_string(),
        }
    }

    fn conn(&self, e: std::io::Error) -> EngineError {
        EngineError::Connection {
            peer: self.peer.clone(),
            source: e,
        }
    }

    /// Writes a control frame.
    pub async fn send(&mut self, frame: &Frame) -> Result<(), EngineError> {
        self.scratch.clear();
        proto::encode(frame, &mut self.scratch);
        let r = self.w.write_all(&self.scratch).await;
        r.map_err(|e| self.conn(e))
    }

    /// Writes a data frame with `payload` (empty for a zero block).
    pub async fn send_data(&mut self, h: &DataHeader, payload: &[u8]) -> Result<(), EngineError> {
        let prefix = proto::encode_data_prefix(h, payload.len());
        self.w.write_all(&prefix).await.map_err(|e| self.conn(e))?;
        self.w.write_all(payload).await.map_err(|e| self.conn(e))
    }

    /// Pushes buffered bytes to the stream.
    pub async fn flush(&mut self) -> Result<(), EngineError> {
        self.w.flush().await.map_err(|e| self.conn(e))
    }

    /// Flushes and closes the writing side.
    pub async fn shutdown(&mut self) -> Result<(), EngineError> {
        self.w.shutdown().await.map_err(|e| self.conn(e))
    }
}

/// Reads exactly one control frame without read-ahead, for handshakes: bytes after the
/// frame stay in the stream for whoever reads it next.
pub async fn read_frame_exact<R: AsyncRead + Unpin>(
    r: &mut R,
    peer: &str,
) -> Result<Frame, EngineError> {
    let conn = |e: std::io::Error| EngineError::Connection {
        peer: peer.to_string(),
        source: e,
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
    let mut body = vec![0u8; header.len as usize];
    r.read_exact(&mut body).await.map_err(conn)?;
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
                source: e,
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
        source: e,
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
        source: e,
    };
    w.write_all(&bytes).await.map_err(conn)?;
    w.flush().await.map_err(conn)
}
