//! rclone's SFTP backend, against a private sshd.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

use super::sshd::Sshd;
use crate::server::{not_started, program, version_line};
use crate::tool::{Tool, ToolContext};

/// SFTP payload per packet: OpenSSH takes packets up to 256 KiB, and rclone's docs
/// recommend 255k over the RFC's 32 KiB default as much faster on long links.
const CHUNK: &str = "255k";

/// `rclone copy` to an on-the-fly `:sftp:` remote served by its own sshd.
#[derive(Debug, Default)]
pub(crate) struct Rclone {
    sshd: Option<Sshd>,
    config: PathBuf,
    streams: Option<u32>,
}

impl Tool for Rclone {
    fn name(&self) -> &'static str {
        "rclone"
    }

    fn version(&self) -> String {
        version_line("rclone", &["version"])
    }

    fn flags(&self) -> String {
        let n = self.streams.map_or("N".to_string(), |s| s.to_string());
        format!(
            "copy --transfers {n} --checkers {n} --sftp-chunk-size {CHUNK} \
             --sftp-disable-hashcheck --sftp-shell-type none --no-check-dest \
             --ignore-checksum --create-empty-src-dirs: {n} files at once; the largest \
             SFTP packets OpenSSH takes; no remote shell commands or hashing, no listing \
             of the (empty) destination; Go's ssh picks aes128-gcm first and rclone 1.60 \
             has no cipher option; --multi-thread-streams is left out, it only splits \
             downloads"
        )
    }

    fn start(&mut self, ctx: &ToolContext) -> Result<()> {
        self.stop();
        // An empty configuration of its own: no notice about a missing rclone.conf,
        // and no remote from the user's configuration can interfere.
        let dir = ctx.scratch.join("rclone");
        fs::create_dir_all(&dir)?;
        self.config = dir.join("rclone.conf");
        fs::write(&self.config, "")?;
        self.streams = Some(ctx.streams);
        self.sshd = Some(Sshd::start("rclone", ctx)?);
        Ok(())
    }

    fn copy(&self, ctx: &ToolContext, src: &Path, dst: &Path, _bytes: u64) -> Command {
        let Some(sshd) = &self.sshd else {
            return not_started("rclone");
        };
        let n = ctx.streams.max(1).to_string();
        let mut cmd = ctx.client.command(&program("rclone"));
        // Harmless here, but a CA bundle meant for S3 has no business in this run.
        cmd.env_remove("AWS_CA_BUNDLE");
        cmd.arg("--config").arg(&self.config);
        cmd.arg("copy").arg(src);
        // The backend's settings as flags rather than in the remote's name, so no path
        // needs rclone's connection-string quoting.
        cmd.arg(format!(":sftp:{}", dst.display()));
        cmd.args(["--sftp-host", &ctx.server.addr]);
        cmd.args(["--sftp-port", &sshd.port.to_string()]);
        cmd.args(["--sftp-user", "root"]);
        cmd.arg("--sftp-key-file").arg(&sshd.key);
        cmd.args(["--transfers", &n, "--checkers", &n]);
        cmd.args(["--sftp-chunk-size", CHUNK]);
        cmd.args([
            "--sftp-disable-hashcheck",
            "--sftp-shell-type",
            "none",
            "--no-check-dest",
            "--ignore-checksum",
            "--create-empty-src-dirs",
        ]);
        cmd
    }

    fn stop(&mut self) {
        if let Some(mut sshd) = self.sshd.take() {
            sshd.stop();
        }
    }
}

impl Drop for Rclone {
    fn drop(&mut self) {
        self.stop();
    }
}
