//! Encoding and decoding of frames: preamble, headers, bodies, data frames.
//!
//! Control frame bodies live in `body.rs`, the little-endian primitives in `wire.rs`.
//! Every decoding function here is total: on any input it returns a value or a
//! [`ProtoError`], never panics, and allocates at most in proportion to the bytes it was
//! given. Errors are fatal for the connection: the peer is broken or hostile, and the
//! stream cannot be resynchronised.
use crate::body;
use crate::frame::*;

/// First bytes on every connection, from both sides: magic then version.
pub const MAGIC: [u8; 6] = *b"HETCH\0";
/// Protocol version spoken by this build. 4: data-stream hellos carry a session proof
/// instead of the token, and plain (`--no-encrypt`) data streams a MAC per frame.
/// 6: data blocks may be zstd-compressed ([`DataHeader::compressed`]), as the session
/// asks ([`SessionRequest::compression`]). 7: dry runs of plain copies
/// ([`SessionRequest::dry_run`]); changes carry sizes and may be replacements.
/// 10: a session's connections may be kept for further operations
/// ([`SessionRequest::reuse`]). 11: a range's client sends keep-alives while it has no
/// block to send, and the server bounds its silence by its stall timeout. 12: a
/// session of chosen entries says so ([`SessionRequest::chosen_entries`]). 13: damage
/// a plain data stream's MAC caught is reported as [`ErrorCode::Damaged`]; a damaged
/// block is repaired a patch at a time ([`Frame::Repair`], [`DataHeader::patch`]). 14: a
/// session keeps going through a lost data stream, which is joined again
/// ([`Frame::StreamLost`], [`Hello::Data`]'s generation); repair rounds are numbered.
pub const VERSION: u16 = 14;
/// Length of the preamble: `MAGIC | VERSION (u16 LE)`.
pub const PREAMBLE_LEN: usize = 8;
/// Length of a frame header: `len: u32 LE | kind: u8`.
pub const HEADER_LEN: usize = 5;
/// Length of the fixed part of a data frame body: `file u64 | block u64 | digest [32] |
/// flags u8 | raw_len u32 | patch_at u32 | patch_count u32 | patch_round u32` (the last
/// three 0 unless the frame carries a [`Patch`]).
pub const DATA_FIXED_LEN: usize = 8 + 8 + DIGEST_LEN + 1 + 4 + 4 + 4 + 4;
/// Largest payload a data frame may carry (the largest block size).
pub const MAX_BLOCK: usize = 256 << 20;
/// Largest body of a control (non-data) frame.
pub const MAX_CONTROL_BODY: usize = 16 << 20;

/// Errors found while decoding.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtoError {
    /// The peer did not start with hetch's magic bytes: it speaks something else.
    #[error("peer does not speak the hetch protocol")]
    BadMagic,
    /// The peer speaks another version.
    #[error("peer speaks hetch protocol version {theirs}, this build speaks {ours}")]
    Version {
        /// Our version.
        ours: u16,
        /// Theirs.
        theirs: u16,
    },
    /// Unknown frame kind byte.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// A frame longer than allowed for its kind.
    #[error("frame of kind {kind} is {len} bytes, more than the {max} allowed")]
    TooLong {
        /// Kind byte.
        kind: u8,
        /// Announced length.
        len: u32,
        /// Limit for that kind.
        max: usize,
    },
    /// The body did not parse.
    #[error("malformed {what} frame: {why}")]
    Malformed {
        /// Which frame.
        what: &'static str,
        /// What was wrong.
        why: &'static str,
    },
}

/// The kind byte of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// [`Frame::Hello`]
    Hello = 1,
    /// [`Frame::Welcome`]
    Welcome = 2,
    /// [`Frame::Error`]
    Error = 3,
    /// [`Frame::Entries`]
    Entries = 4,
    /// [`Frame::Plan`]
    Plan = 5,
    /// [`Frame::Data`]
    Data = 6,
    /// [`Frame::Resend`]
    Resend = 7,
    /// [`Frame::FileDone`]
    FileDone = 8,
    /// [`Frame::FileError`]
    FileError = 9,
    /// [`Frame::EndOfEntries`]
    EndOfEntries = 10,
    /// [`Frame::Finished`]
    Finished = 11,
    /// [`Frame::StreamEnd`]
    StreamEnd = 12,
    /// [`Frame::Seal`]
    Seal = 13,
    /// [`Frame::Abandon`]
    Abandon = 14,
    /// [`Frame::Durable`]
    Durable = 15,
    /// [`Frame::Piece`]
    Piece = 16,
    /// [`Frame::Cover`]
    Cover = 17,
    /// [`Frame::KeepAlive`]
    KeepAlive = 18,
    /// [`Frame::Change`]
    Change = 19,
    /// [`Frame::Progress`]
    Progress = 20,
    /// [`Frame::Repair`]
    Repair = 21,
    /// [`Frame::StreamLost`]
    StreamLost = 22,
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// What follows.
    pub kind: FrameKind,
    /// Body length in bytes (for data frames: fixed part plus payload).
    pub len: u32,
}

impl FrameKind {
    /// Every kind, in kind-byte order.
    pub const ALL: [FrameKind; 22] = [
        FrameKind::Hello,
        FrameKind::Welcome,
        FrameKind::Error,
        FrameKind::Entries,
        FrameKind::Plan,
        FrameKind::Data,
        FrameKind::Resend,
        FrameKind::FileDone,
        FrameKind::FileError,
        FrameKind::EndOfEntries,
        FrameKind::Finished,
        FrameKind::StreamEnd,
        FrameKind::Seal,
        FrameKind::Abandon,
        FrameKind::Durable,
        FrameKind::Piece,
        FrameKind::Cover,
        FrameKind::KeepAlive,
        FrameKind::Change,
        FrameKind::Progress,
        FrameKind::Repair,
        FrameKind::StreamLost,
    ];

    /// The kind with this kind byte, if any.
    pub fn from_u8(byte: u8) -> Option<FrameKind> {
        // Kind bytes are 1..=22 in `ALL`'s order.
        let index = usize::from(byte).checked_sub(1)?;
        FrameKind::ALL.get(index).copied()
    }

    /// Lower-case name of the kind, for messages (the `what` of [`ProtoError::Malformed`]).
    pub fn name(self) -> &'static str {
        match self {
            FrameKind::Hello => "hello",
            FrameKind::Welcome => "welcome",
            FrameKind::Error => "error",
            FrameKind::Entries => "entries",
            FrameKind::Plan => "plan",
            FrameKind::Data => "data",
            FrameKind::Resend => "resend",
            FrameKind::FileDone => "file-done",
            FrameKind::FileError => "file-error",
            FrameKind::EndOfEntries => "end-of-entries",
            FrameKind::Finished => "finished",
            FrameKind::StreamEnd => "stream-end",
            FrameKind::Seal => "seal",
            FrameKind::Abandon => "abandon",
            FrameKind::Durable => "durable",
            FrameKind::Piece => "piece",
            FrameKind::Cover => "cover",
            FrameKind::KeepAlive => "keep-alive",
            FrameKind::Change => "change",
            FrameKind::Progress => "progress",
            FrameKind::Repair => "repair",
            FrameKind::StreamLost => "stream-lost",
        }
    }

    /// Largest body length a frame of this kind may announce.
    pub fn max_len(self) -> usize {
        match self {
            FrameKind::Data => DATA_FIXED_LEN + MAX_BLOCK,
            FrameKind::EndOfEntries | FrameKind::StreamEnd | FrameKind::KeepAlive => 0,
            _ => MAX_CONTROL_BODY,
        }
    }
}

impl Frame {
    /// The kind byte this frame is sent with.
    pub fn kind(&self) -> FrameKind {
        match self {
            Frame::Hello(_) => FrameKind::Hello,
            Frame::Welcome(_) => FrameKind::Welcome,
            Frame::Error(_) => FrameKind::Error,
            Frame::Entries(_) => FrameKind::Entries,
            Frame::Plan(_) => FrameKind::Plan,
            Frame::Data(..) => FrameKind::Data,
            Frame::Resend { .. } => FrameKind::Resend,
            Frame::FileDone { .. } => FrameKind::FileDone,
            Frame::FileError { .. } => FrameKind::FileError,
            Frame::EndOfEntries => FrameKind::EndOfEntries,
            Frame::Finished(_) => FrameKind::Finished,
            Frame::StreamEnd => FrameKind::StreamEnd,
            Frame::Seal(_) => FrameKind::Seal,
            Frame::Abandon { .. } => FrameKind::Abandon,
            Frame::Durable { .. } => FrameKind::Durable,
            Frame::Piece(_) => FrameKind::Piece,
            Frame::Cover { .. } => FrameKind::Cover,
            Frame::KeepAlive => FrameKind::KeepAlive,
            Frame::Change(_) => FrameKind::Change,
            Frame::Progress(_) => FrameKind::Progress,
            Frame::Repair { .. } => FrameKind::Repair,
            Frame::StreamLost { .. } => FrameKind::StreamLost,
        }
    }
}

/// Bit of the data frame flags byte saying the block is all zeros.
const FLAG_ZERO: u8 = 1;
/// Bit of the data frame flags byte saying the payload is zstd-compressed.
const FLAG_ZSTD: u8 = 2;
/// Bit of the data frame flags byte saying the source file has holes in the block.
const FLAG_SPARSE: u8 = 4;
/// Bit of the data frame flags byte saying the payload is a patch of the block.
const FLAG_PATCH: u8 = 8;

/// The preamble this build sends.
pub fn preamble() -> [u8; PREAMBLE_LEN] {
    let mut p = [0; PREAMBLE_LEN];
    p[..MAGIC.len()].copy_from_slice(&MAGIC);
    p[MAGIC.len()..].copy_from_slice(&VERSION.to_le_bytes());
    p
}

/// Checks a peer's preamble: [`ProtoError::BadMagic`] or [`ProtoError::Version`] if wrong.
///
/// Only the exact [`VERSION`] is accepted: there is no negotiation.
pub fn check_preamble(bytes: &[u8; PREAMBLE_LEN]) -> Result<(), ProtoError> {
    let (magic, version) = bytes.split_at(MAGIC.len());
    if magic != MAGIC {
        return Err(ProtoError::BadMagic);
    }
    let theirs = u16::from_le_bytes([version[0], version[1]]);
    if theirs != VERSION {
        return Err(ProtoError::Version {
            ours: VERSION,
            theirs,
        });
    }
    Ok(())
}

/// Appends the encoding of `frame` (header and body) to `out`.
///
/// # Panics
///
/// If the frame breaks a limit the peer would reject it for: a control body longer
/// than [`MAX_CONTROL_BODY`] (batch entries and plans with [`Entry::wire_len`] and
/// [`PlanItem::wire_len`]), or a data frame refused by [`encode_data_prefix`]. Sending
/// such a frame is a bug of the caller, better caught here than as a protocol error at
/// the far end.
pub fn encode(frame: &Frame, out: &mut Vec<u8>) {
    if let Frame::Data(header, payload) = frame {
        out.extend_from_slice(&encode_data_prefix(header, payload.len()));
        out.extend_from_slice(payload);
        return;
    }
    let kind = frame.kind();
    let start = out.len();
    // Header with a placeholder length, patched once the body is written.
    out.extend_from_slice(&[0, 0, 0, 0, kind as u8]);
    body::encode_body(frame, out);
    let len = out.len() - start - HEADER_LEN;
    assert!(
        len <= kind.max_len(),
        "hetch-proto: {} frame body of {len} bytes exceeds the {} allowed",
        kind.name(),
        kind.max_len()
    );
    // Cannot truncate: max_len is at most MAX_CONTROL_BODY here.
    out[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
}

/// Decodes and checks a frame header (known kind, length within that kind's limit).
///
/// Errors: [`ProtoError::UnknownKind`] for an unknown kind byte;
/// [`ProtoError::TooLong`] for a length above [`FrameKind::max_len`] (which is 0 for
/// `EndOfEntries` and `StreamEnd`); [`ProtoError::Malformed`] for a data frame shorter
/// than [`DATA_FIXED_LEN`], so that a data header that passes can always be followed by
/// reading exactly `DATA_FIXED_LEN` bytes into [`decode_data_fixed`].
pub fn decode_header(bytes: &[u8; HEADER_LEN]) -> Result<FrameHeader, ProtoError> {
    let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let kind = FrameKind::from_u8(bytes[4]).ok_or(ProtoError::UnknownKind(bytes[4]))?;
    let max = kind.max_len();
    if len as usize > max {
        return Err(ProtoError::TooLong {
            kind: kind as u8,
            len,
            max,
        });
    }
    if kind == FrameKind::Data && (len as usize) < DATA_FIXED_LEN {
        return Err(ProtoError::Malformed {
            what: "data",
            why: "frame shorter than the fixed data fields",
        });
    }
    Ok(FrameHeader { kind, len })
}

/// Decodes the body of a non-data frame of the given kind.
///
/// `body` must be the whole body (exactly the header's `len` bytes). Besides the
/// structure (lengths, UTF-8 strings, enum tags, strict 0/1 booleans and option tags, no
/// trailing bytes) this checks what the types document: entry paths pass
/// [`crate::validate_rel_path`], pull sources [`crate::validate_operand_path`] (they may
/// be empty or end in `/`), symlink targets are non-empty without NUL, modes
/// fit in `0o7777`, `mtime_nsec` is below one second, block sizes are powers of two in
/// `1 KiB..=MAX_BLOCK`, plan ranges do not end before they start. The push destination
/// is *not* path-checked (it may name the root): the server must resolve it safely.
/// Any failure is [`ProtoError::Malformed`]; so is `kind == FrameKind::Data`, whose
/// frames go through [`decode_data_fixed`] instead.
pub fn decode_body(kind: FrameKind, body: &[u8]) -> Result<Frame, ProtoError> {
    body::decode_body(kind, body)
}

/// Writes the header and fixed part of a data frame whose payload is `payload_len`
/// bytes (0 for a zero block), ready to be followed by the payload.
///
/// # Panics
///
/// If the frame would be refused by [`decode_data_fixed`] or [`check_data_payload`]:
/// a payload above [`MAX_BLOCK`], a zero block with a payload, a block both zero and
/// compressed (or zero and sparse), a `raw_len` above `MAX_BLOCK`, a `raw_len` on a block sent as-is, a
/// compressed payload empty or not shorter than its `raw_len`. Sending such a frame is
/// a bug of the caller.
pub fn encode_data_prefix(
    header: &DataHeader,
    payload_len: usize,
) -> [u8; HEADER_LEN + DATA_FIXED_LEN] {
    if let Err(e) = check_data_fixed(header).and_then(|()| check_data_payload(header, payload_len))
    {
        panic!("hetch-proto: data frame the peer would refuse ({payload_len} payload bytes): {e}");
    }
    let mut out = [0; HEADER_LEN + DATA_FIXED_LEN];
    let len = (DATA_FIXED_LEN + payload_len) as u32;
    let mut put = |at: usize, bytes: &[u8]| out[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, &len.to_le_bytes());
    put(4, &[FrameKind::Data as u8]);
    put(5, &header.file.to_le_bytes());
    put(13, &header.block.to_le_bytes());
    put(21, &header.digest);
    let flag = |set: bool, bit: u8| if set { bit } else { 0 };
    let flags = flag(header.zero, FLAG_ZERO)
        | flag(header.compressed, FLAG_ZSTD)
        | flag(header.sparse, FLAG_SPARSE)
        | flag(header.patch.is_some(), FLAG_PATCH);
    put(53, &[flags]);
    put(54, &header.raw_len.to_le_bytes());
    let patch = header.patch.unwrap_or(Patch {
        at: 0,
        count: 0,
        round: 0,
    });
    put(58, &patch.at.to_le_bytes());
    put(62, &patch.count.to_le_bytes());
    put(66, &patch.round.to_le_bytes());
    out
}

/// Decodes the fixed part of a data frame body.
///
/// Rejects (as [`ProtoError::Malformed`]) unknown flag bits, a block both zero and
/// compressed or both zero and sparse, a `raw_len` on a block sent as-is, and a `raw_len` of 0 or above
/// [`MAX_BLOCK`] on a zero or compressed block. Whether the payload agrees with the
/// flags can only be known with the frame length: check it with [`check_data_payload`].
pub fn decode_data_fixed(bytes: &[u8; DATA_FIXED_LEN]) -> Result<DataHeader, ProtoError> {
    let mut r = crate::wire::Reader::new("data", bytes);
    let file = r.u64()?;
    let block = r.u64()?;
    let digest = r.array()?;
    let flags = r.u8()?;
    let raw_len = r.u32()?;
    let (at, count, round) = (r.u32()?, r.u32()?, r.u32()?);
    r.finish()?;
    if flags & !(FLAG_ZERO | FLAG_ZSTD | FLAG_SPARSE | FLAG_PATCH) != 0 {
        return Err(data_err("unknown data flags"));
    }
    let patch = match flags & FLAG_PATCH != 0 {
        true => Some(Patch { at, count, round }),
        false if at != 0 || count != 0 || round != 0 => {
            return Err(data_err("patch fields without a patch"))
        }
        false => None,
    };
    let header = DataHeader {
        file,
        block,
        digest,
        zero: flags & FLAG_ZERO != 0,
        compressed: flags & FLAG_ZSTD != 0,
        raw_len,
        sparse: flags & FLAG_SPARSE != 0,
        patch,
    };
    check_data_fixed(&header)?;
    Ok(header)
}

fn check_data_fixed(h: &DataHeader) -> Result<(), ProtoError> {
    if h.zero && h.compressed {
        return Err(data_err("block both all zeros and compressed"));
    }
    if h.zero && h.sparse {
        return Err(data_err("block both all zeros and with holes"));
    }
    if !h.zero && !h.compressed && h.raw_len != 0 {
        return Err(data_err("raw_len set on a block sent as it is"));
    }
    if h.raw_len as usize > MAX_BLOCK {
        return Err(data_err("raw_len above MAX_BLOCK"));
    }
    if h.compressed && h.raw_len == 0 {
        return Err(data_err("compressed block of no bytes"));
    }
    if let Some(p) = h.patch {
        if h.zero || h.compressed || h.sparse {
            return Err(data_err("a patch that is zero, compressed or sparse"));
        }
        if p.at % MIN_PATCH != 0 || p.at as usize >= MAX_BLOCK {
            return Err(data_err(
                "patch offset not a multiple of MIN_PATCH within MAX_BLOCK",
            ));
        }
        if p.count == 0 || p.count as usize > MAX_PATCHES {
            return Err(data_err("patch count not within 1..=MAX_PATCHES"));
        }
        if p.round == 0 {
            return Err(data_err("patch of repair round 0"));
        }
    }
    Ok(())
}

/// Checks that a data frame's payload length (the header's `len` minus
/// [`DATA_FIXED_LEN`]) agrees with its fixed part: a zero block carries no payload, a
/// compressed one a payload shorter than the block (the source sends a block that does
/// not shrink as it is). Call it after [`decode_data_fixed`], before reading the payload.
pub fn check_data_payload(header: &DataHeader, payload_len: usize) -> Result<(), ProtoError> {
    if header.zero && payload_len != 0 {
        return Err(data_err("zero block with a payload"));
    }
    if payload_len > MAX_BLOCK {
        return Err(data_err("payload longer than MAX_BLOCK"));
    }
    if header.compressed && (payload_len == 0 || payload_len >= header.raw_len as usize) {
        return Err(data_err(
            "compressed payload empty or not shorter than its block",
        ));
    }
    if let Some(p) = header.patch {
        if payload_len == 0 || p.at as usize + payload_len > MAX_BLOCK {
            return Err(data_err("patch empty or beyond MAX_BLOCK"));
        }
    }
    Ok(())
}

fn data_err(why: &'static str) -> ProtoError {
    ProtoError::Malformed { what: "data", why }
}

/// An incremental decoder over an in-memory byte buffer (tests, fuzzing).
///
/// It decodes frames only: the preamble is checked separately with [`check_preamble`].
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Bytes of `buf` already consumed by decoded frames; dropped on the next push so
    /// that consuming a frame does not shift the rest of the buffer each time.
    pos: usize,
}

impl Decoder {
    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received but not yet consumed as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed.
    ///
    /// A bad header is reported as soon as its 5 bytes are there, without waiting for
    /// the body. After an error nothing is consumed and the same error comes back: the
    /// connection must be dropped.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ProtoError> {
        let avail = &self.buf[self.pos..];
        let Some(header) = avail.first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        let header = decode_header(header)?;
        let total = HEADER_LEN + header.len as usize;
        let Some(body) = avail.get(HEADER_LEN..total) else {
            return Ok(None);
        };
        let frame = if header.kind == FrameKind::Data {
            // decode_header guarantees the fixed part is there.
            let Some((fixed, payload)) = body.split_first_chunk::<DATA_FIXED_LEN>() else {
                return Err(data_err("frame shorter than the fixed data fields"));
            };
            let data = decode_data_fixed(fixed)?;
            check_data_payload(&data, payload.len())?;
            Frame::Data(data, payload.to_vec())
        } else {
            decode_body(header.kind, body)?
        };
        self.pos += total;
        Ok(Some(frame))
    }
}
