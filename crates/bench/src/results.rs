//! The results file: one JSON [`Record`] per line, appended after every run, so an
//! interrupted benchmark resumes where it stopped (runs already recorded are skipped),
//! and `STEM.meta.json` beside it for the report.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::record::{Meta, Record};

/// A run as a results file holds it: serialised as one JSON line, identified by a key
/// (so a resumed benchmark skips it).
pub trait RunRecord: serde::Serialize + serde::de::DeserializeOwned {
    /// What identifies the run (link, dataset, tool, iteration...).
    fn key(&self) -> String;
}

impl RunRecord for Record {
    fn key(&self) -> String {
        Record::key(self)
    }
}

/// An open results file (of sweep [`Record`]s unless said otherwise).
pub struct Results<R = Record> {
    path: PathBuf,
    records: Vec<R>,
    done: HashSet<String>,
}

impl<R: RunRecord> Results<R> {
    /// Opens (or starts) `path`, loading the runs already in it. A last line cut short
    /// by a crash is ignored (and overwritten by the next append's newline fix).
    pub fn open(path: &Path) -> anyhow::Result<Results<R>> {
        let mut records = Vec::new();
        match std::fs::read_to_string(path) {
            Ok(text) => {
                for (n, line) in text.lines().enumerate() {
                    if line.trim().is_empty() {
                        continue;
                    }
                    match serde_json::from_str::<R>(line) {
                        Ok(r) => records.push(r),
                        Err(_) if n + 1 == text.lines().count() && !text.ends_with('\n') => {}
                        Err(e) => {
                            anyhow::bail!("{}:{}: not a result record: {e}", path.display(), n + 1)
                        }
                    }
                }
                if !text.is_empty() && !text.ends_with('\n') {
                    // Drop the torn line so appends start on a line of their own.
                    let keep = text.rfind('\n').map_or(0, |i| i + 1);
                    std::fs::write(path, &text[..keep])
                        .with_context(|| path.display().to_string())?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| path.display().to_string()),
        }
        let done = records.iter().map(RunRecord::key).collect();
        Ok(Results {
            path: path.to_path_buf(),
            records,
            done,
        })
    }

    /// The results file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a run with this key is already recorded.
    pub fn has(&self, key: &str) -> bool {
        self.done.contains(key)
    }

    /// Every run recorded so far.
    pub fn records(&self) -> &[R] {
        &self.records
    }

    /// Appends one run and pushes it to the file at once.
    pub fn append(&mut self, r: R) -> anyhow::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| self.path.display().to_string())?;
        let mut line = serde_json::to_string(&r)?;
        line.push('\n');
        f.write_all(line.as_bytes())
            .and_then(|_| f.sync_data())
            .with_context(|| self.path.display().to_string())?;
        self.done.insert(r.key());
        self.records.push(r);
        Ok(())
    }
}

/// Where the meta file of results file `path` lives (`STEM.meta.json`).
pub fn meta_path(path: &Path) -> PathBuf {
    path.with_extension("meta.json")
}

/// Reads the meta file of results file `path` (empty when missing).
pub fn read_meta(path: &Path) -> anyhow::Result<Meta> {
    let p = meta_path(path);
    match std::fs::read_to_string(&p) {
        Ok(t) => serde_json::from_str(&t).with_context(|| p.display().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Meta::default()),
        Err(e) => Err(e).with_context(|| p.display().to_string()),
    }
}

/// Writes the meta file of results file `path`.
pub fn write_meta(path: &Path, meta: &Meta) -> anyhow::Result<()> {
    let p = meta_path(path);
    std::fs::write(&p, serde_json::to_string_pretty(meta)? + "\n")
        .with_context(|| p.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Mode, Point};

    fn rec(tool: &str, it: u32) -> Record {
        Record {
            point: Point {
                suite: "sweep-bulk".into(),
                dataset: "1KiB-x4".into(),
                file_size: 1024,
                files: 4,
                bytes: 4096,
                rtt_ms: Some(50.0),
                loss: 0.0,
                rate_bps: 0,
                cc: "default".into(),
                write_rate_bps: None,
            },
            tool: tool.into(),
            iteration: it,
            seconds: 1.0,
            ok: true,
            error: None,
            started_unix: 0,
            mode: Mode::Bulk,
            lag: None,
            writer_seconds: None,
            complete_seconds: None,
        }
    }

    #[test]
    fn appended_runs_are_found_after_reopening_and_a_torn_line_is_dropped() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("r.jsonl");
        let mut r = Results::<Record>::open(&p).unwrap();
        r.append(rec("hetch", 1)).unwrap();
        r.append(rec("rsync", 1)).unwrap();
        // A crash in the middle of a write leaves half a line.
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"point\":{\"suite").unwrap();
        drop(f);
        let mut r = Results::<Record>::open(&p).unwrap();
        assert_eq!(r.records().len(), 2);
        assert!(r.has(&rec("hetch", 1).key()));
        assert!(!r.has(&rec("hetch", 2).key()));
        r.append(rec("hetch", 2)).unwrap();
        let r = Results::<Record>::open(&p).unwrap();
        assert_eq!(r.records().len(), 3);
        assert_eq!(r.records()[2], rec("hetch", 2));
    }

    #[test]
    fn a_damaged_line_in_the_middle_is_an_error_naming_the_file() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("r.jsonl");
        std::fs::write(&p, "garbage\n{}\n").unwrap();
        let e = Results::<Record>::open(&p).err().unwrap().to_string();
        assert!(e.contains("r.jsonl:1"), "{e}");
    }

    #[test]
    fn meta_round_trips() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("r.jsonl");
        assert_eq!(read_meta(&p).unwrap(), Meta::default());
        let m = Meta {
            command: "hetch-lab bench".into(),
            storage: "disk".into(),
            ..Meta::default()
        };
        write_meta(&p, &m).unwrap();
        assert_eq!(read_meta(&p).unwrap(), m);
        assert!(t.path().join("r.meta.json").exists());
    }
}
