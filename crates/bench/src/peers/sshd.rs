//! A private OpenSSH server for the ssh-based peers (rsync, scp, rclone): its own host
//! key, client key, authorized_keys and configuration in scratch, on a free port. Each
//! of those peers runs its own instance, so stopping one never breaks another.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::net;
use crate::server::{program, Server};
use crate::tool::ToolContext;

/// The cipher the ssh-based peers ask for: AES-GCM runs on AES-NI and needs no
/// separate MAC, the fastest OpenSSH offers on x86-64.
pub(crate) const CIPHER: &str = "aes128-gcm@openssh.com";

/// sshd's privilege-separation directory; sshd refuses to start without it, and
/// containers often lack it because the package's service never ran.
const PRIVSEP_DIR: &str = "/run/sshd";

/// A running sshd that accepts the generated client key for root.
#[derive(Debug)]
pub(crate) struct Sshd {
    server: Server,
    /// The port it listens on.
    pub(crate) port: u16,
    /// The client's private key.
    pub(crate) key: PathBuf,
}

impl Sshd {
    /// Starts an sshd for peer `tool` on `ctx.server`, its files in
    /// `SCRATCH/TOOL-sshd`, and waits until it accepts connections.
    pub(crate) fn start(tool: &'static str, ctx: &ToolContext) -> Result<Sshd> {
        let dir = ctx.scratch.join(format!("{tool}-sshd"));
        fs::create_dir_all(&dir).with_context(|| format!("{tool}: mkdir {}", dir.display()))?;
        let host_key = dir.join("host_ed25519");
        let key = dir.join("client_ed25519");
        keygen(tool, &host_key)?;
        keygen(tool, &key)?;
        let authorized = dir.join("authorized_keys");
        fs::copy(key.with_extension("pub"), &authorized)?;
        if !Path::new(PRIVSEP_DIR).is_dir() {
            fs::create_dir_all(PRIVSEP_DIR)?;
            fs::set_permissions(PRIVSEP_DIR, fs::Permissions::from_mode(0o755))?;
        }
        let port = net::free_port(&ctx.server)?;
        let config = dir.join("sshd_config");
        fs::write(
            &config,
            config_text(&dir, &host_key, &authorized, &ctx.server.addr),
        )?;
        // sshd re-executes itself, so it must be named by its absolute path.
        let mut cmd = ctx.server.command(&program("sshd"));
        cmd.arg("-D").arg("-e").arg("-f").arg(&config);
        cmd.args(["-p", &port.to_string()]);
        let server = Server::start(tool, cmd, &dir.join("sshd.log"), ctx, port)?;
        Ok(Sshd { server, port, key })
    }

    /// The ssh client options every ssh-based peer passes (the port flag differs
    /// between ssh, `-p`, and scp, `-P`, so it is not among them): no host-key
    /// prompts or records (the host key is new each benchmark), no password prompts,
    /// the generated key, the fastest cipher and no compression.
    pub(crate) fn client_options(&self) -> Vec<String> {
        [
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "Compression=no",
            "-c",
            CIPHER,
            "-i",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([self.key.display().to_string()])
        .collect()
    }

    /// Stops the server; idempotent.
    pub(crate) fn stop(&mut self) {
        self.server.stop();
    }
}

/// Generates an ed25519 key pair at `path` (and `path.pub`) unless one is there from
/// an earlier start.
fn keygen(tool: &str, path: &Path) -> Result<()> {
    if path.exists() && path.with_extension("pub").exists() {
        return Ok(());
    }
    let out = Command::new(program("ssh-keygen"))
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "hetch-bench", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("{tool}: cannot run ssh-keygen"))?;
    if !out.status.success() {
        bail!(
            "{tool}: ssh-keygen {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The sshd configuration: root logs in with the generated key only; no PAM or
/// strict modes (the scratch directory's owner and modes are the harness's business);
/// generous connection limits because rclone opens one connection per transfer at
/// once; the in-process SFTP server, which saves an exec per connection.
fn config_text(dir: &Path, host_key: &Path, authorized: &Path, addr: &str) -> String {
    format!(
        "HostKey {host_key}\n\
         AuthorizedKeysFile {authorized}\n\
         PidFile {pid}\n\
         ListenAddress {addr}\n\
         PermitRootLogin yes\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UsePAM no\n\
         StrictModes no\n\
         UseDNS no\n\
         PrintMotd no\n\
         X11Forwarding no\n\
         AllowTcpForwarding no\n\
         MaxStartups 256\n\
         MaxSessions 256\n\
         Subsystem sftp internal-sftp\n",
        host_key = host_key.display(),
        authorized = authorized.display(),
        pid = dir.join("sshd.pid").display(),
    )
}
