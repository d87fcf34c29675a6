//! Object store operands: `s3://BUCKET/KEY` (S3 and its kin), `gs://BUCKET/KEY` (Google
//! Cloud Storage), `az://CONTAINER/KEY` (Azure Blob Storage).

use std::fmt;

/// Settings of S3 operands that come from the command line rather than the
/// environment (here, not in `hetch-object`, so that a copy job carries them in a
/// build without object stores).
#[derive(Debug, Clone, Default)]
pub struct S3Options {
    /// Endpoint URL (`--s3-endpoint`), overriding `AWS_ENDPOINT_URL` and the config file.
    pub endpoint: Option<String>,
}

/// Which kind of object store a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `s3://`: Amazon S3 and S3-compatible stores (MinIO, Ceph).
    S3,
    /// `gs://`: Google Cloud Storage.
    Gcs,
    /// `az://`: Azure Blob Storage (the bucket is a container).
    Azure,
}

impl Scheme {
    /// The URL scheme, without `://`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::S3 => "s3",
            Scheme::Gcs => "gs",
            Scheme::Azure => "az",
        }
    }

    /// The scheme `s` starts with, if it names an object store.
    fn of(s: &str) -> Option<Scheme> {
        [Scheme::S3, Scheme::Gcs, Scheme::Azure]
            .into_iter()
            .find(|sc| s.starts_with(&format!("{}://", sc.as_str())))
    }
}

/// A bucket (or container) and a key (or key prefix) in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectUrl {
    /// Which store.
    pub scheme: Scheme,
    /// Bucket name (an Azure container's name).
    pub bucket: String,
    /// Key or prefix, without a leading `/`; empty for the whole bucket. A trailing `/`
    /// is kept: it marks a prefix to copy *into*.
    pub key: String,
}

impl ObjectUrl {
    /// Whether `s` is an object store operand (`s3://`, `gs://` or `az://`).
    pub fn is_object_url(s: &str) -> bool {
        Scheme::of(s).is_some()
    }

    /// Parses `SCHEME://BUCKET[/KEY]`.
    pub fn parse(s: &str) -> Result<ObjectUrl, String> {
        let scheme =
            Scheme::of(s).ok_or_else(|| format!("{s}: not an s3://, gs:// or az:// URL"))?;
        let rest = &s[scheme.as_str().len() + 3..];
        let (bucket, key) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        if bucket.is_empty() {
            let sc = scheme.as_str();
            return Err(format!(
                "{s}: no bucket in URL (expected {sc}://BUCKET/KEY)"
            ));
        }
        let valid_bucket = bucket.len() <= 63
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b));
        if !valid_bucket {
            return Err(format!("{s}: '{bucket}' is not a valid bucket name"));
        }
        let trimmed = key.trim_end_matches('/');
        if trimmed.split('/').any(|seg| seg == "." || seg == "..")
            || (!trimmed.is_empty() && trimmed.split('/').any(str::is_empty))
            || key.starts_with('/')
        {
            return Err(format!(
                "{s}: key has an empty, '.' or '..' component, which hetch does not map to files"
            ));
        }
        Ok(ObjectUrl {
            scheme,
            bucket: bucket.to_string(),
            key: key.to_string(),
        })
    }

    /// Whether the operand names a prefix to copy into (`s3://b/` or `s3://b/dir/`).
    pub fn is_dir_like(&self) -> bool {
        self.key.is_empty() || self.key.ends_with('/')
    }

    /// The key without its trailing `/`.
    pub fn trimmed(&self) -> &str {
        self.key.trim_end_matches('/')
    }

    /// The name the operand gets at a destination: its last key component, or the
    /// bucket's name for the whole bucket.
    pub fn operand_name(&self) -> &str {
        match self.trimmed().rsplit('/').next() {
            Some(n) if !n.is_empty() => n,
            _ => &self.bucket,
        }
    }

    /// The URL of a key in the same bucket.
    pub fn with_key(&self, key: &str) -> ObjectUrl {
        ObjectUrl {
            scheme: self.scheme,
            bucket: self.bucket.clone(),
            key: key.to_string(),
        }
    }
}

impl fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}/{}", self.scheme.as_str(), self.bucket, self.key)
    }
}

/// Joins a prefix (maybe empty, maybe ending in `/`) and a relative key.
pub fn join_key(prefix: &str, rel: &str) -> String {
    let p = prefix.trim_end_matches('/');
    match (p.is_empty(), rel.is_empty()) {
        (true, _) => rel.to_string(),
        (false, true) => p.to_string(),
        (false, false) => format!("{p}/{rel}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_buckets_keys_and_prefixes() {
        let u = ObjectUrl::parse("s3://data/run/7/").unwrap();
        assert_eq!((u.bucket.as_str(), u.key.as_str()), ("data", "run/7/"));
        assert!(u.is_dir_like());
        assert_eq!(u.operand_name(), "7");
        let u = ObjectUrl::parse("s3://data").unwrap();
        assert_eq!(u.key, "");
        assert_eq!(u.operand_name(), "data");
        let u = ObjectUrl::parse("s3://data/ünï/cødé.bin").unwrap();
        assert_eq!(u.operand_name(), "cødé.bin");
        assert!(!u.is_dir_like());
        assert_eq!(u.to_string(), "s3://data/ünï/cødé.bin");
        let u = ObjectUrl::parse("gs://data/a/b").unwrap();
        assert_eq!(
            (u.scheme, u.to_string().as_str()),
            (Scheme::Gcs, "gs://data/a/b")
        );
        let u = ObjectUrl::parse("az://box/").unwrap();
        assert_eq!((u.scheme, u.key.as_str()), (Scheme::Azure, ""));
        assert!(!ObjectUrl::is_object_url("gcs://data/x"));
        assert!(ObjectUrl::parse("ftp://data/x").is_err());
    }

    #[test]
    fn refuses_what_cannot_map_to_files() {
        for bad in [
            "s3://",
            "s3:///k",
            "s3://Upper/k",
            "s3://b/a/../k",
            "s3://b/a//k",
            "s3://b//k",
            "s3://b/./k",
            "gs://",
            "az:///k",
        ] {
            assert!(ObjectUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn joins_keys() {
        assert_eq!(join_key("", "a/b"), "a/b");
        assert_eq!(join_key("p/", "a"), "p/a");
        assert_eq!(join_key("p", "a"), "p/a");
        assert_eq!(join_key("p/", ""), "p");
    }
}
