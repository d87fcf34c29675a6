//! Every valid frame survives encode -> decode, however its bytes arrive.

use super::strategies::*;
use super::{decode_one, encoded};
use crate::*;
use proptest::collection::vec;
use proptest::prelude::*;

/// Checks one frame through every decoding path.
fn check_round_trip(frame: &Frame) -> Result<(), TestCaseError> {
    let bytes = encoded(frame);

    // The header announces the kind and the exact body length.
    let header = decode_header(bytes.first_chunk().unwrap()).unwrap();
    prop_assert_eq!(header.kind, frame.kind());
    prop_assert_eq!(header.len as usize, bytes.len() - HEADER_LEN);
    let body = &bytes[HEADER_LEN..];

    // The step-by-step path the engine takes.
    match frame {
        Frame::Data(data, payload) => {
            let prefix = encode_data_prefix(data, payload.len());
            prop_assert_eq!(&prefix[..], &bytes[..prefix.len()]);
            let fixed = body.first_chunk::<DATA_FIXED_LEN>().unwrap();
            prop_assert_eq!(&decode_data_fixed(fixed).unwrap(), data);
            prop_assert_eq!(
                check_data_payload(data, body.len() - DATA_FIXED_LEN),
                Ok(())
            );
            prop_assert_eq!(&body[DATA_FIXED_LEN..], &payload[..]);
            prop_assert!(decode_body(FrameKind::Data, body).is_err());
        }
        _ => prop_assert_eq!(&decode_body(header.kind, body).unwrap(), frame),
    }

    // The whole frame at once.
    prop_assert_eq!(&decode_one(&bytes).unwrap(), frame);

    // Byte by byte: nothing until the last byte.
    let mut decoder = Decoder::default();
    for (i, b) in bytes.iter().enumerate() {
        prop_assert_eq!(decoder.next_frame(), Ok(None), "early frame at byte {}", i);
        decoder.push(&[*b]);
    }
    let last = decoder.next_frame().unwrap();
    prop_assert_eq!(last.as_ref(), Some(frame));
    prop_assert_eq!(decoder.next_frame(), Ok(None));
    prop_assert_eq!(decoder.buffered(), 0);
    Ok(())
}

proptest! {
    #[test]
    fn hello_round_trip(h in hello()) { check_round_trip(&Frame::Hello(h))?; }

    #[test]
    fn welcome_round_trip(w in welcome()) { check_round_trip(&Frame::Welcome(w))?; }

    #[test]
    fn error_round_trip(e in error_frame()) { check_round_trip(&Frame::Error(e))?; }

    #[test]
    fn entries_round_trip(e in entries()) { check_round_trip(&Frame::Entries(e))?; }

    #[test]
    fn plan_round_trip(p in plan()) { check_round_trip(&Frame::Plan(p))?; }

    #[test]
    fn data_round_trip((h, payload) in data()) { check_round_trip(&Frame::Data(h, payload))?; }

    #[test]
    fn resend_round_trip(file: u64, block: u64) { check_round_trip(&Frame::Resend { file, block })?; }
    #[test]
    fn repair_round_trip(file: u64, block: u64, shift in 0u32..17, digests in proptest::collection::vec(any::<[u8; 32]>(), 1..40)) {
        check_round_trip(&Frame::Repair { file, block, round: shift + 1, patch_len: MIN_PATCH << shift, digests })?;
    }
    #[test]
    fn stream_lost_round_trip(index: u16, generation: u32, frames: u64, torn: bool) {
        check_round_trip(&Frame::StreamLost { index, generation, frames, torn })?;
    }

    #[test]
    fn file_done_round_trip(file: u64, error in proptest::option::of(any::<String>())) {
        check_round_trip(&Frame::FileDone { file, error, digest: None })?;
    }

    #[test]
    fn file_error_round_trip(file: u64, message: String) {
        check_round_trip(&Frame::FileError { file, message })?;
    }

    #[test]
    fn finished_round_trip(s in summary()) { check_round_trip(&Frame::Finished(s))?; }

    #[test]
    fn progress_round_trip(p in relay_progress()) { check_round_trip(&Frame::Progress(p))?; }

    #[test]
    fn change_round_trip(c in change()) { check_round_trip(&Frame::Change(c))?; }

    #[test]
    fn any_frame_round_trip(f in frame()) { check_round_trip(&f)?; }

    /// A stream of frames cut at arbitrary points decodes to the same frames.
    #[test]
    fn stream_in_random_splits(
        frames in vec(frame(), 1..8),
        cuts in vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let mut bytes = Vec::new();
        for f in &frames {
            encode(f, &mut bytes);
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        cuts.push(0);
        cuts.push(bytes.len());
        cuts.sort_unstable();

        let mut decoder = Decoder::default();
        let mut got = Vec::new();
        for piece in cuts.windows(2) {
            decoder.push(&bytes[piece[0]..piece[1]]);
            while let Some(f) = decoder.next_frame().unwrap() {
                got.push(f);
            }
        }
        prop_assert_eq!(got, frames);
        prop_assert_eq!(decoder.buffered(), 0);
    }
}

#[test]
fn empty_frames_are_bare_headers() {
    assert_eq!(encoded(&Frame::EndOfEntries), [0, 0, 0, 0, 10]);
    assert_eq!(encoded(&Frame::StreamEnd), [0, 0, 0, 0, 12]);
    assert_eq!(decode_one(&[0, 0, 0, 0, 10]), Ok(Frame::EndOfEntries));
    assert_eq!(decode_one(&[0, 0, 0, 0, 12]), Ok(Frame::StreamEnd));
    assert_eq!(encoded(&Frame::KeepAlive), [0, 0, 0, 0, 18]);
    assert_eq!(decode_one(&[0, 0, 0, 0, 18]), Ok(Frame::KeepAlive));
}

/// Pins the byte layout of a few frames, so that an accidental format change (which
/// round-trip tests cannot see) fails loudly.
#[test]
fn golden_encodings() {
    assert_eq!(
        encoded(&Frame::Resend { file: 1, block: 2 }),
        [16, 0, 0, 0, 7, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(
        encoded(&Frame::FileDone {
            file: 3,
            error: Some("x".into()),
            digest: None,
        }),
        [15, 0, 0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, b'x', 0]
    );
    assert_eq!(
        encoded(&Frame::Error(ErrorFrame {
            code: ErrorCode::NoSpace,
            message: String::new()
        })),
        [6, 0, 0, 0, 3, 6, 0, 0, 0, 0, 0]
    );
    let data = DataHeader {
        file: 0x0102,
        block: 7,
        digest: [0xaa; DIGEST_LEN],
        zero: true,
        compressed: false,
        raw_len: 4096,
        sparse: false,
        patch: None,
    };
    let mut expected = vec![
        65, 0, 0, 0, 6, 2, 1, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0,
    ];
    expected.extend([0xaa; DIGEST_LEN]);
    expected.extend([1, 0, 0x10, 0, 0]);
    expected.extend([0; 12]);
    assert_eq!(encode_data_prefix(&data, 0).to_vec(), expected);
    assert_eq!(encoded(&Frame::Data(data, Vec::new())), expected);
    // A block with holes at the source, sent as it is: flag bit 4, no raw_len.
    let sparse = DataHeader {
        zero: false,
        raw_len: 0,
        sparse: true,
        ..data
    };
    let mut expected = vec![
        67, 0, 0, 0, 6, 2, 1, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0,
    ];
    expected.extend([0xaa; DIGEST_LEN]);
    expected.extend([4, 0, 0, 0, 0]);
    expected.extend([0; 12]);
    expected.extend([9, 8]);
    assert_eq!(encoded(&Frame::Data(sparse, vec![9, 8])), expected);
    // A patch of a block under repair: flag bit 8, its offset and the answer's count.
    let patch = DataHeader {
        sparse: false,
        patch: Some(Patch {
            at: 2 * MIN_PATCH,
            count: 3,
            round: 4,
        }),
        ..sparse
    };
    let mut expected = vec![
        66, 0, 0, 0, 6, 2, 1, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0,
    ];
    expected.extend([0xaa; DIGEST_LEN]);
    expected.extend([8, 0, 0, 0, 0, 0, 0x20, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5]);
    assert_eq!(encoded(&Frame::Data(patch, vec![5])), expected);
}

#[test]
fn entry_and_plan_wire_len_match_encoding() {
    let entry = Entry {
        id: 9,
        path: b"dir/link".to_vec(),
        kind: EntryKind::Symlink {
            target: b"../elsewhere".to_vec(),
        },
        mode: 0o777,
        mtime_sec: -1,
        mtime_nsec: 5,
        xattrs: Vec::new(),
    };
    let file = Entry {
        kind: EntryKind::File {
            size: 10,
            digest: None,
            growing: true,
        },
        ..entry.clone()
    };
    let dir = Entry {
        kind: EntryKind::Dir,
        ..entry.clone()
    };
    let entries = vec![entry, file, dir];
    let body = encoded(&Frame::Entries(entries.clone())).len() - HEADER_LEN;
    assert_eq!(body, 4 + entries.iter().map(Entry::wire_len).sum::<usize>());

    let plan = vec![
        PlanItem {
            id: 1,
            action: PlanAction::Skip,
        },
        PlanItem {
            id: 2,
            action: PlanAction::Send(vec![(0, 3), (5, 9)]),
        },
    ];
    let body = encoded(&Frame::Plan(plan.clone())).len() - HEADER_LEN;
    assert_eq!(body, 4 + plan.iter().map(PlanItem::wire_len).sum::<usize>());
}

#[test]
fn frame_kind_bytes() {
    for (i, kind) in FrameKind::ALL.iter().enumerate() {
        assert_eq!(*kind as u8 as usize, i + 1);
        assert_eq!(FrameKind::from_u8(*kind as u8), Some(*kind));
    }
    assert_eq!(FrameKind::from_u8(0), None);
    assert_eq!(FrameKind::from_u8(23), None);
    assert_eq!(FrameKind::from_u8(255), None);
}
