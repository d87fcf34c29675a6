//! Preamble and frame header checks.

use super::raw_frame;
use crate::*;

fn header(len: u32, kind: u8) -> [u8; HEADER_LEN] {
    let mut h = [0; HEADER_LEN];
    h[..4].copy_from_slice(&len.to_le_bytes());
    h[4] = kind;
    h
}

#[test]
fn preamble_is_magic_then_version() {
    assert_eq!(&preamble(), b"HETCH\0\x0e\x00");
    assert_eq!(check_preamble(&preamble()), Ok(()));
}

#[test]
fn bad_magic_is_refused() {
    // A TLS ClientHello, an HTTP request, and a near miss.
    for bytes in [
        [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01],
        *b"GET / HT",
        *b"HETCH!\x01\x00",
        *b"hetch\0\x01\x00",
    ] {
        assert_eq!(check_preamble(&bytes), Err(ProtoError::BadMagic));
    }
    // Wrong magic wins over wrong version: the peer does not speak hetch at all.
    assert_eq!(
        check_preamble(b"XETCH\0\x02\x00"),
        Err(ProtoError::BadMagic)
    );
}

#[test]
fn other_versions_are_refused() {
    for theirs in [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
        12,
        13,
        15,
        0x0e00,
        u16::MAX,
    ] {
        let mut p = preamble();
        p[6..].copy_from_slice(&theirs.to_le_bytes());
        assert_eq!(
            check_preamble(&p),
            Err(ProtoError::Version {
                ours: VERSION,
                theirs
            })
        );
    }
}

#[test]
fn unknown_kinds_are_refused() {
    for kind in [0, 23, 0x7f, 0xff] {
        assert_eq!(
            decode_header(&header(0, kind)),
            Err(ProtoError::UnknownKind(kind))
        );
    }
}

#[test]
fn control_length_limit() {
    for kind in FrameKind::ALL {
        if matches!(
            kind,
            FrameKind::Data | FrameKind::EndOfEntries | FrameKind::StreamEnd | FrameKind::KeepAlive
        ) {
            continue;
        }
        let max = MAX_CONTROL_BODY as u32;
        assert_eq!(
            decode_header(&header(max, kind as u8)),
            Ok(FrameHeader { kind, len: max })
        );
        for len in [max + 1, u32::MAX] {
            assert_eq!(
                decode_header(&header(len, kind as u8)),
                Err(ProtoError::TooLong {
                    kind: kind as u8,
                    len,
                    max: MAX_CONTROL_BODY
                })
            );
        }
    }
}

#[test]
fn data_length_limits() {
    let kind = FrameKind::Data;
    let max = DATA_FIXED_LEN + MAX_BLOCK;
    assert_eq!(
        decode_header(&header(max as u32, 6)),
        Ok(FrameHeader {
            kind,
            len: max as u32
        })
    );
    assert_eq!(
        decode_header(&header(DATA_FIXED_LEN as u32, 6)),
        Ok(FrameHeader {
            kind,
            len: DATA_FIXED_LEN as u32
        })
    );
    assert_eq!(
        decode_header(&header(max as u32 + 1, 6)),
        Err(ProtoError::TooLong {
            kind: 6,
            len: max as u32 + 1,
            max
        })
    );
    for len in [0, DATA_FIXED_LEN as u32 - 1] {
        assert_eq!(
            decode_header(&header(len, 6)),
            Err(ProtoError::Malformed {
                what: "data",
                why: "frame shorter than the fixed data fields"
            })
        );
    }
}

#[test]
fn empty_kinds_must_be_empty() {
    for kind in [
        FrameKind::EndOfEntries,
        FrameKind::StreamEnd,
        FrameKind::KeepAlive,
    ] {
        assert_eq!(
            decode_header(&header(0, kind as u8)),
            Ok(FrameHeader { kind, len: 0 })
        );
        assert_eq!(
            decode_header(&header(1, kind as u8)),
            Err(ProtoError::TooLong {
                kind: kind as u8,
                len: 1,
                max: 0
            })
        );
    }
}

/// The decoder refuses a bad header as soon as it has the header, without waiting for
/// (or buffering towards) the announced body, and keeps refusing it.
#[test]
fn decoder_refuses_bad_headers_early() {
    let mut decoder = Decoder::default();
    decoder.push(&header(u32::MAX, 4)[..4]);
    assert_eq!(decoder.next_frame(), Ok(None));
    decoder.push(&[4]);
    let err = Err(ProtoError::TooLong {
        kind: 4,
        len: u32::MAX,
        max: MAX_CONTROL_BODY,
    });
    assert_eq!(decoder.next_frame(), err);
    assert_eq!(decoder.next_frame(), err);

    let mut decoder = Decoder::default();
    decoder.push(&raw_frame(99, &[]));
    assert_eq!(decoder.next_frame(), Err(ProtoError::UnknownKind(99)));
}

#[test]
fn decoder_waits_for_the_whole_body() {
    let mut decoder = Decoder::default();
    decoder.push(&header(16, FrameKind::Resend as u8));
    decoder.push(&[0; 15]);
    assert_eq!(decoder.next_frame(), Ok(None));
    decoder.push(&[0]);
    assert_eq!(
        decoder.next_frame(),
        Ok(Some(Frame::Resend { file: 0, block: 0 }))
    );
    assert_eq!(decoder.next_frame(), Ok(None));
}

#[test]
fn error_messages_read_well() {
    assert_eq!(
        ProtoError::Version { ours: 1, theirs: 2 }.to_string(),
        "peer speaks hetch protocol version 2, this build speaks 1"
    );
    assert_eq!(
        decode_body(FrameKind::Resend, &[]).unwrap_err().to_string(),
        "malformed resend frame: body ends early"
    );
}
