//! What a job may touch ([`Access`]): the identity map entry of the user who submitted
//! it, recorded with the job at submission (the service's, never the client's word)
//! and checked by the service at submission and planning, and by the worker before it
//! opens anything.

use std::path::{Component, Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::job::JobSpec;

/// What one identity's jobs may touch: recorded with each job it submits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Access {
    /// The entry that granted it (`CLAIM=VALUE`), for messages.
    pub entry: String,
    /// Paths under the root its jobs may read (`""`: the whole root), and `hetch://`
    /// servers they may copy from.
    pub read: Vec<String>,
    /// Paths under the root its jobs may write (`""`: the whole root), and the URL
    /// prefixes of the destinations they may send to.
    pub write: Vec<String>,
    /// The local account a worker running as root runs its units as (so that the
    /// file system's permissions and ACLs decide too); `None`: the worker's own user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
}

/// A path of an identity map entry as it is matched: a URL with its path's components
/// joined by one `/` and no trailing one; a path under the root as its components
/// (`""` for `/`, the root). `what` (`read` or `write`) names it in the error line.
pub fn normal(p: &str, what: &str) -> Result<String, String> {
    if let Some((scheme, rest)) = url_parts(p) {
        if what == "read" && scheme != "hetch" {
            return Err(format!(
                "read {p:?}: only hetch:// servers can be read from"
            ));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let parts = components(path).ok_or_else(|| format!("{what} {p:?}: '..' or '.'"))?;
        if authority.is_empty() {
            return Err(format!("{what} {p:?}: no host or bucket"));
        }
        return Ok(join(&format!("{scheme}://{authority}"), &parts));
    }
    if p.contains("://") {
        return Err(format!(
            "{what} {p:?}: a path under the root, or a hetch://, s3://, gs:// or az:// URL"
        ));
    }
    let parts = components(p).ok_or_else(|| format!("{what} {p:?}: '..' or '.'"))?;
    if parts.is_empty() && !p.starts_with('/') {
        return Err(format!("{what} {p:?}: empty (\"/\" is the whole root)"));
    }
    Ok(parts.join("/"))
}

/// A URL's scheme (of those hetch takes) and what follows `://`.
fn url_parts(s: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = s.split_once("://")?;
    ["hetch", "s3", "gs", "az"]
        .contains(&scheme)
        .then_some((scheme, rest))
}

/// The non-empty components of `/`-separated `p`; `None` if one is `.` or `..`.
fn components(p: &str) -> Option<Vec<&str>> {
    let parts: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
    (!parts.iter().any(|c| *c == "." || *c == "..")).then_some(parts)
}

fn join(base: &str, parts: &[&str]) -> String {
    match parts.is_empty() {
        true => base.to_string(),
        false => format!("{base}/{}", parts.join("/")),
    }
}

/// Whether `path` is `prefix` or below it, by whole components (both normal).
fn covers(prefix: &str, path: &str) -> bool {
    prefix.is_empty()
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|r| r.starts_with('/'))
}

impl Access {
    /// The read path (under the root) that covers `rel`, a path under the root.
    pub fn read_root(&self, rel: &str) -> Option<&str> {
        local_root(&self.read, rel)
    }

    /// Where local source `rel` (a path under canonical `root`) is read from: the
    /// canonical directory of the read path that covers it, as [`Access::resolve`]
    /// checks it, and the source's path below that directory. Reads go through
    /// handles opened from that directory, so that a symlink swapped onto the way
    /// after this check cannot lead them out of it.
    pub fn source_within(&self, root: &Path, rel: &str) -> Result<(PathBuf, PathBuf), String> {
        let allowed = self
            .read_root(rel)
            .ok_or_else(|| format!("{rel:?} is not yours (identity map entry {})", self.entry))?;
        let base = Access::resolve(root, allowed, rel)?;
        let plain: PathBuf = Path::new(rel)
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        let inside = plain
            .strip_prefix(allowed)
            .map_err(|_| format!("{rel:?} is not below {}", shown(allowed)))?;
        Ok((base.clone(), base.join(inside)))
    }

    /// The write path (under the root) that covers `rel`, a path under the root.
    pub fn write_root(&self, rel: &str) -> Option<&str> {
        local_root(&self.write, rel)
    }

    /// Whether URL `url` (a destination, or a server copied from when `read`) is
    /// covered by one of the identity's URLs.
    pub fn may_reach(&self, url: &str, read: bool) -> bool {
        let Some((scheme, rest)) = url_parts(url) else {
            return false;
        };
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let Some(parts) = components(path) else {
            return false;
        };
        let url = join(&format!("{scheme}://{authority}"), &parts);
        let list = if read { &self.read } else { &self.write };
        list.iter()
            .filter(|p| url_parts(p).is_some())
            .any(|p| covers(p, &url))
    }

    /// Whether a job of `spec` stays within this access, by its names: one line
    /// naming what it may not touch. (Where names lead, through symlinks, is checked
    /// by [`Access::resolve`] at submission, at planning and in the worker.)
    pub fn check_spec(&self, spec: &JobSpec) -> Result<(), String> {
        let denied = |what: &str, p: &str| {
            Err(format!(
                "{what} {p:?} is not yours to {} (identity map entry {})",
                if what == "source" { "read" } else { "write" },
                self.entry
            ))
        };
        for s in &spec.sources {
            let ok = match spec.is_relay() {
                true => self.may_reach(s, true),
                false => self.read_root(s).is_some(),
            };
            if !ok {
                return denied("source", s);
            }
        }
        if crate::job::is_url(&spec.dest) {
            let nodes = 1 + spec.dest_nodes.len() as u64;
            // Every node a unit may go to: the destination and each of dest_nodes.
            for seq in 0..nodes {
                let dest = spec.dest_for(seq, 0);
                if !self.may_reach(&dest, false) {
                    return denied("dest", &dest);
                }
            }
        } else if self.write_root(&spec.dest).is_none() {
            return denied("dest", &spec.dest);
        }
        Ok(())
    }

    /// Where local `rel` under canonical `root` really is, if that is inside
    /// `allowed` (a read or write path of this access, as [`Access::read_root`]
    /// gives): the canonical path of its deepest existing ancestor must lie below the
    /// canonical `root/allowed`, so that a symlink on the way cannot lead elsewhere.
    /// Returns the canonical directory `root/allowed`, which a writer confines itself
    /// to.
    pub fn resolve(root: &Path, allowed: &str, rel: &str) -> Result<PathBuf, String> {
        let base = std::fs::canonicalize(root.join(allowed))
            .map_err(|e| format!("{}: {e}", shown(allowed)))?;
        if !base.starts_with(root) {
            return Err(format!("{} leads outside the root", shown(allowed)));
        }
        let mut at = root.join(rel);
        let real = loop {
            match std::fs::canonicalize(&at) {
                Ok(real) => break real,
                Err(_) if at.pop() && at.starts_with(root) => continue,
                Err(e) => return Err(format!("{rel}: {e}")),
            }
        };
        match real.starts_with(&base) {
            true => Ok(base),
            false => Err(format!("{rel} leads outside {}", shown(allowed))),
        }
    }
}

fn shown(allowed: &str) -> &str {
    match allowed {
        "" => "/",
        a => a,
    }
}

/// The longest of `paths` (local ones) that covers `rel`.
fn local_root<'a>(paths: &'a [String], rel: &str) -> Option<&'a str> {
    let rel = Path::new(rel);
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return None;
    }
    let rel: Vec<&str> = rel.to_str()?.split('/').filter(|c| !c.is_empty()).collect();
    let rel = rel.join("/");
    paths
        .iter()
        .filter(|p| url_parts(p).is_none())
        .filter(|p| covers(p, &rel))
        .max_by_key(|p| p.len())
        .map(String::as_str)
}

/// Where job `spec`'s local sources and destination lead under canonical `root`,
/// checked against its access (if it has one): each source must resolve below one of
/// its read paths and a local destination below one of its write paths, whatever
/// symlinks lie on the way. One line naming the path that does not.
pub fn check_paths(root: &Path, spec: &JobSpec) -> Result<(), String> {
    let Some(access) = &spec.access else {
        return Ok(());
    };
    let denied = |p: &str| format!("{p:?} is not yours (identity map entry {})", access.entry);
    if !spec.is_relay() {
        for s in &spec.sources {
            let allowed = access.read_root(s).ok_or_else(|| denied(s))?;
            Access::resolve(root, allowed, s)?;
        }
    }
    if !crate::job::is_url(&spec.dest) {
        let allowed = access
            .write_root(&spec.dest)
            .ok_or_else(|| denied(&spec.dest))?;
        Access::resolve(root, allowed, &spec.dest)?;
    }
    Ok(())
}
