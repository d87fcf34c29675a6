//! The audit log: one JSON line per tool call, allowed or refused, and one per
//! transfer's end. A call whose record cannot be written is refused (the log fails
//! closed).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{json, Value};

/// Most bytes of a call's arguments kept in its record; longer ones are cut (and say
/// so), so an assistant cannot grow the log by megabytes a call.
pub const MAX_ARGUMENTS_BYTES: usize = 16 * 1024;

/// What was decided about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Carried out (a read-only tool, or an action with its confirmation).
    Allowed,
    /// A plan was made; nothing happens until it is confirmed.
    Planned,
    /// Refused: outside the policy, malformed, or unconfirmed.
    Refused,
    /// A transfer ended (not a call: its outcome).
    Ended,
}

impl Decision {
    fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Planned => "planned",
            Decision::Refused => "refused",
            Decision::Ended => "ended",
        }
    }
}

/// The append-only log file.
pub struct Audit {
    file: Mutex<File>,
}

impl Audit {
    /// Opens (creates, mode 0600) the log for appending.
    pub fn open(path: &Path) -> anyhow::Result<Audit> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(Audit {
            file: Mutex::new(file),
        })
    }

    /// Appends one record: when, which tool, its arguments (cut to
    /// [`MAX_ARGUMENTS_BYTES`]), the decision and its outcome. One `write` per line,
    /// so records of concurrent calls never interleave.
    pub fn record(
        &self,
        tool: &str,
        arguments: &Value,
        decision: Decision,
        outcome: Value,
    ) -> std::io::Result<()> {
        let now = hetch_units::now_ms();
        let args = arguments.to_string();
        let arguments = if args.len() > MAX_ARGUMENTS_BYTES {
            let mut cut = MAX_ARGUMENTS_BYTES;
            while !args.is_char_boundary(cut) {
                cut -= 1;
            }
            json!({"truncated": &args[..cut], "bytes": args.len()})
        } else {
            arguments.clone()
        };
        // Every field an assistant can make long is cut: the tool's name, and the
        // arguments above; outcomes are built here from bounded parts.
        let tool: String = tool.chars().take(64).collect();
        let mut line = json!({
            "time": hetch_units::rfc3339_ms(now),
            "tool": tool,
            "arguments": arguments,
            "decision": decision.as_str(),
            "outcome": outcome,
        })
        .to_string();
        line.push('\n');
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        f.write_all(line.as_bytes())?;
        f.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_json_lines_and_long_arguments_are_cut() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("audit.jsonl");
        let a = Audit::open(&path).unwrap();
        a.record(
            "list",
            &json!({"location": "a\nb"}),
            Decision::Refused,
            json!("x"),
        )
        .unwrap();
        a.record(
            "copy",
            &json!({"sources": ["y".repeat(100_000)]}),
            Decision::Planned,
            json!(null),
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["arguments"]["location"], "a\nb");
        assert_eq!(lines[0]["decision"], "refused");
        assert!(lines[1]["arguments"]["truncated"].as_str().unwrap().len() <= MAX_ARGUMENTS_BYTES);
        assert!(text.len() < 3 * MAX_ARGUMENTS_BYTES);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
