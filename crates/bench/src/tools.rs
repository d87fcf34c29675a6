//! The tools by name: hetch itself, iperf3 (the memory-to-memory limit) and the peers
//! ([`crate::peers`]).

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use crate::net;
use crate::server::{not_started, program, version_line, Server};
use crate::tool::{FollowSettings, Tool, ToolContext};

/// Makes the tool called `name`.
pub fn make(name: &str) -> anyhow::Result<Box<dyn Tool>> {
    match name {
        "hetch" => Ok(Box::new(Hetch::default())),
        "iperf3" => Ok(Box::new(Iperf3::default())),
        _ => crate::peers::make(name).ok_or_else(|| {
            anyhow::anyhow!(
                "unknown tool '{name}': choose from hetch, iperf3, {}",
                crate::peers::NAMES.join(", ")
            )
        }),
    }
}

/// hetch with its defaults: TLS on every stream, blocks read back from the destination
/// and checked (`--verify written`), BLAKE3; only the stream count is set. Streaming
/// runs add `--follow --json --idle D --done-suffix S`.
#[derive(Default)]
pub struct Hetch {
    server: Option<(Server, u16)>,
}

impl Hetch {
    /// `hetch cp` of directory `src` *as* the server's `dst` with `extra` flags.
    fn cp(&self, ctx: &ToolContext, src: &Path, dst: &Path, extra: &[OsString]) -> Command {
        let Some((_, port)) = &self.server else {
            return not_started("hetch");
        };
        let token =
            std::fs::read_to_string(ctx.scratch.join("hetch-server/token")).unwrap_or_default();
        // hetch copies a directory *as* a destination that does not exist yet (cp -r
        // semantics), so the empty destination is removed first.
        let mut c = ctx.client.command("sh");
        c.arg("-c")
            .arg(concat!(
                r#"rmdir -- "$1" && d=$1 s=$2 k=$3 n=$4 h=$5 && shift 5 && "#,
                r#"exec "$0" cp -q --known-hosts "$k" --streams "$n" "$@" -- "$s" "hetch://$h$d""#
            ))
            .arg(&ctx.hetch)
            .arg(dst)
            .arg(src)
            .arg(ctx.scratch.join("hetch-known-hosts"))
            .arg(ctx.streams.to_string())
            .arg(format!("{}:{port}", ctx.server.addr))
            .args(extra)
            .env("HETCH_TOKEN", token.trim());
        c
    }
}

impl Tool for Hetch {
    fn name(&self) -> &'static str {
        "hetch"
    }

    fn version(&self) -> String {
        format!("hetch {}", env!("CARGO_PKG_VERSION"))
    }

    fn flags(&self) -> String {
        "defaults (TLS on all streams, --verify written: each block read back from the destination and checked, BLAKE3) and --streams N; streaming: also --follow --json --idle D --done-suffix S".to_string()
    }

    fn start(&mut self, ctx: &ToolContext) -> anyhow::Result<()> {
        self.stop();
        let state = ctx.scratch.join("hetch-server");
        std::fs::create_dir_all(&state)?;
        let port = net::free_port(&ctx.server)?;
        let mut cmd = ctx.server.command(&ctx.hetch.to_string_lossy());
        cmd.args(["serve", "--root", "/", "--listen"])
            .arg(format!("{}:{port}", ctx.server.addr))
            .arg("--state-dir")
            .arg(&state);
        let s = Server::start(
            "hetch",
            cmd,
            &ctx.scratch.join("hetch-serve.log"),
            ctx,
            port,
        )?;
        self.server = Some((s, port));
        Ok(())
    }

    fn copy(&self, ctx: &ToolContext, src: &Path, dst: &Path, _bytes: u64) -> Command {
        self.cp(ctx, src, dst, &[])
    }

    fn can_follow(&self) -> bool {
        true
    }

    fn follow(
        &self,
        ctx: &ToolContext,
        src: &Path,
        dst: &Path,
        follow: &FollowSettings,
    ) -> Option<Command> {
        let extra = [
            "--follow".to_string(),
            "--json".to_string(),
            "--idle".to_string(),
            format!("{}ms", follow.idle.as_millis()),
            "--done-suffix".to_string(),
            follow.done_suffix.clone(),
        ]
        .map(OsString::from);
        Some(self.cp(ctx, src, dst, &extra))
    }

    fn stop(&mut self) {
        self.server = None;
    }
}

/// iperf3, memory to memory: the most the network gives TCP with the same number of
/// streams; it sends as many bytes as the dataset holds.
#[derive(Default)]
pub struct Iperf3 {
    server: Option<(Server, u16)>,
}

impl Tool for Iperf3 {
    fn name(&self) -> &'static str {
        "iperf3"
    }

    fn version(&self) -> String {
        version_line("iperf3", &["--version"])
    }

    fn flags(&self) -> String {
        "-n BYTES -P N: the dataset's byte count over N TCP streams, memory to memory (the limit)"
            .to_string()
    }

    fn is_limit(&self) -> bool {
        true
    }

    fn start(&mut self, ctx: &ToolContext) -> anyhow::Result<()> {
        self.stop();
        let port = net::free_port(&ctx.server)?;
        let mut cmd = ctx.server.command(&program("iperf3"));
        cmd.args(["-s", "-p", &port.to_string(), "-B", &ctx.server.addr]);
        let log = ctx.scratch.join("iperf3-server.log");
        // The log is appended to: only what this server writes counts.
        let before = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
        let s = Server::start("iperf3", cmd, &log, ctx, port)?;
        // The readiness probe is a client to iperf3, which fails it and then closes
        // and reopens its listening socket: a real client in that moment is refused.
        // Its log says when it listens again ("test #2").
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline
            && !std::fs::read(&log).is_ok_and(|l| {
                let ours = String::from_utf8_lossy(l.get(before..).unwrap_or_default());
                ours.contains("(test #2)")
            })
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.server = Some((s, port));
        Ok(())
    }

    fn copy(&self, ctx: &ToolContext, _src: &Path, _dst: &Path, bytes: u64) -> Command {
        let Some((_, port)) = &self.server else {
            return not_started("iperf3");
        };
        let mut c = ctx.client.command(&program("iperf3"));
        c.args(["-c", &ctx.server.addr, "-p", &port.to_string()])
            .args([
                "-n",
                &bytes.max(1).to_string(),
                "-P",
                &ctx.streams.to_string(),
            ]);
        c
    }

    fn stop(&mut self) {
        self.server = None;
    }
}
