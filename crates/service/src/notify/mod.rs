//! Notifications: each job submitted with a webhook gets a row in the database's
//! outbox ([`hetch_jobdb::webhooks`]); once the job ends, the delivery loop of one
//! service instance (under the row's lease) POSTs a signed note to the webhook,
//! retrying with exponential backoff, and records each outcome. Nothing here touches
//! the job: a receiver that is down or slow only delays its own note.
//!
//! - [`address`]: which hosts a webhook may reach.
//! - [`resolve`]: the client's resolver, which checks every address it returns.
//! - [`send`]: one attempt (signing, the deadline, the answer's bound).

pub mod address;
pub mod resolve;
pub mod send;

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hetch_jobdb::{Attempt, Delivery, DueDelivery};
use hetch_service_api::{DeliveryView, JobSpec, Notice};

use crate::{now_ms, AppState};

/// How webhooks are delivered.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Let webhooks reach loopback, link-local and private addresses
    /// (`--webhook-allow-private`).
    pub allow_private: bool,
    /// Also trust this CA for receivers' certificates (`--webhook-ca`).
    pub ca: Option<reqwest::Certificate>,
    /// The wait after the first failed attempt; it doubles after each.
    pub backoff_base: Duration,
    /// The longest wait between attempts.
    pub backoff_cap: Duration,
    /// Attempts before a delivery is given up.
    pub max_attempts: u64,
    /// Each attempt's deadline (connecting, sending, reading the answer).
    pub timeout: Duration,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        WebhookConfig {
            allow_private: false,
            ca: None,
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(600),
            max_attempts: DEFAULT_ATTEMPTS,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Attempts per delivery unless the operator says otherwise.
pub const DEFAULT_ATTEMPTS: u64 = 8;
/// Most attempts the operator may ask for.
pub const MAX_ATTEMPTS: u64 = 100;
/// Most deliveries one instance sends at once.
const AT_ONCE: u64 = 16;
/// Most deliveries the live view shows.
pub const SHOWN: u64 = 50;

impl WebhookConfig {
    /// Reads the CA file (PEM) receivers' certificates may also chain to; an error
    /// names the file.
    pub fn load_ca(path: &Path) -> Result<reqwest::Certificate, String> {
        let pem =
            std::fs::read(path).map_err(|e| format!("--webhook-ca {}: {e}", path.display()))?;
        reqwest::Certificate::from_pem(&pem).map_err(|e| {
            format!(
                "--webhook-ca {}: not a PEM certificate: {e}",
                path.display()
            )
        })
    }

    /// The settings `hetch service` was given: `--webhook-allow-private`,
    /// `--webhook-ca` and `--webhook-attempts`. The first wait is 1 s, or
    /// `$HETCH_WEBHOOK_BACKOFF_MS` (hidden: for tests of retries).
    pub fn from_flags(
        allow_private: bool,
        ca: Option<&Path>,
        max_attempts: u64,
    ) -> Result<WebhookConfig, String> {
        let base = std::env::var("HETCH_WEBHOOK_BACKOFF_MS").ok();
        let base = match base.map(|ms| ms.parse::<u64>()) {
            None => Duration::from_secs(1),
            Some(Ok(ms)) if ms > 0 => Duration::from_millis(ms),
            Some(_) => return Err("HETCH_WEBHOOK_BACKOFF_MS must be milliseconds above 0".into()),
        };
        let cfg = WebhookConfig {
            allow_private,
            ca: ca.map(Self::load_ca).transpose()?,
            max_attempts,
            backoff_base: base,
            ..WebhookConfig::default()
        };
        cfg.check()?;
        Ok(cfg)
    }

    /// Whether the settings are in bounds, as one line naming the one that is not.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_ATTEMPTS).contains(&self.max_attempts) {
            return Err(format!("webhook attempts must be 1 to {MAX_ATTEMPTS}"));
        }
        if self.backoff_base.is_zero() || self.backoff_base > self.backoff_cap {
            return Err("webhook backoff: the base must be above 0 and at most the cap".into());
        }
        if self.timeout.is_zero() || self.timeout > Duration::from_secs(300) {
            return Err("webhook timeout must be above 0 and at most 300 s".into());
        }
        Ok(())
    }
}

/// A delivery as the API shows it.
pub fn view(d: &Delivery) -> DeliveryView {
    DeliveryView {
        job: d.job.clone(),
        id: d.id(),
        state: d.state.clone(),
        attempts: d.attempts,
        last_error: d.last_error.clone(),
        next_attempt: (d.state == "pending").then_some(d.next_attempt),
        updated: d.updated,
    }
}

/// Sends due deliveries until the service stops: up to [`AT_ONCE`] at a time, each
/// under a lease longer than its deadline.
pub async fn run(state: Arc<AppState>) {
    let cfg = &state.webhooks;
    // Often enough for the backoff's base (tests shorten it), at most once a second.
    let tick = cfg
        .backoff_base
        .clamp(Duration::from_millis(20), Duration::from_secs(1));
    let lease = cfg.timeout + Duration::from_secs(30);
    loop {
        let now = now_ms();
        let until = now + lease.as_millis() as u64;
        match state
            .db
            .claim_deliveries(&state.instance, until, now, AT_ONCE)
            .await
        {
            Ok(due) => {
                let sends = due.into_iter().map(|d| deliver(&state, d));
                futures_util::future::join_all(sends).await;
            }
            Err(e) => _ = writeln!(std::io::stderr(), "hetch service: webhooks: {e}"),
        }
        tokio::time::sleep(tick).await;
    }
}

/// One attempt at `due`, and its outcome recorded.
async fn deliver(state: &AppState, due: DueDelivery) {
    let cfg = &state.webhooks;
    let job = &due.job;
    let delivery = hetch_jobdb::webhooks::delivery_id(&job.id, due.finished);
    let outcome = match serde_json::from_str::<JobSpec>(&job.spec)
        .ok()
        .and_then(|s| s.webhook)
    {
        None => Err("the job's stored spec has no readable webhook".to_string()),
        Some(hook) => {
            let notice = Notice {
                event: "job.ended".into(),
                delivery: delivery.clone(),
                timestamp: now_ms(),
                job: job.id.clone(),
                state: job.state.as_str().into(),
                files_done: job.files_done,
                bytes_done: job.bytes_done,
                files: job.files,
                bytes: job.bytes,
                error: job.error_shown(),
                created: job.created,
                started: job.started,
                finished: job.finished,
            };
            let body = serde_json::to_vec(&notice).expect("a plain struct");
            let note = send::Note {
                url: &hook.url,
                secret: &hook.secret,
                delivery: &delivery,
                body,
            };
            send::post(cfg, note).await
        }
    };
    let attempts = due.attempts + 1;
    let attempt = match outcome {
        Ok(()) => Attempt::Delivered,
        Err(error) => {
            let wait = send::backoff(cfg.backoff_base, cfg.backoff_cap, attempts);
            let next = (attempts < cfg.max_attempts).then(|| now_ms() + wait.as_millis() as u64);
            if next.is_none() {
                _ = writeln!(
                    std::io::stderr(),
                    "hetch service: job {}: webhook given up after {attempts} attempts: {error}",
                    job.id
                );
            }
            Attempt::Failed { error, next }
        }
    };
    if let Err(e) = state
        .db
        .record_attempt(&job.id, &state.instance, due.finished, &attempt, now_ms())
        .await
    {
        _ = writeln!(
            std::io::stderr(),
            "hetch service: job {}: recording its webhook's delivery: {e}",
            job.id
        );
    }
}
