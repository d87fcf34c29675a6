//! Certificate fingerprints.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// SHA-256 of a certificate's DER bytes. Displays and parses as `sha256:<64 hex digits>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of a DER-encoded certificate.
    pub fn of(cert_der: &[u8]) -> Self {
        Fingerprint(Sha256::digest(cert_der).into())
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", hex::encode(self.0))
    }
}

// Debug shows the same text as Display: error messages and logs that use `{:?}` stay
// comparable with what the server prints and what the known-hosts file holds.
impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// Why a string is not a [`Fingerprint`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fingerprint {input:?}: {reason} (expected sha256:<64 hex digits>)")]
pub struct ParseFingerprintError {
    /// The rejected text (possibly shortened).
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl FromStr for Fingerprint {
    type Err = ParseFingerprintError;

    /// Accepts `sha256:<hex>` (prefix case-insensitive) or bare hex; hex digits in
    /// either case, because users paste fingerprints from various tools.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| ParseFingerprintError {
            input: s.chars().take(100).collect(),
            reason,
        };
        let trimmed = s.trim();
        let hex_part = match trimmed.split_once(':') {
            Some((algo, rest)) if algo.eq_ignore_ascii_case("sha256") => rest,
            Some((algo, _)) => return Err(err(format!("unsupported algorithm {algo:?}"))),
            None => trimmed,
        };
        if hex_part.len() != 64 {
            return Err(err(format!(
                "{} hex digits instead of 64",
                hex_part.chars().count()
            )));
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut bytes).map_err(|e| err(e.to_string()))?;
        Ok(Fingerprint(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_parse_round_trip() {
        let fp = Fingerprint::of(b"some certificate");
        let text = fp.to_string();
        assert!(text.starts_with("sha256:"));
        assert_eq!(text.len(), 7 + 64);
        assert_eq!(text, text.to_lowercase());
        assert_eq!(text.parse::<Fingerprint>().unwrap(), fp);
        // Bare hex, upper case and surrounding spaces are accepted too.
        assert_eq!(text[7..].parse::<Fingerprint>().unwrap(), fp);
        assert_eq!(
            format!(" SHA256:{} ", text[7..].to_uppercase())
                .parse::<Fingerprint>()
                .unwrap(),
            fp
        );
        assert_eq!(format!("{fp:?}"), format!("Fingerprint({text})"));
    }

    #[test]
    fn known_value() {
        // sha256("") is a well-known constant.
        assert_eq!(
            Fingerprint::of(b"").to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn parse_errors_are_clear() {
        let err = "sha256:abcd".parse::<Fingerprint>().unwrap_err();
        assert!(
            err.to_string().contains("4 hex digits instead of 64"),
            "{err}"
        );
        let err = format!("md5:{}", "0".repeat(64))
            .parse::<Fingerprint>()
            .unwrap_err();
        assert!(err.to_string().contains("unsupported algorithm"), "{err}");
        let err = format!("sha256:{}", "g".repeat(64))
            .parse::<Fingerprint>()
            .unwrap_err();
        assert!(
            err.to_string().contains("expected sha256:<64 hex digits>"),
            "{err}"
        );
        assert!("".parse::<Fingerprint>().is_err());
    }
}
