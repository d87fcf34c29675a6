//! Reads a systemd service the way systemd would start it, for what the package check
//! needs: `User=`, `Group=`, `EnvironmentFile=` and `ExecStart=` of [Service], and
//! the command line with `$VAR` (split on white space) and `${VAR}` (one word) taken
//! from the environment file.

use std::collections::BTreeMap;

use anyhow::{bail, Result};

/// The parts of a unit's [Service] section a check starts it from.
#[derive(Debug, Default, PartialEq)]
pub struct Service {
    /// `User=`.
    pub user: String,
    /// `Group=` (the user's name if unset, as systemd does for a system user's group).
    pub group: String,
    /// `EnvironmentFile=`, without the optional leading `-`.
    pub environment_file: Option<String>,
    /// `ExecStart=`, unexpanded.
    pub exec_start: String,
}

/// Parses a unit file's text.
pub fn parse_unit(text: &str) -> Result<Service> {
    let mut s = Service::default();
    let mut in_service = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_service = line == "[Service]";
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if !in_service || line.starts_with('#') {
            continue;
        }
        let value = value.trim().to_string();
        match key.trim() {
            "User" => s.user = value,
            "Group" => s.group = value,
            "EnvironmentFile" => {
                s.environment_file = Some(value.trim_start_matches('-').to_string())
            }
            "ExecStart" => s.exec_start = value,
            _ => {}
        }
    }
    if s.user.is_empty() || s.exec_start.is_empty() {
        bail!("the unit has no User= or no ExecStart=");
    }
    if s.group.is_empty() {
        s.group = s.user.clone();
    }
    Ok(s)
}

/// Parses an environment file: `KEY=VALUE` lines, the value optionally in double or
/// single quotes; comments and blank lines skipped.
pub fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let unquoted = ['"', '\'']
                .iter()
                .find_map(|q| v.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
                .unwrap_or(v);
            (k.trim().to_string(), unquoted.to_string())
        })
        .collect()
}

/// `ExecStart=`'s words with the variables of `env` put in: `$VAR` becomes the words
/// of its value, `${VAR}` its value as one word. A specifier (`%i`) or quoting is not
/// supported: an error, rather than a command unlike systemd's.
pub fn expand(exec_start: &str, env: &BTreeMap<String, String>) -> Result<Vec<String>> {
    let mut argv = Vec::new();
    for word in exec_start.split_whitespace() {
        if word.contains(['%', '"', '\'']) {
            bail!("ExecStart= word {word:?}: specifiers and quotes are not supported here");
        }
        if let Some(name) = word.strip_prefix("${").and_then(|w| w.strip_suffix('}')) {
            argv.push(env.get(name).cloned().unwrap_or_default());
        } else if let Some(name) = word.strip_prefix('$') {
            argv.extend(
                env.get(name)
                    .map(|v| v.split_whitespace().map(String::from).collect::<Vec<_>>())
                    .unwrap_or_default(),
            );
        } else {
            argv.push(word.to_string());
        }
    }
    Ok(argv)
}

/// The value after `flag` in `argv`.
pub fn flag_value<'a>(argv: &'a [String], flag: &str) -> Option<&'a str> {
    argv.iter()
        .position(|a| a == flag)
        .and_then(|i| argv.get(i + 1))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_expands_as_systemd_would() {
        let unit = "[Unit]\nUser=nobody\n[Service]\nUser=hetch\n# ExecStart=/bin/false\n\
                    EnvironmentFile=-/etc/default/x\nExecStart=/usr/bin/hetch serve $OPTS ${ONE}\n";
        let s = parse_unit(unit).unwrap();
        assert_eq!(s.user, "hetch");
        assert_eq!(s.group, "hetch");
        assert_eq!(s.environment_file.as_deref(), Some("/etc/default/x"));
        let env = parse_env("# c\nOPTS=\"--root /srv  --listen 0.0.0.0:1\"\nONE='a b'\n");
        let argv = expand(&s.exec_start, &env).unwrap();
        assert_eq!(
            argv,
            [
                "/usr/bin/hetch",
                "serve",
                "--root",
                "/srv",
                "--listen",
                "0.0.0.0:1",
                "a b"
            ]
        );
        assert_eq!(flag_value(&argv, "--root"), Some("/srv"));
        assert!(expand("/usr/bin/hetch --name %i", &env).is_err());
        assert!(parse_unit("[Service]\nExecStart=/bin/true\n").is_err());
    }
}
