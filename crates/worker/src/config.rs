//! What a worker is told: its service, its root, how many units at once, the tokens
//! and keys of the servers its units reach.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// How [`crate::run`] works (`hetch worker`'s flags, read).
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The service, HOST:PORT.
    pub service: String,
    /// The service's token.
    pub service_token: Vec<u8>,
    /// Job sources are below this directory here (the service's root, as this node
    /// sees the shared file system).
    pub root: PathBuf,
    /// This worker's name, unique among the service's workers (`None`: host and
    /// process id).
    pub name: Option<String>,
    /// Units run at once (1 to 64).
    pub units: u32,
    /// The service key's expected fingerprint, instead of the known-hosts file.
    pub fingerprint: Option<hetch_net::Fingerprint>,
    /// Known-hosts file for the service and the destinations (`None`: the default).
    pub known_hosts: Option<PathBuf>,
    /// Token file for hetch:// destinations (`None`: `HETCH_TOKEN`).
    pub token_file: Option<PathBuf>,
    /// Token file for the source servers of copies between two servers (`None`:
    /// [`WorkerConfig::token_file`]'s token).
    pub source_token_file: Option<PathBuf>,
    /// Leave after this long with nothing to do (`None`: never).
    pub idle_exit: Option<Duration>,
    /// Serve metrics at http://ADDR/metrics (HOST:PORT; `None`: off).
    pub metrics: Option<String>,
    /// The arguments with which this executable runs one unit as a user's local
    /// account, reading it on its standard input and calling [`crate::child_main`]
    /// (`hetch worker-unit`).
    pub account_child: Vec<OsString>,
    /// Where the worker says what it does (`None`: standard error, each line after
    /// `hetch worker NAME: `).
    pub log: Option<crate::log::Log>,
}
