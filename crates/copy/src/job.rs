//! What a copy is asked to do: the operands, the engine's settings, how sessions
//! connect and recover. Built by the command line, a worker's unit or a program.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hetch_engine::{Options, Report};
use hetch_location::Location;
use hetch_location::S3Options;
use hetch_proto::FilterRequest;
use hetch_session::ClientConfig;

use crate::RetryPolicy;

/// Data streams of a session when autotuning is off and none are given.
pub const DEFAULT_STREAMS: u16 = 4;

/// A copy: what the user asked for.
#[derive(Clone)]
pub struct CopyJob {
    /// Source operands.
    pub sources: Vec<Location>,
    /// Destination operand.
    pub dest: Location,
    /// Engine settings.
    pub opts: Options,
    /// Data streams (when `client` does not autotune them).
    pub streams: u16,
    /// Why the sessions do not autotune their streams, when the user said so.
    pub autotune_off: Option<&'static str>,
    /// The path's rate, when known, for a dry run's prediction.
    pub link_rate: Option<u64>,
    /// TLS on data streams.
    pub encrypt: bool,
    /// Connection settings (token, trust, sockets, autotuning); only used for remote
    /// copies, and required for them.
    pub client: Option<ClientConfig>,
    /// Write whole-file digests of the copied files here.
    pub manifest: Option<PathBuf>,
    /// Object store settings.
    pub s3: S3Options,
    /// How lost sessions are recovered.
    pub retry: RetryPolicy,
    /// The `--include`/`--exclude` globs, for a server to apply (`opts.filter` is this
    /// side's compiled copy).
    pub filter: FilterRequest,
    /// For each local source, only these entries of it (wire paths) instead of all
    /// of it: a worker's share of a job's listing.
    pub entries: Option<Vec<Vec<Vec<u8>>>>,
    /// A local destination must stay inside this directory (canonical), whatever
    /// symlinks its path holds: a worker's `--root`, as a server's root.
    pub confine_to: Option<PathBuf>,
    /// The destination server of a copy between two servers.
    pub dest_server: DestServer,
}

/// How the source server of a copy between two servers reaches the destination
/// server, which it pushes to directly.
#[derive(Clone, Default)]
pub struct DestServer {
    /// The destination server's token (default: the source server's).
    pub token: Option<Vec<u8>>,
    /// The key it must present (default: the known-hosts file's, learned on first use).
    pub fingerprint: Option<hetch_net::Fingerprint>,
}

impl CopyJob {
    /// Copies `sources` into `dest` with the defaults: default engine settings,
    /// [`DEFAULT_STREAMS`] encrypted streams, no server connection settings, the
    /// default recovery, everything of every source.
    pub fn new(sources: Vec<Location>, dest: Location) -> Self {
        CopyJob {
            sources,
            dest,
            opts: Options::default(),
            streams: DEFAULT_STREAMS,
            autotune_off: None,
            link_rate: None,
            encrypt: true,
            client: None,
            manifest: None,
            s3: S3Options::default(),
            retry: RetryPolicy::default(),
            filter: FilterRequest::default(),
            entries: None,
            confine_to: None,
            dest_server: DestServer::default(),
        }
    }

    /// The autotuning of the job's sessions, if they autotune.
    fn autotune(&self) -> Option<&Arc<hetch_session::Autotune>> {
        self.client.as_ref().and_then(|c| c.autotune.as_ref())
    }

    /// How the job's sessions chose their data streams (the `--json` summary's
    /// `autotune`): the last session's autotuning choice, or the fixed count and why.
    pub fn autotune_json(&self) -> serde_json::Value {
        let tune = self.autotune();
        match (tune.and_then(|t| t.last()), self.autotune_off) {
            (Some(choice), _) => {
                let mut v = serde_json::to_value(choice).expect("a plain struct");
                v["enabled"] = true.into();
                v
            }
            (None, why) => serde_json::json!({
                "enabled": false,
                "streams": self.streams,
                "why": why.unwrap_or(match (&self.client, tune) {
                    (None, _) => "no server: nothing to tune",
                    (Some(_), Some(_)) => "no session was opened",
                    (Some(_), None) => "not autotuned",
                }),
            }),
        }
    }

    /// A dry run's prediction of the copy it stands for: what would be copied or
    /// replaced (`report` of the dry run), at this machine's fitted costs, over the
    /// round trip and windows autotuning measured (a path of unknown rate).
    pub fn predict(&self, report: &Report) -> hetch_doctor::predict::Prediction {
        use hetch_doctor::predict::{predict, Rates, Shape};
        let w = &report.would;
        // Sizes a server reported: a hostile one may send any.
        let shape = Shape {
            files: w.copy.saturating_add(w.replace),
            bytes: w.copy_bytes.saturating_add(w.replace_bytes),
        };
        let (rtt, window) = match self.autotune().and_then(|t| t.last()) {
            Some(c) => (Duration::from_secs_f64(c.rtt_ms / 1e3), c.window_rate),
            None => (Duration::ZERO, None),
        };
        predict(shape, &Rates::fitted(self.link_rate, rtt, window))
    }
}
