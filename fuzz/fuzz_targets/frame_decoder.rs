//! Feeds arbitrary bytes to every decoder of hetch-proto: `Decoder` (whole and in
//! pieces), `decode_header`, `decode_data_fixed` and `decode_body`. It fails on any
//! panic, and on a decoded frame that does not re-encode to the exact bytes it came from.
//! The checks live in `hetch_proto::fuzzing` so that the crate's own tests run the
//! same ones on random input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hetch_proto::fuzzing::exercise(data);
});
