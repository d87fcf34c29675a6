//! `hetch service` (the transfer service) and `hetch job` (its command-line client:
//! submit, ls, show, cancel, retry, wait), over the service's HTTPS API with the
//! same token and key pinning as `hetch cp`.
//!
//! `hetch job` exits with [`UNREACHABLE`] when the service could not be reached (for
//! `wait`: not within `--retry-for`), apart from a job that failed (3) or was
//! cancelled (1).

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use hetch_net::NetError;
use hetch_service::api::{CopyOptions, JobSpec, ListQuery};
use hetch_service_api::client::{service_address, Client, ClientError, Look};
use hetch_service_api::Webhook;

use crate::usage::usage_error;

/// `hetch job`'s exit code when the service could not be reached.
pub const UNREACHABLE: u8 = 4;

/// `hetch service`.
#[derive(Args)]
pub struct ServiceArgs {
    /// Job sources (and local destinations) are paths below this directory: a file
    /// system the service and its workers share.
    #[arg(long)]
    root: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value_t = SocketAddr::from(([0, 0, 0, 0], hetch_service_api::DEFAULT_PORT)))]
    listen: SocketAddr,
    /// The job database: sqlite://PATH (default: jobs.db in the state directory) or
    /// postgres://USER@HOST/DB, which several service instances may share.
    #[arg(long)]
    db: Option<String>,
    /// TLS key, certificate and token (default: ~/.config/hetch/service).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Seconds a worker's lease on a unit lasts without a heartbeat.
    #[arg(long, default_value_t = 30)]
    lease_secs: u64,
    /// Attempts each unit of a job gets before it fails for good.
    #[arg(long, default_value_t = hetch_service::planning::DEFAULT_ATTEMPTS, value_parser = clap::value_parser!(u32).range(1..=100))]
    unit_attempts: u32,
    /// Wait after a unit's first failed attempt before it is handed out again; each
    /// later wait is three times the one before, up to --retry-wait-max (`5s`,
    /// `500ms`; `0s` for none).
    #[arg(long, default_value = "5s", value_parser = hetch_units::parse_duration)]
    retry_wait: Duration,
    /// Longest wait between two attempts of a unit.
    #[arg(long, default_value = "2m", value_parser = hetch_units::parse_duration)]
    retry_wait_max: Duration,
    /// Most files in one unit of work (a batch one worker copies in one session).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=hetch_service::routes::MAX_FILES))]
    batch_files: u64,
    /// Files larger than this are moved in block ranges by several workers at once
    /// ("off": never), into one part file at a destination that is a directory tree:
    /// a path on the shared storage, or `hetch serve` nodes (`hetch://`) that serve a
    /// directory (not an object store: use "off" for those).
    #[arg(long, default_value = "1G", value_parser = hetch_units::parse_size_or_off)]
    split_size: u64,
    /// Bytes of one such range (whole blocks; at least one block, at most 2^20).
    #[arg(long, default_value = "256M", value_parser = hetch_units::parse_size)]
    range_size: u64,
    /// Ranges one file may be cut into, at most: a job naming a larger file fails
    /// at planning, naming it (a sparse file can claim any size).
    #[arg(long, default_value_t = 65_536, value_parser = clap::value_parser!(u64).range(1..))]
    max_ranges_per_file: u64,
    /// Units of work one job may be cut into, at most: a larger job fails at
    /// planning, naming the first file over.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    max_units_per_job: u64,
    /// Also let in users presenting a token (JWT) of this OpenID Connect issuer, e.g.
    /// https://login.example.org/realms/hetch; each sees only the jobs they submitted.
    #[arg(long, requires = "oidc_audience")]
    oidc_issuer: Option<String>,
    /// The audience users' tokens must name (their `aud`).
    #[arg(long, requires = "oidc_issuer")]
    oidc_audience: Option<String>,
    /// CA certificate(s), PEM, for the issuer's HTTPS beyond the system's roots.
    #[arg(long, requires = "oidc_issuer")]
    oidc_ca: Option<PathBuf>,
    /// What each OIDC identity may read and write (TOML; see the README): an
    /// identity the map does not name is refused. Without it, every user of the
    /// issuer reaches all the workers reach.
    #[arg(long, requires = "oidc_issuer")]
    identity_map: Option<PathBuf>,
    /// The web page's "Log in with" button: the client id registered at the issuer
    /// (the ID token's audience), which sends browsers to the issuer's login page.
    #[arg(long, requires_all = ["oidc_issuer", "public_url"])]
    oidc_client_id: Option<String>,
    /// A file holding the client secret, for an issuer that registered the service
    /// as a confidential client (without it, PKCE alone: a public client).
    #[arg(long, requires = "oidc_client_id")]
    oidc_client_secret_file: Option<PathBuf>,
    /// Where browsers reach this service, https://HOST:PORT: the issuer sends them
    /// back to its /login/callback (register that as the client's redirect URI).
    #[arg(long, requires = "oidc_client_id")]
    public_url: Option<String>,
    /// Authenticated connections at once; past it, a newcomer takes the place of the
    /// connection idle the longest (lowered to fit the open-file limit).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Connections one user (OIDC identity) may hold; past it, their own connection
    /// idle the longest is closed for the newcomer (or it is refused, 429, when all
    /// are busy). The service's token has no such cap.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections_per_user: u32,
    /// Connections users from one address (IPv6: one /64) may hold together.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections_per_address: u32,
    /// Of --max-connections, how many only the service's token (the operator and the
    /// workers) may hold, so that users holding all theirs never lock them out.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32))]
    operator_connections: u32,
    /// Requests a second one user may make, sustained (0: no limit); more are
    /// answered 429 with Retry-After. The service's token is not limited.
    #[arg(long, default_value_t = 50)]
    user_requests_per_second: u32,
    /// Requests one user may make at once after a quiet spell.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    user_request_burst: u32,
    #[command(flatten)]
    pre_auth: crate::PreAuthArgs,
    /// Seconds a connection may stay idle between requests before it is closed.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    idle_timeout: u64,
    /// Let jobs' webhooks reach loopback, link-local and private addresses.
    #[arg(long)]
    webhook_allow_private: bool,
    /// CA certificate (PEM) to trust for webhook receivers beyond the system's roots.
    #[arg(long)]
    webhook_ca: Option<PathBuf>,
    /// Attempts at delivering a job's webhook before it is given up.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=100))]
    webhook_attempts: u64,
    /// Recurring mirrors (`hetch job submit --every/--cron`) one user may have, so
    /// that a token holder cannot fill the database with them.
    #[arg(long, default_value_t = hetch_service::DEFAULT_MAX_SCHEDULES, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_schedules: u64,
    /// Shortest time between two runs of a schedule (`90s`, `5m`; at most `1d`).
    #[arg(long, default_value = "60s", value_parser = hetch_service_api::schedule::parse_min_every)]
    min_schedule_interval: u64,
    /// Finished jobs kept, newest first; older ones are deleted with their listings.
    #[arg(long, default_value_t = hetch_service::retention::DEFAULT_KEEP_JOBS, value_parser = clap::value_parser!(u64).range(1..))]
    keep_jobs: u64,
    /// Days a finished job is kept after it ended.
    #[arg(long, default_value_t = hetch_service::retention::DEFAULT_KEEP_DAYS, value_parser = clap::value_parser!(u64).range(1..=36_500))]
    keep_jobs_days: u64,
}

/// The web page's login through the issuer, if a client id was given.
fn login_config(
    a: &ServiceArgs,
    oidc: Option<&hetch_oidc::OidcConfig>,
) -> anyhow::Result<Option<hetch_oidc::LoginConfig>> {
    let (Some(client_id), Some(public_url), Some(oidc)) = (&a.oidc_client_id, &a.public_url, oidc)
    else {
        return Ok(None);
    };
    let secret = a.oidc_client_secret_file.as_deref();
    let login = hetch_oidc::LoginConfig::from_flags(oidc, client_id, public_url, secret);
    Ok(Some(login.map_err(anyhow::Error::msg)?))
}

/// Runs the service until it is stopped.
pub async fn service(a: ServiceArgs) -> anyhow::Result<ExitCode> {
    let (issuer, audience) = (a.oidc_issuer.as_deref(), a.oidc_audience.as_deref());
    let oidc = hetch_oidc::OidcConfig::from_flags(issuer, audience, a.oidc_ca.as_deref())
        .map_err(anyhow::Error::msg)?;
    let login = login_config(&a, oidc.as_ref())?;
    let identities = match &a.identity_map {
        Some(p) => Some(hetch_service::identity::IdentityMap::load(p).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let state_dir = a
        .state_dir
        .unwrap_or_else(|| hetch_session::server::default_state_dir().with_file_name("service"));
    // Made private (0700) by the service itself, which refuses one others can reach.
    let db_url =
        a.db.unwrap_or_else(|| format!("sqlite://{}", state_dir.join("jobs.db").display()));
    let cfg = hetch_service::ServiceConfig {
        listen: a.listen,
        root: a.root,
        state_dir,
        db_url,
        lease_ttl: Duration::from_secs(a.lease_secs.max(1)),
        planner: hetch_jobs::Planner {
            batch_files: a.batch_files,
            split_size: a.split_size,
            range_size: a.range_size.max(1),
            max_ranges: a.max_ranges_per_file,
            max_units: a.max_units_per_job,
            ..hetch_jobs::Planner::default()
        },
        retries: hetch_service::Retries::new(a.unit_attempts, a.retry_wait, a.retry_wait_max),
        oidc,
        limits: hetch_service::listen::ConnLimits {
            max_connections: a.max_connections as usize,
            fair: hetch_service::fair::FairLimits {
                per_user: a.max_connections_per_user as usize,
                per_address: a.max_connections_per_address as usize,
                operator_reserve: a.operator_connections as usize,
            },
            rate: hetch_service::rate::RequestRate {
                per_second: f64::from(a.user_requests_per_second),
                burst: f64::from(a.user_request_burst),
            },
            pre_auth: a.pre_auth.limits(),
            idle: Duration::from_secs(a.idle_timeout),
        },
        identities,
        webhooks: hetch_service::notify::WebhookConfig::from_flags(
            a.webhook_allow_private,
            a.webhook_ca.as_deref(),
            a.webhook_attempts,
        )
        .map_err(anyhow::Error::msg)?,
        max_schedules: a.max_schedules,
        min_schedule_interval: Duration::from_millis(a.min_schedule_interval),
        retention: hetch_service::retention::Retention {
            count: a.keep_jobs,
            age: Duration::from_secs(a.keep_jobs_days * 86_400),
        },
        login,
    };
    let svc = hetch_service::Service::bind(cfg).await?;
    for line in svc.banner() {
        errln!("hetch service: {line}");
    }
    svc.run().await?;
    Ok(ExitCode::SUCCESS)
}

/// `hetch job`.
#[derive(Args)]
pub struct JobArgs {
    /// The service: as it prints itself (https://HOST:PORT), HOST:PORT, or a host
    /// alone for the default port, 7879 (IPv6 addresses in brackets: [::1]:7879).
    #[arg(long, env = "HETCH_SERVICE")]
    service: String,
    #[command(flatten)]
    pin: crate::PinArgs,
    /// Print the service's JSON answer on stdout (before or after the subcommand).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: JobCmd,
}

#[derive(Subcommand)]
enum JobCmd {
    /// Queue a copy and print the job's id.
    ///
    /// Sources are paths below the service's root and the destination is
    /// hetch://HOST/PATH, s3://..., or a path below the root; or sources on one
    /// hetch:// server and a hetch:// destination, which that server pushes to
    /// directly (a copy between two servers).
    Submit(Box<SubmitArgs>),
    /// List jobs, newest first.
    Ls {
        /// Only jobs in this state (planning, queued, running, done, failed, cancelled).
        #[arg(long)]
        state: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u64,
    },
    /// Show one job.
    Show {
        /// The job's id.
        id: String,
    },
    /// Cancel a job: workers stop its units within a heartbeat.
    Cancel {
        /// The job's id.
        id: String,
    },
    /// Run a failed or cancelled job's unfinished units again.
    Retry {
        /// The job's id.
        id: String,
    },
    /// Recurring mirrors: list, show, pause, resume or delete them.
    ///
    /// A recurring mirror is made by `hetch job submit --every` or `--cron`.
    #[command(subcommand)]
    Schedule(crate::schedulecli::ScheduleCmd),
    /// Wait for a job to end.
    ///
    /// Exit code 0 when it is done, 3 when it failed, 1 when it was cancelled, 4 when
    /// the service could not be reached for --retry-for.
    Wait {
        /// The job's id.
        id: String,
        #[command(flatten)]
        patience: Patience,
    },
}

/// How long waiting for a job goes on while the service cannot be reached.
#[derive(Args, Clone, Copy)]
struct Patience {
    /// While the service cannot be reached (restarting), ask again, less and less
    /// often, for up to this long in a row; then give up (exit code 4).
    #[arg(long, default_value = "2m", value_parser = hetch_units::parse_duration)]
    retry_for: Duration,
}

#[derive(Args)]
struct SubmitArgs {
    /// Sources then destination.
    #[arg(required = true, num_args = 2.., value_name = "SRC... DST")]
    paths: Vec<String>,
    /// Block digest algorithm (as `hetch cp --checksum`).
    #[arg(long)]
    checksum: Option<String>,
    /// What the destination checks (as `hetch cp --verify`): none, received, written.
    #[arg(long)]
    verify: Option<String>,
    /// Block size (as `hetch cp --block-size`).
    #[arg(long, value_parser = hetch_units::parse_block_size)]
    block_size: Option<u64>,
    /// Data streams per session (default: autotuned by each worker per session, as
    /// `hetch cp` does).
    #[arg(long)]
    streams: Option<u16>,
    /// Never replace an existing file.
    #[arg(long)]
    no_clobber: bool,
    /// Compression on the wire to a hetch:// destination (as `hetch cp --compress`):
    /// none, auto, zstd or zstd:LEVEL.
    #[arg(long, value_parser = check_compress)]
    compress: Option<String>,
    /// Mirror as `hetch sync`: once every file is copied, delete what the sources lack.
    #[arg(long)]
    sync: bool,
    /// With --sync: fail, deleting nothing, if more than N entries would be deleted.
    #[arg(long, value_name = "N", requires = "sync")]
    max_delete: Option<u64>,
    /// Higher goes first (-100 to 100).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    priority: i64,
    /// Bytes per second for the whole job (e.g. 100M); 0 for no limit.
    #[arg(long, value_parser = hetch_units::parse_rate, default_value = "0")]
    rate_limit: u64,
    /// Wait for the job to end (exit codes as `hetch job wait`).
    #[arg(long, conflicts_with_all = ["every", "cron"])]
    wait: bool,
    /// Make a recurring mirror instead of one job: run it every this long (90s, 1h,
    /// 1d; 1s to 365d), the first run at once; print the schedule's id. A due time
    /// whose previous run has not ended is skipped (`hetch job schedule show` says so).
    #[arg(long, value_name = "N[smhd]", conflicts_with = "cron")]
    every: Option<String>,
    /// Make a recurring mirror run at the times of a 5-field cron expression, in UTC
    /// ("0 * * * *": hourly); print the schedule's id.
    #[arg(long, value_name = "\"MIN HOUR DAY MONTH WEEKDAY\"")]
    cron: Option<String>,
    #[command(flatten)]
    patience: Patience,
    /// Another `hetch serve` node (HOST[:PORT]) serving the same storage as the
    /// hetch:// destination's server; repeatable. Units are spread over all of them.
    #[arg(long, value_name = "HOST[:PORT]")]
    dest_node: Vec<String>,
    /// Move the files while they are being written, as `hetch cp --follow`: the job
    /// ends once every file is complete (a worker holds each source; another takes
    /// over if it is lost, resuming from what the destination verified).
    #[arg(long, conflicts_with = "watch")]
    follow: bool,
    /// Follow for ever, new files included, as `hetch watch`, until the job is
    /// cancelled.
    #[arg(long, conflicts_with_all = ["every", "cron"])]
    watch: bool,
    #[command(flatten)]
    stream: crate::follow::FollowArgs,
    /// POST a note signed with a secret to this https:// URL when the job ends.
    #[arg(long)]
    webhook: Option<String>,
    /// The webhook's secret is this file's first line (else $HETCH_WEBHOOK_SECRET).
    #[arg(long, requires = "webhook")]
    webhook_secret_file: Option<PathBuf>,
}

impl SubmitArgs {
    /// The stream settings of `--follow`/`--watch` (none without either).
    fn stream(&self) -> Option<hetch_service_api::StreamSpec> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let f = &self.stream;
        (self.follow || self.watch).then(|| hetch_service_api::StreamSpec {
            forever: self.watch,
            idle_ms: ms(f.idle),
            done_suffix: f.done_suffix.clone(),
            poll_ms: ms(f.poll),
            flush_ms: ms(f.flush),
            rescan_ms: ms(f.rescan),
        })
    }
}

/// `--compress` checked here as the service will, kept as written.
fn check_compress(s: &str) -> Result<String, String> {
    s.parse::<hetch_engine::Compression>()?;
    Ok(s.to_string())
}

/// Runs `hetch job ...`: bad usage is exit code 2, a service that could not be
/// reached [`UNREACHABLE`].
pub async fn job(a: JobArgs) -> anyhow::Result<ExitCode> {
    let service = match service_address(&a.service) {
        Ok(s) => s,
        Err(e) => return Ok(usage_error(&format!("--service {e}"))),
    };
    match run(&a, &service).await {
        Err(e) if unreachable(&e) => {
            crate::report(&e);
            Ok(ExitCode::from(UNREACHABLE))
        }
        r => r,
    }
}

/// Whether `e` says that the service could not be reached (not that it refused).
fn unreachable(e: &anyhow::Error) -> bool {
    match e.downcast_ref::<ClientError>() {
        Some(ClientError::Net(NetError::Connect { .. })) => true,
        Some(c) => c.is_transient(),
        None => false,
    }
}

/// `hetch job ...` on `service`.
async fn run(a: &JobArgs, service: &str) -> anyhow::Result<ExitCode> {
    let pin = &a.pin;
    let token = hetch_session::client::load_token(pin.token_file.as_ref())?;
    let c = Client::new(service, pin.fingerprint, pin.known_hosts.clone(), token).await?;
    match &a.cmd {
        JobCmd::Submit(s) => {
            let (dest, sources) = s.paths.split_last().expect("clap asks for two");
            let file = s.webhook_secret_file.as_deref();
            let webhook = s
                .webhook
                .as_deref()
                .map(|u| Webhook::with_secret_from(u, file));
            let webhook = webhook.transpose().map_err(anyhow::Error::msg)?;
            let spec = JobSpec {
                sources: sources.to_vec(),
                dest: dest.clone(),
                options: CopyOptions {
                    checksum: s.checksum.clone(),
                    verify: s.verify.clone(),
                    block_size: s.block_size,
                    streams: s.streams,
                    no_clobber: s.no_clobber,
                    compress: s.compress.clone(),
                    stream: s.stream(),
                    sync: s.sync,
                    max_delete: s.max_delete,
                },
                priority: s.priority,
                rate_limit: s.rate_limit,
                dest_nodes: s.dest_node.clone(),
                access: None,
                webhook,
            };
            if s.every.is_some() || s.cron.is_some() {
                let spec = hetch_service_api::ScheduleSpec {
                    job: spec,
                    every: s.every.clone(),
                    cron: s.cron.clone(),
                };
                let made = c.create_schedule(&spec).await?;
                match a.json {
                    true => print_json(&made)?,
                    false => outln!("{}", made.id)?,
                }
                return Ok(ExitCode::SUCCESS);
            }
            let j = c.submit(&spec).await?;
            match a.json && !s.wait {
                true => print_json(&j)?,
                false => outln!("{}", j.id)?,
            }
            if s.wait {
                return wait(&c, &j.id, a.json, s.patience).await;
            }
        }
        JobCmd::Ls { state, limit } => {
            let q = ListQuery {
                state: state.clone(),
                limit: Some(*limit),
            };
            let jobs = c.list(&q).await?;
            match a.json {
                true => print_json(&jobs)?,
                false => out!("{}", hetch_service_api::show::table(&jobs))?,
            }
        }
        JobCmd::Show { id } => {
            let j = c.job(id).await?;
            match a.json {
                true => print_json(&j)?,
                false => out!("{}", j.to_text())?,
            }
        }
        JobCmd::Cancel { id } | JobCmd::Retry { id } => {
            let j = match a.cmd {
                JobCmd::Cancel { .. } => c.cancel(id).await?,
                _ => c.retry(id).await?,
            };
            match a.json {
                true => print_json(&j)?,
                false => outln!("{id}: {}", j.state)?,
            }
        }
        JobCmd::Wait { id, patience } => return wait(&c, id, a.json, *patience).await,
        JobCmd::Schedule(cmd) => return crate::schedulecli::run(&c, cmd, a.json).await,
    }
    Ok(ExitCode::SUCCESS)
}

/// Polls job `id` until it ends, with a line of progress on a terminal; through a
/// restart of the service, as `patience` says (one line when the service is lost).
async fn wait(c: &Client, id: &str, json: bool, patience: Patience) -> anyhow::Result<ExitCode> {
    let tty = std::io::stderr().is_terminal() && !json;
    let every = Duration::from_millis(500);
    let mut lost = false;
    let j = c
        .wait(id, every, patience.retry_for, |look| match look {
            Look::Job(j) => {
                lost = false;
                if tty {
                    err!("\r{id}: {}   ", j.progress());
                }
            }
            Look::Lost(e) if !lost => {
                lost = true;
                let e = hetch_proto::escape_text(&e.to_string());
                let secs = patience.retry_for.as_secs();
                errln!("hetch: job {id}: {e}; asking again for up to {secs} s");
            }
            Look::Lost(_) => {}
        })
        .await?;
    if tty {
        errln!();
    }
    match json {
        true => print_json(&j)?,
        false => out!("{}", j.to_text())?,
    }
    Ok(match j.state.as_str() {
        "done" => ExitCode::SUCCESS,
        "failed" => ExitCode::from(3),
        _ => ExitCode::from(1),
    })
}

/// `v` as `--json` prints it: indented JSON.
fn print_json(v: &impl serde::Serialize) -> std::io::Result<()> {
    outln!("{}", serde_json::to_string_pretty(v).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[test]
    fn json_is_taken_before_or_after_the_subcommand() {
        for args in [
            ["hetch", "job", "--service", "h:1", "--json", "ls"],
            ["hetch", "job", "--service", "h:1", "ls", "--json"],
        ] {
            let cli = crate::Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let crate::Command::Job(a) = cli.command else {
                panic!("{args:?}: not a job command");
            };
            assert!(a.json, "{args:?}");
        }
    }
}
