//! The webhook client's resolver: the one way from a webhook's name to the addresses
//! it connects to, and every address it returns has been checked
//! ([`super::address::refused`]). The HTTP client asks it for the name exactly as
//! it will connect to it (the URL's host in punycode), so no spelling of a name is
//! checked while another is connected to, and no second lookup can answer
//! differently. A literal address is never resolved: [`super::send`] checks it.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::address;

/// Most addresses of a name taken (and checked).
const MAX_ADDRS: usize = 32;

/// A name's lookup: its addresses, in the order to try them.
pub type Lookup = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>> + Send + Sync,
>;

/// Why a name gave no address to connect to, as the one line a delivery's error
/// shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved(pub String);

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unresolved {}

/// A resolver whose every answer is checked.
pub struct Checked {
    allow_private: bool,
    lookup: Lookup,
}

impl Checked {
    /// Checks the system resolver's answers (none are refused with
    /// `allow_private`: `--webhook-allow-private`).
    pub fn new(allow_private: bool) -> Checked {
        let lookup: Lookup = Arc::new(|name: String| {
            Box::pin(async move {
                let addrs = tokio::net::lookup_host((name.as_str(), 0)).await?;
                Ok(addrs.map(|a| a.ip()).collect())
            })
        });
        Checked::with_lookup(allow_private, lookup)
    }

    /// Checks the answers of `lookup`.
    pub fn with_lookup(allow_private: bool, lookup: Lookup) -> Checked {
        Checked {
            allow_private,
            lookup,
        }
    }

    /// The addresses of `name`, once every one of them is allowed (one refused
    /// address refuses the name: which one a connection would use is not ours to
    /// pick).
    pub async fn addresses(&self, name: &str) -> Result<Vec<IpAddr>, Unresolved> {
        let mut ips = (self.lookup)(name.to_string())
            .await
            .map_err(|e| Unresolved(format!("resolving {name}: {e}")))?;
        ips.truncate(MAX_ADDRS);
        if ips.is_empty() {
            return Err(Unresolved(format!("{name} resolves to no address")));
        }
        if !self.allow_private {
            for ip in &ips {
                if let Some(why) = address::refused(*ip) {
                    return Err(Unresolved(format!(
                        "{name} resolves to {ip}, {why} (not allowed without \
                         --webhook-allow-private)"
                    )));
                }
            }
        }
        Ok(ips)
    }
}

impl Resolve for Checked {
    fn resolve(&self, name: Name) -> Resolving {
        let (allow_private, lookup) = (self.allow_private, self.lookup.clone());
        let name = name.as_str().to_string();
        Box::pin(async move {
            let ips = Checked::with_lookup(allow_private, lookup)
                .addresses(&name)
                .await?;
            // Port 0: the client puts the URL's in.
            let addrs: Addrs = Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

/// The [`Unresolved`] line in `e`'s chain of causes, if a lookup is why it failed.
pub fn unresolved(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(u) = c.downcast_ref::<Unresolved>() {
            return Some(u.0.clone());
        }
        cause = c.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A lookup answering from `table` (a name it lacks does not resolve).
    fn table(entries: &[(&str, &[&str])]) -> Lookup {
        let table: HashMap<String, Vec<IpAddr>> = entries
            .iter()
            .map(|(n, ips)| {
                (
                    n.to_string(),
                    ips.iter().map(|i| i.parse().unwrap()).collect(),
                )
            })
            .collect();
        Arc::new(move |name| {
            let got = table.get(&name).cloned();
            Box::pin(async move {
                got.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such name"))
            })
        })
    }

    #[tokio::test]
    async fn every_address_is_checked_and_one_refused_refuses_the_name() {
        let lookup = table(&[
            ("hooks.example.org", &["93.184.216.34", "2606:4700::1111"]),
            ("mixed.example.org", &["93.184.216.34", "64:ff9b::a00:1"]),
            ("empty.example.org", &[]),
        ]);
        let r = Checked::with_lookup(false, lookup.clone());
        assert_eq!(r.addresses("hooks.example.org").await.unwrap().len(), 2);
        let e = r.addresses("mixed.example.org").await.unwrap_err();
        assert_eq!(
            e.0,
            "mixed.example.org resolves to 64:ff9b::a00:1, an IPv6 address embedding \
             10.0.0.1, a private address (not allowed without --webhook-allow-private)"
        );
        let e = r.addresses("empty.example.org").await.unwrap_err();
        assert_eq!(e.0, "empty.example.org resolves to no address");
        let e = r.addresses("nowhere.example.org").await.unwrap_err();
        assert_eq!(e.0, "resolving nowhere.example.org: no such name");
        // The operator's --webhook-allow-private lets everything through.
        let open = Checked::with_lookup(true, lookup);
        assert_eq!(open.addresses("mixed.example.org").await.unwrap().len(), 2);
    }

    /// The finding: the name as typed resolved to a public address, its punycode
    /// form (which the client connects to) to loopback. The client asks this resolver
    /// for the punycode form, and that is what is checked.
    #[tokio::test]
    async fn the_client_asks_for_the_punycode_form_and_that_is_what_is_checked() {
        let lookup = table(&[
            ("bücher.example", &["93.184.216.34"]),
            ("xn--bcher-kva.example", &["127.0.0.1"]),
        ]);
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(Checked::with_lookup(false, lookup)))
            .no_proxy()
            .build()
            .unwrap();
        let e = client
            .get("https://bücher.example:1/hook")
            .send()
            .await
            .unwrap_err();
        assert_eq!(
            unresolved(&e).as_deref(),
            Some(
                "xn--bcher-kva.example resolves to 127.0.0.1, a loopback address (not \
                 allowed without --webhook-allow-private)"
            ),
            "{e:?}"
        );
    }
}
