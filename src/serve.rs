//! `hetch serve`: its flags turned into the server's configuration, and the server run
//! until SIGINT or SIGTERM, saying where it listens and which key it presents.

use std::process::ExitCode;

use crate::location::{Location, DEFAULT_PORT};
use clap::Args;
use hetch_copy::S3Options;
use hetch_session::{RelayPolicy, ServeConfig, ServeLimits, ServeRoot, Server};

use crate::usage::{usage, ArgsError};
use crate::ServeArgs;

/// `hetch serve`'s flags, with the global `--s3-endpoint` (for an object store root).
pub(crate) struct ServeFlags<'a>(pub(crate) &'a ServeArgs, pub(crate) &'a S3Options);

impl TryFrom<ServeFlags<'_>> for ServeConfig {
    type Error = ArgsError;

    // Without object stores the S3 settings have nothing to set.
    #[cfg_attr(not(feature = "cloud"), allow(unused_variables))]
    fn try_from(ServeFlags(a, s3): ServeFlags<'_>) -> Result<Self, ArgsError> {
        let mut engine = a.tuning.engine()?;
        engine.rate_limit = a.rate_limit.unwrap_or(0);
        engine.preserve_special_modes = a.preserve_special_modes;
        engine.devices = a.devices;
        let root = match hetch_copy::parse_operand(&a.root) {
            #[cfg(feature = "cloud")]
            Ok(Location::Object(url)) => {
                let mut b = hetch_copy::Buckets::new(s3);
                ServeRoot::Object(b.location(&url).map_err(anyhow::Error::from)?)
            }
            Ok(Location::Local(p)) => {
                // Messages to clients name paths relative to the root.
                engine.served_root = hetch_storage::paths::canonical_root(&p).ok();
                ServeRoot::Local(p)
            }
            #[cfg(not(feature = "cloud"))]
            Ok(Location::Object(_)) => unreachable!("refused by parse_operand"),
            Ok(Location::Remote { .. }) => {
                return usage("--root: a local directory or s3://, gs:// or az://BUCKET/PREFIX")
            }
            Err(msg) => return usage(msg),
        };
        Ok(ServeConfig {
            root,
            listen: a.listen.clone(),
            state_dir: a
                .state_dir
                .clone()
                .unwrap_or_else(hetch_session::default_state_dir),
            token_file: a.token_file.clone(),
            socket: a.tuning.socket(),
            engine,
            limits: a.pre_auth.limits(),
            fair: a.fair.limits(),
            metrics: a.metrics.clone(),
            relay: RelayPolicy::parse(&a.relay_to, DEFAULT_PORT).map_err(ArgsError::Usage)?,
        })
    }
}

/// Serves `cfg` until SIGINT or SIGTERM.
pub async fn run(cfg: ServeConfig) -> anyhow::Result<ExitCode> {
    let srv = Server::bind(cfg).await?;
    if srv.new_identity {
        errln!("hetch serve: created a new key");
    }
    for line in &srv.lowered {
        errln!("hetch serve: {line}");
    }
    let fds = srv.open_files;
    errln!(
        "hetch serve: sessions may hold {} (open-file limit {fds})",
        srv.caps
    );
    errln!("hetch serve: listening on {}", srv.addr);
    if let Some(addr) = srv.metrics_addr {
        errln!("hetch serve: metrics on http://{addr}/metrics");
    }
    errln!("hetch serve: fingerprint {}", srv.fingerprint);
    errln!("hetch serve: token in {}", srv.token_path.display());
    srv.run_until(crate::watch::shutdown()).await?;
    Ok(ExitCode::SUCCESS)
}

/// What authenticated sessions may hold: each left out is sized at start from the
/// open-file limit (raised to the hard limit) and memory, and printed.
#[derive(Args)]
pub(crate) struct ServeLimitArgs {
    /// Connections (control and data streams) sessions hold at once, from everyone
    /// [default: a third of the open files left after the server's own and the
    /// unauthenticated, at most half of memory at 320 KiB each].
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..))]
    max_connections: Option<u32>,
    /// Connections sessions from one address (IPv6: /64) hold [default: a quarter of
    /// --max-connections].
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..))]
    max_connections_per_address: Option<u32>,
    /// Sessions open at once (running, joining or kept idle) [default: an eighth of
    /// --max-connections].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_sessions: Option<u32>,
    /// Sessions open from one address [default: a quarter of --max-sessions].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_sessions_per_address: Option<u32>,
    /// Sessions kept idle between operations; past it the longest idle is closed
    /// [default: half of --max-sessions].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_idle_sessions: Option<u32>,
    /// Sessions kept idle from one address [default: half of --max-sessions-per-address].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_idle_sessions_per_address: Option<u32>,
}

impl ServeLimitArgs {
    fn limits(&self) -> ServeLimits {
        let n = |v: Option<u32>| v.map(|v| v as usize);
        ServeLimits {
            max_connections: n(self.max_connections),
            max_connections_per_address: n(self.max_connections_per_address),
            max_sessions: n(self.max_sessions),
            max_sessions_per_address: n(self.max_sessions_per_address),
            max_idle_sessions: n(self.max_idle_sessions),
            max_idle_sessions_per_address: n(self.max_idle_sessions_per_address),
        }
    }
}
