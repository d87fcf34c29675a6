//! Object stores as sources and destinations: S3 (AWS, MinIO, Ceph, ...) through the
//! `object_store` crate.
//!
//! - [`url`]: `s3://BUCKET/KEY` operands.
//! - [`config`]: credentials, region and endpoint from the environment and the shared
//!   AWS files.
//! - [`bucket`]: listing, ranged reads, single and multipart writes, with the store's
//!   errors sorted into [`ObjectError`]s.
//! - [`parts`]: cutting objects into parts of whole transfer blocks within S3's limits.
//! - [`journal`]: the local record that lets an interrupted multipart upload resume.

#![deny(missing_docs)]

pub mod bucket;
pub mod config;
mod error;
pub mod journal;
pub mod parts;
pub mod url;

pub use bucket::{Bucket, ObjectHead, ObjectInfo, PutMeta};
pub use config::{S3Config, S3Options};
pub use error::ObjectError;
pub use parts::PartPlan;
pub use url::S3Url;
