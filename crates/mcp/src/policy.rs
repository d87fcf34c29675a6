//! The operator's guardrails: where an assistant may read and write, how much one action
//! may move, and whether it may delete. Read from a TOML file the assistant cannot
//! change; every location an assistant names is checked here before hetch sees it.

use std::path::{Component, Path, PathBuf};

use hetch_location::Location;
use serde::Deserialize;

/// Most bytes of one location string an assistant may pass.
pub const MAX_LOCATION_LEN: usize = 4096;

/// The guardrails in effect, as loaded (local roots canonical).
#[derive(Debug, Clone)]
pub struct Policy {
    /// Locations an assistant may read (sources, listings, comparisons, manifests).
    pub read: Vec<Root>,
    /// Locations an assistant may write to (destinations).
    pub write: Vec<Root>,
    /// Most bytes one copy or sync may move (copied plus replaced).
    pub max_bytes: u64,
    /// Most files one copy or sync may create or replace.
    pub max_files: u64,
    /// Ceiling on every transfer's rate, bytes per second (0: none).
    pub rate_limit: u64,
    /// Whether a sync may delete at the destination at all.
    pub allow_delete: bool,
    /// Most entries one sync may delete.
    pub max_delete: u64,
    /// Whether a copy may replace destination files that differ (always confirmed).
    pub allow_overwrite: bool,
    /// A copy that replaces and deletes nothing and moves at most this many bytes runs
    /// without a confirmation (0: every action is confirmed).
    pub auto_confirm_bytes: u64,
    /// Transfers running at once.
    pub max_running: usize,
    /// Seconds a plan's confirmation token stays valid.
    pub plan_ttl_secs: u64,
    /// The audit log (JSON lines, appended).
    pub audit_log: PathBuf,
    /// The token hetch presents to `hetch://` servers (else HETCH_TOKEN of the
    /// server's environment): the operator's secret, never the assistant's to see.
    pub token_file: Option<PathBuf>,
    /// The known-hosts file pinning servers' keys (else hetch's default).
    pub known_hosts: Option<PathBuf>,
    /// The S3-compatible endpoint for `s3://` locations (else AWS_ENDPOINT_URL).
    pub s3_endpoint: Option<String>,
}

/// A location the operator allows: a local directory (canonical) or a URL prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Root {
    /// A directory on this machine and everything below it.
    Dir(PathBuf),
    /// A server or object store location and everything below it: its scheme and
    /// authority, then its path's components.
    Url(UrlKey),
}

/// A URL reduced to what matching needs: `scheme://authority` (port made explicit)
/// and the path's components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlKey {
    /// `hetch://host:port`, `s3://bucket`, ...
    pub base: String,
    /// Path components, none empty, `.` or `..`.
    pub parts: Vec<String>,
}

/// A location that passed the policy: what hetch is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The operand for hetch: a canonical local path (a trailing `/` kept) or the URL.
    pub operand: String,
    /// Whether it is on this machine.
    pub local: bool,
    /// The root it was matched against, when local: hetch keeps the destination
    /// inside it (`--confine-to`) whatever symlinks appear meanwhile.
    pub root: Option<PathBuf>,
}

/// Why a request was refused: one line for the assistant and the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Builds a [`Refusal`] from format arguments.
macro_rules! refuse {
    ($($t:tt)*) => { Refusal(format!($($t)*)) };
}
pub(crate) use refuse;

/// The file's form; sizes and rates as hetch's flags take them ("50G", "2gbit").
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    read: Vec<String>,
    #[serde(default)]
    write: Vec<String>,
    max_bytes: String,
    max_files: u64,
    #[serde(default)]
    rate_limit: Option<String>,
    #[serde(default)]
    allow_delete: bool,
    #[serde(default = "default_max_delete")]
    max_delete: u64,
    #[serde(default = "yes")]
    allow_overwrite: bool,
    #[serde(default)]
    auto_confirm_bytes: Option<String>,
    #[serde(default = "default_max_running")]
    max_running: usize,
    #[serde(default = "default_plan_ttl")]
    plan_ttl_secs: u64,
    audit_log: PathBuf,
    #[serde(default)]
    token_file: Option<PathBuf>,
    #[serde(default)]
    known_hosts: Option<PathBuf>,
    #[serde(default)]
    s3_endpoint: Option<String>,
}

fn default_max_delete() -> u64 {
    1000
}
fn yes() -> bool {
    true
}
fn default_max_running() -> usize {
    2
}
fn default_plan_ttl() -> u64 {
    900
}

impl Policy {
    /// Loads and checks the operator's file; the error names the file and the entry.
    pub fn load(path: &Path) -> anyhow::Result<Policy> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let p = Policy::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        p.out_of_reach(path, "the policy file itself")
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(p)
    }

    /// Refuses a file of the operator's (the policy, the audit log, the token, the
    /// known hosts) that the assistant could overwrite or delete (inside a write root)
    /// or, for the token, copy out (inside a read root).
    fn out_of_reach(&self, file: &Path, what: &str) -> Result<(), String> {
        // The file may not exist yet (the log): its directory decides.
        let real = file
            .canonicalize()
            .or_else(|_| file.parent().unwrap_or(file).canonicalize())
            .unwrap_or_else(|_| file.to_path_buf());
        let inside = |roots: &[Root]| {
            roots
                .iter()
                .any(|r| matches!(r, Root::Dir(d) if real.starts_with(d)))
        };
        if inside(&self.write) {
            return Err(format!(
                "{what} ({}) is inside a write root: the assistant could change it",
                file.display()
            ));
        }
        if what == "token_file" && inside(&self.read) {
            return Err(format!(
                "token_file ({}) is inside a read root: the assistant could copy it",
                file.display()
            ));
        }
        Ok(())
    }

    /// Parses a policy's text (local roots must exist: they are made canonical).
    pub fn parse(text: &str) -> Result<Policy, String> {
        let f: PolicyFile = toml::from_str(text).map_err(|e| e.message().to_string())?;
        let size =
            |key: &str, v: &str| hetch_units::parse_size(v).map_err(|e| format!("{key}: {e}"));
        let roots = |key: &str, list: &[String]| -> Result<Vec<Root>, String> {
            list.iter()
                .map(|r| Root::parse(r).map_err(|e| format!("{key}: {e}")))
                .collect()
        };
        if f.read.is_empty() {
            return Err("read: name at least one location the assistant may read".into());
        }
        if !(1..=64).contains(&f.max_running) {
            return Err("max_running: between 1 and 64".into());
        }
        if !(10..=86_400).contains(&f.plan_ttl_secs) {
            return Err("plan_ttl_secs: between 10 and 86400".into());
        }
        let p = Policy {
            read: roots("read", &f.read)?,
            write: roots("write", &f.write)?,
            max_bytes: size("max_bytes", &f.max_bytes)?,
            max_files: f.max_files,
            rate_limit: match &f.rate_limit {
                Some(r) => hetch_units::parse_rate(r).map_err(|e| format!("rate_limit: {e}"))?,
                None => 0,
            },
            allow_delete: f.allow_delete,
            max_delete: f.max_delete,
            allow_overwrite: f.allow_overwrite,
            auto_confirm_bytes: match &f.auto_confirm_bytes {
                Some(v) => size("auto_confirm_bytes", v)?,
                None => 0,
            },
            max_running: f.max_running,
            plan_ttl_secs: f.plan_ttl_secs,
            audit_log: f.audit_log,
            token_file: f.token_file,
            known_hosts: f.known_hosts,
            s3_endpoint: f.s3_endpoint,
        };
        p.out_of_reach(&p.audit_log, "audit_log")?;
        for (what, file) in [
            ("token_file", &p.token_file),
            ("known_hosts", &p.known_hosts),
        ] {
            if let Some(file) = file {
                p.out_of_reach(file, what)?;
            }
        }
        Ok(p)
    }

    /// `loc` checked for reading: inside a `read` root.
    pub fn readable(&self, loc: &str) -> Result<Checked, Refusal> {
        check(loc, &self.read, "read", Exists::Must)
    }

    /// `loc` checked for writing: inside a `write` root (it need not exist yet).
    pub fn writable(&self, loc: &str) -> Result<Checked, Refusal> {
        check(loc, &self.write, "write", Exists::May)
    }

    /// `loc` checked for looking at only (a comparison's copy): inside a `read` or a
    /// `write` root.
    pub fn visible(&self, loc: &str) -> Result<Checked, Refusal> {
        self.readable(loc)
            .or_else(|_| check(loc, &self.write, "read or write", Exists::Must))
    }

    /// The rate a transfer runs at: the lower of the operator's ceiling and the
    /// assistant's request (either may be absent).
    pub fn rate(&self, asked: Option<u64>) -> u64 {
        match (self.rate_limit, asked) {
            (0, Some(a)) => a,
            (c, Some(a)) if a > 0 => c.min(a),
            (c, _) => c,
        }
    }

    /// The flags that tell hetch how to reach and trust servers and stores, from the
    /// policy.
    pub fn conn_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(e) = &self.s3_endpoint {
            a.extend(["--s3-endpoint".to_string(), e.clone()]);
        }
        for (flag, path) in [
            ("--token-file", &self.token_file),
            ("--known-hosts", &self.known_hosts),
        ] {
            if let Some(p) = path {
                a.extend([flag.to_string(), p.to_string_lossy().into_owned()]);
            }
        }
        a
    }

    /// The policy as the assistant may see it (a resource): what it may do.
    pub fn describe(&self) -> serde_json::Value {
        let show = |roots: &[Root]| roots.iter().map(Root::to_string).collect::<Vec<_>>();
        serde_json::json!({
            "read": show(&self.read),
            "write": show(&self.write),
            "max_bytes": self.max_bytes,
            "max_files": self.max_files,
            "rate_limit": self.rate_limit,
            "allow_delete": self.allow_delete,
            "max_delete": self.max_delete,
            "allow_overwrite": self.allow_overwrite,
            "auto_confirm_bytes": self.auto_confirm_bytes,
            "max_running": self.max_running,
            "plan_ttl_secs": self.plan_ttl_secs,
        })
    }
}

/// Whether a checked local path must already exist.
#[derive(Clone, Copy, PartialEq)]
enum Exists {
    Must,
    May,
}

impl Root {
    /// Parses a root of the policy file: an absolute directory (made canonical) or a
    /// `hetch://`, `s3://`, `gs://` or `az://` URL.
    fn parse(s: &str) -> Result<Root, String> {
        match Location::parse(s)? {
            Location::Local(p) => {
                if !p.is_absolute() {
                    return Err(format!("{s}: not an absolute path"));
                }
                let c = p.canonicalize().map_err(|e| format!("{s}: {e}"))?;
                if !c.is_dir() {
                    return Err(format!("{s}: not a directory"));
                }
                Ok(Root::Dir(c))
            }
            _ => url_key(s).map(Root::Url).map_err(|r| r.0),
        }
    }
}

impl std::fmt::Display for Root {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Root::Dir(p) => write!(f, "{}", p.display()),
            Root::Url(k) => write!(f, "{}/{}", k.base, k.parts.join("/")),
        }
    }
}

/// Checks `loc` against `roots`: strictly, as input from a network peer.
fn check(loc: &str, roots: &[Root], verb: &str, exists: Exists) -> Result<Checked, Refusal> {
    if loc.is_empty() || loc.len() > MAX_LOCATION_LEN {
        return Err(refuse!(
            "a location must have 1 to {MAX_LOCATION_LEN} bytes"
        ));
    }
    if loc.chars().any(char::is_control) {
        return Err(refuse!(
            "{}: control characters are not allowed in a location",
            loc.escape_debug()
        ));
    }
    let shown = loc.escape_debug();
    match Location::parse(loc).map_err(|e| Refusal(e.escape_debug().to_string()))? {
        Location::Local(p) => {
            let path = local_path(loc, &p, exists)?;
            let root = roots.iter().find_map(|r| match r {
                Root::Dir(d) if path.starts_with(d) => Some(d.clone()),
                _ => None,
            });
            if root.is_none() {
                return Err(refuse!(
                    "{shown}: outside the directories the operator lets the assistant {verb}"
                ));
            }
            let Some(operand) = path.to_str() else {
                return Err(refuse!("{shown}: the path is not valid UTF-8"));
            };
            let mut operand = operand.to_string();
            if loc.ends_with('/') && !operand.ends_with('/') {
                operand.push('/');
            }
            Ok(Checked {
                operand,
                local: true,
                root,
            })
        }
        _ => {
            let key = url_key(loc)?;
            let inside = roots.iter().any(|r| {
                matches!(r, Root::Url(k) if k.base == key.base && key.parts.starts_with(&k.parts))
            });
            if !inside {
                return Err(refuse!(
                    "{shown}: outside the locations the operator lets the assistant {verb}"
                ));
            }
            Ok(Checked {
                operand: loc.to_string(),
                local: false,
                root: None,
            })
        }
    }
}

/// A local path made canonical: every component plain (no `.` or `..`), then
/// resolved through the file system (symlinks followed, so a link inside a root that
/// leads out of it is outside). A path that may not exist yet is resolved up to its
/// deepest existing ancestor, and the rest appended.
fn local_path(loc: &str, p: &Path, exists: Exists) -> Result<PathBuf, Refusal> {
    let shown = loc.escape_debug();
    if !p.is_absolute() {
        return Err(refuse!(
            "{shown}: give an absolute path (the server's working directory is not the user's)"
        ));
    }
    if p.components()
        .any(|c| !matches!(c, Component::RootDir | Component::Normal(_)))
        || loc.contains("/./")
        || loc.ends_with("/.")
    {
        return Err(refuse!("{shown}: '.' and '..' are not allowed in a path"));
    }
    if exists == Exists::Must {
        return p.canonicalize().map_err(|e| refuse!("{shown}: {e}"));
    }
    let mut existing = p.to_path_buf();
    let mut rest = Vec::new();
    loop {
        match existing.symlink_metadata() {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let Some(name) = existing.file_name() else {
                    return Err(refuse!("{shown}: {e}"));
                };
                rest.push(name.to_owned());
                existing.pop();
            }
            Err(e) => return Err(refuse!("{shown}: {e}")),
        }
    }
    let mut path = existing
        .canonicalize()
        .map_err(|e| refuse!("{shown}: {e}"))?;
    for name in rest.into_iter().rev() {
        path.push(name);
    }
    Ok(path)
}

/// The matching key of a server or object store URL. Refused: empty, `.` or `..`
/// path components, and anything a URL could hide a second meaning in (`?`, `#`,
/// `%`, `\`, `@`).
fn url_key(s: &str) -> Result<UrlKey, Refusal> {
    let shown = s.escape_debug();
    if s.contains(['?', '#', '%', '\\', '@']) {
        return Err(refuse!(
            "{shown}: '?', '#', '%', '\\' and '@' are not allowed in a URL"
        ));
    }
    let (scheme, rest) = s
        .split_once("://")
        .ok_or_else(|| refuse!("{shown}: not a URL"))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let base = match Location::parse(s).map_err(Refusal)? {
        Location::Remote { host, .. } => format!("hetch://{}", host.to_ascii_lowercase()),
        Location::Object(_) => format!("{}://{}", scheme.to_ascii_lowercase(), authority),
        Location::Local(_) => return Err(refuse!("{shown}: not a URL")),
    };
    let path = path.strip_suffix('/').unwrap_or(path);
    let mut parts = Vec::new();
    if !path.is_empty() {
        for part in path.split('/') {
            if part.is_empty() || part == "." || part == ".." {
                return Err(refuse!(
                    "{shown}: empty, '.' and '..' path components are not allowed"
                ));
            }
            parts.push(part.to_string());
        }
    }
    Ok(UrlKey { base, parts })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(dir: &Path) -> Policy {
        let text = format!(
            r#"
read = ["{d}/in", "hetch://dtn:7878/archive", "s3://runs/2026"]
write = ["{d}/out", "hetch://cluster/incoming"]
max_bytes = "1G"
max_files = 1000
rate_limit = "100M"
audit_log = "{d}/audit.jsonl"
"#,
            d = dir.display()
        );
        Policy::parse(&text).unwrap()
    }

    #[test]
    fn locations_inside_roots_pass_and_others_are_refused() {
        let t = tempfile::tempdir().unwrap();
        for d in ["in/a", "out", "elsewhere"] {
            std::fs::create_dir_all(t.path().join(d)).unwrap();
        }
        std::os::unix::fs::symlink(t.path().join("elsewhere"), t.path().join("in/link")).unwrap();
        let p = policy(t.path());
        let root = t.path().canonicalize().unwrap();
        let d = t.path().display();
        assert_eq!(
            p.readable(&format!("{d}/in/a")).unwrap().operand,
            root.join("in/a").to_string_lossy()
        );
        // Not there yet, below a write root: the missing part is kept, '/' too.
        assert_eq!(
            p.writable(&format!("{d}/out/new/deeper/")).unwrap().operand,
            format!("{}/out/new/deeper/", root.display())
        );
        for bad in [
            format!("{d}/in/../elsewhere"),
            format!("{d}/in/./a"),
            format!("{d}/in/link"),
            format!("{d}/in/link/x"),
            format!("{d}/elsewhere"),
            "in/a".to_string(),
            format!("{d}/in/a\nrm -rf /"),
            "/etc/passwd".into(),
            String::new(),
            "x".repeat(MAX_LOCATION_LEN + 1),
        ] {
            assert!(p.readable(&bad).is_err(), "{bad} was let in");
        }
        // Reading is not writing, and the other way round.
        assert!(p.writable(&format!("{d}/in/a/new")).is_err());
        assert!(p.readable(&format!("{d}/out")).is_err());
        assert!(p.visible(&format!("{d}/out")).is_ok());
        assert!(p.writable(&format!("{d}/in/link/new")).is_err());
    }

    #[test]
    fn urls_match_by_component_with_the_port_made_explicit() {
        let t = tempfile::tempdir().unwrap();
        for d in ["in", "out"] {
            std::fs::create_dir_all(t.path().join(d)).unwrap();
        }
        let p = policy(t.path());
        assert!(p.readable("hetch://dtn/archive/run1").is_ok());
        assert!(p.readable("hetch://DTN:7878/archive").is_ok());
        assert!(p.readable("s3://runs/2026/x.h5").is_ok());
        assert!(p.writable("hetch://cluster:7878/incoming/new/").is_ok());
        for bad in [
            "hetch://dtn:7879/archive/x",
            "hetch://dtn/archive2",
            "hetch://dtn/archive/../etc",
            "hetch://dtn/archive//x",
            "hetch://dtn/archive/%2e%2e/x",
            "hetch://evil@dtn/archive",
            "s3://runs/2026x/y",
            "s3://runs2/2026",
            "gs://runs/2026",
            "hetch://dtn/archive?x",
        ] {
            assert!(p.readable(bad).is_err(), "{bad} was let in");
        }
        assert!(p.writable("hetch://dtn/archive/x").is_err());
    }

    #[test]
    fn the_file_is_checked_and_rates_only_go_down() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("in")).unwrap();
        std::fs::create_dir_all(t.path().join("out")).unwrap();
        let p = policy(t.path());
        assert_eq!(p.rate(None), 100_000_000);
        assert_eq!(p.rate(Some(5)), 5);
        assert_eq!(p.rate(Some(1 << 40)), 100_000_000);
        let base = "read=[\"/tmp\"]\nmax_bytes=\"1G\"\nmax_files=1\naudit_log=\"/var/log/a\"\n";
        assert!(Policy::parse(base).is_ok());
        for bad in [
            format!("{base}allow_everything = true\n"),
            base.replace("\"/tmp\"", "\"relative\""),
            base.replace("\"/tmp\"", "\"/no/such/dir\""),
            base.replace("1G", "lots"),
            base.replace("read=[\"/tmp\"]", "read=[]"),
            // The operator's files out of the assistant's reach.
            format!("{base}write=[\"/var/log\"]\n"),
            format!("{base}token_file=\"/tmp/token\"\n"),
        ] {
            assert!(Policy::parse(&bad).is_err(), "{bad}");
        }
    }
}
