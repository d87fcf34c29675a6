//! Drives one file's block ledger (the sink's accounting and bounds on peer numbers)
//! with arbitrary events and checks it against a plain model after each (see
//! `hetch_engine::fuzzing::ledger_events`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hetch_engine::fuzzing::ledger_events(data);
});
