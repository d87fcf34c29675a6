//! Drives a receiving session's settlement (when its summary may go out) with
//! arbitrary task events and checks it against a plain model (see
//! `hetch_engine::fuzzing::settle_events`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hetch_engine::fuzzing::settle_events(data);
});
