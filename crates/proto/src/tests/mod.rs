//! Tests of the codec: round trips, rejected inputs, random inputs.

mod header;
mod malformed;
mod random;
mod roundtrip;
mod strategies;

use crate::wire::Put;
use crate::*;

/// The full encoding of `frame`.
fn encoded(frame: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    encode(frame, &mut out);
    out
}

/// A frame of kind `kind` with body `body`, as it would arrive on the wire.
fn raw_frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_u32(body.len() as u32);
    out.put_u8(kind);
    out.extend_from_slice(body);
    out
}

/// Decodes `bytes` with a fresh [`Decoder`], expecting exactly one frame or an error.
fn decode_one(bytes: &[u8]) -> Result<Frame, ProtoError> {
    let mut decoder = Decoder::default();
    decoder.push(bytes);
    let frame = decoder
        .next_frame()?
        .expect("a complete frame was pushed, the decoder wants more");
    assert_eq!(decoder.buffered(), 0, "decoder left bytes after one frame");
    Ok(frame)
}
