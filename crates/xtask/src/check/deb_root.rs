//! The Debian package installed into a throwaway root: an overlay over `/` whose
//! upper layer is a tmpfs, in a private mount namespace (`unshare --mount`), entered
//! with chroot. The host's files are the lower layer and are never written; every
//! change (dpkg's database, the new user, the installed files) lands in the tmpfs and
//! is gone when the namespace's last process exits, however the check ends. Needs
//! root and overlayfs, no network, no container runtime.
//!
//! In it: dpkg -i (twice: the maintainer scripts must be idempotent), the files
//! `dpkg -L` lists, the user, `hetch --version`, then `hetch serve` run as its unit
//! would run it (User=, Group=, EnvironmentFile=, ExecStart=; systemd is not running),
//! a push to it from the x86_64 binary outside, the file checked by digest and owner,
//! then `dpkg --purge` and what it must and must not remove.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::data;
use super::qemu::digest;
use super::server::Server;
use super::unit;
use crate::cmd::{output, run};
use crate::deb::{FILES, MAN_PAGES};

/// PATH in the root: dpkg needs the sbin directories (ldconfig, start-stop-daemon),
/// whatever the caller's PATH.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The hidden subcommand the namespace's process runs (`xtask deb-root DEB CLIENT WORK`).
pub const SUBCOMMAND: &str = "deb-root";

/// Runs the check in a new mount namespace; `client` is an x86_64 hetch on the host.
pub fn check(deb: &Path, client: &Path, work: &Path) -> Result<()> {
    let exe = std::env::current_exe()?;
    let status = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .arg(exe)
        .arg(SUBCOMMAND)
        .args([deb, client, work])
        .status()
        .context("cannot run unshare")?;
    // The mounts went with the namespace; what is left is the empty mount point.
    let _ = fs::remove_dir_all(work);
    if !status.success() {
        // The process inside said why, in one line.
        std::process::exit(status.code().unwrap_or(1));
    }
    Ok(())
}

/// What the namespace's process does (see the module's docs).
pub fn inside(deb: &Path, client: &Path, work: &Path) -> Result<()> {
    let root = mount_root(work)?;
    let in_root = |p: &str| root.join(p.trim_start_matches('/'));
    let chroot = |args: &[&str]| {
        let mut c = Command::new("chroot");
        c.arg(&root).args(args).env("PATH", PATH);
        c
    };

    if chroot(&["dpkg", "-s", "hetch"]).output()?.status.success() {
        bail!("hetch is installed on this host: the package check needs a root without it");
    }
    let deb_name = deb.file_name().context("a .deb file")?.to_string_lossy();
    fs::copy(deb, in_root("/tmp").join(&*deb_name))?;
    let deb_in_root = format!("/tmp/{deb_name}");
    output(&mut chroot(&["dpkg", "-i", &deb_in_root]))?;
    output(&mut chroot(&["dpkg", "-i", &deb_in_root])).context("installing it again")?;

    let listed = output(&mut chroot(&["dpkg", "-L", "hetch"]))?;
    for f in FILES {
        if !listed.lines().any(|l| l == f) {
            bail!("dpkg -L hetch does not list {f}");
        }
        if fs::metadata(in_root(f)).map(|m| m.len()).unwrap_or(0) == 0 {
            bail!("{f} is missing or empty after dpkg -i");
        }
    }
    for page in MAN_PAGES {
        if !listed.contains(&format!("/usr/share/man/man1/{page}")) {
            bail!("dpkg -L hetch lists no man page {page}");
        }
    }
    let conffiles = output(&mut chroot(&[
        "dpkg-query",
        "-W",
        "-f=${Conffiles}",
        "hetch",
    ]))?;
    if conffiles
        .lines()
        .filter(|l| l.contains("/etc/default/hetch-"))
        .count()
        != 3
    {
        bail!(
            "the package's conffiles are not the three /etc/default/hetch-* files: {conffiles:?}"
        );
    }
    let version = output(&mut chroot(&["hetch", "--version"]))?;
    if !version.contains(env!("CARGO_PKG_VERSION")) {
        bail!("hetch --version in the root says {:?}", version.trim());
    }

    let passwd = output(&mut chroot(&["getent", "passwd", "hetch"]))
        .context("no user hetch after dpkg -i")?;
    let fields: Vec<&str> = passwd.trim().split(':').collect();
    let (uid, home) = match fields.as_slice() {
        [_, _, uid, _, _, home, _] => (uid.parse::<u32>()?, home.to_string()),
        _ => bail!("getent passwd hetch: {passwd:?}"),
    };
    let state = fs::metadata(in_root("/var/lib/hetch")).context("no /var/lib/hetch")?;
    if state.uid() != uid || state.mode() & 0o077 != 0 {
        bail!(
            "/var/lib/hetch is not the user hetch's alone (uid {}, mode {:o})",
            state.uid(),
            state.mode() & 0o777
        );
    }

    let arrived = serve_as_the_unit(&root, client, uid, &home)?;

    output(&mut chroot(&["dpkg", "--purge", "hetch"]))?;
    if in_root("/var/lib/hetch").exists() {
        bail!("dpkg --purge left /var/lib/hetch (postrm removes the state on purge)");
    }
    if !arrived.exists() {
        bail!("dpkg --purge removed served data ({})", arrived.display());
    }
    // Lazily: the namespace's end would unmount it all anyway; the root's processes
    // are gone (the server was killed and waited for).
    run(Command::new("umount").args(["-R", "-l"]).arg(&root))?;
    Ok(())
}

/// Starts `hetch serve` from the installed hetch-serve.service, on an ephemeral
/// loopback port instead of its --listen; pushes a file to it from `client`. Returns
/// where the file arrived.
fn serve_as_the_unit(root: &Path, client: &Path, uid: u32, home: &str) -> Result<PathBuf> {
    let in_root = |p: &str| root.join(p.trim_start_matches('/'));
    let unit_path = "/lib/systemd/system/hetch-serve.service";
    let svc = unit::parse_unit(&fs::read_to_string(in_root(unit_path))?)
        .with_context(|| unit_path.to_string())?;
    let env = match &svc.environment_file {
        Some(f) => unit::parse_env(
            &fs::read_to_string(in_root(f)).with_context(|| format!("reading {f}"))?,
        ),
        None => Default::default(),
    };
    let mut argv = unit::expand(&svc.exec_start, &env)?;
    // A fixed port could be taken on a shared machine: the rest is the unit's.
    match argv.iter().position(|a| a == "--listen") {
        Some(i) if i + 1 < argv.len() => argv[i + 1] = "127.0.0.1:0".into(),
        _ => argv.extend(["--listen".into(), "127.0.0.1:0".into()]),
    }
    let served = unit::flag_value(&argv, "--root")
        .context("the unit's hetch serve has no --root")?
        .to_string();

    let mut cmd = Command::new("chroot");
    cmd.arg(root)
        .args([
            "setpriv",
            "--reuid",
            &svc.user,
            "--regid",
            &svc.group,
            "--init-groups",
            "--",
        ])
        .args(&argv)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", home)
        .env("USER", &svc.user)
        .env("LOGNAME", &svc.user)
        .envs(&env);
    let srv =
        Server::start(cmd, Duration::from_secs(30)).context("hetch serve as its unit runs it")?;
    let status = fs::read_to_string(format!("/proc/{}/status", srv.pid()))?;
    let runs_as = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|u| u.parse::<u32>().ok());
    if runs_as != Some(uid) {
        bail!("hetch serve from the unit runs as uid {runs_as:?}, not hetch's {uid}");
    }

    let src = root.join("tmp/deb-check-src.bin");
    data::write(&src, 4 << 20)?;
    output(
        srv.cp(client, &in_root(&srv.token_file.to_string_lossy()))
            .arg(&src)
            .arg(format!("hetch://{}/deb-check.bin", srv.addr)),
    )
    .context("pushing to the package's hetch serve")?;
    drop(srv);

    let arrived: PathBuf = in_root(&served).join("deb-check.bin");
    let meta =
        fs::metadata(&arrived).with_context(|| format!("{served}/deb-check.bin did not arrive"))?;
    if meta.uid() != uid {
        bail!(
            "{served}/deb-check.bin is owned by uid {}, not hetch ({uid})",
            meta.uid()
        );
    }
    let (want, got) = (
        digest(Command::new(client).arg("sum").arg(&src))?,
        digest(Command::new(client).arg("sum").arg(&arrived))?,
    );
    if want != got {
        bail!("{served}/deb-check.bin differs from what was pushed (hetch sum {got}, sent {want})");
    }
    Ok(arrived)
}

/// Mounts the throwaway root at `work/root` and returns its path: a tmpfs at `work`
/// holding the overlay's upper and work directories, the overlay over `/`, then the
/// API file systems a package's scripts use. /run and /tmp are fresh tmpfs: the host's
/// /run/systemd/system would make the scripts talk to the host's systemd.
fn mount_root(work: &Path) -> Result<PathBuf> {
    fs::create_dir_all(work)?;
    let mount = |args: &[&str], at: &Path| run(Command::new("mount").args(args).arg(at));
    mount(&["-t", "tmpfs", "tmpfs"], work)?;
    let (upper, scratch, root) = (work.join("upper"), work.join("scratch"), work.join("root"));
    for d in [&upper, &scratch, &root] {
        fs::create_dir(d)?;
    }
    let opts = format!(
        "lowerdir=/,upperdir={},workdir={}",
        upper.display(),
        scratch.display()
    );
    mount(&["-t", "overlay", "overlay", "-o", &opts], &root)?;
    mount(&["-t", "proc", "proc"], &root.join("proc"))?;
    mount(&["--rbind", "/dev"], &root.join("dev"))?;
    mount(&["-t", "tmpfs", "tmpfs"], &root.join("run"))?;
    mount(&["-t", "tmpfs", "tmpfs"], &root.join("tmp"))?;
    Ok(root)
}
