//! hetch-engine's integration tests, in one test binary: one link and one process
//! instead of one per file, so a run spends its time in tests rather than in linking
//! them, and servers the conformance suite needs (MinIO, fake-gcs-server, Azurite) are
//! started once per run and shared by its cases (see `conformance.rs`).
//!
//! Each former test file is a module; tests are named `module::test`, e.g.
//! `cargo test -p hetch-engine conformance::` runs the conformance suite alone.

mod common;
mod confinement;
mod conformance;
mod hostile;
mod hostile_bounds;
mod local;
mod repair;
mod resume;
mod verify;
mod xattrs;
