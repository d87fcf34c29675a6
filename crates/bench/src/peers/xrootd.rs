//! XRootD: a real xrootd server exporting the file system, and xrdcp.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

use crate::net;
use crate::server::{as_user, failing, not_started, program, url_host, version_line, Server};
use crate::tool::{Tool, ToolContext};

/// The user xrootd runs as: it refuses root. Debian's xrootd-server package creates
/// it (and bench/install-peers.sh does if it is missing).
const USER: &str = "xrootd";

/// xrdcp to a private xrootd.
#[derive(Debug, Default)]
pub(crate) struct Xrootd {
    server: Option<Server>,
    port: u16,
    /// Where `copy` puts the symbolic link it copies from (see `copy`).
    links: PathBuf,
    streams: Option<u32>,
}

impl Tool for Xrootd {
    fn name(&self) -> &'static str {
        "xrootd"
    }

    fn version(&self) -> String {
        format!("xrdcp {}", version_line("xrdcp", &["--version"]))
    }

    fn flags(&self) -> String {
        let n = self.streams.map_or("N".to_string(), |s| s.to_string());
        format!(
            "-r --parallel {n} --nopbar --force: {n} files at once; no progress bar; \
             chunk size and chunks in flight per file left at xrdcp's defaults \
             (8 MiB x 4); no checksums; the source is named through a symbolic link \
             called like the destination, copied into its parent, because xrdcp -r \
             puts a directory inside the target; the server exports / read-write with \
             no authentication"
        )
    }

    fn start(&mut self, ctx: &ToolContext) -> Result<()> {
        self.stop();
        let dir = ctx.scratch.join("xrootd");
        for sub in ["admin", "run", "links"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let port = net::free_port(&ctx.server)?;
        let config = dir.join("xrootd.cfg");
        fs::write(&config, config_text(&dir, port))?;
        // Not root (see `as_user`); without -l it logs to stderr, which is our log.
        let mut cmd = ctx.server.command(&program("setpriv"));
        cmd.args(as_user(USER, USER, "xrootd"));
        cmd.arg("-c").arg(&config);
        let server = Server::start("xrootd", cmd, &dir.join("xrootd.log"), ctx, port)?;
        self.server = Some(server);
        self.port = port;
        self.links = dir.join("links");
        self.streams = Some(ctx.streams);
        Ok(())
    }

    fn copy(&self, ctx: &ToolContext, src: &Path, dst: &Path, _bytes: u64) -> Command {
        if self.server.is_none() {
            return not_started("xrootd");
        }
        let (Some(name), Some(parent)) = (dst.file_name(), dst.parent()) else {
            return failing(&format!(
                "xrootd: destination {} has no parent",
                dst.display()
            ));
        };
        // `xrdcp -r SRC root://H//DST/` writes DST/NAME-OF-SRC/REL, and several sources
        // can overflow the command line. So copy from a symbolic link to SRC named
        // like DST into DST's parent: that writes DST/REL. The shell makes the link at
        // run time (so `copy` itself has no side effects) and execs xrdcp.
        let link = self.links.join(name);
        let n = ctx.streams.max(1).to_string();
        let mut cmd = ctx.client.command("sh");
        cmd.args([
            "-c",
            "ln -sfn -- \"$1\" \"$2\" && shift 2 && exec \"$@\"",
            "sh",
        ]);
        cmd.arg(src).arg(&link);
        cmd.args([
            &program("xrdcp"),
            "-r",
            "--parallel",
            &n,
            "--nopbar",
            "--force",
        ]);
        cmd.arg(&link);
        // `//` after the host: the path is absolute.
        cmd.arg(format!(
            "root://{}:{}/{}/",
            url_host(&ctx.server.addr),
            self.port,
            parent.display()
        ));
        cmd
    }

    fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.stop();
        }
    }
}

impl Drop for Xrootd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The server's configuration: the whole file system exported read-write (where the
/// harness puts destinations is not known at start), no reverse DNS look-ups of
/// clients, and its admin and pid files in scratch so that instances never collide.
fn config_text(dir: &Path, port: u16) -> String {
    format!(
        "xrd.port {port}\n\
         xrd.network nodnr\n\
         all.export / r/w\n\
         all.adminpath {admin}\n\
         all.pidpath {run}\n",
        admin = dir.join("admin").display(),
        run = dir.join("run").display(),
    )
}
