//! Installs what the tasks need when it is missing, from the registries only: Rust's
//! musl targets (rustup), zig and cargo-zigbuild (PyPI, into a venv under
//! `target/tools/zig`, not globally) and Debian packages (apt-get). Each step first
//! looks, so a second run installs nothing.
//!
//! Why zig: the crates with C in them (ring, zstd-sys, the bundled SQLite) need a C
//! compiler and a libc for the target. Debian has a musl toolchain only for the host
//! (musl-tools' musl-gcc); its gcc-aarch64-linux-gnu targets glibc, so an aarch64 musl
//! build would compile C against glibc's headers. Zig ships musl's headers and libc
//! for both architectures, and cargo-zigbuild uses it as the C compiler and linker.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Result};

use crate::cmd::{output, run, which};

/// The versions the dist build was made and checked with: a new zig can change what
/// compiles, so a fresh CI machine gets these, not whatever is newest.
const ZIGLANG: &str = "ziglang==0.17.1";
const CARGO_ZIGBUILD: &str = "cargo-zigbuild==0.24.1";

/// Adds the rustup targets that are not installed yet.
pub fn rust_targets(targets: &[&str]) -> Result<()> {
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    let missing: Vec<&str> = targets
        .iter()
        .copied()
        .filter(|t| !installed.lines().any(|l| l.trim() == *t))
        .collect();
    if !missing.is_empty() {
        run(Command::new("rustup")
            .args(["target", "add"])
            .args(&missing))?;
    }
    Ok(())
}

/// Makes sure zig and cargo-zigbuild are in the venv `root/target/tools/zig`;
/// returns its `bin` directory, to go first on PATH for the builds (cargo-zigbuild
/// finds zig there as `python3 -m ziglang`).
pub fn zig(root: &Path) -> Result<PathBuf> {
    let venv = root.join("target/tools/zig");
    let bin = venv.join("bin");
    let ready = bin.join("cargo-zigbuild").exists()
        && Command::new(bin.join("python3"))
            .args(["-m", "ziglang", "version"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
    if ready {
        return Ok(bin);
    }
    if which("python3").is_none() {
        apt(&[("python3", "python3")])?;
    }
    // Debian's python3 has the venv module but not ensurepip, which `venv` needs to
    // put pip in; python3-venv brings it.
    if Command::new("python3")
        .args(["-c", "import ensurepip, venv"])
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        apt(&[("", "python3-venv")])?;
    }
    run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    run(Command::new(bin.join("pip")).args([
        "install",
        "-q",
        "--disable-pip-version-check",
        ZIGLANG,
        CARGO_ZIGBUILD,
    ]))?;
    Ok(bin)
}

/// Installs the Debian packages whose probe (a program on PATH, or an absolute path)
/// is missing; an empty probe always installs. `(probe, package)` pairs.
pub fn apt(wanted: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|(probe, _)| {
            probe.is_empty()
                || if probe.starts_with('/') {
                    !Path::new(probe).exists()
                } else {
                    which(probe).is_none()
                }
        })
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if which("apt-get").is_none() {
        bail!(
            "missing {}: install them (no apt-get here)",
            missing.join(" ")
        );
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { geteuid() } != 0 {
        bail!(
            "missing {}: run as root, or apt-get install {}",
            missing.join(" "),
            missing.join(" ")
        );
    }
    let quiet = |c: &mut Command| {
        c.env("DEBIAN_FRONTEND", "noninteractive");
    };
    let mut update = Command::new("apt-get");
    update.args(["update", "-qq"]);
    quiet(&mut update);
    run(&mut update)?;
    let mut install = Command::new("apt-get");
    install
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing);
    quiet(&mut install);
    run(&mut install)
}

extern "C" {
    fn geteuid() -> u32;
}
