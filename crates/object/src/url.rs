//! `s3://BUCKET/KEY` operands.

use std::fmt;

/// A bucket and a key (or key prefix) in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Url {
    /// Bucket name.
    pub bucket: String,
    /// Key or prefix, without a leading `/`; empty for the whole bucket. A trailing `/`
    /// is kept: it marks a prefix to copy *into*.
    pub key: String,
}

impl S3Url {
    /// Whether `s` is an object store operand (`s3://...`).
    pub fn is_s3(s: &str) -> bool {
        s.starts_with("s3://")
    }

    /// Parses `s3://BUCKET[/KEY]`.
    pub fn parse(s: &str) -> Result<S3Url, String> {
        let rest = s
            .strip_prefix("s3://")
            .ok_or_else(|| format!("{s}: not an s3:// URL"))?;
        let (bucket, key) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        if bucket.is_empty() {
            return Err(format!("{s}: no bucket in URL (expected s3://BUCKET/KEY)"));
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
        Ok(S3Url {
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
    pub fn with_key(&self, key: &str) -> S3Url {
        S3Url {
            bucket: self.bucket.clone(),
            key: key.to_string(),
        }
    }
}

impl fmt::Display for S3Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
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
        let u = S3Url::parse("s3://data/run/7/").unwrap();
        assert_eq!((u.bucket.as_str(), u.key.as_str()), ("data", "run/7/"));
        assert!(u.is_dir_like());
        assert_eq!(u.operand_name(), "7");
        let u = S3Url::parse("s3://data").unwrap();
        assert_eq!(u.key, "");
        assert_eq!(u.operand_name(), "data");
        let u = S3Url::parse("s3://data/ünï/cødé.bin").unwrap();
        assert_eq!(u.operand_name(), "cødé.bin");
        assert!(!u.is_dir_like());
        assert_eq!(u.to_string(), "s3://data/ünï/cødé.bin");
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
        ] {
            assert!(S3Url::parse(bad).is_err(), "{bad}");
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
