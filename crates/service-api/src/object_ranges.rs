//! What workers and the service say to each other about a large file moved in ranges
//! into an object store as one multipart upload: the upload all its ranges share
//! (`POST /api/work/upload`), what each range reports of its parts when it is done
//! (the `range` field of its [`crate::FinishRequest`]), and what the file's commit
//! unit reads back to check and complete the upload (`POST /api/work/ranges`).
//!
//! Every number and string a worker sends is bounded here, and checked by the service
//! before anything is stored ([`RangeReport::check`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest upload id (S3's are about 100 bytes).
pub const MAX_UPLOAD_ID: usize = 1024;
/// Longest part id (S3 ETags are 34 bytes, Azure's block ids 32).
pub const MAX_PART_ID: usize = 256;
/// Most parts one range reports.
pub const MAX_RANGE_PARTS: usize = 1024;
/// Most block digests one range reports (the planner cuts ranges of files going into
/// object stores within it).
pub const MAX_RANGE_DIGESTS: usize = 16_384;
/// Most ranges one answer to `POST /api/work/ranges` holds.
pub const MAX_RANGES_PAGE: usize = 64;

/// What a done range unit of a file going into an object store reports of its parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RangeReport {
    /// The upload its parts went into (the one the service recorded for the file).
    #[schemars(length(min = 1, max = 1024))]
    pub upload: String,
    /// Its parts' ids (ETags or block ids), in order: 1 to 1024 of 1 to 256 printable
    /// ASCII characters.
    #[schemars(length(min = 1, max = 1024))]
    pub parts: Vec<String>,
    /// Its parts' bytes.
    #[schemars(range(max = 9_007_199_254_740_992u64))]
    pub size: u64,
    /// Its blocks' BLAKE3 digests (64 hex digits each), in block order, one per block
    /// of the range (at most 16,384).
    #[schemars(length(max = 16_384))]
    pub digests: Vec<String>,
}

/// Whether `s` is 1 to `max` printable ASCII characters (no space or line break:
/// ids are stored one a line).
fn id_like(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_graphic())
}

/// Whether `upload` is an upload id within bounds; else one line naming the field.
pub fn check_upload(upload: &str) -> Result<(), String> {
    match id_like(upload, MAX_UPLOAD_ID) {
        true => Ok(()),
        false => Err(format!("upload: 1 to {MAX_UPLOAD_ID} printable characters")),
    }
}

impl RangeReport {
    /// Whether it is within bounds and has one digest per block of a range of
    /// `blocks` blocks and `bytes` bytes; else one line naming the field.
    pub fn check(&self, blocks: u64, bytes: u64) -> Result<(), String> {
        check_upload(&self.upload).map_err(|e| format!("range.{e}"))?;
        if self.parts.is_empty() || self.parts.len() > MAX_RANGE_PARTS {
            return Err(format!("range.parts: 1 to {MAX_RANGE_PARTS} part ids"));
        }
        if !self.parts.iter().all(|p| id_like(p, MAX_PART_ID)) {
            return Err(format!(
                "range.parts: each 1 to {MAX_PART_ID} printable characters"
            ));
        }
        if self.parts.len() as u64 > blocks {
            return Err(format!(
                "range.parts: {} parts for a range of {blocks} blocks",
                self.parts.len()
            ));
        }
        if self.size != bytes {
            return Err(format!(
                "range.size: {} bytes for a range of {bytes}",
                self.size
            ));
        }
        if self.digests.len() as u64 != blocks || self.digests.len() > MAX_RANGE_DIGESTS {
            return Err(format!(
                "range.digests: {} digests for a range of {blocks} blocks",
                self.digests.len()
            ));
        }
        let hex = |d: &String| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit());
        if !self.digests.iter().all(hex) {
            return Err("range.digests: each 64 hex digits".into());
        }
        Ok(())
    }
}

/// A range unit asking for its file's upload: the one recorded, or `upload` (which
/// it created) if none is, in which case it is recorded. A worker whose upload was
/// not recorded aborts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadRequest {
    /// The worker's name.
    #[schemars(
        length(min = 1, max = 200),
        regex(pattern = r"^[^\x00-\x1f\x7f-\x9f]+$")
    )]
    pub worker: String,
    /// The unit's job.
    pub job: String,
    /// The unit's number (a range unit the worker holds).
    pub seq: u64,
    /// The unit's lease id, as its claim gave it.
    #[schemars(length(min = 1, max = 64))]
    pub lease: String,
    /// The upload it created.
    #[schemars(length(min = 1, max = 1024))]
    pub upload: String,
}

/// The file's upload, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UploadReply {
    /// The upload every range of the file puts its parts into.
    pub upload: String,
}

/// A commit unit asking what its file's ranges reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RangesRequest {
    /// The worker's name.
    #[schemars(
        length(min = 1, max = 200),
        regex(pattern = r"^[^\x00-\x1f\x7f-\x9f]+$")
    )]
    pub worker: String,
    /// The unit's job.
    pub job: String,
    /// The unit's number (a commit unit the worker holds).
    pub seq: u64,
    /// The unit's lease id, as its claim gave it.
    #[schemars(length(min = 1, max = 64))]
    pub lease: String,
    /// The first block of the first range wanted (0 to start; then the previous
    /// answer's `next`).
    #[serde(default)]
    pub from: u64,
}

/// A page of what a file's done ranges reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RangesReply {
    /// The file's upload, if one was recorded.
    pub upload: Option<String>,
    /// The ranges from the one asked for, in block order (at most 64).
    pub ranges: Vec<ReportedRange>,
    /// Where the next page starts, if there may be more.
    pub next: Option<u64>,
}

/// What one done range reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReportedRange {
    /// Its first block.
    pub first: u64,
    /// One past its last block.
    pub end: u64,
    /// Its parts' bytes.
    pub size: u64,
    /// Its parts' ids, in order.
    pub parts: Vec<String>,
    /// Its blocks' BLAKE3 digests, hex, in block order.
    pub digests: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> RangeReport {
        RangeReport {
            upload: "up-1".into(),
            parts: vec!["\"etag-1\"".into(), "\"etag-2\"".into()],
            size: 10,
            digests: vec!["ab".repeat(32); 4],
        }
    }

    /// A change making a good report bad.
    type Change = Box<dyn Fn(&mut RangeReport)>;

    #[test]
    fn reports_out_of_bounds_are_refused_naming_the_field() {
        assert_eq!(report().check(4, 10), Ok(()));
        let cases: Vec<(&str, Change)> = vec![
            ("range.upload", Box::new(|r| r.upload.clear())),
            ("range.upload", Box::new(|r| r.upload = "u".repeat(1025))),
            ("range.parts", Box::new(|r| r.parts.clear())),
            (
                "range.parts",
                Box::new(|r| r.parts = vec!["p".into(); 1025]),
            ),
            (
                "range.parts",
                Box::new(|r| r.parts[0] = "e".repeat(1 << 20)),
            ),
            ("range.parts", Box::new(|r| r.parts[1] = "a\nb".into())),
            ("range.parts", Box::new(|r| r.parts = vec!["p".into(); 5])),
            ("range.size", Box::new(|r| r.size = u64::MAX)),
            ("range.digests", Box::new(|r| drop(r.digests.pop()))),
            (
                "range.digests",
                Box::new(|r| r.digests[2] = "zz".repeat(32)),
            ),
        ];
        for (field, f) in cases {
            let mut r = report();
            f(&mut r);
            let e = r.check(4, 10).unwrap_err();
            assert!(e.starts_with(field), "{field}: {e}");
        }
        // An absurd block count is refused by the digests' bound, not believed.
        let mut r = report();
        r.digests = vec!["ab".repeat(32); MAX_RANGE_DIGESTS + 1];
        let n = r.digests.len() as u64;
        assert!(r.check(n, 10).unwrap_err().starts_with("range.digests"));
    }
}
