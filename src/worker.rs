//! `hetch worker`'s flags, turned into the library's worker (`hetch_worker`), and
//! the hidden `hetch worker-unit` that runs one unit as a user's local account.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use hetch_worker::WorkerConfig;

/// `hetch worker`.
#[derive(Args)]
pub struct WorkerArgs {
    /// The service: as it prints itself (https://HOST:PORT), HOST:PORT, or a host
    /// alone for the default port, 7879 (IPv6 addresses in brackets: [::1]:7879).
    #[arg(long, env = "HETCH_SERVICE")]
    service: String,
    /// Job sources are below this directory here (the service's --root, as this node
    /// sees the shared file system).
    #[arg(long)]
    root: PathBuf,
    /// This worker's name, unique among the service's workers (default: host and
    /// process id).
    #[arg(long)]
    name: Option<String>,
    /// Units run at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    units: u32,
    /// Expected service key fingerprint (sha256:...), instead of the known-hosts file.
    #[arg(long)]
    fingerprint: Option<hetch_net::Fingerprint>,
    /// Known-hosts file for the service and the destinations.
    #[arg(long)]
    known_hosts: Option<PathBuf>,
    /// The service's token file (default: the HETCH_SERVICE_TOKEN environment
    /// variable, then HETCH_TOKEN).
    #[arg(long)]
    service_token_file: Option<PathBuf>,
    /// Token file for hetch:// destinations (default: HETCH_TOKEN).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Token file for the source servers of copies between two servers, which this
    /// worker asks to push to the destination (default: the --token-file token).
    #[arg(long)]
    source_token_file: Option<PathBuf>,
    /// Leave after this many seconds with nothing to do (default: never).
    #[arg(long)]
    idle_exit: Option<u64>,
    /// Serve metrics in Prometheus' text format at http://ADDR/metrics (HOST:PORT; off
    /// by default). Plain HTTP without a token: they are counts, and the ids of the
    /// jobs with a unit running here, never a path or a token; bind it to loopback or
    /// a monitoring network if that is not for everyone to see.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
}

/// The arguments of the hidden subcommand that runs one unit as a local account.
const WORKER_UNIT: &str = "worker-unit";

impl TryFrom<WorkerArgs> for WorkerConfig {
    type Error = anyhow::Error;

    /// The worker of these flags, with the service's token read: from
    /// `--service-token-file`, else `HETCH_SERVICE_TOKEN`, else as for `cp`.
    fn try_from(a: WorkerArgs) -> anyhow::Result<WorkerConfig> {
        let service_token = match (&a.service_token_file, std::env::var("HETCH_SERVICE_TOKEN")) {
            (Some(f), _) => hetch_net::read_token_file(f)?,
            (None, Ok(t)) if !t.trim().is_empty() => t.trim().as_bytes().to_vec(),
            _ => hetch_session::client::load_token(None)?,
        };
        Ok(WorkerConfig {
            service: a.service,
            service_token,
            root: a.root,
            name: a.name,
            units: a.units,
            fingerprint: a.fingerprint,
            known_hosts: a.known_hosts,
            token_file: a.token_file,
            source_token_file: a.source_token_file,
            idle_exit: a.idle_exit.map(Duration::from_secs),
            metrics: a.metrics,
            account_child: vec![WORKER_UNIT.into()],
            log: None,
        })
    }
}

/// `hetch worker`: runs until the service refuses it, or idle for `--idle-exit`; a
/// `--service` that is no service's address is bad usage (exit code 2).
pub async fn run(mut a: WorkerArgs) -> anyhow::Result<ExitCode> {
    a.service = match hetch_service_api::client::service_address(&a.service) {
        Ok(s) => s,
        Err(e) => return Ok(crate::usage::usage_error(&format!("--service {e}"))),
    };
    hetch_worker::run(WorkerConfig::try_from(a)?).await?;
    Ok(ExitCode::SUCCESS)
}

/// `hetch worker-unit`: ends the process once the unit is reported.
pub async fn unit() -> anyhow::Result<ExitCode> {
    match hetch_worker::child_main().await? {}
}
