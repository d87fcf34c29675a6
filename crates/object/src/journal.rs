//! The local record of a multipart upload in progress, so that an interrupted transfer
//! resumes it (uploading only the parts the store does not have) instead of starting
//! over or leaving the parts behind.
//!
//! One file per object under the state directory, named by a digest of endpoint,
//! bucket and key: a JSON header line, then one line per uploaded part with its id and
//! the digests of its blocks (so the whole-object digest can be completed without
//! reading the parts back). A torn last line (crash mid-write) is ignored.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What identifies an upload and the file it is a copy of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadHeader {
    /// `s3://bucket/key`, for people reading the file.
    pub url: String,
    /// The store's upload id.
    pub upload: String,
    /// Size of the source file.
    pub size: u64,
    /// Modification time of the source file.
    pub mtime: (i64, u32),
    /// Transfer block size.
    pub block_size: u64,
    /// Blocks per part.
    pub part_blocks: u64,
    /// The checksum algorithm of the block digests.
    pub checksum: String,
}

/// One uploaded part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRecord {
    /// Part index, from 0.
    pub part: u64,
    /// What completing the upload needs (ETag and checksum).
    pub id: String,
    /// Hex digests of the part's blocks, in order.
    pub digests: Vec<String>,
}

/// An open upload journal.
#[derive(Debug)]
pub struct UploadJournal {
    path: PathBuf,
    file: File,
}

/// Where the journal of `url` at `endpoint` lives under `state_dir`.
pub fn journal_path(state_dir: &Path, endpoint: &str, url: &str) -> PathBuf {
    let mut h = blake3::Hasher::new();
    h.update(endpoint.as_bytes());
    h.update(&[0]);
    h.update(url.as_bytes());
    let name = hex::encode(&h.finalize().as_bytes()[..16]);
    state_dir.join("uploads").join(format!("{name}.json"))
}

impl UploadJournal {
    /// Starts a journal (replacing any old one at `path`).
    pub fn create(path: &Path, header: &UploadHeader) -> std::io::Result<UploadJournal> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("tmp");
        {
            let mut f = File::create(&tmp)?;
            let mut line = serde_json::to_vec(header).map_err(std::io::Error::other)?;
            line.push(b'\n');
            f.write_all(&line)?;
            f.sync_data()?;
        }
        std::fs::rename(&tmp, path)?;
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(UploadJournal {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Reads the journal at `path`: its header and the parts recorded. `None` when
    /// there is none or it cannot be read (it is then only a lost chance to resume).
    pub fn load(path: &Path) -> Option<(UploadHeader, Vec<PartRecord>)> {
        let text = std::fs::read_to_string(path).ok()?;
        let mut lines = text.lines();
        let header: UploadHeader = serde_json::from_str(lines.next()?).ok()?;
        let parts = lines
            .map_while(|l| serde_json::from_str::<PartRecord>(l).ok())
            .collect();
        Some((header, parts))
    }

    /// Reopens an existing journal for appending.
    pub fn reopen(path: &Path) -> std::io::Result<UploadJournal> {
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(UploadJournal {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Records an uploaded part (one write of one line, flushed to disk).
    pub fn add(&mut self, part: &PartRecord) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(part).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.sync_data()
    }

    /// Where the journal is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Removes the journal at `path` (the upload completed or was aborted).
pub fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// The default state directory: `$HETCH_STATE_DIR`, else `$XDG_STATE_HOME/hetch`, else
/// `~/.local/state/hetch`.
pub fn default_state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("HETCH_STATE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("hetch");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    PathBuf::from(home).join(".local/state/hetch")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_and_torn_lines_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal_path(dir.path(), "http://h:9000", "s3://b/k");
        let header = UploadHeader {
            url: "s3://b/k".into(),
            upload: "u1".into(),
            size: 10,
            mtime: (1, 2),
            block_size: 4,
            part_blocks: 2,
            checksum: "blake3".into(),
        };
        let mut j = UploadJournal::create(&path, &header).unwrap();
        let p0 = PartRecord {
            part: 0,
            id: "<e>".into(),
            digests: vec!["aa".into(), "bb".into()],
        };
        j.add(&p0).unwrap();
        drop(j);
        // A crash mid-line leaves a torn record.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"part\":1,\"id\":").unwrap();
        let (h, parts) = UploadJournal::load(&path).unwrap();
        assert_eq!(h, header);
        assert_eq!(parts, vec![p0]);
        assert_ne!(
            path,
            journal_path(dir.path(), "http://h:9000", "s3://b/k2"),
            "each object has its own journal"
        );
        remove(&path);
        assert!(UploadJournal::load(&path).is_none());
    }
}
