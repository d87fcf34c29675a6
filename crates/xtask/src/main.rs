//! hetch's release tasks, run as `cargo xtask TASK` (the alias is in
//! .cargo/config.toml). See [`USAGE`] for what each does, what it needs and makes.

mod build;
mod check;
mod cmd;
mod deb;
mod dist;
mod elf;
mod tools;
mod variant;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Result};

use variant::Variant;

/// `cargo xtask --help`.
const USAGE: &str = "\
cargo xtask: hetch's release tasks

USAGE:
    cargo xtask dist [--quick] [--only BUILD,...]
    cargo xtask check-dist

dist
    Builds static, stripped release binaries for Linux with musl, each with its
    debug info beside it (NAME.debug, found through a .gnu_debuglink), the Debian
    package and SHA256SUMS, into target/dist (emptied first):

        hetch-VERSION-x86_64-linux-musl          full: default features
        hetch-VERSION-aarch64-linux-musl
        hetch-edge-VERSION-x86_64-linux-musl     edge: --no-default-features
        hetch-edge-VERSION-aarch64-linux-musl
        hetch_VERSION-1_amd64.deb                the full x86_64 binary, systemd
                                                 units, man pages, completions
        SHA256SUMS

    then prints each file's size, and fails if the edge x86_64 binary is over its
    size budget. Installs what is missing first: the rustup targets
    x86_64-unknown-linux-musl and aarch64-unknown-linux-musl, zig and
    cargo-zigbuild (from PyPI, into target/tools/zig), and with apt-get (as root)
    binutils, binutils-aarch64-linux-gnu, file. Needs Rust, python3 and network
    access to crates.io, PyPI and the Debian mirror. Cargo profile: `release-dist`
    (release's, with debug info). On a 2-core machine a cold build takes about
    20 min for the first binary (thin LTO; 13 with --quick), less for the next
    of the same architecture (the dependencies are shared).

    --only BUILD,...   build only these, of x86_64-full, x86_64-edge,
                       aarch64-full, aarch64-edge; the .deb comes with x86_64-full
    --quick            CI's build: no LTO, 16 codegen units (quicker; binaries about
                       10% larger and a little slower). Not for release.

check-dist
    Checks what dist left in target/dist (as root: it mounts): every binary is
    static; each aarch64 binary runs `hetch demo` under qemu-user; an aarch64
    server and an x86_64 client push and pull a file, `hetch sum` agreeing on both
    sides; the .deb installs into a throwaway root (an overlay over / in a private
    mount namespace), its files, user and conffiles are there, and hetch serve,
    started as hetch-serve.service starts it, receives a file intact, owned by
    hetch; dpkg --purge removes the state and keeps the data. Installs
    qemu-user-static with apt-get if missing. Needs an aarch64 and an x86_64
    binary and the .deb (dist --only x86_64-full,aarch64-edge is the least).
";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line, whatever the causes chain holds.
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("xtask: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Vec<String>) -> Result<()> {
    let root = checkout();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        [] | ["help" | "--help" | "-h"] | ["help" | "--help" | "-h", ..] => {
            print!("{USAGE}");
            Ok(())
        }
        ["dist", rest @ ..] => {
            let (mut only, mut quick) = (Vec::new(), false);
            let mut rest = rest.iter();
            while let Some(arg) = rest.next() {
                match *arg {
                    "--quick" => quick = true,
                    "--only" => match rest.next() {
                        Some(list) => only = Variant::parse_list(list)?,
                        None => bail!("dist: --only needs a list (cargo xtask --help)"),
                    },
                    _ => bail!("dist: unexpected argument {arg:?} (cargo xtask --help)"),
                }
            }
            dist::dist(&root, &only, quick)
        }
        ["check-dist"] => check::check_dist(&root),
        [check::deb_root::SUBCOMMAND, deb, client, work] => {
            check::deb_root::inside(Path::new(deb), Path::new(client), Path::new(work))
        }
        _ => bail!("unknown task {:?} (cargo xtask --help)", args.join(" ")),
    }
}

/// The checkout: two levels above this crate.
fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/xtask is two levels down")
        .to_path_buf()
}
