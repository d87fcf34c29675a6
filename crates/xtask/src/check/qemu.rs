//! The aarch64 build at work under qemu-user: `hetch demo` (a server and a client of
//! that build on loopback, a push and a pull over TLS, every file checked by BLAKE3),
//! then an aarch64 `hetch serve` with the x86_64 binary as its client, a push and a
//! pull checked with `hetch sum` on both sides.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Result};

use super::data;
use super::server::Server;
use crate::cmd::output;

/// qemu-user's static build (Debian's qemu-user-static), which runs an aarch64 binary
/// on any host without binfmt_misc being set up.
pub const QEMU: &str = "qemu-aarch64-static";

/// The large file of the demo in MiB: its other files (64 MiB of medium files, 2000
/// small ones, a sparse one) are fixed, and emulation is ~10 times slower than native.
const DEMO_LARGE_MIB: &str = "16";

/// Runs the demo with the aarch64 binary `arm`.
pub fn demo(arm: &Path) -> Result<()> {
    output(Command::new(QEMU).arg(arm).arg("--version"))?;
    output(
        Command::new(QEMU)
            .arg(arm)
            .args(["demo", "--large-mib", DEMO_LARGE_MIB]),
    )?;
    Ok(())
}

/// Serves `work/served` with the aarch64 binary `arm`; pushes a file into it and pulls
/// it back with the x86_64 binary `x86`; compares the three digests.
pub fn cross(arm: &Path, x86: &Path, work: &Path) -> Result<()> {
    if work.exists() {
        fs::remove_dir_all(work)?;
    }
    let served = work.join("served");
    fs::create_dir_all(&served)?;
    let src = work.join("src.bin");
    data::write(&src, 8 << 20)?;

    let mut serve = Command::new(QEMU);
    serve
        .arg(arm)
        .arg("serve")
        .arg("--root")
        .arg(&served)
        .args(["--listen", "127.0.0.1:0", "--state-dir"])
        .arg(work.join("state"));
    let srv = Server::start(serve, Duration::from_secs(120))?;
    let client = |args: &[&std::ffi::OsStr]| output(srv.cp(x86, &srv.token_file).args(args));
    let url = format!("hetch://{}/cross.bin", srv.addr);
    let pulled = work.join("pulled.bin");
    client(&[src.as_os_str(), url.as_ref()])?;
    client(&[url.as_ref(), pulled.as_os_str()])?;
    drop(srv);

    let want = digest(Command::new(x86).arg("sum").arg(&src))?;
    let on_arm = digest(
        Command::new(QEMU)
            .arg(arm)
            .arg("sum")
            .arg(served.join("cross.bin")),
    )?;
    let back = digest(Command::new(x86).arg("sum").arg(&pulled))?;
    if on_arm != want {
        bail!(
            "the file pushed to the aarch64 server differs: hetch sum {on_arm} there, {want} here"
        );
    }
    if back != want {
        bail!("the file pulled from the aarch64 server differs: hetch sum {back}, sent {want}");
    }
    fs::remove_dir_all(work)?;
    Ok(())
}

/// The digest of `hetch sum FILE`'s one line (`DIGEST  NAME`).
pub fn digest(c: &mut Command) -> Result<String> {
    let out = output(c)?;
    match out.split_whitespace().next() {
        Some(d) if d.len() >= 32 => Ok(d.to_string()),
        _ => bail!("hetch sum printed no digest: {:?}", out.trim()),
    }
}
