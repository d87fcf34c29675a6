//! What hetch's tests stand on, kept out of the shipped binary.
//!
//! - [`memory_store`]: a tree in memory as a destination [`Store`]: tests get the
//!   whole engine without a disk, and it shows what the seam asks of a store.
//! - [`memory_origin`]: the same tree as a source [`Origin`].
//! - [`emulators`]: fake-gcs-server and Azurite, started for a test, and (in
//!   `postgres.rs`) a throwaway PostgreSQL server.
//! - [`oidc_issuer`]: an OpenID Connect issuer with keys of its own, signing tokens.
//! - [`prometheus`]: a metrics endpoint's body, parsed as Prometheus parses it.
//! - [`webhook`]: an HTTPS webhook receiver that records, fails, hangs or floods.
//! - [`hosts`]: a hosts file of a test's own, in a private mount namespace.
//! - [`data`]: deterministic pseudo-random test data, in memory or in a file.
//! - [`tree`]: a tree with every boundary case on disk, and a comparison of two trees.
//! - [`minio`]: one MinIO per test process, a bucket per case.
//! - [`shared`]: servers started once per test process, shared by its tests, and
//!   stopped (their directories removed) when it ends.
//!
//! Both are implemented only through the engine's public seams, as any new backend
//! would be.
//!
//! [`Store`]: hetch_store::Store
//! [`Origin`]: hetch_store::origin::Origin

#![deny(missing_docs)]

pub mod data;
pub mod emulators;
pub mod hosts;
pub mod memory_origin;
pub mod memory_store;
pub mod minio;
pub mod oidc_issuer;
pub mod oidc_login;
mod postgres;
pub mod prometheus;
pub mod shared;
pub mod tree;
pub mod webhook;

pub use memory_origin::MemoryOrigin;
pub use memory_store::{MemoryStore, MemoryTree, Node, Unfinished};

/// Says that a test cannot run on this machine (`why`): a pass that says SKIPPED, or
/// a failure under `HETCH_REQUIRE_ALL` (the full tier, where everything must run).
pub fn skipped(why: impl std::fmt::Display) {
    assert!(
        std::env::var_os("HETCH_REQUIRE_ALL").is_none(),
        "cannot run here, and HETCH_REQUIRE_ALL is set: {why}"
    );
    eprintln!("SKIPPED: {why}");
}
