//! The deployment examples in contrib/ (systemd units, a Slurm batch script) name
//! only flags the binary has, with values it takes: each command line is run with
//! `--help` appended, which the argument parser answers only when everything before
//! it parses.

use crate::util;

use std::path::Path;

use util::hetch;

/// The `hetch` command lines in `text`: `ExecStart=` lines of units, and the lines
/// of a shell script from `hetch` to the end of its backslash continuations.
fn command_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(cmd) = line.strip_prefix("ExecStart=") {
            out.push(cmd.to_string());
            continue;
        }
        let Some(i) = line.find(" hetch ").filter(|_| !line.starts_with('#')) else {
            continue;
        };
        let mut cmd = line[i + 1..].trim_end_matches('\\').to_string();
        let mut more = line.ends_with('\\');
        while more {
            let next = lines.next().unwrap_or_default();
            more = next.ends_with('\\');
            cmd.push(' ');
            cmd.push_str(next.trim().trim_end_matches('\\'));
        }
        out.push(cmd);
    }
    out
}

/// Words of a command line, with systemd's specifiers and the script's variables
/// given sample values and its quotes removed.
fn words(cmd: &str) -> Vec<String> {
    let cmd = cmd
        .replace("%i", "1")
        .replace("%H", "node1")
        .replace("$SLURM_JOB_ID", "42")
        .replace("$SLURMD_NODENAME", "node1")
        .replace("$HETCH_SERVICE", "svc.example.org:7879")
        .replace("$HETCH_ROOT", "/data")
        .replace("$HETCH_CONFIG", "/etc/hetch")
        .replace('"', "");
    cmd.split_whitespace().skip(1).map(String::from).collect()
}

#[test]
fn every_command_line_in_contrib_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib");
    let mut seen = 0;
    for sub in ["systemd", "slurm"] {
        for entry in std::fs::read_dir(dir.join(sub)).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for cmd in command_lines(&text) {
                let mut args = words(&cmd);
                assert!(
                    ["serve", "service", "worker"].contains(&args[0].as_str()),
                    "{}: {cmd}",
                    path.display()
                );
                args.push("--help".into());
                let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
                let out = hetch(&args, &[]);
                assert_eq!(out.code(), Some(0), "{}: {cmd}\n{out:?}", path.display());
                seen += 1;
            }
        }
    }
    assert_eq!(seen, 4, "a command line in contrib/ was not found");
}

#[test]
fn a_misspelt_flag_is_caught() {
    let args = words("/usr/local/bin/hetch worker --service a:1 --root /data --unit 4");
    let mut args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    args.push("--help".into());
    assert_eq!(hetch(&args, &[]).code(), Some(2));
}
