//! GridFTP: a real globus-gridftp-server with anonymous access, and globus-url-copy.

use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::Result;

use crate::net;
use crate::server::{as_user, not_started, program, url_host, version_line, Server};
use crate::tool::{Tool, ToolContext};

/// Usage statistics went away upstream, but older builds send UDP reports to Globus
/// unless told not to; nothing may leave this machine.
const OPT_OUT: (&str, &str) = ("GLOBUS_USAGE_OPTOUT", "1");

/// globus-url-copy to a private globus-gridftp-server.
#[derive(Debug, Default)]
pub(crate) struct Gridftp {
    server: Option<Server>,
    port: u16,
    streams: Option<u32>,
}

impl Tool for Gridftp {
    fn name(&self) -> &'static str {
        "gridftp"
    }

    fn version(&self) -> String {
        format!(
            "{}; {}",
            version_line("globus-url-copy", &["-version"]),
            version_line("globus-gridftp-server", &["-version"])
        )
    }

    fn flags(&self) -> String {
        let n = self.streams.map_or("N".to_string(), |s| s.to_string());
        format!(
            "-p {n} -cc {n} -fast -cd -r, anonymous ftp:// (clear text, no GSI): {n} \
             parallel TCP streams per file (mode E) and {n} files at once; -fast reuses \
             data channels between files, as Globus recommends; TCP buffers left to \
             Linux's autotuning (-tcp-bs would pin them)"
        )
    }

    fn start(&mut self, ctx: &ToolContext) -> Result<()> {
        self.stop();
        let dir = ctx.scratch.join("gridftp");
        fs::create_dir_all(&dir)?;
        // An empty configuration file of its own, so /etc/gridftp.conf is not read.
        let config = dir.join("gridftp.conf");
        fs::write(&config, "")?;
        let port = net::free_port(&ctx.server)?;
        let addr = &ctx.server.addr;
        // On a testbed host the server resolves its own address through the hosts file
        // `hetch-lab wan` gives each namespace (it exits when that needs DNS).
        let mut cmd = ctx.server.command(&program("setpriv"));
        // As root the server setuids anonymous sessions to -anonymous-user and refuses
        // root itself; running it as nobody (keeping CAP_DAC_OVERRIDE, see `as_user`)
        // serves anonymous sessions as nobody with no setuid, able to write anywhere.
        cmd.args(as_user("nobody", "nogroup", "globus-gridftp-server"));
        cmd.env(OPT_OUT.0, OPT_OUT.1);
        cmd.arg("-c").arg(&config);
        cmd.args(["-aa", "-p", &port.to_string()]);
        cmd.args(["-control-interface", addr, "-data-interface", addr]);
        // Errors and warnings only, to stderr (the log): INFO writes lines per file.
        cmd.args(["-d", "ERROR,WARN"]);
        let server = Server::start("gridftp", cmd, &dir.join("gridftp.log"), ctx, port)?;
        self.server = Some(server);
        self.port = port;
        self.streams = Some(ctx.streams);
        Ok(())
    }

    fn copy(&self, ctx: &ToolContext, src: &Path, dst: &Path, _bytes: u64) -> Command {
        if self.server.is_none() {
            return not_started("gridftp");
        }
        let n = ctx.streams.max(1).to_string();
        let mut cmd = ctx.client.command(&program("globus-url-copy"));
        cmd.env(OPT_OUT.0, OPT_OUT.1);
        cmd.args(["-p", &n, "-cc", &n, "-fast", "-cd", "-r"]);
        // Both URLs end in '/': -r then copies the source's contents into the
        // destination directory (DST/REL), not the source directory itself.
        cmd.arg(format!("file://{}/", src.display()));
        cmd.arg(format!(
            "ftp://{}:{}{}/",
            url_host(&ctx.server.addr),
            self.port,
            dst.display()
        ));
        cmd
    }

    fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.stop();
        }
    }
}

impl Drop for Gridftp {
    fn drop(&mut self) {
        self.stop();
    }
}
