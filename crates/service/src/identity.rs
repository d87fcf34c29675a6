//! Who may read and write what: the operator's identity map (`--identity-map FILE`),
//! as facilities run Globus Connect Server's. Each entry matches an OIDC identity by
//! one claim of its token (`sub`, `preferred_username`, an entry of `groups`, ...) and
//! says where that identity's jobs may read and write:
//!
//! ```toml
//! [[identity]]
//! claim = "groups"
//! value = "astro"
//! read = ["groups/astro", "public"]           # paths under the service's root
//! write = ["groups/astro", "hetch://dtn2:7878/astro", "s3://astro-archive"]
//! ```
//!
//! - The first entry that matches decides; an identity no entry matches is refused
//!   (an allow-list: an account of the issuer is not a user unless the map says so).
//!   The service's own token remains the operator's, with the whole root.
//! - `read` and `write` hold paths under the root (a directory and all below it; `/`
//!   for the whole root) and, for `write`, `hetch://HOST:PORT/PATH`, `s3://`, `gs://`
//!   and `az://` URL prefixes: the destinations the identity may send to; a `hetch://`
//!   URL in `read` names a server the identity may copy from (a copy between two
//!   servers). Matching is by whole path components: `groups/astro` does not cover
//!   `groups/astronomy`.
//! - `account = "NAME"` (optional) names a local account: a worker running as root
//!   runs the identity's units as it (its uid, gid and groups), so that the file
//!   system's own permissions decide too; other workers leave it to the paths.
//! - What a job may touch ([`Access`]) is recorded with it at submission, checked then
//!   against its sources and destination, checked again when it is listed, and again
//!   by the worker before it opens anything: each source, resolved, must lie under a
//!   read path, and a local destination is written only through handles confined to
//!   its write path (a symlink planted below it cannot lead out).
//! - A schedule's runs and a job's retry take it again from the map as it is then, by
//!   the entry recorded (`CLAIM=VALUE`): a narrowed entry narrows them, and a removed
//!   one (or a map where there was none) stops them, with one line saying so.

use std::path::Path;

use serde::Deserialize;

use hetch_service_api::access::normal;
pub use hetch_service_api::access::Access;

/// Most entries in a map, and most paths in one entry's `read` or `write`.
const MAX_ENTRIES: usize = 10_000;
const MAX_PATHS: usize = 256;
/// Largest map file read.
const MAX_FILE: u64 = 4 << 20;

/// The operator's identity map.
#[derive(Debug, Clone, Default)]
pub struct IdentityMap {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone)]
struct Entry {
    claim: String,
    value: String,
    access: Access,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    #[serde(default)]
    identity: Vec<EntryFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryFile {
    claim: String,
    value: String,
    #[serde(default)]
    read: Vec<String>,
    #[serde(default)]
    write: Vec<String>,
    #[serde(default)]
    account: Option<String>,
}

impl IdentityMap {
    /// Reads the map at `path`; an error is one line naming the file (and the entry).
    pub fn load(path: &Path) -> Result<IdentityMap, String> {
        let shown = path.display();
        let text = read_bounded(path).map_err(|e| format!("identity map {shown}: {e}"))?;
        Self::parse(&text).map_err(|e| format!("identity map {shown}: {e}"))
    }

    /// The map in TOML text `text`.
    pub fn parse(text: &str) -> Result<IdentityMap, String> {
        let file: MapFile = toml::from_str(text).map_err(|e| one_line(&e.to_string()))?;
        if file.identity.len() > MAX_ENTRIES {
            return Err(format!("more than {MAX_ENTRIES} identities"));
        }
        let mut entries = Vec::with_capacity(file.identity.len());
        for (i, e) in file.identity.into_iter().enumerate() {
            let key = format!("{}={}", e.claim, e.value);
            let entry =
                Entry::new(e).map_err(|why| format!("identity {} ({key}): {why}", i + 1))?;
            entries.push(entry);
        }
        Ok(IdentityMap { entries })
    }

    /// What the identity `subject` with token claims `claims` may touch: the first
    /// entry that matches, or `None` (refused).
    pub fn lookup(
        &self,
        subject: &str,
        claims: &serde_json::Map<String, serde_json::Value>,
    ) -> Option<&Access> {
        let matches = |e: &&Entry| match e.claim.as_str() {
            "sub" => e.value == subject,
            claim => match claims.get(claim) {
                Some(serde_json::Value::String(s)) => *s == e.value,
                Some(serde_json::Value::Array(items)) => {
                    items.iter().any(|v| v.as_str() == Some(&e.value))
                }
                _ => false,
            },
        };
        self.entries.iter().find(matches).map(|e| &e.access)
    }

    /// The claims the map's entries match on (`sub`, `groups`, ...), each once: what
    /// a browser login asks the issuer for.
    pub fn claims(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for e in &self.entries {
            if !names.contains(&e.claim.as_str()) {
                names.push(&e.claim);
            }
        }
        names
    }

    /// The entry `CLAIM=VALUE` (a browser session names the entry its login matched),
    /// if the map still has it.
    pub fn entry(&self, key: &str) -> Option<&Access> {
        self.entries
            .iter()
            .find(|e| e.access.entry == key)
            .map(|e| &e.access)
    }
}

impl Entry {
    fn new(e: EntryFile) -> Result<Entry, String> {
        if e.claim.is_empty() || e.value.is_empty() {
            return Err("claim and value must not be empty".into());
        }
        if e.read.len() > MAX_PATHS || e.write.len() > MAX_PATHS {
            return Err(format!("at most {MAX_PATHS} read and write paths"));
        }
        let read: Result<Vec<String>, String> = e.read.iter().map(|p| normal(p, "read")).collect();
        let write: Result<Vec<String>, String> =
            e.write.iter().map(|p| normal(p, "write")).collect();
        if let Some(a) = &e.account {
            check_account(a)?;
        }
        Ok(Entry {
            access: Access {
                entry: format!("{}={}", e.claim, e.value),
                read: read?,
                write: write?,
                account: e.account,
            },
            claim: e.claim,
            value: e.value,
        })
    }
}

/// A local account name as `useradd` takes it (never `root`).
fn check_account(a: &str) -> Result<(), String> {
    let ok = (1..=32).contains(&a.len())
        && !a.starts_with('-')
        && a.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    match ok && a != "root" {
        true => Ok(()),
        false => Err(format!(
            "account {a:?}: a local user name (letters, digits, '.', '_', '-'; not root)"
        )),
    }
}

fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_FILE + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_FILE {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB",
            MAX_FILE >> 20
        )));
    }
    Ok(text)
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MAP: &str = r#"
        [[identity]]
        claim = "preferred_username"
        value = "alice"
        read = ["groups/astro", "/public/"]
        write = ["groups/astro/alice", "hetch://dtn2:7878/astro", "s3://archive/astro/"]

        [[identity]]
        claim = "groups"
        value = "bio"
        read = ["groups/bio"]
        write = ["groups/bio"]

        [[identity]]
        claim = "sub"
        value = "svc-1"
        read = ["/"]
        write = ["/"]
    "#;

    fn claims(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn the_first_entry_that_matches_decides_and_no_match_is_refused() {
        let m = IdentityMap::parse(MAP).unwrap();
        let alice = m
            .lookup(
                "u1",
                &claims(json!({"preferred_username": "alice", "groups": ["bio"]})),
            )
            .unwrap();
        assert_eq!(alice.entry, "preferred_username=alice");
        let bob = m
            .lookup("u2", &claims(json!({"groups": ["x", "bio"]})))
            .unwrap();
        assert_eq!(bob.entry, "groups=bio");
        assert_eq!(m.lookup("svc-1", &claims(json!({}))).unwrap().read, [""]);
        assert!(m
            .lookup("u3", &claims(json!({"groups": "astro"})))
            .is_none());
        assert_eq!(m.entry("groups=bio"), Some(bob));
        assert!(m.entry("groups=astro").is_none());
    }

    #[test]
    fn paths_match_by_whole_components() {
        let m = IdentityMap::parse(MAP).unwrap();
        let a = m.entry("preferred_username=alice").unwrap();
        assert_eq!(a.read_root("groups/astro/run1/x"), Some("groups/astro"));
        assert_eq!(a.read_root("groups/astro"), Some("groups/astro"));
        assert_eq!(a.read_root("public"), Some("public"));
        for denied in [
            "groups/astronomy",
            "groups",
            "groups/bio/x",
            "groups/astro/../bio",
            "/etc",
        ] {
            assert_eq!(a.read_root(denied), None, "{denied}");
        }
        assert_eq!(
            a.write_root("groups/astro/alice/out"),
            Some("groups/astro/alice")
        );
        assert_eq!(a.write_root("groups/astro/bob"), None);
        assert!(a.may_reach("hetch://dtn2:7878/astro/in", false));
        assert!(a.may_reach("hetch://dtn2:7878/astro", false));
        assert!(!a.may_reach("hetch://dtn2:7878/astrox", false));
        assert!(!a.may_reach("hetch://dtn2:7879/astro", false));
        assert!(!a.may_reach("hetch://dtn2:7878/astro/../bio", false));
        assert!(a.may_reach("s3://archive/astro/2026/", false));
        assert!(!a.may_reach("s3://archive/bio", false));
        assert!(
            !a.may_reach("hetch://dtn2:7878/astro", true),
            "write is not read"
        );
    }

    #[test]
    fn a_bad_map_is_one_line_naming_the_entry() {
        for (text, why) in [
            (
                "[[identity]]\nclaim = \"sub\"\nvalue = \"a\"\nread = [\"../x\"]",
                "identity 1 (sub=a)",
            ),
            (
                "[[identity]]\nclaim = \"sub\"\nvalue = \"a\"\nread = [\"s3://b\"]",
                "only hetch://",
            ),
            (
                "[[identity]]\nclaim = \"sub\"\nvalue = \"\"",
                "must not be empty",
            ),
            (
                "[[identity]]\nclaim = \"sub\"\nvalue = \"a\"\nadmin = true",
                "admin",
            ),
            (
                "[[identity]]\nclaim = \"sub\"\nvalue = \"a\"\nwrite = [\"\"]",
                "empty",
            ),
        ] {
            let e = IdentityMap::parse(text).unwrap_err();
            assert!(e.contains(why) && !e.contains('\n'), "{e}");
        }
    }
}
