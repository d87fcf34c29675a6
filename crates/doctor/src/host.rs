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
        let dir = self.sys.join("devices/system/cpu");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut out: Vec<(String, String)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let is_cpu = name
                    .strip_prefix("cpu")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
                if !is_cpu {
                    return None;
                }
                let gov = std::fs::read_to_string(e.path().join("cpufreq/scaling_governor"));
                Some((name, gov.ok()?.trim().to_string()))
            })
            .collect();
        out.sort();
        out
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
    }
}
