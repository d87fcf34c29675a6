//! Object stores as sources and destinations: S3 (AWS, MinIO, Ceph, ...), Google Cloud
//! Storage and Azure Blob Storage, through the `object_store` crate.
//!
//! - [`url`]: `s3://`, `gs://` and `az://BUCKET/KEY` operands.
//! - [`config`]: S3 credentials, region and endpoint from the environment and the
//!   shared AWS files.
//! - [`cloud`]: GCS and Azure: their configuration, and how their buckets open.
//! - [`bucket`]: listing, ranged reads, single and multipart writes, with the store's
//!   errors sorted into [`ObjectError`]s.
//! - [`parts`]: cutting objects into parts of whole transfer blocks within S3's limits.
//! - [`shared`]: one object uploaded in parts by several writers (the ranges of a
//!   large file), checked from their digests and completed with its BLAKE3.
//! - [`journal`]: the local record that lets an interrupted multipart upload resume.
//! - [`location`]: where in a bucket a transfer reads or writes, and how operands map
//!   to keys.
//! - [`store`]: a bucket prefix as a destination (the engine's `Store` seam).
//! - [`origin`]: objects and prefixes as sources (the engine's `Origin` seam), and
//!   whole-object digests.

#![deny(missing_docs)]

pub mod bucket;
pub mod cloud;
pub mod config;
mod direct;
mod error;
pub mod journal;
pub mod location;
pub mod origin;
pub mod parts;
#[cfg(test)]
mod runs_test;
pub mod shared;
pub mod store;
/// `s3://`, `gs://` and `az://BUCKET/KEY` operands, parsed in the leaf crate
/// `hetch-location` (re-exported: operands are read without the stores).
pub use hetch_location::url;

pub use bucket::{Bucket, ObjectHead, ObjectInfo, PutMeta};
pub use cloud::{AzureConfig, GcsConfig};
pub use config::{S3Config, S3Options};
pub use error::ObjectError;
pub use location::{ObjectDest, ObjectLocation};
pub use origin::{sum_objects, ObjectOrigin};
pub use parts::{PartLimits, PartPlan, RangeCut};
pub use store::BucketStore;
pub use url::{ObjectUrl, Scheme};

impl From<ObjectError> for hetch_store::StoreError {
    fn from(e: ObjectError) -> Self {
        hetch_store::StoreError::Service(e.to_string())
    }
}
