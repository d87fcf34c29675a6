//! What dist builds: two architectures, each as the full binary (default features) and
//! the edge binary (`--no-default-features`: no cloud stores, service or MCP server),
//! and the names they ship under.

use anyhow::{bail, Result};

/// A target architecture.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Arch {
    /// x86_64-unknown-linux-musl.
    X86_64,
    /// aarch64-unknown-linux-musl.
    Aarch64,
}

impl Arch {
    /// Both, in build order.
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The name in file names and in `--only`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// Rust's target triple.
    pub fn triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-musl",
            Arch::Aarch64 => "aarch64-unknown-linux-musl",
        }
    }

    /// The objcopy that understands this architecture's ELF files (Debian's host
    /// objcopy knows only x86), with the Debian package that has it.
    pub fn objcopy(self) -> (&'static str, &'static str) {
        match self {
            Arch::X86_64 => ("objcopy", "binutils"),
            Arch::Aarch64 => ("aarch64-linux-gnu-objcopy", "binutils-aarch64-linux-gnu"),
        }
    }
}

/// One binary dist can build.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Variant {
    /// Its architecture.
    pub arch: Arch,
    /// The edge build (`--no-default-features`) rather than the full one.
    pub edge: bool,
}

impl Variant {
    /// All four, in build order: x86_64 first (the Debian package needs its full
    /// binary), full before edge.
    pub fn all() -> Vec<Variant> {
        Arch::ALL
            .iter()
            .flat_map(|&arch| [false, true].map(|edge| Variant { arch, edge }))
            .collect()
    }

    /// `x86_64-full`, `aarch64-edge`...: the names `--only` takes.
    pub fn name(self) -> String {
        let kind = if self.edge { "edge" } else { "full" };
        format!("{}-{kind}", self.arch.name())
    }

    /// The shipped file's name: `hetch-VERSION-ARCH-linux-musl` or
    /// `hetch-edge-VERSION-ARCH-linux-musl`.
    pub fn file_name(self, version: &str) -> String {
        let edge = if self.edge { "-edge" } else { "" };
        format!("hetch{edge}-{version}-{}-linux-musl", self.arch.name())
    }

    /// Parses `--only`'s comma-separated list; unknown names are an error naming the
    /// known ones.
    pub fn parse_list(list: &str) -> Result<Vec<Variant>> {
        let all = Variant::all();
        let mut chosen = Vec::new();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match all.iter().find(|v| v.name() == name) {
                Some(v) if !chosen.contains(v) => chosen.push(*v),
                Some(_) => {}
                None => bail!(
                    "--only: unknown build {name:?} (known: {})",
                    all.iter().map(|v| v.name()).collect::<Vec<_>>().join(", ")
                ),
            }
        }
        if chosen.is_empty() {
            bail!("--only: no build named");
        }
        // Build order, whatever the order given.
        Ok(all.into_iter().filter(|v| chosen.contains(v)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_fail() {
        let v = Variant::parse_list("aarch64-edge,x86_64-full").unwrap();
        assert_eq!(
            v.iter().map(|v| v.name()).collect::<Vec<_>>(),
            ["x86_64-full", "aarch64-edge"]
        );
        assert_eq!(
            v[1].file_name("1.2.3"),
            "hetch-edge-1.2.3-aarch64-linux-musl"
        );
        assert_eq!(v[0].file_name("1.2.3"), "hetch-1.2.3-x86_64-linux-musl");
        assert!(Variant::parse_list("x86_64-fast").is_err());
        assert!(Variant::parse_list("").is_err());
    }
}
