//! Encoding and decoding of frames (SPEC ONLY: bodies to be written).
use crate::frame::*;

/// First bytes on every connection, from both sides: magic then version.
pub const MAGIC: [u8; 6] = *b"HETCH\0";
/// Protocol version spoken by this build.
pub const VERSION: u16 = 1;
/// Length of the preamble: `MAGIC | VERSION (u16 LE)`.
pub const PREAMBLE_LEN: usize = 8;
/// Length of a frame header: `len: u32 LE | kind: u8`.
pub const HEADER_LEN: usize = 5;
/// Length of the fixed part of a data frame body: `file u64 | block u64 | digest [32] | flags u8 | zero_len u32`.
pub const DATA_FIXED_LEN: usize = 8 + 8 + DIGEST_LEN + 1 + 4;
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
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// What follows.
    pub kind: FrameKind,
    /// Body length in bytes (for data frames: fixed part plus payload).
    pub len: u32,
}

/// The preamble this build sends.
pub fn preamble() -> [u8; PREAMBLE_LEN] {
    todo!()
}

/// Checks a peer's preamble: [`ProtoError::BadMagic`] or [`ProtoError::Version`] if wrong.
pub fn check_preamble(_bytes: &[u8; PREAMBLE_LEN]) -> Result<(), ProtoError> {
    todo!()
}

/// Appends the encoding of `frame` (header and body) to `out`.
pub fn encode(_frame: &Frame, _out: &mut Vec<u8>) {
    todo!()
}

/// Decodes and checks a frame header (known kind, length within that kind's limit).
pub fn decode_header(_bytes: &[u8; HEADER_LEN]) -> Result<FrameHeader, ProtoError> {
    todo!()
}

/// Decodes the body of a non-data frame of the given kind.
pub fn decode_body(_kind: FrameKind, _body: &[u8]) -> Result<Frame, ProtoError> {
    todo!()
}

/// Writes the header and fixed part of a data frame whose payload is `payload_len`
/// bytes (0 for a zero block), ready to be followed by the payload.
pub fn encode_data_prefix(
    _header: &DataHeader,
    _payload_len: usize,
) -> [u8; HEADER_LEN + DATA_FIXED_LEN] {
    todo!()
}

/// Decodes the fixed part of a data frame body.
pub fn decode_data_fixed(_bytes: &[u8; DATA_FIXED_LEN]) -> Result<DataHeader, ProtoError> {
    todo!()
}

/// An incremental decoder over an in-memory byte buffer (tests, fuzzing).
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ProtoError> {
        todo!()
    }
}
