//! `hetch serve`: its flags turned into the server's configuration, and the server run
//! until SIGINT or SIGTERM, saying where it listens and which key it presents.

use std::process::ExitCode;

use crate::location::{Location, DEFAULT_PORT};
use hetch_copy::S3Options;
use hetch_session::{RelayPolicy, ServeConfig, ServeRoot, Server};

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
    errln!("hetch serve: listening on {}", srv.addr);
    if let Some(addr) = srv.metrics_addr {
        errln!("hetch serve: metrics on http://{addr}/metrics");
    }
    errln!("hetch serve: fingerprint {}", srv.fingerprint);
    errln!("hetch serve: token in {}", srv.token_path.display());
    srv.run_until(crate::watch::shutdown()).await?;
    Ok(ExitCode::SUCCESS)
}
