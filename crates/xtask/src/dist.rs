//! `cargo xtask dist`: installs what is missing, builds the chosen variants, the
//! Debian package when the full x86_64 binary is among them, SHA256SUMS, then prints
//! what it wrote and holds the edge binary to its size budget.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Result};

use crate::build::{self, Built};
use crate::cmd::output;
use crate::deb;
use crate::tools;
use crate::variant::{Arch, Variant};

/// The most the stripped static edge x86_64 binary may weigh, whichever way it was
/// built. Measured at 0.1.0: 10.1 MB with `--quick` (CI's build); a release build is
/// smaller (the full binary: 25.6 MB against 28.2 MB quick). 13 MB leaves the quick
/// build about 30% for growth; a dependency that pushes past it is a decision to make
/// on purpose, for a binary meant for small devices, not one that slips in.
pub const EDGE_BUDGET: u64 = 13_000_000;

/// Builds `only` (every variant if empty) into `target/dist`, emptied first so that
/// SHA256SUMS describes one run; `quick` with CI's cheaper build settings.
pub fn dist(root: &Path, only: &[Variant], quick: bool) -> Result<()> {
    let version = env!("CARGO_PKG_VERSION");
    let out = build::target_dir(root).join("dist");
    let variants = if only.is_empty() {
        Variant::all()
    } else {
        only.to_vec()
    };
    let with_deb = variants.contains(&Variant {
        arch: Arch::X86_64,
        edge: false,
    });

    let mut triples: Vec<&str> = variants.iter().map(|v| v.arch.triple()).collect();
    triples.dedup();
    tools::rust_targets(&triples)?;
    let mut debs = vec![
        ("file", "file"),
        ("readelf", "binutils"),
        ("objcopy", "binutils"),
    ];
    if variants.iter().any(|v| v.arch == Arch::Aarch64) {
        debs.push(Arch::Aarch64.objcopy());
    }
    if with_deb {
        debs.extend([("dpkg-deb", "dpkg"), ("gzip", "gzip")]);
    }
    tools::apt(&debs)?;
    let zig = tools::zig(root)?;

    if out.exists() {
        fs::remove_dir_all(&out)?;
    }
    fs::create_dir_all(&out)?;
    let mut built = Vec::new();
    for v in variants {
        built.push(build::build(root, &zig, v, version, &out, quick)?);
    }
    let deb = match built
        .iter()
        .find(|b| b.variant.arch == Arch::X86_64 && !b.variant.edge)
    {
        Some(full) => Some(deb::build(root, &full.bin, version, &out)?),
        None => None,
    };
    sha256sums(&out)?;
    table(&built, deb.as_deref(), &out)?;
    budget(&built, EDGE_BUDGET)
}

/// Writes `SHA256SUMS` (`sha256sum -c SHA256SUMS` checks the directory).
fn sha256sums(out: &Path) -> Result<()> {
    let mut names: Vec<String> = fs::read_dir(out)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let sums = output(
        Command::new("sha256sum")
            .current_dir(out)
            .arg("--")
            .args(&names),
    )?;
    fs::write(out.join("SHA256SUMS"), sums)?;
    Ok(())
}

fn table(built: &[Built], deb: Option<&Path>, out: &Path) -> Result<()> {
    let size = |p: &Path| fs::metadata(p).map(|m| m.len());
    println!("{}/", out.display());
    println!("  {:<50} {:>12} {:>9}  build", "file", "bytes", "MiB");
    let mut rows: Vec<(PathBuf, Option<u64>)> = Vec::new();
    for b in built {
        rows.push((b.bin.clone(), Some(b.build_secs)));
        rows.push((b.debug.clone(), None));
    }
    rows.extend(deb.map(|d| (d.to_path_buf(), None)));
    rows.push((out.join("SHA256SUMS"), None));
    for (p, secs) in rows {
        let n = size(&p)?;
        let secs = secs.map(|s| format!("{s} s")).unwrap_or_default();
        println!(
            "  {:<50} {:>12} {:>9.1}  {secs}",
            p.file_name().unwrap_or_default().to_string_lossy(),
            n,
            n as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}

/// Fails if the edge x86_64 binary was built and is over `limit` ([`EDGE_BUDGET`]);
/// prints it beside the full one either way.
fn budget(built: &[Built], limit: u64) -> Result<()> {
    let size = |edge| {
        built
            .iter()
            .find(|b| b.variant.arch == Arch::X86_64 && b.variant.edge == edge)
            .map(|b| fs::metadata(&b.bin).map(|m| m.len()))
            .transpose()
    };
    let (edge, full) = (size(true)?, size(false)?);
    let mb = |n: Option<u64>| n.map_or("not built".into(), |n| format!("{:.1} MB", n as f64 / 1e6));
    println!(
        "edge x86_64: {} (budget {}); full x86_64: {}",
        mb(edge),
        mb(Some(limit)),
        mb(full)
    );
    if let Some(n) = edge.filter(|&n| n > limit) {
        bail!(
            "the edge x86_64 binary is {}, over its budget of {} (crates/xtask/src/dist.rs)",
            mb(Some(n)),
            mb(Some(limit))
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(dir: &Path, edge: bool, len: u64) -> Built {
        let bin = dir.join(if edge { "edge" } else { "full" });
        fs::File::create(&bin).unwrap().set_len(len).unwrap();
        Built {
            variant: Variant {
                arch: Arch::X86_64,
                edge,
            },
            debug: bin.clone(),
            bin,
            build_secs: 0,
        }
    }

    #[test]
    fn an_edge_binary_over_its_budget_fails_dist() {
        let dir = std::env::temp_dir().join(format!("xtask-budget-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let full = built(&dir, false, 5000);
        assert!(budget(&[full, built(&dir, true, 1000)], 1000).is_ok());
        let err = budget(&[built(&dir, true, 1001)], 1000).unwrap_err();
        assert!(err.to_string().contains("over its budget"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
