//! A transfer service's worker as a library: what `hetch worker` runs.
//!
//! [`run`] claims work units from the service and runs them (its loop is
//! [`claim_loop::claim_loop`], over the [`service::Service`] trait the service's
//! HTTPS client implements), each as a task of its own: a batch of files, a block
//! range of a large file split over several workers or the commit of such a file, or
//! a source of a copy between two servers, which the worker has the source server
//! push, or a mirroring job's deletion step once its copies are done. A unit whose user has a local account runs as that account in a child
//! process ([`child_main`]). [`lease::Leases`] keeps the leases of the units a worker
//! runs: fed the time and the service's answers, it says when to send a heartbeat and
//! which units to stop, so that a worker never writes after the service may have
//! handed a unit to another worker; property tests check it against the service's own
//! lease model (`hetch-jobs`). [`metrics::WorkerMetrics`] counts what the units do.

pub mod claim_loop;
mod config;
mod error;
pub mod lease;
pub mod log;
pub mod metrics;
pub mod service;

mod account;
mod files;
mod mirror;
mod object_parts;
mod object_split;
mod relay;
mod servers;
mod split;
mod stream;
mod unit;

pub use account::{child_main, ChildError};
pub use config::WorkerConfig;
pub use error::WorkerError;
pub use unit::{Pace, UnitContext};

use std::sync::Arc;

use hetch_service_api::client::Client;

use crate::claim_loop::LoopConfig;
use crate::metrics::WorkerMetrics;

/// Runs the worker `c` until the service refuses it, or it was idle for
/// [`WorkerConfig::idle_exit`] (`Ok`).
pub async fn run(c: WorkerConfig) -> Result<(), WorkerError> {
    let name = c.name.clone().unwrap_or_else(default_name);
    let log = c
        .log
        .clone()
        .unwrap_or_else(|| log::Log::stderr(format!("hetch worker {name}: ")));
    let metrics = Arc::new(WorkerMetrics::default());
    // Bound before anything else, so that a wrong address is the first thing said.
    let _serving = match &c.metrics {
        Some(addr) => {
            let endpoint = hetch_metrics::Endpoint::bind(addr)
                .await
                .map_err(WorkerError::Metrics)?;
            log.say(&format!("metrics on http://{}/metrics", endpoint.addr));
            let m = metrics.clone();
            Some(endpoint.spawn(move || m.render()))
        }
        None => None,
    };
    let api = Client::new(
        &c.service,
        c.fingerprint,
        c.known_hosts.clone(),
        c.service_token,
    )
    .await
    .map_err(WorkerError::Connect)?;
    let api = Arc::new(api);
    let root = std::fs::canonicalize(&c.root).map_err(|source| WorkerError::Root {
        path: c.root.clone(),
        source,
    })?;
    log.say(&format!("working for {}", c.service));
    let mut ctx = UnitContext::new(
        api.clone(),
        root,
        c.token_file,
        c.source_token_file,
        c.known_hosts,
    );
    ctx.account_child = c.account_child.into();
    ctx.log = log.clone();
    ctx.worker = name.clone();
    ctx.stream_floor = unit::stream_floor(c.units);
    let lc = LoopConfig {
        name,
        units: c.units,
        idle_exit: c.idle_exit,
        // This host's checks, found once: the service shows them on its nodes page.
        checks: hetch_doctor::host_findings(&hetch_doctor::Host::default()),
        log,
    };
    claim_loop::claim_loop(&lc, api, ctx, &metrics).await
}

/// A worker's name when it is given none: its host and process id.
fn default_name() -> String {
    format!("{}-{}", hostname(), std::process::id())
}

/// This host's name.
fn hostname() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    host.trim().to_string()
}
