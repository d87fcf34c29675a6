//! Google Cloud Storage (`gs://`) and Azure Blob Storage (`az://`): where their
//! credentials and endpoints come from, and how a bucket (container) of each is
//! opened. Everything after that is shared with S3: [`Bucket`], the `Store` and the
//! `Origin` do not know which provider they talk to.
//!
//! Both read the variables their own tools and SDKs read, and point at an emulator
//! the way those do: `STORAGE_EMULATOR_HOST` for GCS (fake-gcs-server), and
//! `AZURE_STORAGE_USE_EMULATOR` (with `AZURITE_BLOB_STORAGE_URL`) for Azurite.

use std::collections::HashMap;
use std::sync::Arc;

use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;

use crate::bucket::{client_options, retry_config};
use crate::{Bucket, ObjectError, Scheme};

/// Azurite's well-known development account and key (public, in Microsoft's docs).
const AZURITE_ACCOUNT: &str = "devstoreaccount1";
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// How to reach Google Cloud Storage.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct GcsConfig {
    /// Service account file (`GOOGLE_APPLICATION_CREDENTIALS` or
    /// `GOOGLE_SERVICE_ACCOUNT`); without one, application default credentials or the
    /// instance's metadata server, as Google's own tools find them.
    pub service_account: Option<String>,
    /// The service account key itself (`GOOGLE_SERVICE_ACCOUNT_KEY`, JSON).
    pub service_account_key: Option<String>,
    /// An emulator's address (`STORAGE_EMULATOR_HOST`): no credentials are sent.
    pub emulator: Option<String>,
}

impl std::fmt::Debug for GcsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("GcsConfig")
            .field("service_account", &self.service_account)
            .field("emulator", &self.emulator)
            .finish_non_exhaustive()
    }
}

impl GcsConfig {
    /// From the process environment.
    pub fn resolve() -> GcsConfig {
        GcsConfig::resolve_from(&std::env::vars().collect())
    }

    /// From `env` (for tests).
    pub fn resolve_from(env: &HashMap<String, String>) -> GcsConfig {
        let get = |k: &str| env.get(k).filter(|v| !v.is_empty()).cloned();
        GcsConfig {
            service_account: get("GOOGLE_APPLICATION_CREDENTIALS")
                .or_else(|| get("GOOGLE_SERVICE_ACCOUNT")),
            service_account_key: get("GOOGLE_SERVICE_ACCOUNT_KEY"),
            emulator: get("STORAGE_EMULATOR_HOST").map(|h| with_scheme(&h)),
        }
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> String {
        self.emulator
            .clone()
            .unwrap_or_else(|| "https://storage.googleapis.com".into())
    }
}

/// How to reach Azure Blob Storage.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AzureConfig {
    /// Storage account (`AZURE_STORAGE_ACCOUNT_NAME`).
    pub account: String,
    /// Its shared key (`AZURE_STORAGE_ACCOUNT_KEY`).
    pub key: Option<String>,
    /// A shared access signature instead (`AZURE_STORAGE_SAS_TOKEN`).
    pub sas: Option<String>,
    /// The account's blob endpoint (`AZURE_STORAGE_ENDPOINT`; for Azurite, its URL
    /// with the account as the first path segment).
    pub endpoint: Option<String>,
}

impl std::fmt::Debug for AzureConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key or the signature.
        f.debug_struct("AzureConfig")
            .field("account", &self.account)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl AzureConfig {
    /// From the process environment.
    pub fn resolve() -> Result<AzureConfig, ObjectError> {
        AzureConfig::resolve_from(&std::env::vars().collect())
    }

    /// From `env` (for tests).
    pub fn resolve_from(env: &HashMap<String, String>) -> Result<AzureConfig, ObjectError> {
        let get = |k: &str| env.get(k).filter(|v| !v.is_empty()).cloned();
        let emulator = get("AZURE_STORAGE_USE_EMULATOR")
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes"));
        if emulator {
            let account = get("AZURE_STORAGE_ACCOUNT_NAME").unwrap_or(AZURITE_ACCOUNT.into());
            let url = get("AZURITE_BLOB_STORAGE_URL").unwrap_or("http://127.0.0.1:10000".into());
            return Ok(AzureConfig {
                // Azurite addresses accounts path-style.
                endpoint: Some(format!("{}/{account}", url.trim_end_matches('/'))),
                key: Some(get("AZURE_STORAGE_ACCOUNT_KEY").unwrap_or(AZURITE_KEY.into())),
                sas: None,
                account,
            });
        }
        let account = get("AZURE_STORAGE_ACCOUNT_NAME").ok_or_else(|| {
            ObjectError::Config(
                "az://: no storage account: set AZURE_STORAGE_ACCOUNT_NAME and \
                 AZURE_STORAGE_ACCOUNT_KEY (or AZURE_STORAGE_SAS_TOKEN), or \
                 AZURE_STORAGE_USE_EMULATOR=true for Azurite"
                    .into(),
            )
        })?;
        Ok(AzureConfig {
            account,
            key: get("AZURE_STORAGE_ACCOUNT_KEY"),
            sas: get("AZURE_STORAGE_SAS_TOKEN"),
            endpoint: get("AZURE_STORAGE_ENDPOINT"),
        })
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> String {
        self.endpoint
            .clone()
            .unwrap_or_else(|| format!("https://{}.blob.core.windows.net", self.account))
    }
}

/// `host:port` as a URL (emulators are named without a scheme).
fn with_scheme(host: &str) -> String {
    match host.contains("://") {
        true => host.trim_end_matches('/').to_string(),
        false => format!("http://{}", host.trim_end_matches('/')),
    }
}

impl Bucket {
    /// A client for GCS bucket `bucket` (nothing is sent until the first request).
    pub fn open_gcs(cfg: &GcsConfig, bucket: &str) -> Result<Bucket, ObjectError> {
        let endpoint = cfg.endpoint();
        let mut client = client_options(None)?;
        let mut b = GoogleCloudStorageBuilder::new()
            .with_bucket_name(bucket)
            .with_retry(retry_config());
        if let Some(url) = &cfg.emulator {
            // object_store's way to an emulator: a key that names the base URL and
            // turns OAuth off.
            let key = serde_json::json!({
                "private_key": "",
                "private_key_id": "",
                "client_email": "",
                "gcs_base_url": url,
                "disable_oauth": true,
            });
            b = b.with_service_account_key(key.to_string());
            client = client.with_allow_http(url.starts_with("http://"));
        } else if let Some(key) = &cfg.service_account_key {
            b = b.with_service_account_key(key);
        } else if let Some(path) = &cfg.service_account {
            b = b.with_service_account_path(path);
        }
        let store = b
            .with_client_options(client)
            .build()
            .map_err(|e| ObjectError::Config(format!("gs://{bucket}: {e}")))?;
        Ok(Bucket::of(Scheme::Gcs, bucket, endpoint, Arc::new(store)))
    }

    /// A client for Azure container `container` (nothing is sent until the first
    /// request).
    pub fn open_azure(cfg: &AzureConfig, container: &str) -> Result<Bucket, ObjectError> {
        let endpoint = cfg.endpoint();
        let client = client_options(None)?.with_allow_http(endpoint.starts_with("http://"));
        let mut b = MicrosoftAzureBuilder::new()
            .with_account(&cfg.account)
            .with_container_name(container)
            .with_endpoint(endpoint.clone())
            .with_retry(retry_config());
        if let Some(k) = &cfg.key {
            b = b.with_access_key(k);
        } else if let Some(sas) = &cfg.sas {
            b = b.with_config(
                object_store::azure::AzureConfigKey::SasKey,
                sas.trim_start_matches('?'),
            );
        }
        let store = b
            .with_client_options(client)
            .build()
            .map_err(|e| ObjectError::Config(format!("az://{container}: {e}")))?;
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .map_err(|e| ObjectError::Config(format!("az://{container}: {e}")))?;
        let store = Arc::new(store);
        // Put Block List with metadata (a multipart blob's BLAKE3) is made here.
        let direct = crate::direct::Direct {
            signer: crate::direct::Signer::Azure {
                store: store.clone(),
                account: cfg.account.clone(),
            },
            base_url: format!("{}/{container}", endpoint.trim_end_matches('/')),
            http,
        };
        let mut b = Bucket::of(Scheme::Azure, container, endpoint, store);
        b.direct = Some(direct);
        Ok(b)
    }
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
    fn gcs_reads_google_variables_and_the_emulator_host() {
        let c = GcsConfig::resolve_from(&env(&[("GOOGLE_APPLICATION_CREDENTIALS", "/k.json")]));
        assert_eq!(c.service_account.as_deref(), Some("/k.json"));
        assert_eq!(c.endpoint(), "https://storage.googleapis.com");
        let c = GcsConfig::resolve_from(&env(&[("STORAGE_EMULATOR_HOST", "127.0.0.1:4443")]));
        assert_eq!(c.endpoint(), "http://127.0.0.1:4443");
        assert!(Bucket::open_gcs(&c, "data").is_ok());
        assert_eq!(
            Bucket::open_gcs(&c, "data").unwrap().url("a/b"),
            "gs://data/a/b"
        );
    }

    #[test]
    fn azure_needs_an_account_unless_emulated() {
        let e = AzureConfig::resolve_from(&env(&[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("AZURE_STORAGE_ACCOUNT_NAME"), "{e}");
        let c = AzureConfig::resolve_from(&env(&[
            ("AZURE_STORAGE_ACCOUNT_NAME", "acct"),
            ("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY),
        ]))
        .unwrap();
        assert_eq!(c.endpoint(), "https://acct.blob.core.windows.net");
        let c = AzureConfig::resolve_from(&env(&[
            ("AZURE_STORAGE_USE_EMULATOR", "true"),
            ("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:10999/"),
        ]))
        .unwrap();
        assert_eq!(c.endpoint(), "http://127.0.0.1:10999/devstoreaccount1");
        assert_eq!(Bucket::open_azure(&c, "box").unwrap().url(""), "az://box/");
        // Neither the key nor a signature is ever printed.
        assert!(!format!("{c:?}").contains(AZURITE_KEY));
    }
}
