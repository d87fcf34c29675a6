//! Where in an object store a transfer reads or writes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hetch_store::placement::{self, Found, Placement};

use crate::{Bucket, ObjectUrl};

/// A place in an object store: a bucket client and a key or prefix.
#[derive(Debug, Clone)]
pub struct ObjectLocation {
    /// The bucket.
    pub bucket: Arc<Bucket>,
    /// The key or prefix (a trailing `/` marks a prefix to copy into).
    pub url: ObjectUrl,
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
    /// Where the operands' entries go: the prefix they are placed in, and the name
    /// that replaces the operand's own (`Some("")`: its contents go straight into the
    /// prefix), by the `cp -r` rules of `hetch_store::placement`. A bucket has no
    /// directories to find: a location named as a prefix (a trailing `/`, the bucket
    /// itself) or given several operands counts as one, anything else as nothing yet,
    /// so one operand is copied *as* the location and several *into* it.
    pub fn layout(&self) -> (String, Option<String>) {
        let url = &self.location.url;
        let trimmed = url.trimmed();
        let found = match url.is_dir_like() || self.sources > 1 {
            true => Found::Dir { marked: false },
            false => Found::Nothing,
        };
        let placed = placement::place(found, self.sources, false, Path::new(trimmed));
        let as_operand = self.as_operand || matches!(placed, Ok(Placement::As));
        match (as_operand, trimmed.rsplit_once('/')) {
            (false, _) => (trimmed.to_string(), None),
            (true, Some((parent, name))) => (parent.to_string(), Some(name.to_string())),
            (true, None) => (String::new(), Some(trimmed.to_string())),
        }
    }

    /// The key for wire path `rel` (whose first component is the operand's name).
    pub fn key_for(&self, rel: &str) -> String {
        let (base, name) = self.layout();
        let rel = match name {
            None => rel.to_string(),
            Some(name) => {
                let rest = rel.split_once('/').map_or("", |(_, r)| r);
                crate::url::join_key(&name, rest)
            }
        };
        crate::url::join_key(&base, &rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(url: &str, sources: u32) -> ObjectDest {
        let cfg = crate::S3Config {
            access_key: None,
            secret_key: None,
            session_token: None,
            region: "us-east-1".into(),
            endpoint: Some("http://127.0.0.1:9".into()),
            ca_bundle: None,
        };
        let url = ObjectUrl::parse(url).unwrap();
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
