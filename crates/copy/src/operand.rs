//! Operands as this build takes them: without the `cloud` feature (a lean edge build)
//! an object store URL is refused in one line that names the feature, before anything
//! starts, rather than failing somewhere inside a copy.

use hetch_location::{Location, ObjectUrl};

/// Whether this build reaches object stores (s3://, gs://, az://).
pub const OBJECT_STORES: bool = cfg!(feature = "cloud");

/// What `s` names, as [`Location::parse`] reads it, refused if it is an object store
/// URL and this build has none; `Err` is the one-line message.
pub fn parse_operand(s: &str) -> Result<Location, String> {
    operand(s, OBJECT_STORES)
}

/// [`parse_operand`] for a build with or without object stores.
fn operand(s: &str, object_stores: bool) -> Result<Location, String> {
    match Location::parse(s)? {
        Location::Object(url) if !object_stores => Err(without_object_stores(&url)),
        loc => Ok(loc),
    }
}

/// Why `url` cannot be used by a build without the `cloud` feature.
pub fn without_object_stores(url: &ObjectUrl) -> String {
    format!("{url}: this hetch was built without object stores (the cloud feature)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_urls_are_refused_without_object_stores() {
        for s in ["s3://b/k", "gs://b/k", "az://c/k"] {
            assert_eq!(
                operand(s, false).unwrap_err(),
                format!("{s}: this hetch was built without object stores (the cloud feature)")
            );
            assert!(matches!(operand(s, true), Ok(Location::Object(_))), "{s}");
        }
        // Other operands are not this build's concern.
        for objects in [false, true] {
            assert!(matches!(operand("a/b", objects), Ok(Location::Local(_))));
            assert!(matches!(
                operand("hetch://h/p", objects),
                Ok(Location::Remote { .. })
            ));
            assert!(operand("s3://", objects).is_err(), "still a bad URL");
        }
    }
}
