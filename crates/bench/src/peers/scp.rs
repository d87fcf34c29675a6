//! scp (the SFTP protocol, OpenSSH's default since 9.0), against a private sshd.

use std::path::Path;
use std::process::Command;

use anyhow::Result;

use super::sshd::{Sshd, CIPHER};
use crate::server::{not_started, program, url_host, version_line};
use crate::tool::{Tool, ToolContext};

/// scp pushing to `root@SERVER` through its own sshd.
#[derive(Debug, Default)]
pub(crate) struct Scp {
    sshd: Option<Sshd>,
}

impl Tool for Scp {
    fn name(&self) -> &'static str {
        "scp"
    }

    fn version(&self) -> String {
        // scp has no version option; it is OpenSSH's, which `ssh -V` prints.
        version_line("ssh", &["-V"])
    }

    fn flags(&self) -> String {
        format!(
            "-r -q -c {CIPHER} -o Compression=no (SFTP protocol, the default): \
             recursive; quiet, no progress meter; AES-GCM, OpenSSH's fastest cipher; \
             no compression. scp has no parallel streams or files"
        )
    }

    fn start(&mut self, ctx: &ToolContext) -> Result<()> {
        self.stop();
        self.sshd = Some(Sshd::start("scp", ctx)?);
        Ok(())
    }

    fn copy(&self, ctx: &ToolContext, src: &Path, dst: &Path, _bytes: u64) -> Command {
        let Some(sshd) = &self.sshd else {
            return not_started("scp");
        };
        let mut cmd = ctx.client.command(&program("scp"));
        cmd.args(["-r", "-q", "-P", &sshd.port.to_string()]);
        cmd.args(sshd.client_options());
        // `SRC/.` copies the directory's contents (hidden files too) into the existing
        // destination; plain `SRC` would land in `DST/NAME`, and a glob would miss
        // dot files.
        cmd.arg(src.join("."));
        cmd.arg(format!(
            "root@{}:{}/",
            url_host(&ctx.server.addr),
            dst.display()
        ));
        cmd
    }

    fn stop(&mut self) {
        if let Some(mut sshd) = self.sshd.take() {
            sshd.stop();
        }
    }
}

impl Drop for Scp {
    fn drop(&mut self) {
        self.stop();
    }
}
