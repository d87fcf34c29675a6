//! Running `hetch` itself: every tool is carried out by the same binary and flags a
//! user would type (`--json` for the result, `--progress-json` for progress), so the
//! assistant gets exactly what the command line does, and a failing transfer cannot
//! take the MCP server down with it.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

/// Most names kept of each kind of line (the rest are counted).
pub const MAX_SAMPLE: usize = 1000;
/// Most characters kept of one line.
const MAX_LINE_CHARS: usize = 1024;
/// Most bytes of a result read from hetch's stdout.
const MAX_STDOUT: u64 = 8 << 20;

/// Lines of one kind: how many, and the first few.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Sample {
    /// All such lines.
    pub count: u64,
    /// The first ones (names escaped by hetch, cut to 1024 characters).
    pub first: Vec<String>,
    #[serde(skip)]
    keep: usize,
}

impl Sample {
    fn push(&mut self, s: &str) {
        self.count += 1;
        if self.first.len() < self.keep {
            self.first.push(s.chars().take(MAX_LINE_CHARS).collect());
        }
    }
}

/// What hetch said on stderr, sorted.
#[derive(Debug, Clone, Serialize)]
pub struct Lines {
    /// "would copy PATH" (a dry run).
    pub would_copy: Sample,
    /// "would replace PATH".
    pub would_replace: Sample,
    /// "would delete PATH".
    pub would_delete: Sample,
    /// "deleted PATH".
    pub deleted: Sample,
    /// Everything else: errors, differences, warnings.
    pub messages: Sample,
}

impl Lines {
    /// Keeping the first `keep` lines of each kind (at most [`MAX_SAMPLE`]).
    pub fn new(keep: usize) -> Lines {
        let s = Sample {
            keep: keep.min(MAX_SAMPLE),
            ..Default::default()
        };
        Lines {
            would_copy: s.clone(),
            would_replace: s.clone(),
            would_delete: s.clone(),
            deleted: s.clone(),
            messages: s,
        }
    }

    /// Lines holding one message (hetch could not be run at all).
    pub fn failed(message: &str) -> Lines {
        let mut l = Lines::new(1);
        l.messages.push(message);
        l
    }

    /// Files one line to its kind; progress lines go to `progress` instead.
    fn take(&mut self, line: &str, progress: &mut Option<Value>) {
        if line.starts_with("{\"progress\"") {
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                *progress = Some(v["progress"].clone());
            }
            return;
        }
        let kinds: [(&str, &mut Sample); 4] = [
            ("would copy ", &mut self.would_copy),
            ("would replace ", &mut self.would_replace),
            ("would delete ", &mut self.would_delete),
            ("deleted ", &mut self.deleted),
        ];
        for (prefix, sample) in kinds {
            if let Some(rest) = line.strip_prefix(prefix) {
                sample.push(rest);
                return;
            }
        }
        self.messages
            .push(line.strip_prefix("hetch: ").unwrap_or(line));
    }
}

/// A finished run of hetch.
#[derive(Debug, Clone)]
pub struct Finished {
    /// Exit code (None: killed by a signal).
    pub code: Option<i32>,
    /// The `--json` result (Null if it printed none).
    pub json: Value,
    /// Its stderr, sorted.
    pub lines: Lines,
}

impl Finished {
    /// The first message, for a one-line error.
    pub fn first_message(&self) -> String {
        self.lines
            .messages
            .first
            .first()
            .cloned()
            .unwrap_or_else(|| format!("hetch exited with {:?}", self.code))
    }
}

/// Runs hetch with `args`, keeping `keep` lines of each kind and calling
/// `on_progress` with each progress line, until it exits or `stop` resolves (then it
/// is killed: what it wrote resumes on the next run).
pub async fn run(
    exe: &PathBuf,
    args: &[String],
    keep: usize,
    mut on_progress: impl FnMut(&Value),
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<Finished> {
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let out = tokio::spawn(async move {
        let mut buf = Vec::new();
        let _ = stdout.take(MAX_STDOUT + 1).read_to_end(&mut buf).await;
        // Cut off: no result at all rather than part of one.
        if buf.len() as u64 > MAX_STDOUT {
            buf.clear();
        }
        buf
    });
    let mut lines = Lines::new(keep);
    let mut progress = None;
    let mut err = BufReader::new(stderr);
    let mut line = Vec::new();
    tokio::pin!(stop);
    let mut stopped = false;
    loop {
        line.clear();
        // At most 64 KiB a line: a longer one (names a server chose) goes in parts.
        let mut part = (&mut err).take(64 * 1024);
        tokio::select! {
            n = part.read_until(b'\n', &mut line) => {
                if n? == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches('\n');
                lines.take(text, &mut progress);
                if let Some(p) = progress.take() {
                    on_progress(&p);
                }
            }
            _ = &mut stop, if !stopped => {
                stopped = true;
                let _ = child.start_kill();
            }
        }
    }
    let status = child.wait().await?;
    let stdout = out.await.unwrap_or_default();
    Ok(Finished {
        code: status.code(),
        json: last_json(&stdout),
        lines,
    })
}

/// The JSON document hetch printed: the whole output, else its last line that is one.
fn last_json(out: &[u8]) -> Value {
    let text = String::from_utf8_lossy(out);
    if let Ok(v) = serde_json::from_str(&text) {
        return v;
    }
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null)
}

/// Runs hetch to the end (a dry run, a comparison, a listing), for at most
/// `limit` (then it is killed, and what it said so far is the result).
pub async fn run_to_end(
    exe: &PathBuf,
    args: &[String],
    keep: usize,
    limit: Duration,
) -> std::io::Result<Finished> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let timer = tokio::spawn(async move {
        tokio::time::sleep(limit).await;
        let _ = tx.send(());
    });
    let r = run(exe, args, keep, |_| {}, async {
        let _ = rx.await;
    })
    .await;
    timer.abort();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_sorted_and_bounded() {
        let mut l = Lines::new(50);
        let mut p = None;
        for i in 0..200 {
            l.take(&format!("would copy /d/f{i}"), &mut p);
        }
        l.take("would delete /d/old", &mut p);
        l.take("hetch: error: /d/x: permission denied", &mut p);
        l.take(&format!("hetch: error: {}", "y".repeat(5000)), &mut p);
        l.take("{\"progress\":{\"bytes\":5}}", &mut p);
        assert_eq!(l.would_copy.count, 200);
        assert_eq!(l.would_copy.first.len(), 50);
        assert_eq!(l.would_delete.first, ["/d/old"]);
        assert_eq!(l.messages.first[0], "error: /d/x: permission denied");
        assert_eq!(l.messages.first[1].chars().count(), MAX_LINE_CHARS);
        assert_eq!(p.unwrap()["bytes"], 5);
        assert_eq!(
            last_json(b"noise\n{\"a\":1}\n"),
            serde_json::json!({"a": 1})
        );
        assert_eq!(last_json(b"{\n \"a\": 2\n}\n"), serde_json::json!({"a": 2}));
        assert_eq!(last_json(b"none"), Value::Null);
    }
}
