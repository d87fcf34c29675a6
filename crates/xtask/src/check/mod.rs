//! `cargo xtask check-dist`: what CI runs after `dist`, on what it left in
//! `target/dist`. Each check prints one line when it passes; the first that fails
//! ends the run with one line saying why.
//!
//! 1. every binary is static (`ldd`, `file`), and has the features of its build;
//! 2. each aarch64 binary runs `hetch demo` under qemu-user;
//! 3. an aarch64 server and an x86_64 client push and pull a file, `hetch sum` agreeing
//!    on both sides;
//! 4. the .deb installs into a throwaway root and its `hetch serve` unit works
//!    ([`deb_root`]).

mod data;
pub mod deb_root;
mod qemu;
mod server;
mod unit;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Result};

use crate::build::target_dir;
use crate::cmd::output;
use crate::deb;
use crate::elf::check_static;
use crate::tools;
use crate::variant::{Arch, Variant};

/// The root crate's default features: the full build's, none of them the edge build's.
const DEFAULT_FEATURES: [&str; 3] = ["cloud", "service", "mcp"];

/// Runs every check on `target/dist`.
pub fn check_dist(root: &Path) -> Result<()> {
    let version = env!("CARGO_PKG_VERSION");
    let dist = target_dir(root).join("dist");
    let present: Vec<(Variant, PathBuf)> = Variant::all()
        .into_iter()
        .map(|v| (v, dist.join(v.file_name(version))))
        .filter(|(_, p)| p.exists())
        .collect();
    if present.is_empty() {
        bail!(
            "no hetch binaries in {}: run cargo xtask dist first",
            dist.display()
        );
    }
    tools::apt(&[
        ("file", "file"),
        ("ldd", "libc-bin"),
        (qemu::QEMU, "qemu-user-static"),
        ("unshare", "util-linux"),
    ])?;
    let pick = |arch: Arch| {
        // The edge build first: the smaller, the quicker under emulation.
        [true, false].iter().find_map(|&edge| {
            present
                .iter()
                .find(|(v, _)| v.arch == arch && v.edge == edge)
                .map(|(_, p)| p.clone())
        })
    };
    let (Some(arm), Some(x86)) = (pick(Arch::Aarch64), pick(Arch::X86_64)) else {
        bail!(
            "check-dist needs an aarch64 and an x86_64 binary in {}",
            dist.display()
        );
    };
    let x86_full = dist.join(
        Variant {
            arch: Arch::X86_64,
            edge: false,
        }
        .file_name(version),
    );
    let deb = dist.join(deb::file_name(version));
    if !deb.exists() {
        bail!(
            "no {} in {}: run cargo xtask dist with x86_64-full",
            deb::file_name(version),
            dist.display()
        );
    }

    for (v, p) in &present {
        timed(&format!("{} is static", v.name()), || check_static(p))?;
        timed(&format!("{} has its features", v.name()), || {
            features(*v, p)
        })?;
    }
    for (v, p) in present.iter().filter(|(v, _)| v.arch == Arch::Aarch64) {
        timed(&format!("{} runs hetch demo under qemu", v.name()), || {
            qemu::demo(p)
        })?;
    }
    let work = target_dir(root).join("dist-check");
    timed("aarch64 server, x86_64 client: push and pull agree", || {
        qemu::cross(&arm, &x86, &work.join("cross"))
    })?;
    timed("the .deb installs, and its hetch-serve unit serves", || {
        deb_root::check(&deb, &x86_full, &work.join("root"))
    })?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// The full build has the default features and the edge build none of them, as
/// `hetch --version` says (it lists the features it was built with).
fn features(v: Variant, bin: &Path) -> Result<()> {
    let mut c = match v.arch {
        Arch::X86_64 => Command::new(bin),
        Arch::Aarch64 => {
            let mut c = Command::new(qemu::QEMU);
            c.arg(bin);
            c
        }
    };
    let version = output(c.arg("--version"))?;
    let version = version.trim();
    for f in DEFAULT_FEATURES {
        let has = version
            .split(|c: char| !c.is_alphanumeric())
            .any(|w| w == f);
        if has == v.edge {
            let should = if v.edge { "should not" } else { "should" };
            bail!(
                "{}: {f:?} {should} be in its features: --version says {version:?}",
                v.name()
            );
        }
    }
    Ok(())
}

fn timed(what: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    let t0 = Instant::now();
    f()?;
    println!("ok: {what} ({} s)", t0.elapsed().as_secs());
    Ok(())
}
