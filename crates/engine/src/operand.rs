//! What a transfer reads from and writes to: local paths or object store locations.

use std::path::PathBuf;
use std::sync::Arc;

use hetch_object::{Bucket, S3Url};

/// A source operand.
#[derive(Debug, Clone)]
pub enum Operand {
    /// A local file or directory.
    Local(PathBuf),
    /// An object or a prefix in a bucket.
    Object(ObjectLocation),
}

impl From<PathBuf> for Operand {
    fn from(p: PathBuf) -> Self {
        Operand::Local(p)
    }
}

/// A place in an object store: a bucket client and a key or prefix.
#[derive(Debug, Clone)]
pub struct ObjectLocation {
    /// The bucket.
    pub bucket: Arc<Bucket>,
    /// The key or prefix (a trailing `/` marks a prefix to copy into).
    pub url: S3Url,
}

/// Where a transfer writes.
#[derive(Debug, Clone)]
pub enum Destination {
    /// A local path with `cp -r` semantics.
    Local(crate::DestSpec),
    /// An object store prefix.
    Object(ObjectDest),
}

/// An object store destination.
#[derive(Debug, Clone)]
pub struct ObjectDest {
    /// Where: with one source operand and no trailing `/`, the operand is copied *as*
    /// this key (a file to the key itself, a directory's contents under `key/`);
    /// otherwise each operand is copied *into* it under its own name.
    pub location: ObjectLocation,
    /// Number of source operands.
    pub sources: u32,
    /// Take the location as the copy of the single operand whatever its form (as
    /// `diff -r SRC DST` does): used when comparing.
    pub as_operand: bool,
    /// Directory for the journals of multipart uploads in progress (resume state).
    pub state_dir: PathBuf,
}

impl ObjectDest {
    /// The key for wire path `rel` (whose first component is the operand's name).
    pub fn key_for(&self, rel: &str) -> String {
        let url = &self.location.url;
        let as_operand = self.as_operand || (self.sources == 1 && !url.is_dir_like());
        let rest = if as_operand {
            rel.split_once('/').map_or("", |(_, r)| r)
        } else {
            rel
        };
        hetch_object::url::join_key(url.trimmed(), rest)
    }
}
