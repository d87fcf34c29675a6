//! Credentials, region and endpoint, found where users of the AWS tools already keep
//! them: the standard environment variables first, then the shared `credentials` and
//! `config` files (`AWS_PROFILE` picks the profile), then `--s3-endpoint`'s override.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::ObjectError;

pub use hetch_location::url::S3Options;

/// Everything needed to talk to a store.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    /// Access key id (`None`: unsigned requests, `AWS_NO_SIGN_REQUEST`).
    pub access_key: Option<String>,
    /// Secret key.
    pub secret_key: Option<String>,
    /// Session token of temporary credentials.
    pub session_token: Option<String>,
    /// Region (`us-east-1` unless configured).
    pub region: String,
    /// Endpoint of an on-premises store (MinIO, Ceph): path-style addressing is used
    /// with it. `None` for AWS itself (virtual-hosted addressing).
    pub endpoint: Option<String>,
    /// PEM file of extra trusted certificate authorities (`AWS_CA_BUNDLE`).
    pub ca_bundle: Option<PathBuf>,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("S3Config")
            .field("access_key", &self.access_key)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl S3Config {
    /// Resolves the configuration from the process environment and the shared files.
    pub fn resolve(opts: &S3Options) -> Result<S3Config, ObjectError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        Self::resolve_from(opts, &env)
    }

    /// Resolves the configuration from `env` (for tests) and the files it points at.
    pub fn resolve_from(
        opts: &S3Options,
        env: &HashMap<String, String>,
    ) -> Result<S3Config, ObjectError> {
        let get = |k: &str| env.get(k).filter(|v| !v.is_empty()).cloned();
        let home = get("HOME").map(PathBuf::from);
        let profile = get("AWS_PROFILE").unwrap_or_else(|| "default".into());
        let creds_file = get("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws/credentials")));
        let config_file = get("AWS_CONFIG_FILE")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws/config")));
        let creds = match &creds_file {
            Some(p) => read_ini_section(p, &profile)?,
            None => HashMap::new(),
        };
        // In the config file, profiles other than "default" are "[profile NAME]".
        let config_section = if profile == "default" {
            "default".to_string()
        } else {
            format!("profile {profile}")
        };
        let config = match &config_file {
            Some(p) => read_ini_section(p, &config_section)?,
            None => HashMap::new(),
        };
        let from_files = |k: &str| creds.get(k).or_else(|| config.get(k)).cloned();
        let unsigned = get("AWS_NO_SIGN_REQUEST").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let (access_key, secret_key, session_token) = if unsigned {
            (None, None, None)
        } else if let (Some(a), Some(s)) = (get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY"))
        {
            (Some(a), Some(s), get("AWS_SESSION_TOKEN"))
        } else {
            match (
                from_files("aws_access_key_id"),
                from_files("aws_secret_access_key"),
            ) {
                (Some(a), Some(s)) => (Some(a), Some(s), from_files("aws_session_token")),
                _ => {
                    return Err(ObjectError::Config(format!(
                        "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or add profile '{profile}' to {}",
                        creds_file
                            .as_deref()
                            .map_or("~/.aws/credentials".into(), |p| p.display().to_string())
                    )))
                }
            }
        };
        let region = get("AWS_REGION")
            .or_else(|| get("AWS_DEFAULT_REGION"))
            .or_else(|| config.get("region").cloned())
            .unwrap_or_else(|| "us-east-1".into());
        let endpoint = opts
            .endpoint
            .clone()
            .or_else(|| get("AWS_ENDPOINT_URL_S3"))
            .or_else(|| get("AWS_ENDPOINT_URL"))
            .or_else(|| config.get("endpoint_url").cloned())
            .map(|e| e.trim_end_matches('/').to_string());
        if let Some(e) = &endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(ObjectError::Config(format!(
                    "S3 endpoint '{e}': expected an http:// or https:// URL"
                )));
            }
        }
        Ok(S3Config {
            access_key,
            secret_key,
            session_token,
            region,
            endpoint,
            ca_bundle: get("AWS_CA_BUNDLE").map(PathBuf::from),
        })
    }

    /// Where the store is, for messages and for keying resume state.
    pub fn endpoint_name(&self) -> String {
        self.endpoint
            .clone()
            .unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", self.region))
    }
}

/// The `key = value` pairs of `[section]` in an INI-style AWS file; a missing file has
/// none. Values may not span lines (nested `s3 =` blocks are skipped).
fn read_ini_section(path: &Path, section: &str) -> Result<HashMap<String, String>, ObjectError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => {
            return Err(ObjectError::Config(format!("{}: {e}", path.display())));
        }
    };
    let mut out = HashMap::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == section;
            continue;
        }
        if inside {
            if let Some((k, v)) = line.split_once('=') {
                let (k, v) = (k.trim(), v.trim());
                if !v.is_empty() {
                    out.insert(k.to_ascii_lowercase(), v.to_string());
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn environment_comes_first() {
        let e = env(&[
            ("HOME", "/nonexistent"),
            ("AWS_ACCESS_KEY_ID", "AK"),
            ("AWS_SECRET_ACCESS_KEY", "SK"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"),
        ]);
        let c = S3Config::resolve_from(&S3Options::default(), &e).unwrap();
        assert_eq!(c.access_key.as_deref(), Some("AK"));
        assert_eq!(c.region, "eu-west-1");
        assert_eq!(c.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        let o = S3Options {
            endpoint: Some("https://store.example:443".into()),
        };
        let c = S3Config::resolve_from(&o, &e).unwrap();
        assert_eq!(c.endpoint.as_deref(), Some("https://store.example:443"));
        assert!(
            !format!("{c:?}").contains("SK"),
            "the secret is never printed"
        );
    }

    #[test]
    fn shared_files_and_profiles() {
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("credentials");
        let config = dir.path().join("config");
        std::fs::write(
            &creds,
            "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n\n[lab]\naws_access_key_id=L\naws_secret_access_key=LS\naws_session_token = T\n",
        )
        .unwrap();
        std::fs::write(
            &config,
            "[default]\nregion = us-west-2\n[profile lab]\nregion = ap-south-1\nendpoint_url = https://minio.lab:9000\ns3 =\n  addressing_style = path\n",
        )
        .unwrap();
        let base = [
            ("AWS_SHARED_CREDENTIALS_FILE", creds.to_str().unwrap()),
            ("AWS_CONFIG_FILE", config.to_str().unwrap()),
        ];
        let c = S3Config::resolve_from(&S3Options::default(), &env(&base)).unwrap();
        assert_eq!(c.access_key.as_deref(), Some("D"));
        assert_eq!(c.region, "us-west-2");
        assert_eq!(c.endpoint, None);
        let mut lab = base.to_vec();
        lab.push(("AWS_PROFILE", "lab"));
        let c = S3Config::resolve_from(&S3Options::default(), &env(&lab)).unwrap();
        assert_eq!(c.access_key.as_deref(), Some("L"));
        assert_eq!(c.session_token.as_deref(), Some("T"));
        assert_eq!(c.region, "ap-south-1");
        assert_eq!(c.endpoint.as_deref(), Some("https://minio.lab:9000"));
    }

    #[test]
    fn missing_credentials_and_bad_endpoints_are_clear() {
        let e = env(&[("HOME", "/nonexistent")]);
        let err = S3Config::resolve_from(&S3Options::default(), &e).unwrap_err();
        assert!(err.to_string().contains("no S3 credentials"), "{err}");
        let e = env(&[
            ("AWS_ACCESS_KEY_ID", "a"),
            ("AWS_SECRET_ACCESS_KEY", "b"),
            ("AWS_ENDPOINT_URL", "minio:9000"),
        ]);
        let err = S3Config::resolve_from(&S3Options::default(), &e).unwrap_err();
        assert!(err.to_string().contains("minio:9000"), "{err}");
        let e = env(&[("AWS_NO_SIGN_REQUEST", "true")]);
        let c = S3Config::resolve_from(&S3Options::default(), &e).unwrap();
        assert_eq!(c.access_key, None);
    }
}
