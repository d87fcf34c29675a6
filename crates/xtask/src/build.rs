//! Builds one variant and makes the shipped pair from it: cargo zigbuild with the
//! `release-dist` profile (release's code with the debug info left in the binary), then
//! objcopy moves the DWARF to `NAME.debug` (compressed) and writes `NAME` stripped,
//! with a .gnu_debuglink naming that file, so gdb and perf find it when it sits beside
//! the binary or in /usr/lib/debug. The same steps for both architectures, which
//! `split-debuginfo` is not (its .dwp needs the skeleton units left in the binary).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Result;

use crate::cmd::run;
use crate::elf::{check_split, check_static};
use crate::variant::Variant;

/// The cargo profile the shipped binaries are built with (Cargo.toml).
pub const PROFILE: &str = "release-dist";

/// `--quick`: the profile's settings CI overrides, through cargo's environment, to
/// build in a fraction of the time: the test profile's optimisation (opt-level 1), no
/// cross-crate LTO, more codegen units and line tables only for debug info. The
/// binary is larger and slower; what CI checks of it (static, split debug info, runs
/// under qemu, pushes and pulls across architectures, the package installs and
/// serves, the edge build within its budget) is the same.
const QUICK: [(&str, &str); 4] = [
    ("CARGO_PROFILE_RELEASE_DIST_OPT_LEVEL", "1"),
    ("CARGO_PROFILE_RELEASE_DIST_LTO", "false"),
    ("CARGO_PROFILE_RELEASE_DIST_CODEGEN_UNITS", "16"),
    ("CARGO_PROFILE_RELEASE_DIST_DEBUG", "line-tables-only"),
];

/// A variant's shipped files and how long its build took.
pub struct Built {
    /// Which binary.
    pub variant: Variant,
    /// The stripped static binary.
    pub bin: PathBuf,
    /// Its debug info.
    pub debug: PathBuf,
    /// Seconds the cargo build took (a cached build is quick).
    pub build_secs: u64,
}

/// Builds `v` in the checkout `root`, with zig from `zig_bin`, into `out`; `quick`
/// with CI's cheaper settings.
pub fn build(
    root: &Path,
    zig_bin: &Path,
    v: Variant,
    version: &str,
    out: &Path,
    quick: bool,
) -> Result<Built> {
    let t0 = Instant::now();
    eprintln!("xtask: building {} ({})", v.name(), v.arch.triple());
    let mut c = Command::new("cargo");
    c.current_dir(root)
        .env("PATH", path_with(zig_bin))
        .args(["zigbuild", "--locked", "--profile", PROFILE])
        .args(["--target", v.arch.triple(), "--bin", "hetch"]);
    if v.edge {
        c.arg("--no-default-features");
    }
    if quick {
        c.envs(QUICK);
    }
    run(&mut c)?;
    let build_secs = t0.elapsed().as_secs();
    let built = target_dir(root)
        .join(v.arch.triple())
        .join(PROFILE)
        .join("hetch");

    let bin = out.join(v.file_name(version));
    let debug = out.join(format!("{}.debug", v.file_name(version)));
    let (objcopy, _) = v.arch.objcopy();
    run(Command::new(objcopy)
        .args(["--only-keep-debug", "--compress-debug-sections=zlib"])
        .arg(&built)
        .arg(&debug))?;
    // objcopy keeps the binary's mode; the debug file is data.
    std::fs::set_permissions(&debug, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    let mut link = OsString::from("--add-gnu-debuglink=");
    link.push(&debug);
    run(Command::new(objcopy)
        .arg("--strip-all")
        .arg(link)
        .arg(&built)
        .arg(&bin))?;
    check_static(&bin)?;
    check_split(&bin, &debug)?;
    Ok(Built {
        variant: v,
        bin,
        debug,
        build_secs,
    })
}

/// Cargo's target directory: CARGO_TARGET_DIR if set, else the checkout's `target`.
pub fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(|d| root.join(d))
        .unwrap_or_else(|| root.join("target"))
}

/// PATH with `dir` first.
fn path_with(dir: &Path) -> OsString {
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).expect("PATH entries have no colon")
}
