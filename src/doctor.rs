//! `hetch doctor`: what on this host keeps a transfer over a given path below the
//! path's rate, and the commands that fix it (see the hetch-doctor crate).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

/// `hetch doctor`.
#[derive(Args)]
pub struct DoctorArgs {
    /// The path's round-trip time (e.g. 100ms).
    #[arg(long, value_parser = hetch_units::parse_duration)]
    rtt: Duration,
    /// The path's rate: bytes per second with SI suffixes (500M) or bits (2gbit).
    #[arg(long, value_parser = hetch_units::parse_rate)]
    rate: u64,
    /// Data streams the transfer is to use (as `hetch cp --streams`).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    streams: u32,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs the checks and prints the report. Exit code 0 whatever it finds: a finding
/// is advice, not an error.
pub fn run(a: DoctorArgs) -> anyhow::Result<ExitCode> {
    let path = hetch_doctor::Path {
        rate: a.rate,
        rtt: a.rtt,
        streams: a.streams,
    };
    let report = hetch_doctor::check(&hetch_doctor::Host::default(), path);
    match a.json {
        true => println!("{}", serde_json::to_string(&report)?),
        false => print!("{}", report.to_text()),
    }
    Ok(ExitCode::SUCCESS)
}
