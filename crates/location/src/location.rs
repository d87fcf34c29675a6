//! Command-line operands: local paths, `hetch://HOST[:PORT]/path` URLs or object store
//! locations (`s3://`, `gs://`, `az://BUCKET/KEY`).

use std::path::PathBuf;

use crate::url::ObjectUrl;

/// Port a server listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 7878;

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A path on this machine.
    Local(PathBuf),
    /// A path under a server's root.
    Remote {
        /// `host:port`, as used for connecting and in the known-hosts file.
        host: String,
        /// Path relative to the server's root (may be empty: the root itself).
        path: String,
    },
    /// An object or prefix in an object store (S3, GCS, Azure).
    Object(ObjectUrl),
}

impl Location {
    /// Parses an operand.
    pub fn parse(s: &str) -> Result<Location, String> {
        if ObjectUrl::is_object_url(s) {
            return ObjectUrl::parse(s).map(Location::Object);
        }
        let Some(rest) = s.strip_prefix("hetch://") else {
            return Ok(Location::Local(PathBuf::from(s)));
        };
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let host = crate::host::host_port(hostport, DEFAULT_PORT)
            .map_err(|e| format!("{s}: {e} (expected hetch://HOST[:PORT]/path)"))?;
        Ok(Location::Remote {
            host,
            path: path.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls_and_paths() {
        assert_eq!(
            Location::parse("a/b").unwrap(),
            Location::Local("a/b".into())
        );
        assert_eq!(
            Location::parse("hetch://h/x/y").unwrap(),
            Location::Remote {
                host: "h:7878".into(),
                path: "x/y".into()
            }
        );
        assert_eq!(
            Location::parse("hetch://127.0.0.1:9000").unwrap(),
            Location::Remote {
                host: "127.0.0.1:9000".into(),
                path: "".into()
            }
        );
        assert_eq!(
            Location::parse("hetch://[::1]:9/d/").unwrap(),
            Location::Remote {
                host: "[::1]:9".into(),
                path: "d/".into()
            }
        );
        assert!(matches!(
            Location::parse("s3://bucket/a/b"),
            Ok(Location::Object(u)) if u.bucket == "bucket" && u.key == "a/b"
        ));
        assert!(Location::parse("s3:///a").is_err());
        assert!(Location::parse("hetch:///x").is_err());
        for bad in [
            "hetch://h:port/x",
            "hetch://h:0/x",
            "hetch://[::1/x",
            "hetch://::1/x",
            "hetch://a b/x",
        ] {
            let e = Location::parse(bad).unwrap_err();
            assert!(e.starts_with(bad), "{bad}: {e}");
        }
    }
}
