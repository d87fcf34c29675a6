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
#[derive(Clone)]
pub enum Destination {
    /// A local path with `cp -r` semantics.
    Local(crate::DestSpec),
    /// An object store prefix.
    Object(ObjectDest),
    /// Any store (see [`crate::store`]), resolved by the caller.
    Store(Arc<dyn crate::store::Store>),
}

impl Destination {
    /// The store that receives into this destination (within a Tokio runtime: an
    /// object store runs its requests there). `buffer_memory` bounds what a store
    /// keeps besides the session's block buffers (an object store's part buffers).
    pub fn into_store(self, buffer_memory: usize) -> Arc<dyn crate::store::Store> {
        match self {
            Destination::Local(d) => Arc::new(crate::store::posix::PosixStore::new(d)),
            Destination::Object(d) => Arc::new(crate::store::s3::S3Store::new(d, buffer_memory)),
            Destination::Store(s) => s,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(url: &str, sources: u32) -> ObjectDest {
        let cfg = hetch_object::S3Config {
            access_key: None,
            secret_key: None,
            session_token: None,
            region: "us-east-1".into(),
            endpoint: Some("http://127.0.0.1:9".into()),
            ca_bundle: None,
        };
        let url = S3Url::parse(url).unwrap();
        ObjectDest {
            location: ObjectLocation {
                bucket: Arc::new(Bucket::open(&cfg, &url.bucket).unwrap()),
                url,
            },
            sources,
            as_operand: false,
            state_dir: PathBuf::new(),
        }
    }

    #[test]
    fn keys_follow_the_copy_rules() {
        // One source, no trailing '/': copied as the key.
        let d = dest("s3://b/raw/x.h5", 1);
        assert_eq!(d.key_for("big.h5"), "raw/x.h5");
        let d = dest("s3://b/raw/r7", 1);
        assert_eq!(d.key_for("run7"), "raw/r7");
        assert_eq!(d.key_for("run7/a/f"), "raw/r7/a/f");
        // Trailing '/', the bucket itself, or several sources: into, under its name.
        let d = dest("s3://b/raw/", 1);
        assert_eq!(d.key_for("run7/a/f"), "raw/run7/a/f");
        let d = dest("s3://b", 1);
        assert_eq!(d.key_for("run7/f"), "run7/f");
        let d = dest("s3://b/raw", 2);
        assert_eq!(d.key_for("run7/f"), "raw/run7/f");
        // Comparing takes the location as the operand's copy whatever its form.
        let mut d = dest("s3://b/raw/", 1);
        d.as_operand = true;
        assert_eq!(d.key_for("run7/f"), "raw/f");
    }
}
