//! The servers a unit reaches: the keys they must present (pinned in this worker's
//! known-hosts file) and the tokens it presents them, read from their files, or ahead
//! of time for a unit run as a local account (which may no longer read them).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail};
use hetch_service_api::ClaimedUnit;

use crate::unit::UnitContext;

/// Tokens and pinned keys read ahead, by the token file and the host they are for
/// (what reading them said, when it failed).
pub(crate) struct Preloaded {
    tokens: Vec<(Option<PathBuf>, ReadAhead<Vec<u8>>)>,
    pins: Vec<(String, ReadAhead<Option<hetch_net::Fingerprint>>)>,
}

/// What reading a file ahead gave.
type ReadAhead<T> = Result<T, String>;

impl Preloaded {
    /// What unit `u` may need of `ctx`'s files: the destination's and the source
    /// server's tokens, and the keys of the servers it names.
    pub(crate) fn for_unit(ctx: &UnitContext, u: &ClaimedUnit) -> Preloaded {
        let files = [
            ctx.dest_token.clone(),
            ctx.source_token.clone().or(ctx.dest_token.clone()),
        ];
        let tokens = files
            .into_iter()
            .map(|f| {
                let t = hetch_session::client::load_token(f.as_ref()).map_err(|e| e.to_string());
                (f, t)
            })
            .collect();
        let mut urls = vec![u.spec.dest_for(u.seq, u.attempts)];
        if u.spec.is_relay() {
            urls.extend(u.spec.sources.iter().cloned());
        }
        let pins = urls
            .iter()
            .filter_map(|url| hetch_service_api::hetch_url(url))
            .map(|(host, _)| {
                let pin = ctx
                    .known_hosts_file()
                    .lookup(host)
                    .map_err(|e| e.to_string());
                (host.to_string(), pin)
            })
            .collect();
        Preloaded { tokens, pins }
    }
}

impl UnitContext {
    /// The key server `host` must present: its entry in this worker's known-hosts
    /// file. A worker learns no key on first use: the servers a job names are a job
    /// submitter's choice (any user's), and a worker presents its token only to
    /// servers its operator pinned.
    pub(crate) fn pinned(&self, host: &str) -> anyhow::Result<hetch_net::Fingerprint> {
        let kh = self.known_hosts_file();
        let pin = match &self.preloaded {
            Some(p) => match p.pins.iter().find(|(h, _)| h == host) {
                Some((_, pin)) => pin.clone().map_err(anyhow::Error::msg)?,
                None => bail!("{host}: not a server this unit names"),
            },
            None => kh.lookup(host)?,
        };
        pin.ok_or_else(|| {
            anyhow!(
                "{host}: not in this worker's known-hosts file ({}): a worker connects \
                 only to servers pinned there (HOST:PORT sha256:...)",
                kh.path.display()
            )
        })
    }

    /// The token for a server, from `token_file` (else `HETCH_TOKEN`), which must not
    /// be the service's own: that one never goes to a data server.
    pub(crate) fn server_token(&self, token_file: Option<&PathBuf>) -> anyhow::Result<Vec<u8>> {
        let token = match &self.preloaded {
            Some(p) => match p.tokens.iter().find(|(f, _)| f.as_ref() == token_file) {
                Some((_, t)) => t.clone().map_err(anyhow::Error::msg)?,
                None => bail!("no token read for this unit"),
            },
            None => hetch_session::client::load_token(token_file)?,
        };
        if self.api.is_token(&token) {
            bail!(
                "no token for hetch:// servers: the service's token is not sent to them \
                 (give the servers' token with --token-file)"
            );
        }
        Ok(token)
    }

    /// This worker's known-hosts file.
    fn known_hosts_file(&self) -> hetch_net::KnownHosts {
        hetch_net::KnownHosts {
            path: self
                .known_hosts
                .clone()
                .unwrap_or_else(hetch_net::KnownHosts::default_path),
        }
    }
    /// How this worker reaches server `host` with the token in `token_file` (else
    /// `HETCH_TOKEN`): see [`UnitContext::server_token`] and [`UnitContext::pinned`].
    pub(crate) fn client_config(
        &self,
        host: &str,
        token_file: Option<&PathBuf>,
    ) -> anyhow::Result<hetch_session::client::ClientConfig> {
        Ok(hetch_session::client::ClientConfig {
            token: self.server_token(token_file)?,
            fingerprint: Some(self.pinned(host)?),
            known_hosts: self.known_hosts.clone(),
            socket: Default::default(),
            timeout: Duration::from_secs(30),
            opened: Default::default(),
            autotune: None,
            reuse: Some(self.sessions.clone()),
        })
    }
}
