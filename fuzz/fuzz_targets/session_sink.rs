//! Plays a hostile source against a real sink: the input is a program of crafted
//! entries, data blocks, pieces, seals and the like (see `hetch_engine::fuzzing`). It
//! fails on a panic or an allocation beyond libFuzzer's limit in the engine, on a sink
//! that does not end once its source hangs up, and on anything written outside the
//! destination.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hetch_engine::fuzzing::sink_session(data);
});
