//! The limits of this host, as the kernel shows them in `/proc/sys` and `/sys`.
//!
//! The `net.ipv4.tcp_*` values belong to the network namespace the doctor runs in
//! (a new namespace starts at the kernel's defaults); `net.core.*` are global.

use std::path::{Path, PathBuf};

/// Where the doctor reads the host's settings.
#[derive(Debug, Clone)]
pub struct Host {
    /// `/proc/sys`, or a tree standing in for it.
    pub proc_sys: PathBuf,
    /// `/sys`, or a tree standing in for it.
    pub sys: PathBuf,
}

impl Default for Host {
    fn default() -> Self {
        Host {
            proc_sys: "/proc/sys".into(),
            sys: "/sys".into(),
        }
    }
}

/// A `tcp_rmem`/`tcp_wmem` triple: minimum, default and maximum buffer, in bytes.
pub type Triple = [u64; 3];

impl Host {
    /// `net.ipv4.tcp_rmem`.
    pub fn tcp_rmem(&self) -> Result<Triple, String> {
        self.triple("net/ipv4/tcp_rmem")
    }

    /// `net.ipv4.tcp_wmem`.
    pub fn tcp_wmem(&self) -> Result<Triple, String> {
        self.triple("net/ipv4/tcp_wmem")
    }

    /// The CPU frequency governors of the CPUs that expose one (none in most virtual
    /// machines), as (cpu directory name, governor).
    pub fn governors(&self) -> Vec<(String, String)> {
        sorted_entries(&self.sys.join("devices/system/cpu"), |name, path| {
            let is_cpu = name
                .strip_prefix("cpu")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if !is_cpu {
                return None;
            }
            let gov = std::fs::read_to_string(path.join("cpufreq/scaling_governor"));
            Some(gov.ok()?.trim().to_string())
        })
    }

    /// `net.ipv4.tcp_congestion_control`, and the algorithms the kernel has loaded
    /// (`tcp_available_congestion_control`).
    pub fn congestion(&self) -> Result<(String, Vec<String>), String> {
        let now = read(&self.proc_sys.join("net/ipv4/tcp_congestion_control"))?;
        let all = read(
            &self
                .proc_sys
                .join("net/ipv4/tcp_available_congestion_control"),
        )?;
        let all = all.split_whitespace().map(str::to_string).collect();
        Ok((now.trim().to_string(), all))
    }

    /// Swap in use, bytes (`/proc/meminfo`: SwapTotal - SwapFree).
    pub fn swap_used(&self) -> Result<u64, String> {
        let path = self.proc().join("meminfo");
        let text = read(&path)?;
        let kib = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .ok_or_else(|| format!("{}: no {key}", path.display()))
        };
        Ok(kib("SwapTotal:")?.saturating_sub(kib("SwapFree:")?) * 1024)
    }

    /// The network interfaces that are up, other than loopback, with their MTUs.
    pub fn interfaces(&self) -> Vec<(String, u32)> {
        sorted_entries(&self.sys.join("class/net"), |name, path| {
            let up = std::fs::read_to_string(path.join("operstate"))
                .is_ok_and(|s| matches!(s.trim(), "up" | "unknown"));
            (name != "lo" && up).then(|| self.mtu(name)).flatten()
        })
    }

    /// The MTU of interface `name`.
    pub fn mtu(&self, name: &str) -> Option<u32> {
        let p = self.sys.join("class/net").join(name).join("mtu");
        std::fs::read_to_string(p).ok()?.trim().parse().ok()
    }

    /// The interface this host's IPv4 routing table sends `to` through (the longest
    /// matching prefix of `/proc/net/route`).
    pub fn route_interface(&self, to: std::net::Ipv4Addr) -> Option<String> {
        let text = std::fs::read_to_string(self.proc().join("net/route")).ok()?;
        // The kernel prints each address as the hexadecimal of its bytes (network
        // order) read as a native integer.
        let addr = |s: &str| {
            let v = u32::from_str_radix(s, 16).ok()?;
            Some(u32::from(std::net::Ipv4Addr::from(v.to_ne_bytes())))
        };
        let want = u32::from(to);
        const RTF_UP: u32 = 1;
        text.lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let (dest, mask) = (addr(f.get(1)?)?, addr(f.get(7)?)?);
                let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
                let metric: u32 = f.get(6)?.parse().ok()?;
                let hit = flags & RTF_UP != 0 && want & mask == dest & mask;
                // The most specific route wins; among equals, the lowest metric.
                hit.then(|| {
                    (
                        (mask.count_ones(), std::cmp::Reverse(metric)),
                        f[0].to_string(),
                    )
                })
            })
            .max_by_key(|(rank, _)| *rank)
            .map(|(_, name)| name)
    }

    fn proc(&self) -> PathBuf {
        self.proc_sys
            .parent()
            .map_or_else(|| "/proc".into(), Path::to_path_buf)
    }

    fn triple(&self, key: &str) -> Result<Triple, String> {
        let path = self.proc_sys.join(key);
        let text = read(&path)?;
        let v: Vec<u64> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| format!("{}: not three numbers: {text:?}", path.display()))?;
        match v[..] {
            [min, default, max] => Ok([min, default, max]),
            _ => Err(format!("{}: not three numbers: {text:?}", path.display())),
        }
    }
}

/// `(name, value)` of the entries of `dir` that `value` gives one for, by name: the
/// sysfs listings (CPUs, interfaces) the checks go through. Empty if `dir` is missing.
fn sorted_entries<T: Ord>(
    dir: &Path,
    value: impl Fn(&str, &Path) -> Option<T>,
) -> Vec<(String, T)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, T)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let v = value(&name, &e.path())?;
            Some((name, v))
        })
        .collect();
    out.sort();
    out
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A stand-in for /proc/sys and /sys with `files` (relative path, contents).
    pub(crate) fn fake(files: &[(&str, &str)]) -> (tempfile::TempDir, Host) {
        let t = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            let p = t.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let host = Host {
            proc_sys: t.path().join("proc/sys"),
            sys: t.path().join("sys"),
        };
        (t, host)
    }

    #[test]
    fn triples_and_governors_are_read_and_bad_values_named() {
        let (_t, h) = fake(&[
            ("proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n"),
            ("proc/sys/net/ipv4/tcp_wmem", "4096 16384\n"),
            (
                "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
                "powersave\n",
            ),
            (
                "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
                "performance\n",
            ),
            (
                "sys/devices/system/cpu/cpufreq/scaling_governor",
                "not a cpu\n",
            ),
        ]);
        assert_eq!(h.tcp_rmem(), Ok([4096, 131072, 6291456]));
        let e = h.tcp_wmem().unwrap_err();
        assert!(
            e.contains("tcp_wmem") && e.contains("not three numbers"),
            "{e}"
        );
        let gov = h.governors();
        assert_eq!(
            gov,
            vec![
                ("cpu0".to_string(), "performance".to_string()),
                ("cpu1".to_string(), "powersave".to_string())
            ]
        );
        let (_t, empty) = fake(&[]);
        assert!(empty.tcp_rmem().unwrap_err().contains("tcp_rmem"));
        assert!(empty.governors().is_empty());
        assert!(empty.interfaces().is_empty());
        assert!(empty.swap_used().is_err());
    }

    /// A route table as a little-endian kernel prints it: a default route through
    /// eth0 and 10.77.0.0/24 on veth-a.
    const ROUTES: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
        eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
        wlan0\t00000000\t010200C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n\
        gone0\t00004D0A\t00000000\t0000\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
        veth-a\t00004D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";

    #[test]
    fn routes_interfaces_congestion_and_swap_are_read() {
        let (_t, h) = fake(&[
            ("proc/net/route", ROUTES),
            (
                "proc/meminfo",
                "MemTotal: 100 kB\nSwapTotal:  2048 kB\nSwapFree:  1024 kB\n",
            ),
            ("proc/sys/net/ipv4/tcp_congestion_control", "cubic\n"),
            (
                "proc/sys/net/ipv4/tcp_available_congestion_control",
                "reno cubic\n",
            ),
            ("sys/class/net/eth0/mtu", "1400\n"),
            ("sys/class/net/eth0/operstate", "up\n"),
            ("sys/class/net/veth-a/mtu", "9000\n"),
            ("sys/class/net/veth-a/operstate", "up\n"),
            ("sys/class/net/down0/mtu", "1500\n"),
            ("sys/class/net/down0/operstate", "down\n"),
            ("sys/class/net/lo/mtu", "65536\n"),
            ("sys/class/net/lo/operstate", "unknown\n"),
        ]);
        if cfg!(target_endian = "little") {
            assert_eq!(
                h.route_interface([10, 77, 0, 2].into()).as_deref(),
                Some("veth-a")
            );
            assert_eq!(
                h.route_interface([8, 8, 8, 8].into()).as_deref(),
                Some("eth0")
            );
        }
        assert_eq!(
            h.interfaces(),
            [("eth0".to_string(), 1400), ("veth-a".to_string(), 9000)]
        );
        assert_eq!(h.swap_used(), Ok(1 << 20));
        assert_eq!(
            h.congestion(),
            Ok(("cubic".into(), vec!["reno".into(), "cubic".into()]))
        );
    }
}
