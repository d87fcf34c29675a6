//! `hetch-lab`: the benchmark harness and the WAN testbed, kept out of the shipped
//! `hetch` binary. The harness runs `hetch` as a black box: the binary beside this one,
//! or the one `HETCH_BIN` names.

mod bench;
mod coordinator_bench;
mod service_bench;
mod service_proc;
mod wan;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// hetch-lab: measure hetch beside its peers, on this machine or an emulated WAN.
#[derive(Parser)]
#[command(version, about, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// WAN testbed on this machine: two hosts (network namespaces), or N pairs, joined by
    /// emulated links with the given RTT, rate and loss (root only).
    #[command(subcommand)]
    Wan(WanCommand),
    /// Benchmark harness: sweeps over file sizes and links, the datasets of paper 003,
    /// hetch beside its peers and iperf3; results, a report and plots.
    #[command(subcommand)]
    Bench(Box<bench::BenchCommand>),
}

#[derive(Subcommand)]
enum WanCommand {
    /// Create hosts a (10.77.0.1) and b (10.77.0.2) and the link between them; with
    /// --pairs N, hosts a1..aN (10.77.0.1..N) and b1..bN (10.77.0.101..100+N), each on
    /// its own link.
    Up(WanLinkArgs),
    /// Run a command on a host: `hetch-lab wan exec a -- CMD...` (or a1, b2, ...).
    Exec {
        /// a or b; with --pairs, a1..aN or b1..bN.
        host: String,
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<String>,
    },
    /// Stop the link and remove the hosts (also what a crash left behind).
    Down,
    /// Cut the link (every host's): every packet is dropped, silently, until `restore` (delay-line
    /// links only).
    Cut,
    /// Restore a cut link.
    Restore,
    /// The link's forwarder (started by `up`).
    #[command(hide = true)]
    Forward(WanLinkArgs),
}

#[derive(Args)]
struct WanLinkArgs {
    /// Pairs of hosts: 1 is hosts a and b; N (up to 8) is sources a1..aN and
    /// destinations b1..bN, every host reaching every other, each on its own link with
    /// the settings below (the delay-line link only).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=hetch_wan::hosts::MAX_PAIRS as i64))]
    pairs: u8,
    /// Round-trip time between any two hosts (50ms, 0.1s).
    #[arg(long, default_value = "0ms", value_parser = hetch_units::parse_duration)]
    rtt: std::time::Duration,
    /// Rate each host sends at (each direction, with one pair): bytes/s with SI suffixes
    /// (250M) or bits (2gbit); 0 = unlimited.
    #[arg(long, default_value = "0", value_parser = hetch_units::parse_rate)]
    rate: u64,
    /// Packet loss on what each host sends (each direction, with one pair): 0.1% or 0.001.
    #[arg(long, default_value = "0", value_parser = wan::parse_loss)]
    loss: f64,
    /// TCP segments whose payload is damaged, with the TCP checksum fixed so that the
    /// damage reaches the application, in each direction (0.01% or 0.0001; delay-line
    /// link only).
    #[arg(long, default_value = "0", value_parser = wan::parse_loss)]
    corrupt: f64,
    /// MTU of the link.
    #[arg(long, default_value_t = 9000)]
    mtu: u32,
    /// Keep the hosts' TCP buffer limits as the namespaces start (by default both hosts
    /// are tuned like data transfer nodes: tcp_rmem/tcp_wmem maximum 64 MiB).
    #[arg(long)]
    untuned: bool,
    /// What makes the link: the kernel's netem where it exists (auto), or always
    /// hetch's userspace delay line.
    #[arg(long, value_enum, default_value = "auto")]
    link: wan::LinkKind,
}

impl WanLinkArgs {
    fn link(&self) -> hetch_wan::testbed::Link {
        hetch_wan::testbed::Link {
            rtt: self.rtt,
            rate: self.rate,
            loss: self.loss,
            corrupt: self.corrupt,
            mtu: self.mtu,
            tuned: !self.untuned,
        }
    }
}

/// The `hetch` binary under test: `HETCH_BIN`, else the one beside this binary.
pub(crate) fn hetch_binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("HETCH_BIN") {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe()?;
    let beside = me.with_file_name("hetch");
    anyhow::ensure!(
        beside.is_file(),
        "no hetch binary beside {} (build it: cargo build --release -p hetch), and HETCH_BIN is not set",
        me.display()
    );
    Ok(beside)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Wan(w) => match w {
            WanCommand::Up(l) => wan::up(l.link(), l.link, l.pairs).map(|_| ExitCode::SUCCESS),
            WanCommand::Down => wan::down().map(|_| ExitCode::SUCCESS),
            WanCommand::Cut => wan::cut(true).map(|_| ExitCode::SUCCESS),
            WanCommand::Restore => wan::cut(false).map(|_| ExitCode::SUCCESS),
            WanCommand::Exec { host, cmd } => wan::exec(&host, &cmd),
            WanCommand::Forward(l) => wan::forward(l.link(), l.pairs).map(|_| ExitCode::SUCCESS),
        },
        Command::Bench(b) => {
            let argv: Vec<String> = std::env::args().skip(1).collect();
            bench::main(*b, &argv)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hetch-lab: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
