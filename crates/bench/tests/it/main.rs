//! The benchmark harness's integration tests, one binary: the peers and the report.

mod peers;
mod report;
