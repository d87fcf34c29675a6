//! One session of a copy: a local copy, a push, a pull or a relay between two servers
//! (either end may be an object store), chosen from where the operands are.

use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use hetch_engine::{
    copy_between, run_source_from, DestSpec, Destination, Operand, Progress, Report,
};
use hetch_location::Location;
#[cfg(feature = "cloud")]
use hetch_object::{BucketStore, ObjectDest, ObjectOrigin};
use hetch_proto::Op;
use hetch_session::{open_session, session_request, ClientConfig};

#[cfg(feature = "cloud")]
use crate::Buckets;
use crate::{CopyError, CopyJob};

/// A refusal of the job, as a result.
fn refuse<T>(why: impl Into<String>) -> Result<T, CopyError> {
    Err(CopyError::Refused(why.into()))
}

/// The wire paths of a pull's operands (what its entries must lie under), `None` when
/// the sources are not on a server.
fn pull_paths(remote_sources: &[(String, String)]) -> Option<Vec<Vec<u8>>> {
    if remote_sources.is_empty() {
        return None;
    }
    Some(
        remote_sources
            .iter()
            .map(|(_, p)| p.as_bytes().to_vec())
            .collect(),
    )
}

/// Runs one session of `job` (local copy, push, pull or relay; either end may be an
/// object store), counting into `progress`.
pub async fn dispatch(job: &CopyJob, progress: Arc<Progress>) -> Result<Report, CopyError> {
    let remote_sources: Vec<_> = job
        .sources
        .iter()
        .filter_map(|s| match s {
            Location::Remote { host, path } => Some((host.clone(), path.clone())),
            _ => None,
        })
        .collect();
    let here = job.sources.len() - remote_sources.len();
    if !remote_sources.is_empty() && here > 0 {
        return refuse("sources must be all local (or in object stores) or all on one server");
    }
    // Refuse '..' before connecting, naming the operand (the server would refuse too).
    for loc in job.sources.iter().chain(std::iter::once(&job.dest)) {
        if let Location::Remote { host, path } = loc {
            if path.split('/').any(|c| c == "..") {
                return refuse(format!(
                    "hetch://{host}/{path}: path escapes the server's root ('..' is not allowed)"
                ));
            }
        }
    }
    // A build without object stores refuses them before anything starts (the command
    // line already did, naming the feature; a program building a job may not have).
    #[cfg(not(feature = "cloud"))]
    for loc in job.sources.iter().chain(std::iter::once(&job.dest)) {
        if let Location::Object(url) = loc {
            return refuse(crate::operand::without_object_stores(url));
        }
    }
    #[cfg(feature = "cloud")]
    let mut buckets = Buckets::new(&job.s3);
    let mut operands = Vec::new();
    for (i, s) in job.sources.iter().enumerate() {
        match s {
            Location::Local(p) => {
                std::fs::symlink_metadata(p).map_err(|source| CopyError::Operand {
                    path: p.display().to_string(),
                    source,
                })?;
                operands.push(match job.entries.as_ref().and_then(|e| e.get(i)) {
                    Some(entries) => Operand::Entries {
                        operand: p.clone(),
                        entries: entries.clone(),
                    },
                    None => Operand::Local(p.clone()),
                });
            }
            #[cfg(feature = "cloud")]
            Location::Object(url) => {
                let loc = buckets.location(url)?;
                // Like a missing local operand: one clear error before anything starts
                // (this also finds bad credentials and missing buckets).
                if !loc.bucket.exists(&url.key).await? {
                    return refuse(format!("{url}: no such object (nor objects under it)"));
                }
                operands.push(Operand::Origin(Arc::new(ObjectOrigin::new(loc))));
            }
            #[cfg(not(feature = "cloud"))]
            Location::Object(_) => unreachable!("refused above"),
            Location::Remote { .. } => {}
        }
    }
    let n = job.sources.len() as u32;
    let pull = |host: &String| -> Result<Op, CopyError> {
        if remote_sources.iter().any(|(h, _)| h != host) {
            return refuse("all remote sources must be on the same server");
        }
        Ok(Op::Pull {
            sources: pull_paths(&remote_sources).unwrap_or_default(),
        })
    };
    let streams = job.streams as usize;
    match &job.dest {
        Location::Local(dest) => {
            let mut opts = job.opts.clone();
            opts.pulled = pull_paths(&remote_sources);
            let spec = DestSpec {
                path: dest.clone(),
                sources: n,
                trailing_slash: dest.as_os_str().as_bytes().ends_with(b"/"),
                confine_to: job.confine_to.clone(),
                as_operand: job.opts.compare_only,
            };
            if let Some((host, _)) = remote_sources.first() {
                let transport = open(job, host, pull(host)?).await?;
                return Ok(hetch_engine::run_sink(opts, spec, transport, progress).await?);
            }
            let dest = Destination::Local(spec);
            Ok(copy_between(job.opts.clone(), operands, dest, streams, progress).await?)
        }
        #[cfg(not(feature = "cloud"))]
        Location::Object(_) => unreachable!("refused above"),
        #[cfg(feature = "cloud")]
        Location::Object(url) => {
            let mut opts = job.opts.clone();
            opts.pulled = pull_paths(&remote_sources);
            let dest = ObjectDest {
                location: buckets.location(url)?,
                sources: n,
                as_operand: job.opts.compare_only,
                state_dir: hetch_object::journal::default_state_dir(),
            };
            let store = Arc::new(BucketStore::new(dest, opts.effective_buffer_memory()));
            if let Some((host, _)) = remote_sources.first() {
                let transport = open(job, host, pull(host)?).await?;
                return Ok(hetch_engine::run_sink_into(opts, store, transport, progress).await?);
            }
            let dest = Destination::Store(store);
            Ok(copy_between(job.opts.clone(), operands, dest, streams, progress).await?)
        }
        Location::Remote { host, path } => {
            if let Some((source, _)) = remote_sources.first() {
                let op = relay_op(job, pull(source)?, host, path).await?;
                let relay = hetch_session::relay(source, client(job), request(job, op), &progress);
                // Leaving ends the relay at the source server too.
                let stop = job.opts.stop.clone();
                let stopped = async move {
                    match stop {
                        Some(s) => s.raised().await,
                        None => std::future::pending().await,
                    }
                };
                return tokio::select! {
                    r = relay => r.map_err(CopyError::session),
                    _ = stopped => refuse(format!("{source}: relay stopped")),
                };
            }
            let op = Op::Push {
                dest: path.as_bytes().to_vec(),
                sources: n,
            };
            let transport = open(job, host, op).await?;
            Ok(run_source_from(job.opts.clone(), operands, transport, progress).await?)
        }
    }
}

/// The session request of `job` for `op`: what the server is to apply on its side.
fn request(job: &CopyJob, op: Op) -> hetch_proto::SessionRequest {
    let socket = job.client.as_ref().map(|c| &c.socket);
    let (streams, encrypt) = (job.streams, job.encrypt);
    session_request(op, &job.opts, streams, encrypt, socket, job.filter.clone())
}

/// Opens a session of `job` with the server `host` for `op`.
async fn open(job: &CopyJob, host: &str, op: Op) -> Result<hetch_engine::Transport, CopyError> {
    open_session(host, client(job), request(job, op))
        .await
        .map_err(CopyError::session)
}

/// The connection settings of a job with an operand on a server.
fn client(job: &CopyJob) -> &ClientConfig {
    job.client
        .as_ref()
        .expect("client config for remote copies")
}

/// The request to the source server of a copy between two servers (`pull` names its
/// sources) to push them to the server `host`, under `path` there.
async fn relay_op(job: &CopyJob, pull: Op, host: &str, path: &str) -> Result<Op, CopyError> {
    let Op::Pull { sources } = pull else {
        unreachable!("a pull of the remote sources")
    };
    if job.opts.manifest.is_some() {
        return refuse("--manifest is not available for copies between two servers yet");
    }
    let client = client(job);
    let fingerprint = hetch_session::server_key(
        host,
        job.dest_server.fingerprint,
        client.known_hosts.as_deref(),
        &client.socket,
    )
    .await
    .map_err(CopyError::session)?;
    Ok(Op::Relay {
        sources,
        to: Box::new(hetch_proto::RelayTarget {
            host: host.to_string(),
            fingerprint: fingerprint.0,
            token: job
                .dest_server
                .token
                .clone()
                .unwrap_or_else(|| client.token.clone()),
            dest: path.as_bytes().to_vec(),
        }),
    })
}
