//! Random and mutated inputs through every decoder: what the cargo-fuzz target in
//! /fuzz does, run here too so that CI (which does not run cargo-fuzz) exercises it.
//! `fuzzing::exercise` panics on any decoder panic or non-canonical decoding.

use super::strategies::frame;
use crate::fuzzing::exercise;
use crate::*;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::Config;

/// Cases per test; overall a few hundred thousand inputs.
fn config(cases: u32) -> Config {
    Config {
        cases,
        // Shrinking is only useful on failure and can take long on big inputs.
        max_shrink_iters: 2_000,
        ..Config::default()
    }
}

/// Fixed points of interest for lengths, so random headers often announce bodies that
/// the random data can actually fill.
fn small_len() -> impl Strategy<Value = u32> {
    prop_oneof![
        0u32..80,
        Just(DATA_FIXED_LEN as u32),
        Just(MAX_CONTROL_BODY as u32),
        any::<u32>(),
    ]
}

proptest! {
    #![proptest_config(config(200_000))]

    /// Plain random bytes.
    #[test]
    fn random_bytes(data in vec(any::<u8>(), 0..96)) {
        exercise(&data);
    }
}

proptest! {
    #![proptest_config(config(100_000))]

    /// Random bodies behind plausible headers, possibly followed by more frames.
    #[test]
    fn random_bodies_behind_valid_headers(
        frames in vec((0u8..14, small_len(), vec(any::<u8>(), 0..80)), 1..4),
    ) {
        let mut data = Vec::new();
        for (kind, len, body) in frames {
            let len = if len < 80 { len.min(body.len() as u32) } else { len };
            data.extend_from_slice(&len.to_le_bytes());
            data.push(kind);
            data.extend_from_slice(&body);
        }
        exercise(&data);
    }
}

proptest! {
    #![proptest_config(config(100_000))]

    /// Valid frames with a few bytes overwritten, inserted or removed, and the stream
    /// possibly cut short: inputs close to valid reach the deepest checks.
    #[test]
    fn mutated_valid_frames(
        frames in vec(frame(), 1..4),
        edits in vec((any::<prop::sample::Index>(), 0u8..3, any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut data = Vec::new();
        for f in &frames {
            encode(f, &mut data);
        }
        for (at, op, byte) in edits {
            let i = at.index(data.len() + 1);
            match op {
                0 if i < data.len() => data[i] = byte,
                1 => data.insert(i, byte),
                _ if i < data.len() => {
                    data.remove(i);
                }
                _ => {}
            }
        }
        data.truncate(cut.index(data.len() + 1));
        exercise(&data);
    }
}
