//! One attempt at a delivery: POST the signed body to the webhook, through a client
//! whose resolver checks every address ([`super::resolve`]), and read at most
//! [`MAX_ANSWER`] bytes of the answer. A refused address is refused before anything
//! connects to it, in one line naming the host and why: nothing in the error tells
//! an open port of the service's network from a closed one. The receiver is an adversary like any peer: it may hang (the attempt
//! has a deadline), redirect (never followed), or answer without end (read no
//! further than a few KiB).

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::address;
use super::resolve::{unresolved, Checked};
use super::WebhookConfig;

/// Most bytes of a receiver's answer read (only to show the start of an error's).
pub const MAX_ANSWER: usize = 4096;
/// Most bytes of an answer quoted in an error.
const QUOTED: usize = 200;

/// `sha256=HEX`: the HMAC-SHA256 of `body` with `secret`, as `X-Hetch-Signature`
/// carries it.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// One note to send.
pub struct Note<'a> {
    /// The webhook's URL.
    pub url: &'a str,
    /// Its secret.
    pub secret: &'a str,
    /// The `X-Hetch-Delivery` id.
    pub delivery: &'a str,
    /// The JSON body, signed as it is sent.
    pub body: Vec<u8>,
}

/// POSTs `note`; `Err` says why it was not delivered, in one line (never quoting the
/// secret).
pub async fn post(cfg: &WebhookConfig, note: Note<'_>) -> Result<(), String> {
    match tokio::time::timeout(cfg.timeout, attempt(cfg, note)).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} s", cfg.timeout.as_secs_f64())),
    }
}

async fn attempt(cfg: &WebhookConfig, note: Note<'_>) -> Result<(), String> {
    let Note {
        url,
        secret,
        delivery,
        body,
    } = note;
    // A literal address is connected to as it is (no resolver is asked), so it is
    // checked here; a name's every address is checked by the client's resolver.
    if let (address::Host::Ip(ip), false) = (address::host(url)?, cfg.allow_private) {
        if let Some(why) = address::refused(ip) {
            return Err(format!(
                "{ip} is {why} (not allowed without --webhook-allow-private)"
            ));
        }
    }
    let mut client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        // The whole attempt's deadline is `post`'s, so that it names itself.
        .connect_timeout(cfg.timeout)
        .https_only(true)
        // Straight to the checked address: a proxy would resolve the name itself.
        .no_proxy()
        .dns_resolver(Arc::new(Checked::new(cfg.allow_private)))
        .user_agent(concat!("hetch/", env!("CARGO_PKG_VERSION")));
    if let Some(ca) = &cfg.ca {
        client = client.add_root_certificate(ca.clone());
    }
    let client = client.build().map_err(|e| format!("TLS set-up: {e}"))?;
    let sig = signature(secret.as_bytes(), &body);
    let mut resp = client
        .post(url)
        .header("content-type", "application/json")
        .header("x-hetch-event", "job.ended")
        .header("x-hetch-delivery", delivery)
        .header("x-hetch-signature", sig)
        .body(body)
        .send()
        .await
        .map_err(|e| one_line(&unresolved(&e).unwrap_or_else(|| error_chain(&e))))?;
    let status = resp.status();
    let mut answer = Vec::new();
    while answer.len() < MAX_ANSWER {
        match resp.chunk().await {
            Ok(Some(c)) => answer.extend_from_slice(&c[..c.len().min(MAX_ANSWER - answer.len())]),
            Ok(None) | Err(_) => break,
        }
    }
    // The rest, if any, is never read: dropping the answer closes the connection.
    drop(resp);
    if status.is_success() {
        return Ok(());
    }
    let quoted = String::from_utf8_lossy(&answer[..answer.len().min(QUOTED)]).into_owned();
    Err(one_line(&format!("answered {status}: {quoted}")))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    s
}

/// `s` on one line, at most 300 characters.
fn one_line(s: &str) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect();
    flat
}

/// How long to wait after failed attempt number `attempts` (1 for the first):
/// `base` doubling each time, at most `cap`.
pub fn backoff(base: Duration, cap: Duration, attempts: u64) -> Duration {
    let doublings = attempts.saturating_sub(1).min(32) as u32;
    base.saturating_mul(2u32.saturating_pow(doublings)).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_the_body() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn backoff_doubles_from_the_base_up_to_the_cap() {
        let (base, cap) = (Duration::from_secs(1), Duration::from_secs(600));
        let waits: Vec<u64> = (1..=12).map(|n| backoff(base, cap, n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600]);
        assert_eq!(backoff(base, cap, u64::MAX), cap);
    }
}
