//! Plays a hostile sink against a real source reading a small tree: the input is a
//! program of crafted plans, resend requests, file reports and summaries (see
//! `hetch_engine::fuzzing`). It fails on a panic or an allocation beyond libFuzzer's
//! limit in the engine, and on a source that does not end once its sink hangs up.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hetch_engine::fuzzing::source_session(data);
});
