//! Decoding checks shared by the cargo-fuzz target (`fuzz/`, feature `fuzzing`) and
//! the in-crate random-input tests, so that CI exercises exactly what the fuzzer does.
//! Not part of the crate's API.

use crate::{
    check_data_payload, decode_body, decode_data_fixed, decode_header, encode, Decoder, Frame,
    FrameKind, Hello, ProtoError, DATA_FIXED_LEN, HEADER_LEN, SESSION_ID_LEN, STREAM_PROOF_LEN,
};

/// Runs every decoder of the crate over `data`, panicking if any of them panics or if a
/// decoded frame does not re-encode to exactly the bytes it came from.
pub fn exercise(data: &[u8]) {
    decoder_stream(data);
    split_feeding_agrees(data);
    raw_entry_points(data);
}

/// Feeds `data` to a [`Decoder`] at once and returns what it produced: the frames, then
/// the error or `None` if it simply ran out of bytes. Checks that each frame re-encodes
/// to the bytes it consumed.
fn decoder_stream(data: &[u8]) -> (Vec<Frame>, Option<ProtoError>) {
    let mut decoder = Decoder::default();
    decoder.push(data);
    let mut frames = Vec::new();
    loop {
        let before = data.len() - decoder.buffered();
        match decoder.next_frame() {
            Ok(Some(frame)) => {
                let after = data.len() - decoder.buffered();
                let mut again = Vec::new();
                encode(&frame, &mut again);
                assert_eq!(again, &data[before..after], "non-canonical frame {frame:?}");
                frames.push(frame);
            }
            Ok(None) => return (frames, None),
            Err(e) => {
                // Errors are sticky: nothing was consumed.
                assert_eq!(decoder.buffered(), data.len() - before);
                assert_eq!(decoder.next_frame().err().as_ref(), Some(&e));
                return (frames, Some(e));
            }
        }
    }
}

/// Feeding the same bytes in pieces (sizes taken from the data itself) must give the
/// same frames and the same final error as feeding them at once.
fn split_feeding_agrees(data: &[u8]) {
    let (whole_frames, whole_error) = decoder_stream(data);
    let mut decoder = Decoder::default();
    let mut frames = Vec::new();
    let mut error = None;
    let mut rest = data;
    let mut sizes = data.iter().cycle();
    'feed: while !rest.is_empty() {
        let size = sizes.next().map_or(1, |&b| usize::from(b % 17) + 1);
        let (piece, tail) = rest.split_at(size.min(rest.len()));
        rest = tail;
        decoder.push(piece);
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break 'feed;
                }
            }
        }
    }
    assert_eq!(frames, whole_frames);
    assert_eq!(error, whole_error);
}

/// Calls the step-by-step entry points the engine uses directly.
fn raw_entry_points(data: &[u8]) {
    if let Some(header) = data.first_chunk::<HEADER_LEN>() {
        if let Ok(h) = decode_header(header) {
            assert!(h.len as usize <= h.kind.max_len());
            assert_eq!(h.kind as u8, header[4]);
        }
    }
    if let Some(fixed) = data.first_chunk::<DATA_FIXED_LEN>() {
        if let Ok(d) = decode_data_fixed(fixed) {
            let payload = &data[DATA_FIXED_LEN..];
            if check_data_payload(&d, payload.len()).is_ok() {
                let frame = Frame::Data(d, payload.to_vec());
                let mut bytes = Vec::new();
                encode(&frame, &mut bytes);
                assert_eq!(&bytes[HEADER_LEN..], data);
            }
        }
    }
    // First byte picks the kind, the rest is the body.
    if let Some((&k, body)) = data.split_first() {
        let kind = FrameKind::ALL[usize::from(k) % FrameKind::ALL.len()];
        match decode_body(kind, body) {
            Ok(frame) => {
                assert_ne!(kind, FrameKind::Data);
                assert_eq!(frame.kind(), kind);
                let mut bytes = Vec::new();
                encode(&frame, &mut bytes);
                assert_eq!(&bytes[HEADER_LEN..], body, "non-canonical body {frame:?}");
                // A data stream's hello has a fixed size: there is no room for a token.
                if let Frame::Hello(Hello::Data { .. }) = frame {
                    assert_eq!(body.len(), 1 + SESSION_ID_LEN + 2 + 4 + STREAM_PROOF_LEN);
                }
            }
            Err(e) => assert!(matches!(e, ProtoError::Malformed { .. }), "{e:?}"),
        }
    }
}
