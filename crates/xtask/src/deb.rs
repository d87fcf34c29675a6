//! The Debian package, built with `dpkg-deb --build` from a staging tree. (cargo-deb
//! would build hetch again itself, for the host's glibc, unless told the musl target
//! and zig; dist already has the binary, and the tree is a handful of files.) Its
//! data is in `contrib/debian/`: the units, the conffiles in /etc/default, the
//! maintainer scripts, the control file, copyright and README.Debian. The man pages
//! and completions come from the binary itself (`hetch man DIR`, `hetch completions
//! SHELL`).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::cmd::{output, run};

/// Whom the package names as its maintainer.
const MAINTAINER: &str = "hetch developers <hetch@users.noreply.github.com>";

/// The systemd units, in contrib/debian and in /lib/systemd/system.
pub const UNITS: [&str; 3] = [
    "hetch-serve.service",
    "hetch-service.service",
    "hetch-worker@.service",
];

/// Every file the package installs apart from the man pages (whose list is the
/// binary's: see [`MAN_PAGES`]); the package check expects each in `dpkg -L hetch`.
pub const FILES: [&str; 14] = [
    "/usr/bin/hetch",
    "/lib/systemd/system/hetch-serve.service",
    "/lib/systemd/system/hetch-service.service",
    "/lib/systemd/system/hetch-worker@.service",
    "/etc/default/hetch-serve",
    "/etc/default/hetch-service",
    "/etc/default/hetch-worker",
    "/usr/share/bash-completion/completions/hetch",
    "/usr/share/zsh/vendor-completions/_hetch",
    "/usr/share/fish/vendor_completions.d/hetch.fish",
    "/usr/share/doc/hetch/copyright",
    "/usr/share/doc/hetch/README.Debian",
    "/usr/share/man/man1/hetch.1.gz",
    "/usr/share/man/man1/hetch-serve.1.gz",
];

/// Man pages the package must have at least (the binary writes one per subcommand):
/// the units' `Documentation=` name these.
pub const MAN_PAGES: [&str; 4] = [
    "hetch.1.gz",
    "hetch-serve.1.gz",
    "hetch-service.1.gz",
    "hetch-worker.1.gz",
];

/// Where each shell's completions go, as Debian's bash-completion, zsh and fish look.
const COMPLETIONS: [(&str, &str); 3] = [
    ("bash", "usr/share/bash-completion/completions/hetch"),
    ("zsh", "usr/share/zsh/vendor-completions/_hetch"),
    ("fish", "usr/share/fish/vendor_completions.d/hetch.fish"),
];

/// The package's file name.
pub fn file_name(version: &str) -> String {
    format!("hetch_{version}-1_amd64.deb")
}

/// Builds `out/hetch_VERSION-1_amd64.deb` around the x86_64 binary `bin`.
pub fn build(root: &Path, bin: &Path, version: &str, out: &Path) -> Result<PathBuf> {
    let src = root.join("contrib/debian");
    let stage = out.join(".deb-staging");
    if stage.exists() {
        fs::remove_dir_all(&stage)?;
    }

    install(bin, &stage.join("usr/bin/hetch"), 0o755)?;
    for unit in UNITS {
        install(
            &src.join(unit),
            &stage.join("lib/systemd/system").join(unit),
            0o644,
        )?;
    }
    for name in ["hetch-serve", "hetch-service", "hetch-worker"] {
        install(
            &src.join("default").join(name),
            &stage.join("etc/default").join(name),
            0o644,
        )?;
    }
    for doc in ["copyright", "README.Debian"] {
        install(
            &src.join(doc),
            &stage.join("usr/share/doc/hetch").join(doc),
            0o644,
        )?;
    }
    man_pages(bin, &stage.join("usr/share/man/man1"))?;
    for (shell, dest) in COMPLETIONS {
        let script = output(Command::new(bin).args(["completions", shell]))?;
        if script.trim().is_empty() {
            bail!("hetch completions {shell} printed nothing");
        }
        write(&stage.join(dest), script.as_bytes(), 0o644)?;
    }

    let debian = stage.join("DEBIAN");
    let installed_kib = files(&stage)?
        .iter()
        .map(|f| f.metadata().map(|m| m.len().div_ceil(1024)))
        .sum::<std::io::Result<u64>>()?;
    let control = fs::read_to_string(src.join("control"))?
        .replace("@VERSION@", version)
        .replace("@MAINTAINER@", MAINTAINER)
        .replace("@INSTALLED_SIZE@", &installed_kib.to_string());
    write(&debian.join("control"), control.as_bytes(), 0o644)?;
    // dpkg-deb makes nothing a conffile by itself (debhelper would): list them.
    write(
        &debian.join("conffiles"),
        b"/etc/default/hetch-serve\n/etc/default/hetch-service\n/etc/default/hetch-worker\n",
        0o644,
    )?;
    for script in ["postinst", "prerm", "postrm"] {
        install(&src.join(script), &debian.join(script), 0o755)?;
    }
    write(&debian.join("md5sums"), md5sums(&stage)?.as_bytes(), 0o644)?;

    let deb = out.join(file_name(version));
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zxz", "--build"])
        .arg(&stage)
        .arg(&deb))?;
    fs::remove_dir_all(&stage)?;
    Ok(deb)
}

/// `hetch man DIR`, then each page gzipped (-n: no name or time in the header, so the
/// same page gives the same bytes).
fn man_pages(bin: &Path, dir: &Path) -> Result<()> {
    fs::create_dir_all(dir)?;
    run(Command::new(bin).arg("man").arg(dir))?;
    let mut pages: Vec<PathBuf> = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    pages.retain(|p| p.extension().is_some_and(|e| e == "1"));
    if pages.is_empty() {
        bail!("hetch man {} wrote no page", dir.display());
    }
    run(Command::new("gzip").args(["-9n", "--"]).args(&pages))?;
    for name in MAN_PAGES {
        if !dir.join(name).exists() {
            bail!("hetch man wrote no {}", name.trim_end_matches(".gz"));
        }
    }
    Ok(())
}

/// `md5sum`'s lines for every file below `stage` but DEBIAN (dpkg --verify reads them).
fn md5sums(stage: &Path) -> Result<String> {
    let rel: Vec<PathBuf> = files(stage)?
        .into_iter()
        .map(|f| f.strip_prefix(stage).map(Path::to_path_buf))
        .collect::<Result<_, _>>()?;
    output(
        Command::new("md5sum")
            .current_dir(stage)
            .arg("--")
            .args(rel),
    )
}

/// Every regular file below `dir`, sorted, DEBIAN left out.
fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let e = e?;
            let p = e.path();
            if e.file_type()?.is_dir() {
                if p != dir.join("DEBIAN") {
                    stack.push(p);
                }
            } else {
                found.push(p);
            }
        }
    }
    found.sort();
    Ok(found)
}

fn install(from: &Path, to: &Path, mode: u32) -> Result<()> {
    let bytes = fs::read(from).with_context(|| format!("reading {}", from.display()))?;
    write(to, &bytes, mode)
}

fn write(to: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    fs::create_dir_all(to.parent().expect("a file in a directory"))?;
    fs::write(to, bytes).with_context(|| format!("writing {}", to.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(mode))?;
    Ok(())
}
