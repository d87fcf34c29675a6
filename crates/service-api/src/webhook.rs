//! A job's webhook: where the service POSTs a signed note when the job ends, and how
//! the API shows it (the URL and whether a secret is set, never the secret; the last
//! delivery's outcome).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest webhook URL, in bytes.
pub const MAX_URL: usize = 2048;
/// Shortest secret, in bytes: a shorter one can be guessed from signed bodies.
pub const MIN_SECRET: usize = 16;
/// Longest secret, in bytes.
pub const MAX_SECRET: usize = 1024;

/// Where to tell of a job's end, and the secret its body is signed with (HMAC-SHA256,
/// header `X-Hetch-Signature: sha256=HEX`). The secret is never shown back.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    /// An `https://` URL (at most 2,048 bytes). Unless the operator allows it
    /// (`--webhook-allow-private`), its host must not be or resolve to a loopback,
    /// link-local or private address.
    #[schemars(length(min = 9, max = 2048))]
    pub url: String,
    /// The shared secret, 16 to 1,024 bytes.
    #[schemars(length(min = 16, max = 1024))]
    pub secret: String,
}

// By hand: a derived `Debug` would print the secret into logs and errors.
impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &self.url)
            .field("secret", &"(set)")
            .finish()
    }
}

impl Webhook {
    /// Whether the URL and secret are in bounds, as one line starting with
    /// `webhook` (never quoting the secret). Whether the host is private is the
    /// service's to judge (its operator may allow it).
    pub fn check(&self) -> Result<(), String> {
        if self.url.len() > MAX_URL {
            return Err(format!("webhook url is longer than {MAX_URL} bytes"));
        }
        let Some(rest) = self.url.strip_prefix("https://") else {
            return Err("webhook url must start with https://".into());
        };
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if host.is_empty() || host.contains('@') || self.url.chars().any(char::is_control) {
            return Err("webhook url must be https://HOST[:PORT]/PATH (no user, no spaces)".into());
        }
        let n = self.secret.len();
        if !(MIN_SECRET..=MAX_SECRET).contains(&n) {
            return Err(format!(
                "webhook secret must be {MIN_SECRET} to {MAX_SECRET} bytes (got {n})"
            ));
        }
        Ok(())
    }
}

impl Webhook {
    /// A webhook to `url` whose secret is the first line of `file`, or else
    /// `$HETCH_WEBHOOK_SECRET` (never a command-line argument: those show in `ps`).
    /// An error names where the secret was looked for, never the secret.
    pub fn with_secret_from(url: &str, file: Option<&std::path::Path>) -> Result<Self, String> {
        let secret = match file {
            Some(f) => {
                let text = std::fs::read_to_string(f)
                    .map_err(|e| format!("--webhook-secret-file {}: {e}", f.display()))?;
                text.lines().next().unwrap_or_default().to_string()
            }
            None => std::env::var("HETCH_WEBHOOK_SECRET").map_err(|_| {
                "--webhook needs a secret: --webhook-secret-file FILE or $HETCH_WEBHOOK_SECRET"
                    .to_string()
            })?,
        };
        let hook = Webhook {
            url: url.to_string(),
            secret,
        };
        hook.check()?;
        Ok(hook)
    }
}

/// A job's webhook as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WebhookView {
    /// Where the note goes.
    pub url: String,
    /// Always true: a secret is set (it is never shown).
    pub secret_set: bool,
    /// The delivery of the job's end, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryView>,
}

/// The delivery of a job's end to its webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryView {
    /// The job.
    pub job: String,
    /// Its `X-Hetch-Delivery` id.
    pub id: String,
    /// `pending` (to be tried, or tried again), `delivered` or `given_up`.
    pub state: String,
    /// Attempts made.
    pub attempts: u64,
    /// Why the last attempt failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the next attempt is due (ms since the epoch), while pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt: Option<u64>,
    /// When its state last changed (ms since the epoch).
    pub updated: u64,
}

/// The JSON body POSTed to a webhook (`X-Hetch-Event: job.ended`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Notice {
    /// `job.ended`.
    pub event: String,
    /// The same as the `X-Hetch-Delivery` header: the same for every attempt, so a
    /// receiver can drop a repeat.
    pub delivery: String,
    /// When this attempt was sent (ms since the epoch).
    pub timestamp: u64,
    /// The job.
    pub job: String,
    /// `done`, `failed` or `cancelled`.
    pub state: String,
    /// Entries moved.
    pub files_done: u64,
    /// Bytes moved.
    pub bytes_done: u64,
    /// Entries in its listing.
    pub files: u64,
    /// Bytes in its listing.
    pub bytes: u64,
    /// Why it failed.
    pub error: Option<String>,
    /// When it was submitted (ms since the epoch).
    pub created: u64,
    /// When its first unit was claimed.
    pub started: Option<u64>,
    /// When it ended.
    pub finished: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_secrets_out_of_bounds_are_refused_without_quoting_the_secret() {
        let ok = Webhook {
            url: "https://hooks.example.org/hetch".into(),
            secret: "s".repeat(16),
        };
        assert_eq!(ok.check(), Ok(()));
        assert!(!format!("{ok:?}").contains("ssss"));
        for (url, secret, why) in [
            ("http://x.org/", "s".repeat(16), "https://"),
            ("https://", "s".repeat(16), "HOST"),
            ("https://u:p@x.org/", "s".repeat(16), "no user"),
            ("https://x.org/a b\n", "s".repeat(16), "no user"),
            ("https://x.org/", "s".repeat(15), "16 to 1024"),
            ("https://x.org/", "s".repeat(1025), "16 to 1024"),
        ] {
            let w = Webhook {
                url: url.into(),
                secret: secret.clone(),
            };
            let e = w.check().unwrap_err();
            assert!(e.starts_with("webhook") && e.contains(why), "{e}");
            assert!(!e.contains(&secret), "{e}");
        }
        let long = Webhook {
            url: format!("https://x.org/{}", "a".repeat(MAX_URL)),
            ..ok
        };
        assert!(long.check().unwrap_err().contains("longer than 2048"));
    }
}
