//! The pieces of a range or commit of a file going into an object store
//! (`object_split.rs`) that hold its data: the sink a range's blocks fill one part at
//! a time, the pages of reports a commit reads, and the form of the recorded upload.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use hetch_engine::ranges::{RangeSink, RangeSource, Taken};
use hetch_integrity::Digest;
use hetch_object::shared::{part_index, RangePart};
use hetch_object::{Bucket, RangeCut};
use hetch_service_api::object_ranges::RangesRequest;
use hetch_storage::StorageError;

/// Where a range's blocks go as they are read: into the part they belong to, which is
/// uploaded once whole (one part in memory at a time).
pub(crate) struct PartSink {
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) bucket: Arc<Bucket>,
    pub(crate) key: String,
    pub(crate) upload: String,
    pub(crate) cut: RangeCut,
    /// One past the range's last block.
    pub(crate) end: u64,
    /// The part being filled.
    pub(crate) part: Vec<u8>,
    pub(crate) parts: Vec<String>,
    pub(crate) digests: Vec<String>,
}

impl RangeSink for PartSink {
    fn keeps(&mut self, _: u64, _: usize) -> Result<bool, StorageError> {
        // A range run again uploads all its parts again (a part's number is its
        // place in the file, so the store keeps the last one).
        Ok(false)
    }

    fn take(&mut self, i: u64, data: &[u8], digest: &Digest) -> Result<Taken, StorageError> {
        if self.part.is_empty() {
            self.part
                .reserve_exact((self.cut.part_blocks as usize).saturating_mul(data.len()));
        }
        self.part.extend_from_slice(data);
        self.digests.push(hex::encode(digest));
        let n = part_index(i, self.cut);
        if i + 1 == ((n + 1) * self.cut.part_blocks).min(self.end) {
            let body = Bytes::from(std::mem::take(&mut self.part));
            let put = self
                .bucket
                .put_part(&self.key, &self.upload, n as usize, body);
            let id = self
                .handle
                .block_on(put)
                .map_err(|e| StorageError::io(&self.key, std::io::Error::other(e.to_string())))?;
            self.parts.push(id);
        }
        Ok(Taken::Done)
    }
}

/// The ranges a commit reads, page by page from the service, as `check_ranges` takes
/// them; a page that cannot be read ends them, its error kept in `failed`.
pub(crate) struct Pages {
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) api: Arc<hetch_service_api::client::Client>,
    pub(crate) req: RangesRequest,
    pub(crate) page: std::vec::IntoIter<hetch_service_api::ReportedRange>,
    pub(crate) next: Option<u64>,
    pub(crate) failed: Arc<Mutex<Option<String>>>,
}

impl Iterator for Pages {
    type Item = RangePart;

    fn next(&mut self) -> Option<RangePart> {
        loop {
            if let Some(r) = self.page.next() {
                let digests: Result<Vec<Digest>, _> = r
                    .digests
                    .iter()
                    .map(|d| {
                        hex::decode(d)
                            .ok()
                            .and_then(|v| v.try_into().ok())
                            .ok_or(())
                    })
                    .collect();
                let Ok(digests) = digests else {
                    *self.failed.lock().expect("not poisoned") = Some(format!(
                        "blocks {}..{}: a digest is not 64 hex digits",
                        r.first, r.end
                    ));
                    return None;
                };
                return Some(RangePart {
                    first: r.first,
                    end: r.end,
                    parts: r.parts,
                    size: r.size,
                    digests,
                });
            }
            let from = self.next.take()?;
            // A page must move on, or a service could keep a commit reading forever.
            if from <= self.req.from {
                *self.failed.lock().expect("not poisoned") = Some(format!(
                    "the next page starts at block {from}, not after {}",
                    self.req.from
                ));
                return None;
            }
            self.req.from = from;
            match self.handle.block_on(self.api.ranges(&self.req)) {
                Ok(p) => {
                    self.page = p.ranges.into_iter();
                    self.next = p.next;
                }
                Err(e) => {
                    *self.failed.lock().expect("not poisoned") = Some(e.to_string());
                    return None;
                }
            }
        }
    }
}

/// What the service records as a file's upload: the source's version its ranges read
/// (size and mtime, as the first range to offer one saw it) and the store's upload id,
/// `SIZE.MTIME_SEC.MTIME_NSEC/ID` (the service keeps it whole, as an opaque id). Every
/// range and the commit compare their source with it, so that a file changed between
/// two ranges is never completed from both versions.
pub(crate) struct Recorded;

impl Recorded {
    /// The version of `source`, as recorded.
    pub(crate) fn version(source: &RangeSource) -> String {
        let m = source.meta();
        format!("{}.{}.{:09}", source.size(), m.mtime_sec, m.mtime_nsec)
    }

    /// The record of upload `upload` of `source`.
    pub(crate) fn of(source: &RangeSource, upload: &str) -> String {
        format!("{}/{upload}", Recorded::version(source))
    }

    /// The version and the upload id of a record.
    pub(crate) fn parse(recorded: &str) -> Option<(&str, &str)> {
        recorded
            .split_once('/')
            .filter(|(v, u)| !v.is_empty() && !u.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record names the source's version and the store's id (which may hold a `/`);
    /// one naming no version or no id is not a worker's.
    #[test]
    fn a_recorded_upload_names_the_source_version_and_the_id() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, b"12345").unwrap();
        let src = RangeSource::new(std::fs::File::open(&p).unwrap(), &p).unwrap();
        let rec = Recorded::of(&src, "id/with/slash");
        let (version, id) = Recorded::parse(&rec).unwrap();
        assert_eq!(
            (version, id),
            (Recorded::version(&src).as_str(), "id/with/slash")
        );
        assert!(version.starts_with("5."));
        for bad in ["no-slash", "/id", "5.1.2/", ""] {
            assert_eq!(Recorded::parse(bad), None, "{bad}");
        }
    }
}
