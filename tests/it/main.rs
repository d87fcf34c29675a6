//! hetch's end-to-end tests, one binary: each module is one subject (a command, a
//! failure class, a peer), run through the built `hetch` binary or in process.
//!
//! One binary rather than one per file: each test binary links the whole dependency
//! tree (the service, the object stores, the MCP server), and linking 30 of them was a
//! large part of the test build. Run one module with `cargo test --test it sync::`.

#[macro_use]
mod util;

mod architecture;
mod auth;
mod bench;
mod bench_s3;
mod bench_write;
mod changing;
mod cloud;
mod compress;
mod contrib;
mod doctor;
mod errors;
mod failures;
mod faithful;
mod follow;
mod job;
mod manual;
mod mcp;
mod mcp_python;
mod metrics;
mod notify;
mod object_ranges;
mod output;
mod peer_safety;
mod race;
mod range_nodes;
mod recover;
mod relay;
mod resume;
mod rsync_diff;
mod s3;
mod schedules;
mod schemathesis;
mod serve_fair;
mod service;
mod service_faults;
mod service_stream;
mod sum;
mod sync;
mod transfer;
mod verify;
mod wan;
mod watch;
mod web;
mod web_login;
mod web_schedules;
mod xattrs;
