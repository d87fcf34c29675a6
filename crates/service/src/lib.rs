//! The transfer service (`hetch service`; see `docs/design/service.md`): a REST API
//! over HTTPS to submit, list, show, cancel and retry jobs, which it plans into work
//! units in the job database ([`hetch_jobdb`]: SQLite embedded, or PostgreSQL shared
//! by several instances), and to hand those units to workers under leases.
//!
//! - [`api`]: the JSON the API takes and answers, checked before use.
//! - [`routes`]: the handlers of jobs and their listings.
//! - `work`: the worker routes: claims, heartbeats and reports under leases.
//! - [`auth`]: bearer tokens (the operator's and the workers', as `hetch serve`'s;
//!   OIDC users'), throttled.
//! - [`identity`]: the operator's identity map: what each OIDC identity may read and
//!   write.
//! - [`planning`]: listing a job's sources into its listing and units, in batches.
//! - [`schedules`]: recurring mirrors, and the loop that submits their runs.
//! - [`retention`]: deleting finished jobs beyond those kept.
//! - [`listen`]: TLS (the same identity and pinning as `hetch serve`) and HTTP/1.1.
//! - [`fair`]: what one caller and one address may hold of the connections.
//! - [`rate`]: each user's request rate.
//! - [`openapi`]: the API's OpenAPI document, served at `/api/openapi.json`.
//! - [`notify`]: jobs' webhooks: the delivery loop, signing, where they may point.
//! - [`web`]: the web interface at `/`, its sessions and its live event stream.

#![deny(missing_docs)]

pub mod api;
pub mod auth;
pub mod fair;
pub mod identity;
pub mod listen;
pub mod metrics;
pub mod notify;
mod object_ranges;
pub mod openapi;
pub mod planning;
pub mod rate;
pub mod retention;
pub mod routes;
pub mod schedules;
pub mod web;
mod work;

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hetch_jobdb::{Db, DbError, PlanningLease};
use hetch_jobs::Planner;
use hetch_net::{Fingerprint, NetError, ServerIdentity};

/// How a service is set up.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The directory job sources (and local destinations) are relative to.
    pub root: PathBuf,
    /// The TLS identity and the token live here (as `hetch serve`'s).
    pub state_dir: PathBuf,
    /// `sqlite://PATH` or `postgres://...`.
    pub db_url: String,
    /// How long a unit's lease lasts without a heartbeat.
    pub lease_ttl: Duration,
    /// How jobs are cut into units.
    pub planner: Planner,
    /// How many times each unit is tried, and how long it waits between attempts.
    pub retries: Retries,
    /// Also let in users with a token from this OpenID Connect issuer.
    pub oidc: Option<hetch_oidc::OidcConfig>,
    /// Limits on connections, before and after they authenticate.
    pub limits: listen::ConnLimits,
    /// What each OIDC identity may read and write (`None`: every user of the issuer
    /// reaches all the workers reach).
    pub identities: Option<identity::IdentityMap>,
    /// How jobs' webhooks are delivered.
    pub webhooks: notify::WebhookConfig,
    /// Most schedules (recurring mirrors) one owner may have.
    pub max_schedules: u64,
    /// The shortest time between two runs a schedule may ask for (its interval, or
    /// its cron expression's closest due times): at most a day.
    pub min_schedule_interval: Duration,
    /// Finished jobs kept: how many, and for how long.
    pub retention: retention::Retention,
    /// The web page's login through the OIDC issuer (with [`ServiceConfig::oidc`]):
    /// the client id, secret and redirect URI. Scopes for the identity map's claims
    /// are added to those it names.
    pub login: Option<hetch_oidc::LoginConfig>,
}

pub use hetch_jobdb::Patience;

/// How many times each unit is tried, and how long it waits between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retries {
    /// Attempts each unit gets before it fails for good (at least 1).
    pub attempts: u32,
    /// The waits between them.
    pub patience: hetch_jobdb::Patience,
}

impl Retries {
    /// `attempts` per unit, the first wait `first`, the longest `most`.
    pub fn new(attempts: u32, first: Duration, most: Duration) -> Retries {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Retries {
            attempts,
            patience: Patience {
                first_ms: ms(first),
                most_ms: ms(most),
            },
        }
    }
}

impl Default for Retries {
    fn default() -> Retries {
        Retries {
            attempts: planning::DEFAULT_ATTEMPTS,
            patience: hetch_jobdb::Patience::default(),
        }
    }
}

/// Schedules one owner may have unless configured otherwise.
pub const DEFAULT_MAX_SCHEDULES: u64 = 100;
/// The shortest time between two runs of a schedule unless configured otherwise.
pub const DEFAULT_MIN_SCHEDULE_INTERVAL: Duration = Duration::from_secs(60);

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The database.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The TLS identity or the token.
    #[error(transparent)]
    Net(#[from] NetError),
    /// Listening.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The root.
    #[error("root {0}: {1}")]
    Root(PathBuf, std::io::Error),
    /// The OIDC configuration.
    #[error(transparent)]
    Oidc(#[from] hetch_oidc::OidcError),
    /// A setting out of bounds, in one line naming it.
    #[error("{0}")]
    Config(String),
}

// The planner's bound on a range is the protocol's.
const _: () = assert!(hetch_jobs::MAX_RANGE_BLOCKS == hetch_proto::MAX_RANGE_BLOCKS);

/// The workers' token file in the state directory (see [`auth`]).
pub const WORKER_TOKEN_FILE: &str = "worker-token";

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    /// The job database.
    pub db: Db,
    /// Job sources are below this (canonical).
    pub root: PathBuf,
    /// The operator's token (the service's own).
    pub token: Vec<u8>,
    /// The workers' token.
    pub worker_token: Vec<u8>,
    /// Where it is (named in warnings).
    pub worker_token_path: PathBuf,
    /// Failed tokens per address.
    pub throttle: hetch_net::AuthThrottle,
    /// Lease length, milliseconds.
    pub lease_ms: u64,
    /// How jobs are cut.
    pub planner: Planner,
    /// Attempts each new unit gets.
    pub unit_attempts: u32,
    /// Verifies users' OIDC tokens, when an issuer is configured.
    pub oidc: Option<hetch_oidc::OidcVerifier>,
    /// What each OIDC identity may read and write, when the operator gave a map.
    pub identities: Option<identity::IdentityMap>,
    /// This instance's request counters.
    pub metrics: metrics::Metrics,
    /// This instance's name in planning leases (random, new at every start).
    pub instance: String,
    /// Seals browsers' session cookies.
    pub sessions: web::session::Sessions,
    /// The login through the OIDC issuer, when a client id is configured.
    pub login: Option<web::login::WebLogin>,
    /// The live snapshot the web interface shows.
    pub hub: web::events::Hub,
    /// This host's name.
    pub host: String,
    /// This host's checks (found at start), for the nodes page.
    pub host_checks: Vec<String>,
    /// How jobs' webhooks are delivered.
    pub webhooks: notify::WebhookConfig,
    /// Most schedules one owner may have.
    pub max_schedules: u64,
    /// The authenticated connections, and what each caller holds of them.
    pub conns: Arc<fair::Conns>,
    /// Users' request rates.
    pub rates: rate::Rates,
    /// The connections that have not authenticated yet.
    pub gate: Arc<hetch_net::PreAuthGate>,
    /// The shortest time between two runs of a schedule, milliseconds.
    pub min_schedule_ms: u64,
    /// Finished jobs kept.
    pub retention: retention::Retention,
}

/// A service bound to its address, ready to run.
pub struct Service {
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    state: Arc<AppState>,
    limits: listen::ConnLimits,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its certificate's fingerprint, for clients to pin.
    pub fingerprint: Fingerprint,
    /// The token file clients need.
    pub token_path: PathBuf,
    /// The token file workers need.
    pub worker_token_path: PathBuf,
}

impl Service {
    /// Where a browser on this machine reaches the web interface (`HOST:PORT`): as
    /// [`Service::addr`], a wildcard address becoming `localhost`.
    pub fn web_address(&self) -> String {
        match self.addr.ip().is_unspecified() {
            true => format!("localhost:{}", self.addr.port()),
            false => self.addr.to_string(),
        }
    }

    /// What the service says at start, a line each: where it listens, its web
    /// interface, its key's fingerprint and its two token files (clients and tests
    /// read these lines).
    pub fn banner(&self) -> Vec<String> {
        vec![
            format!("listening on https://{}", self.addr),
            format!(
                "web interface at https://{}/ (log in with the token below)",
                self.web_address()
            ),
            format!("key fingerprint {}", self.fingerprint),
            format!("token in {}", self.token_path.display()),
            format!("workers' token in {}", self.worker_token_path.display()),
        ]
    }

    /// Opens the database (applying migrations), loads or creates the TLS identity and
    /// token, binds the address, and resumes planning jobs a previous run left
    /// unplanned. The state directory is made 0700 (and refused if group or others
    /// reach it), a SQLite database 0600 (likewise).
    pub async fn bind(cfg: ServiceConfig) -> Result<Service, ServiceError> {
        let root = std::fs::canonicalize(&cfg.root)
            .map_err(|e| ServiceError::Root(cfg.root.clone(), e))?;
        check_planner(&cfg.planner)?;
        cfg.webhooks.check().map_err(ServiceError::Config)?;
        let min_schedule_ms = u64::try_from(cfg.min_schedule_interval.as_millis())
            .ok()
            .filter(|ms| *ms <= hetch_service_api::schedule::MAX_MIN_EVERY_MS)
            .ok_or_else(|| ServiceError::Config("--min-schedule-interval: at most a day".into()))?;
        // Before anything is made in it: it holds the key, the token, the job database.
        hetch_net::private_state_dir(&cfg.state_dir)?;
        let (identity, _) = ServerIdentity::load_or_create(&cfg.state_dir)?;
        let (token, token_path) = hetch_net::load_or_create_token(&cfg.state_dir)?;
        let (worker_token, worker_token_path) =
            hetch_net::load_or_create_named_token(&cfg.state_dir, WORKER_TOKEN_FILE)?;
        let oidc = cfg.oidc.map(hetch_oidc::OidcVerifier::new).transpose()?;
        if oidc.is_some() && cfg.identities.is_none() {
            _ = writeln!(
                std::io::stderr(),
                "hetch service: warning: no --identity-map: every user of the OIDC issuer \
                 may read and write all that the workers reach"
            );
        }
        if let Some(v) = &oidc {
            // Checked now so that a mistake shows at start; an issuer that is away
            // only for now is asked again when tokens arrive.
            match v.refresh().await {
                Ok(keys) => {
                    _ = writeln!(
                        std::io::stderr(),
                        "hetch service: OIDC issuer {} publishes {keys} keys",
                        v.config().issuer
                    )
                }
                Err(e) => _ = writeln!(std::io::stderr(), "hetch service: warning: {e}"),
            }
        }
        let login = match cfg.login {
            Some(mut login) => {
                if oidc.is_none() {
                    return Err(ServiceError::Config(
                        "--oidc-client-id needs --oidc-issuer".into(),
                    ));
                }
                let claims = cfg
                    .identities
                    .as_ref()
                    .map(|m| m.claims())
                    .unwrap_or_default();
                for scope in web::login::scopes_for(&claims) {
                    if !login.extra_scopes.contains(&scope) {
                        login.extra_scopes.push(scope);
                    }
                }
                let client = hetch_oidc::LoginClient::new(login)?;
                Some(web::login::WebLogin::new(client))
            }
            None => None,
        };
        let db = Db::open(&cfg.db_url)
            .await?
            .with_patience(cfg.retries.patience);
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|source| ServiceError::Listen {
                addr: cfg.listen,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ServiceError::Listen {
                addr: cfg.listen,
                source,
            })?;
        let sessions = web::session::Sessions::new(&token);
        let mut limits = cfg.limits;
        if limits.fair.operator_reserve >= limits.max_connections {
            return Err(ServiceError::Config(format!(
                "--operator-connections {}: must be below --max-connections {}",
                limits.fair.operator_reserve, limits.max_connections
            )));
        }
        if let Some(lowered) = limits.fit(hetch_net::raise_fd_limit()) {
            _ = writeln!(std::io::stderr(), "hetch service: warning: {lowered}");
        }
        let state = Arc::new(AppState {
            sessions,
            login,
            db,
            root,
            token,
            worker_token,
            worker_token_path: worker_token_path.clone(),
            throttle: hetch_net::AuthThrottle::default(),
            lease_ms: cfg.lease_ttl.as_millis() as u64,
            // A worker reads a unit's listing rows in one call.
            planner: Planner {
                batch_files: cfg.planner.batch_files.clamp(1, routes::MAX_FILES),
                ..cfg.planner
            },
            unit_attempts: cfg.retries.attempts.max(1),
            oidc,
            identities: cfg.identities,
            metrics: metrics::Metrics::default(),
            instance: format!("service-{}", hex::encode(rand::random::<[u8; 8]>())),
            hub: web::events::Hub::default(),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap_or_default()
                .trim()
                .to_string(),
            host_checks: hetch_doctor::host_findings(&hetch_doctor::Host::default()),
            webhooks: cfg.webhooks,
            max_schedules: cfg.max_schedules,
            conns: fair::Conns::new(limits.max_connections, limits.fair),
            rates: rate::Rates::new(limits.rate),
            gate: hetch_net::PreAuthGate::new(limits.pre_auth),
            min_schedule_ms,
            retention: cfg.retention,
        });
        take_over_planning(&state).await?;
        Ok(Service {
            listener,
            tls: listen::tls_config(&identity),
            state,
            limits,
            addr,
            fingerprint: identity.fingerprint,
            token_path,
            worker_token_path,
        })
    }

    /// Serves until the process ends; also voids expired leases every few seconds, and
    /// submits schedules' due runs.
    pub async fn run(self) -> Result<(), ServiceError> {
        // In a set, so that they stop with it however it ends, its future dropped too:
        // a service stopped that way (a test's restart) must not go on submitting
        // schedules' runs and reaping beside the one started after it.
        let mut loops = tokio::task::JoinSet::new();
        loops.spawn(reap(self.state.clone()));
        loops.spawn(web::events::run(self.state.clone()));
        loops.spawn(notify::run(self.state.clone()));
        loops.spawn(schedules::run(self.state.clone()));
        let app = routes::router(self.state.clone());
        let r = listen::serve(self.listener, self.tls, app, self.limits, &self.state).await;
        loops.abort_all();
        r.map_err(|source| ServiceError::Listen {
            addr: self.addr,
            source,
        })
    }
}

/// Refuses a planner whose ranges, at its own block size, are longer than one range
/// session may carry (jobs with smaller blocks get shorter ranges).
fn check_planner(p: &Planner) -> Result<(), ServiceError> {
    let blocks = p.range_size / p.block_size.max(1);
    if blocks > hetch_jobs::MAX_RANGE_BLOCKS {
        return Err(ServiceError::Config(format!(
            "--range-size {}: {blocks} blocks of {} bytes, more than the {} one range may \
             have",
            p.range_size,
            p.block_size,
            hetch_jobs::MAX_RANGE_BLOCKS
        )));
    }
    Ok(())
}

/// Takes over, and plans again from the start, jobs whose planner stopped: its
/// planning lease ran out (an instance killed, or cut off) or it has none (retried
/// after it ended unplanned).
async fn take_over_planning(state: &Arc<AppState>) -> Result<(), DbError> {
    let now = now_ms();
    let until = now + state.lease_ms;
    for job in state
        .db
        .take_over_planning(&state.instance, until, now, 64)
        .await?
    {
        match serde_json::from_str::<api::JobSpec>(&job.spec) {
            Ok(spec) => {
                _ = writeln!(
                    std::io::stderr(),
                    "hetch service: planning job {} again",
                    job.lease.job
                );
                start_planning(state, job.lease, spec);
            }
            Err(e) => {
                let why = format!("stored job spec unreadable: {e}");
                state.db.fail_planning(&job.lease, &why, now).await?;
            }
        }
    }
    Ok(())
}

/// Plans the job `lease` holds, in the background. A planner that panics fails its
/// job (it would panic again if planned again).
pub(crate) fn start_planning(state: &AppState, lease: PlanningLease, spec: api::JobSpec) {
    let (db, root, planner) = (state.db.clone(), state.root.clone(), state.planner);
    let (held, ms, attempts) = (lease.clone(), state.lease_ms, state.unit_attempts);
    let planning = planning::plan(db.clone(), root, lease, spec, planner, ms, attempts);
    let planner = tokio::spawn(planning);
    tokio::spawn(async move {
        if let Err(e) = planner.await {
            let why = format!("planning: stopped by an internal error: {e}");
            _ = writeln!(std::io::stderr(), "hetch service: job {}: {why}", held.job);
            if let Err(e) = db.fail_planning(&held, &why, now_ms()).await {
                _ = writeln!(std::io::stderr(), "hetch service: job {}: {e}", held.job);
            }
        }
    });
}

/// Voids expired leases now and then, takes over jobs whose planner stopped, and
/// deletes finished jobs beyond those kept (every instance does; the statements are
/// safe to run from several at once).
async fn reap(state: Arc<AppState>) {
    let every = Duration::from_millis((state.lease_ms / 6).clamp(100, 5_000));
    loop {
        tokio::time::sleep(every).await;
        if let Err(e) = state.db.reap(now_ms()).await {
            _ = writeln!(
                std::io::stderr(),
                "hetch service: reaping expired leases: {e}"
            );
        }
        if let Err(e) = take_over_planning(&state).await {
            _ = writeln!(
                std::io::stderr(),
                "hetch service: taking over planning: {e}"
            );
        }
        if let Err(e) = retention::pass(&state).await {
            _ = writeln!(
                std::io::stderr(),
                "hetch service: deleting finished jobs beyond those kept: {e}"
            );
        }
    }
}

/// Milliseconds since the epoch: the database's clock.
pub use hetch_units::now_ms;
