//! Puts the commit and the features of this build into `hetch --version`
//! (`HETCH_LONG_VERSION`): "0.1.0 (commit 1a2b3c4d5e6f 2026-11-28, features: cloud mcp
//! service)".
//!
//! The commit is git's, when the crate is built in its own checkout (a worktree too);
//! `unknown` outside one (a source tarball, even unpacked inside another repository);
//! a packager's `HETCH_BUILD_COMMIT` wins over both. The script reruns when HEAD or
//! the branch it names moves (a commit, a checkout), not on every edit, so it marks no
//! dirty tree: that mark would go stale between two commits.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=HETCH_BUILD_COMMIT");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let commit = match std::env::var("HETCH_BUILD_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => git_commit(&dir).unwrap_or_else(|| "unknown".into()),
    };
    // Cargo sets CARGO_FEATURE_<NAME> for each feature of this package that is on.
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| k.strip_prefix("CARGO_FEATURE_").map(str::to_lowercase))
        .filter(|f| f != "default")
        .map(|f| f.replace('_', "-"))
        .collect();
    features.sort();
    let features = match features.is_empty() {
        true => "none".to_string(),
        false => features.join(" "),
    };
    let version = std::env::var("CARGO_PKG_VERSION").expect("set by cargo");
    println!(
        "cargo:rustc-env=HETCH_LONG_VERSION={version} (commit {commit}, features: {features})"
    );
}

/// `git` run in `dir`, its output trimmed; `None` if it fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let s = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !s.trim().is_empty()).then(|| s.trim().to_string())
}

/// The checkout's commit and its date ("1a2b3c4d5e6f 2026-11-28"), if `dir` is the top
/// of a git checkout; tells cargo to rerun when HEAD or its branch moves.
fn git_commit(dir: &Path) -> Option<String> {
    // Only this crate's own checkout: not a repository the sources were unpacked in.
    let top = PathBuf::from(git(dir, &["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != dir.canonicalize().ok()? {
        return None;
    }
    // In a worktree HEAD is under .git/worktrees/NAME and branches are shared:
    // `--git-path` finds each where it is.
    // HEAD's reflog grows on every commit and checkout, also of a branch that lives
    // only in packed-refs (whose loose file did not exist to be watched).
    let mut paths = vec!["HEAD".to_string(), "logs/HEAD".into(), "packed-refs".into()];
    paths.extend(git(dir, &["symbolic-ref", "-q", "HEAD"]));
    let mut watched = Vec::new();
    for p in &paths {
        watched.push(git(dir, &["rev-parse", "--git-path", p])?);
    }
    for path in watched {
        // A missing file would rerun the script on every build.
        let path = dir.join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let hash = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
    let date = git(dir, &["log", "-1", "--format=%cs", "HEAD"])?;
    Some(format!("{hash} {date}"))
}
