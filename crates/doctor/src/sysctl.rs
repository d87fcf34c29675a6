//! Running a report's sysctl fixes (`hetch doctor --apply`), after saving the values
//! they replace to an undo file, and putting those values back (`--undo`). Only the
//! settings in [`APPLIED`] are ever written, with values of plain numbers or names:
//! a hand-edited undo file (it lives in the user's config directory) cannot make root
//! set anything else.

use std::path::{Path, PathBuf};

use crate::{Host, Report};

/// The only settings [`apply`] changes and [`undo`] writes back.
pub const APPLIED: [&str; 3] = [
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_congestion_control",
];

/// Why applying or undoing stopped (the settings written before stay written).
#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    /// The undo file (or its directory) could not be read, written or removed.
    #[error("{}", path.display())]
    File {
        /// The file or directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A setting's current value could not be read.
    #[error("{key}: cannot read the current value")]
    Read {
        /// The sysctl key.
        key: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A setting could not be written (it takes root).
    #[error("{key}: cannot set it (root only)")]
    Set {
        /// The sysctl key.
        key: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The undo file holds a line [`apply`] does not write.
    #[error("{}: not a line --apply writes: {line}", path.display())]
    Foreign {
        /// The undo file.
        path: PathBuf,
        /// The line.
        line: String,
    },
}

/// `(key, value)` of a fix that is one `sysctl -w KEY="VALUE"` of a setting in
/// [`APPLIED`], with a value of numbers or a name.
pub fn sysctl_of(fix: &str) -> Option<(String, String)> {
    let (key, value) = fix.strip_prefix("sysctl -w ")?.split_once('=')?;
    let value = value.trim_matches('"');
    let plain = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b' ' || b == b'_');
    (APPLIED.contains(&key) && plain).then(|| (key.to_string(), value.to_string()))
}

/// Where `host` keeps sysctl `key`.
fn proc_sys(host: &Host, key: &str) -> PathBuf {
    host.proc_sys.join(key.replace('.', "/"))
}

/// Writes `value` to sysctl `key` of `host`.
fn set(host: &Host, key: &str, value: &str) -> Result<(), SysctlError> {
    std::fs::write(proc_sys(host, key), value).map_err(|source| SysctlError::Set {
        key: key.to_string(),
        source,
    })
}

/// The error of file `path`.
fn file(path: &Path) -> impl FnOnce(std::io::Error) -> SysctlError + '_ {
    move |source| SysctlError::File {
        path: path.to_path_buf(),
        source,
    }
}

/// Runs `report`'s sysctl fixes on `host` (the first fix of each finding that has
/// one, if it is in [`APPLIED`]), after adding the values they replace to the undo
/// file `undo_path` (an earlier undo file keeps the values from before any apply; keys
/// it lacks are added with their values now). `announce` is told each
/// `sysctl -w KEY="VALUE"` before it is written. Returns how many settings were
/// written: 0 when there was nothing to apply (the undo file is then untouched).
pub fn apply(
    host: &Host,
    report: &Report,
    undo_path: &Path,
    mut announce: impl FnMut(&str),
) -> Result<usize, SysctlError> {
    let fixes: Vec<(String, String)> = report
        .findings
        .iter()
        .filter_map(|f| f.fix.first().and_then(|fix| sysctl_of(fix)))
        .collect();
    if fixes.is_empty() {
        return Ok(0);
    }
    let mut undo = match std::fs::read_to_string(undo_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            String::from("#!/bin/sh\n# written by hetch doctor --apply: the values it replaced\n")
        }
        Err(e) => return Err(file(undo_path)(e)),
    };
    let kept: Vec<String> = undo
        .lines()
        .filter_map(|l| sysctl_of(l).map(|(k, _)| k))
        .collect();
    for (key, _) in fixes.iter().filter(|(k, _)| !kept.contains(k)) {
        let old =
            std::fs::read_to_string(proc_sys(host, key)).map_err(|source| SysctlError::Read {
                key: key.clone(),
                source,
            })?;
        let old = old.split_whitespace().collect::<Vec<_>>().join(" ");
        undo.push_str(&format!("sysctl -w {key}=\"{old}\"\n"));
    }
    if let Some(dir) = undo_path.parent() {
        std::fs::create_dir_all(dir).map_err(file(dir))?;
    }
    std::fs::write(undo_path, &undo).map_err(file(undo_path))?;
    for (key, value) in &fixes {
        announce(&format!("sysctl -w {key}=\"{value}\""));
        set(host, key, value)?;
    }
    Ok(fixes.len())
}

/// Puts back on `host` what [`apply`] replaced, as undo file `undo_path` says, then
/// removes the file. `announce` is told each line before it is run. Returns `false`
/// when there is no undo file (nothing to undo). A line that is not one [`apply`]
/// writes stops it, before that line.
pub fn undo(
    host: &Host,
    undo_path: &Path,
    mut announce: impl FnMut(&str),
) -> Result<bool, SysctlError> {
    let text = match std::fs::read_to_string(undo_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(file(undo_path)(e)),
    };
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let Some((key, value)) = sysctl_of(line) else {
            return Err(SysctlError::Foreign {
                path: undo_path.to_path_buf(),
                line: line.to_string(),
            });
        };
        announce(line);
        set(host, &key, &value)?;
    }
    std::fs::remove_file(undo_path).map_err(file(undo_path))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Finding;

    #[test]
    fn only_plain_sysctl_fixes_are_applied() {
        assert_eq!(
            sysctl_of("sysctl -w net.ipv4.tcp_wmem=\"4096 16384 12582912\""),
            Some(("net.ipv4.tcp_wmem".into(), "4096 16384 12582912".into()))
        );
        assert_eq!(
            sysctl_of("sysctl -w net.ipv4.tcp_congestion_control=bbr"),
            Some(("net.ipv4.tcp_congestion_control".into(), "bbr".into()))
        );
        for not in [
            "modprobe tcp_bbr && sysctl -w net.ipv4.tcp_congestion_control=bbr",
            "hetch cp --streams 12 ...",
            "sysctl -w a/../b=1",
            "sysctl -w net.ipv4.tcp_rmem=\"1; rm -rf /\"",
            "sysctl -w net.ipv4.tcp_wmem=\"$(id)\"",
            "sysctl -w kernel.modprobe=\"/home/u/x\"",
            "sysctl -w net.ipv4.tcp_rmem=\"\"",
            "ip link set dev eth0 mtu 1500",
        ] {
            assert_eq!(sysctl_of(not), None, "{not}");
        }
        assert_eq!(
            proc_sys(&Host::default(), "net.ipv4.tcp_rmem"),
            Path::new("/proc/sys/net/ipv4/tcp_rmem")
        );
    }

    /// A report whose findings have these fixes.
    fn report(fixes: &[&str]) -> Report {
        let mut r = crate::check(
            &Host {
                proc_sys: "/nonexistent".into(),
                sys: "/nonexistent".into(),
            },
            crate::Path {
                rate: 1,
                rtt: Default::default(),
                streams: 1,
                probe: None,
            },
        );
        r.findings = fixes
            .iter()
            .map(|f| Finding {
                link: "receive window",
                limit: None,
                finding: "a test".into(),
                fix: vec![f.to_string()],
            })
            .collect();
        r
    }

    #[test]
    fn apply_keeps_the_first_values_and_undo_puts_them_back() {
        let t = tempfile::tempdir().unwrap();
        let host = Host {
            proc_sys: t.path().join("proc"),
            sys: t.path().join("sys"),
        };
        let rmem = t.path().join("proc/net/ipv4/tcp_rmem");
        std::fs::create_dir_all(rmem.parent().unwrap()).unwrap();
        std::fs::write(&rmem, "4096\t131072\t6291456\n").unwrap();
        let undo_path = t.path().join("cfg/doctor-undo.sh");
        let none = report(&["hetch cp --streams 12 ..."]);
        assert_eq!(apply(&host, &none, &undo_path, |_| {}).unwrap(), 0);
        assert!(!undo_path.exists());
        let mut said = Vec::new();
        let fix = report(&["sysctl -w net.ipv4.tcp_rmem=\"4096 131072 33554432\""]);
        let n = apply(&host, &fix, &undo_path, |l| said.push(l.to_string())).unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            said,
            ["sysctl -w net.ipv4.tcp_rmem=\"4096 131072 33554432\""]
        );
        assert_eq!(
            std::fs::read_to_string(&rmem).unwrap(),
            "4096 131072 33554432"
        );
        // Applied again: the undo file still holds the value from before the first.
        apply(&host, &fix, &undo_path, |_| {}).unwrap();
        let kept = std::fs::read_to_string(&undo_path).unwrap();
        assert_eq!(kept.matches("tcp_rmem").count(), 1, "{kept}");
        assert!(kept.contains("tcp_rmem=\"4096 131072 6291456\""), "{kept}");
        // A key the host lacks: named, after the undo file kept what it had.
        let wmem = report(&["sysctl -w net.ipv4.tcp_wmem=\"1 2 3\""]);
        let e = apply(&host, &wmem, &undo_path, |_| {}).unwrap_err();
        assert_eq!(
            e.to_string(),
            "net.ipv4.tcp_wmem: cannot read the current value"
        );
        said.clear();
        assert!(undo(&host, &undo_path, |l| said.push(l.to_string())).unwrap());
        assert_eq!(
            said,
            ["sysctl -w net.ipv4.tcp_rmem=\"4096 131072 6291456\""]
        );
        assert_eq!(
            std::fs::read_to_string(&rmem).unwrap(),
            "4096 131072 6291456"
        );
        assert!(!undo_path.exists());
        assert!(!undo(&host, &undo_path, |_| {}).unwrap());
        // A line apply never writes is refused before anything is set.
        std::fs::write(&undo_path, "sysctl -w kernel.modprobe=\"/tmp/x\"\n").unwrap();
        let e = undo(&host, &undo_path, |_| panic!("nothing to announce")).unwrap_err();
        assert!(e.to_string().contains("not a line --apply writes"), "{e}");
    }
}
