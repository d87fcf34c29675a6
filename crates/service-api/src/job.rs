//! Jobs as users submit and see them: the spec (refusing fields it does not know, so
//! that a misspelt option is an error, not silently ignored; every number bounded in
//! [`JobSpec::check`] before anything is sized by it), the job's view, its listing's
//! rows, and the error every 4xx and 5xx answer carries.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A job, as submitted: what `hetch cp` takes. (Its default, with no sources and
/// no destination, stands for a stored spec that cannot be read.)
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Source operands, relative to the service's root (a shared file system); or,
    /// for a copy between two servers, `hetch://HOST:PORT/PATH` URLs all on one server
    /// (with a `hetch://` destination), which that server pushes to the destination.
    #[schemars(length(min = 1, max = 1000), inner(length(min = 1, max = 4096)))]
    pub sources: Vec<String>,
    /// Where to: `hetch://HOST:PORT/PATH` or `s3://`, `gs://`, `az://` URLs, or a
    /// path relative to the service's root.
    #[schemars(length(min = 1, max = 4096))]
    pub dest: String,
    /// The copy's options.
    #[serde(default)]
    pub options: CopyOptions,
    /// Higher goes first (-100 to 100).
    #[serde(default)]
    #[schemars(range(min = -100, max = 100))]
    pub priority: i64,
    /// Bytes per second for the whole job; 0 for no limit.
    #[serde(default)]
    pub rate_limit: u64,
    /// Other `hetch serve` nodes (`HOST[:PORT]`) serving the same storage as the
    /// `hetch://` destination's server (a parallel file system or one bucket behind
    /// several data transfer nodes): units are spread over all of them, and a unit
    /// run again after a failure goes to the next node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 300)))]
    pub dest_nodes: Vec<String>,
    /// What the job may touch: set by the service at submission from its
    /// submitter's entry in the identity map (whatever a client sends here is
    /// replaced), and enforced again by the worker; absent for the operator's jobs
    /// and where the service has no identity map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<crate::access::Access>,
    /// Where to POST a signed note when the job ends (done, failed or cancelled).
    /// Its secret is never shown back: a job's view has it in `webhook` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<crate::webhook::Webhook>,
}

/// Most destination nodes of one job.
pub const MAX_DEST_NODES: usize = 64;
/// Longest destination node name (`HOST:PORT`; a DNS name is at most 253 bytes).
const MAX_NODE: usize = 300;

/// The options of `hetch cp` a job may set; absent ones take `cp`'s defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CopyOptions {
    /// Block digest algorithm (`--checksum`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["blake3", "xxh3", "crc32c", "md5", "sha256", "adler32"]))]
    pub checksum: Option<String>,
    /// `none`, `received` or `written` (`--verify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["none", "received", "written"]))]
    pub verify: Option<String>,
    /// Bytes per block, a power of two (`--block-size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u64>,
    /// Data streams per session (`--streams`, 1 to 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub streams: Option<u16>,
    /// Never replace an existing file (`--no-clobber`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_clobber: bool,
    /// Compression on the wire to a `hetch://` destination (`--compress`: `none`,
    /// `auto`, `zstd` or `zstd:LEVEL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(none|off|auto|zstd|zstd:([1-9]|1[0-9]))$"))]
    pub compress: Option<String>,
    /// Move the files while they are written (`--follow`, `--watch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<crate::StreamSpec>,
    /// Mirror (`hetch sync`): once every file was copied, delete what the destination
    /// holds below the copied trees and the sources lack (`--sync`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sync: bool,
    /// With `sync`: if more than this many entries would be deleted, delete none and
    /// fail the job saying how many (`--max-delete`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 9_007_199_254_740_992u64))]
    pub max_delete: Option<u64>,
}

/// Most source operands in one job (each is listed by the service).
pub const MAX_SOURCES: usize = 1000;
/// Longest operand or destination, in bytes.
pub const MAX_PATH: usize = 4096;

impl JobSpec {
    /// Whether the spec can be run, as one line naming what is wrong. (Whether the
    /// sources exist is checked against the root by the caller.)
    pub fn check(&self) -> Result<(), String> {
        if self.sources.is_empty() {
            return Err("a job needs at least one source".into());
        }
        if self.sources.len() > MAX_SOURCES {
            return Err(format!("at most {MAX_SOURCES} sources per job"));
        }
        if self.dest.is_empty() || self.dest.len() > MAX_PATH {
            return Err("dest must be 1 to 4096 bytes".into());
        }
        match self.is_relay() {
            false => {
                for s in &self.sources {
                    check_relative(s, "source")?;
                }
            }
            true => self.check_relay()?,
        }
        match is_url(&self.dest) {
            // As the worker will parse it, so that what it cannot is refused now.
            true => {
                hetch_location::Location::parse(&self.dest).map_err(|e| format!("dest {e}"))?;
            }
            false => check_relative(&self.dest, "dest")?,
        }
        self.check_dest_nodes()?;
        if let Some(w) = &self.webhook {
            w.check()?;
        }
        if !(-100..=100).contains(&self.priority) {
            return Err(format!("priority {} is not in -100..=100", self.priority));
        }
        let o = &self.options;
        if let Some(c) = &o.checksum {
            c.parse::<hetch_integrity::Algorithm>()?;
        }
        if let Some(v) = &o.verify {
            if !["none", "received", "written"].contains(&v.as_str()) {
                return Err(format!("verify {v:?} is not none, received or written"));
            }
        }
        if let Some(bs) = o.block_size {
            hetch_integrity::check_block_size(bs).map_err(|e| e.to_string())?;
        }
        if let Some(n) = o.streams {
            if !(1..=256).contains(&n) {
                return Err(format!("streams {n} is not in 1..=256"));
            }
        }
        if let Some(c) = &o.compress {
            c.parse::<hetch_proto::Compression>()
                .map_err(|e| format!("compress {e}"))?;
        }
        self.check_sync()?;
        if let Some(st) = &o.stream {
            st.check()?;
            if self.is_relay()
                || self
                    .sources
                    .iter()
                    .chain([&self.dest])
                    .any(|s| is_object(s))
            {
                return Err(
                    "stream: a streaming job reads files under the root and writes a \
                    path under it or a hetch:// server"
                        .into(),
                );
            }
        }
        Ok(())
    }
}

impl JobSpec {
    /// Whether this is a streaming job (`--follow`, `--watch`): one `stream` unit per
    /// source, never listed.
    pub fn is_stream(&self) -> bool {
        self.options.stream.is_some()
    }

    /// Whether this is a copy between two servers: its sources are on a `hetch://`
    /// server, which pushes them to the destination server itself.
    pub fn is_relay(&self) -> bool {
        self.sources.iter().any(|s| s.starts_with("hetch://"))
    }

    /// A copy between two servers: every source on one server, a `hetch://`
    /// destination, and no path that leaves a server's root.
    fn check_relay(&self) -> Result<(), String> {
        let mut host = None;
        for s in &self.sources {
            let (h, path) = hetch_url(s).ok_or_else(|| {
                format!("source {s:?}: sources are all paths under the root or all hetch:// URLs")
            })?;
            hetch_location::Location::parse(s).map_err(|e| format!("source {e}"))?;
            if *host.get_or_insert(h) != h {
                return Err(
                    "the sources of a copy between two servers are all on one server".into(),
                );
            }
            check_server_path(path, &format!("source {s:?}"))?;
        }
        let (_, path) = hetch_url(&self.dest).ok_or_else(|| {
            "a job with hetch:// sources copies between two servers: its dest is a hetch:// URL too"
                .to_string()
        })?;
        check_server_path(path, "dest")
    }
}

/// Largest `max_delete` (2^53: exact in every JSON reader).
pub const MAX_MAX_DELETE: u64 = 1 << 53;

impl JobSpec {
    /// `sync` and `max_delete`: a mirror of sources the service lists (its worker
    /// lists them again to decide what goes), into any destination the mover's
    /// `hetch sync` mirrors (a path, a `hetch://` server, an object store).
    fn check_sync(&self) -> Result<(), String> {
        let o = &self.options;
        if let Some(n) = o.max_delete {
            if !o.sync {
                return Err("max_delete applies to mirroring: set sync (--sync) too".into());
            }
            if n > MAX_MAX_DELETE {
                return Err(format!("max_delete {n} is over {MAX_MAX_DELETE}"));
            }
        }
        if !o.sync {
            return Ok(());
        }
        if self.is_relay() {
            return Err("sync: a copy between two servers cannot mirror yet \
                 (the service does not see its sources)"
                .into());
        }
        if o.stream.is_some() {
            return Err(
                "sync: a streaming job does not mirror (it never lists its sources)".into(),
            );
        }
        Ok(())
    }

    /// Destination nodes: only for a `hetch://` destination, each a `HOST[:PORT]`.
    fn check_dest_nodes(&self) -> Result<(), String> {
        if self.dest_nodes.is_empty() {
            return Ok(());
        }
        if hetch_url(&self.dest).is_none() {
            return Err("dest_nodes are for a hetch:// dest".into());
        }
        if self.dest_nodes.len() > MAX_DEST_NODES {
            return Err(format!("at most {MAX_DEST_NODES} dest_nodes"));
        }
        for n in &self.dest_nodes {
            if n.len() > MAX_NODE {
                return Err(format!("dest node {n:?} is not HOST[:PORT]: too long"));
            }
            hetch_location::host_port(n, hetch_location::DEFAULT_PORT)
                .map_err(|e| format!("dest node {n:?} is not HOST[:PORT]: {e}"))?;
        }
        Ok(())
    }

    /// The destination for attempt `attempt` of unit `seq`: the destination's server
    /// and the `dest_nodes` take the units in turn, and a unit tried again moves on
    /// to the next node (one that failed it may be down).
    pub fn dest_for(&self, seq: u64, attempt: u32) -> String {
        let Some((host, path)) = hetch_url(&self.dest) else {
            return self.dest.clone();
        };
        let nodes = 1 + self.dest_nodes.len() as u64;
        match (seq + u64::from(attempt)) % nodes {
            0 => format!("hetch://{host}/{path}"),
            i => format!("hetch://{}/{path}", self.dest_nodes[i as usize - 1]),
        }
    }
}

/// The host and path of a `hetch://HOST[:PORT]/PATH` URL (`None` for anything else,
/// or no host).
pub fn hetch_url(s: &str) -> Option<(&str, &str)> {
    let rest = s.strip_prefix("hetch://")?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    (!host.is_empty()).then_some((host, path))
}

/// A path under a server's root, as the server itself would take it: no `..`, no NUL.
fn check_server_path(p: &str, what: &str) -> Result<(), String> {
    if p.split('/').any(|c| c == "..") || p.contains('\0') {
        return Err(format!(
            "{what} escapes the server's root ('..' and NUL are refused)"
        ));
    }
    Ok(())
}

/// Whether `s` names an object store.
fn is_object(s: &str) -> bool {
    ["s3://", "gs://", "az://"].iter().any(|p| s.starts_with(p))
}

/// Whether `s` names a remote place rather than a path under the root.
pub fn is_url(s: &str) -> bool {
    ["hetch://", "s3://", "gs://", "az://"]
        .iter()
        .any(|p| s.starts_with(p))
}

/// A path below the root: not absolute, no `..`, no NUL.
fn check_relative(p: &str, what: &str) -> Result<(), String> {
    if p.is_empty() || p.len() > MAX_PATH {
        return Err(format!("{what} must be 1 to {MAX_PATH} bytes"));
    }
    if is_url(p) {
        return Err(format!(
            "{what} {p:?}: only paths under the service's root can be sources yet"
        ));
    }
    if p.starts_with('/') || p.split('/').any(|c| c == "..") || p.contains('\0') {
        return Err(format!(
            "{what} {p:?} escapes the service's root (absolute paths and '..' are refused)"
        ));
    }
    Ok(())
}

/// A job as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct JobView {
    /// Its id.
    pub id: String,
    /// `planning`, `queued`, `running`, `done`, `failed` or `cancelled`.
    pub state: String,
    /// Who submitted it.
    pub submitted_by: String,
    /// What it does.
    pub spec: JobSpec,
    /// Milliseconds since the epoch.
    pub created: u64,
    /// When its first unit was claimed.
    pub started: Option<u64>,
    /// When it ended.
    pub finished: Option<u64>,
    /// Why it failed.
    pub error: Option<String>,
    /// Entries in its listing (files, directories, symlinks).
    pub files: u64,
    /// Bytes in its listing.
    pub bytes: u64,
    /// Entries moved.
    pub files_done: u64,
    /// Bytes moved.
    pub bytes_done: u64,
    /// Bytes its units wrote at the destination (`bytes_done` counts files found
    /// already in place too; this does not): 0 for a run that found nothing to copy.
    #[serde(default)]
    pub bytes_written: u64,
    /// Bytes moved so far counting what its running units have moved (their workers
    /// say so in each heartbeat, every few seconds): `bytes_done` and more while a
    /// large unit runs, never past `bytes` (a retried unit's bytes could count twice).
    #[serde(default)]
    pub bytes_live: u64,
    /// Bytes per second over the last ten seconds while it runs (0 otherwise, or
    /// when this service instance has not watched it that long).
    #[serde(default)]
    pub rate: u64,
    /// Seconds left at that rate, while it runs and moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_s: Option<u64>,
    /// A streaming job's lag from bytes appended at the source to bytes durable and
    /// verified at the destination, as its workers last reported it (the largest
    /// among its streams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<crate::LagView>,
    /// Its work units by state.
    pub units: UnitsView,
    /// Its webhook (without the secret) and the delivery of its end, if it has one.
    /// (The webhook is left out of `spec`.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<crate::webhook::WebhookView>,
}

/// A job's units by state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UnitsView {
    /// Split files' commits waiting for their ranges.
    pub waiting: u64,
    /// Ready for a worker.
    pub ready: u64,
    /// Held by a worker.
    pub leased: u64,
    /// Done.
    pub done: u64,
    /// Failed for good.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Units (in any state) tried more than once: a run failed, or a lease ran out.
    #[serde(default)]
    pub retried: u64,
    /// Attempts each unit gets before it fails for good (0: not said).
    #[serde(default)]
    pub max_attempts: u64,
    /// In how many milliseconds (from this answer) the first unit waiting after a
    /// failed attempt may go again, if one waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_try_in_ms: Option<u64>,
}

/// An error, as every 4xx and 5xx answer carries it (`Error` in the OpenAPI
/// document).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "Error")]
pub struct ErrorBody {
    /// One line saying what was wrong.
    pub error: String,
    /// The field of a submitted job it is about (`sources`, `dest`, `priority`,
    /// `rate_limit`, `dest_nodes`, `webhook` or an option's name, such as `sync` or
    /// `max_delete`; a schedule's `every` or `cron`), when it is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// The field of a job spec that [`JobSpec::check`]'s error line `error` is about.
pub fn field_of(error: &str) -> Option<&'static str> {
    const FIELDS: [(&str, &str); 19] = [
        ("webhook", "webhook"),
        ("sync", "sync"),
        ("max_delete", "max_delete"),
        ("every", "every"),
        ("cron", "cron"),
        ("source", "sources"),
        ("a job needs at least one source", "sources"),
        ("at most 1000 sources", "sources"),
        ("the sources", "sources"),
        ("a job with hetch:// sources", "dest"),
        ("dest node", "dest_nodes"),
        ("dest_nodes", "dest_nodes"),
        ("dest", "dest"),
        ("priority", "priority"),
        ("verify", "verify"),
        ("streams", "streams"),
        ("stream", "stream"),
        ("compress", "compress"),
        ("unknown checksum", "checksum"),
    ];
    if error.contains("block size") || error.contains("power of two") {
        return Some("block_size");
    }
    FIELDS
        .iter()
        .find(|(start, _)| error.starts_with(start))
        .map(|(_, field)| *field)
}

/// Most listing rows one call returns: also the most files a unit may hold, so that a
/// worker reads a unit's rows in one call.
pub const MAX_FILES: u64 = 10_000;

/// A row of a job's listing (`GET /api/jobs/{id}/files`, and each line of
/// `/api/jobs/{id}/listing`): an entry found below one of the job's sources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileRow {
    /// The index of the source (in the job's `sources`) it was found below.
    pub operand: u64,
    /// Its path below that source, as the wire names it (`/`-separated, relative).
    pub path: String,
    /// Its size in bytes, when listed (0 for a directory or a symlink).
    pub size: u64,
}

/// The query of `GET /api/jobs`: which jobs, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only jobs in this state (`planning`, `queued`, `running`, `done`, `failed` or
    /// `cancelled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// At most this many (default 100; at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// The query of `GET /api/jobs/{id}/files`: rows `from..to` of the listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilesQuery {
    /// The first row.
    pub from: u64,
    /// One past the last row (at most [`MAX_FILES`] after `from`).
    pub to: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(sources: &[&str], dest: &str) -> JobSpec {
        JobSpec {
            sources: sources.iter().map(|s| s.to_string()).collect(),
            dest: dest.into(),
            options: CopyOptions::default(),
            priority: 0,
            rate_limit: 0,
            dest_nodes: Vec::new(),
            access: None,
            webhook: None,
        }
    }

    #[test]
    fn units_take_destination_nodes_in_turn_and_move_on_when_tried_again() {
        let mut s = spec(&["run1"], "hetch://dtn1:7878/in/");
        assert_eq!(s.dest_for(5, 1), "hetch://dtn1:7878/in/");
        s.dest_nodes = vec!["dtn2:7878".into(), "dtn3".into()];
        assert!(s.check().is_ok());
        let got: Vec<String> = (0..4).map(|seq| s.dest_for(seq, 0)).collect();
        assert_eq!(
            got,
            [
                "hetch://dtn1:7878/in/",
                "hetch://dtn2:7878/in/",
                "hetch://dtn3/in/",
                "hetch://dtn1:7878/in/"
            ]
        );
        assert_eq!(s.dest_for(1, 1), "hetch://dtn3/in/");
        for bad in ["", "a/b", "hetch://x", "a b"] {
            s.dest_nodes = vec![bad.into()];
            assert!(
                s.check().unwrap_err().contains("not HOST[:PORT]"),
                "{bad:?}"
            );
        }
        s.dest_nodes = vec!["n".into(); MAX_DEST_NODES + 1];
        assert!(s.check().is_err());
        let mut local = spec(&["run1"], "copy");
        local.dest_nodes = vec!["dtn2".into()];
        assert!(local.check().unwrap_err().contains("hetch:// dest"));
    }

    #[test]
    fn specs_are_checked_before_anything_runs() {
        assert!(spec(&["run1"], "hetch://dtn2:7878/in").check().is_ok());
        assert!(spec(&["a/b"], "copy/of/b").check().is_ok());
        for (bad, why) in [
            (spec(&[], "x"), "at least one source"),
            (spec(&["/etc"], "x"), "escapes"),
            (spec(&["a/../../etc"], "x"), "escapes"),
            (spec(&["a"], "../x"), "escapes"),
            (
                spec(&["hetch://h/x"], "y"),
                "its dest is a hetch:// URL too",
            ),
            (spec(&["a"], ""), "1 to 4096"),
        ] {
            let e = bad.check().unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        let mut s = spec(&["a"], "b");
        s.options.verify = Some("sometimes".into());
        assert!(s.check().unwrap_err().contains("sometimes"));
        s.options.verify = None;
        s.options.block_size = Some(3);
        assert!(s.check().is_err());
        s.options.block_size = None;
        s.options.streams = Some(0);
        assert!(s.check().unwrap_err().contains("streams 0"));
        s.options.streams = None;
        s.priority = 1000;
        assert!(s.check().unwrap_err().contains("priority"));
        s.priority = 0;
        s.options.checksum = Some("crc64".into());
        assert!(s.check().is_err());
        s.options.checksum = None;
        for bad in ["zstd:99", "zstd:0", "gzip", ""] {
            s.options.compress = Some(bad.into());
            let e = s.check().unwrap_err();
            assert!(e.starts_with("compress '") && e.contains(bad), "{e}");
        }
        s.options.compress = Some("zstd:19".into());
        assert_eq!(s.check(), Ok(()));
        // Mirroring: max_delete needs sync, is bounded, and sync needs a listing.
        s.options.max_delete = Some(2);
        let e = s.check().unwrap_err();
        assert!(
            e.contains("set sync") && field_of(&e) == Some("max_delete"),
            "{e}"
        );
        s.options.sync = true;
        assert_eq!(s.check(), Ok(()));
        s.options.max_delete = Some(MAX_MAX_DELETE + 1);
        assert_eq!(field_of(&s.check().unwrap_err()), Some("max_delete"));
        s.options.max_delete = None;
        for dest in ["hetch://h:1/in", "s3://bucket/m/"] {
            s.dest = dest.into();
            assert_eq!(s.check(), Ok(()), "{dest}");
        }
        s.options.stream = Some(crate::StreamSpec::default());
        let e = s.check().unwrap_err();
        assert!(e.starts_with("sync: a streaming job") && field_of(&e) == Some("sync"));
        s.options.stream = None;
        let mut relay = spec(&["hetch://a:1/x"], "hetch://b:1/y");
        relay.options.sync = true;
        assert!(relay.check().unwrap_err().contains("between two servers"));
        s.options.sync = false;
        let e = serde_json::from_str::<JobSpec>(r#"{"sources":["a"],"dest":"b","optoins":{}}"#)
            .unwrap_err();
        assert!(e.to_string().contains("optoins"), "{e}");
    }
}
