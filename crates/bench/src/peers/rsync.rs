//! rsync over ssh, against a private sshd.

use std::path::Path;
use std::process::Command;

use anyhow::Result;

use super::sshd::{Sshd, CIPHER};
use crate::server::{not_started, program, url_host, version_line};
use crate::tool::{Tool, ToolContext};

/// rsync pushing to `root@SERVER` through its own sshd.
#[derive(Debug, Default)]
pub(crate) struct Rsync {
    sshd: Option<Sshd>,
}

impl Tool for Rsync {
    fn name(&self) -> &'static str {
        "rsync"
    }

    fn version(&self) -> String {
        version_line("rsync", &["--version"])
    }

    fn flags(&self) -> String {
        format!(
            "-a --whole-file --inplace -e 'ssh -T -x -c {CIPHER} -o Compression=no': \
             archive mode; whole files, not the delta algorithm (the destination is \
             empty, so deltas only cost CPU); write in place, without a temporary file \
             and rename per file; no compression; AES-GCM, OpenSSH's fastest cipher"
        )
    }

    fn start(&mut self, ctx: &ToolContext) -> Result<()> {
        self.stop();
        self.sshd = Some(Sshd::start("rsync", ctx)?);
        Ok(())
    }

    fn copy(&self, ctx: &ToolContext, src: &Path, dst: &Path, _bytes: u64) -> Command {
        let Some(sshd) = &self.sshd else {
            return not_started("rsync");
        };
        let port = sshd.port.to_string();
        let ssh: Vec<String> = [program("ssh"), "-T".into(), "-x".into(), "-p".into(), port]
            .into_iter()
            .chain(sshd.client_options())
            .map(|w| quote(&w))
            .collect();
        let mut cmd = ctx.client.command(&program("rsync"));
        cmd.args(["-a", "--whole-file", "--inplace", "-e", &ssh.join(" ")]);
        // A trailing slash on the source copies its contents, not the directory.
        cmd.arg(format!("{}/", src.display()));
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

/// `word` as one word of rsync's `-e` command, which rsync splits at blanks itself,
/// honouring quotes: single-quoted unless it is plainly safe.
fn quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{word}'")
    }
}

impl Drop for Rsync {
    fn drop(&mut self) {
        self.stop();
    }
}
