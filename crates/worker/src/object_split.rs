//! A worker's share of a large file moved in ranges by several workers into an S3 or
//! Azure store as one multipart upload (see `hetch_object::shared`).
//!
//! A `range` unit learns the file's upload from the service (creating one and
//! offering it; the first offered wins, a loser aborts its own), reads its blocks
//! with the reader the file case uses (`ranges::read_range`: paced, stoppable, the
//! source checked unchanged at the end), uploads them as whole parts numbered by
//! their place in the file (one part in memory at a time), and reports its part ids
//! and block digests in its finish. The `commit` unit pages through what the ranges
//! reported, checks they cover the file and merges the digests into its BLAKE3
//! (`check_ranges`), checks the source is unchanged, and completes the upload with
//! that BLAKE3 on the object; on any mismatch it aborts the upload, leaving no object.

use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail};
use hetch_engine::ranges::{self, RangeControl, RangeSource};
use hetch_integrity::Digest;
use hetch_jobs::UnitSpec;
use hetch_object::shared::check_ranges;
use hetch_object::{Bucket, ObjectDest, ObjectUrl, PartLimits, PutMeta, RangeCut, Scheme};
use hetch_service_api::object_ranges::{RangesRequest, UploadRequest, MAX_RANGE_DIGESTS};
use hetch_service_api::{ClaimedUnit, FileRow, RangeReport};

use crate::object_parts::{Pages, PartSink, Recorded};
use crate::unit::{Done, Pace, UnitContext};

/// A file going into an object store in ranges: its source, where it goes and how
/// it is cut.
struct ObjectFile {
    source: Arc<RangeSource>,
    bucket: Arc<Bucket>,
    key: String,
    /// The file's wire path (its name in errors).
    wire: String,
    block_size: u64,
    /// Blocks per part (as every worker and the planner cut it: the part size
    /// depends only on the file's size, the block size and the store).
    part_blocks: u64,
}

impl UnitContext {
    /// Runs a `range` or `commit` unit of listing row `row`, going into `url`.
    pub(crate) async fn object_split(
        &self,
        u: &ClaimedUnit,
        row: FileRow,
        url: ObjectUrl,
        p: Pace,
    ) -> anyhow::Result<Done> {
        if url.scheme == Scheme::Gcs {
            bail!("{url}: a file into GCS goes whole, not in ranges");
        }
        let ctx = self.clone();
        let spec = u.spec.clone();
        let f = tokio::task::spawn_blocking(move || ctx.open_object_file(&spec, &row, &url))
            .await
            .map_err(|e| anyhow!("range task: {e}"))??;
        let blocks = hetch_integrity::block_count(f.source.size(), f.block_size);
        match u.unit {
            UnitSpec::Range { first, end, .. } => {
                // Whole parts only: two ranges sharing a part would overwrite each other.
                let whole = |b: u64| b % f.part_blocks == 0 || b == blocks;
                if first >= end || end > blocks || !whole(first) || !whole(end) {
                    bail!(
                        "the service sent blocks {first}..{end} of a file of {blocks} in parts \
                         of {}",
                        f.part_blocks
                    );
                }
                if end - first > MAX_RANGE_DIGESTS as u64 {
                    bail!("the service sent a range of {} blocks", end - first);
                }
                self.object_range(u, f, first, end, p).await
            }
            _ => self.object_commit(u, f).await,
        }
    }

    /// Opens the source of `row` and the object it goes to under `url`.
    fn open_object_file(
        &self,
        spec: &hetch_service_api::JobSpec,
        row: &FileRow,
        url: &ObjectUrl,
    ) -> anyhow::Result<ObjectFile> {
        let (_, source) = self.open_source(spec, row)?;
        let s3 = hetch_object::S3Options::default();
        let location = hetch_copy::Buckets::new(&s3).location(url)?;
        let bucket = location.bucket.clone();
        // The key the files units would give it: the same placement rules.
        let dest = ObjectDest {
            location,
            sources: spec.sources.len() as u32,
            as_operand: false,
            state_dir: Default::default(),
        };
        let key = dest.key_for(&row.path);
        let block_size = crate::split::block_size_of(spec);
        let size = source.size();
        let part_blocks = PartLimits::of(url.scheme)
            .cut(size, block_size, 1, u64::MAX)
            .map_err(|e| anyhow!("{}: {e}", row.path))?
            .part_blocks;
        Ok(ObjectFile {
            source: Arc::new(source),
            bucket,
            key,
            wire: row.path.clone(),
            block_size,
            part_blocks,
        })
    }

    /// The store's id of the upload every range of the file shares, checked to be of
    /// this version of the source:
    /// the one the service recorded, or the one this unit creates and offers (a loser
    /// of the race aborts its own). A source that is not the recorded version (changed
    /// between two ranges) fails the unit and aborts the upload: no object is made.
    async fn file_upload(&self, u: &ClaimedUnit, f: &ObjectFile) -> anyhow::Result<String> {
        let m = f.source.meta();
        let meta = PutMeta {
            mtime: Some((m.mtime_sec, m.mtime_nsec)),
            blake3: None,
        };
        let created = f.bucket.create_multipart(&f.key, &meta).await?;
        let mine = Recorded::of(&f.source, &created);
        let req = UploadRequest {
            worker: self.worker.clone(),
            job: u.job.clone(),
            seq: u.seq,
            lease: u.lease.clone(),
            upload: mine.clone(),
        };
        let recorded = self.api.upload(&req).await;
        let recorded = match recorded {
            Ok(r) => r.upload,
            Err(e) => {
                let _ = f.bucket.abort_multipart(&f.key, &created).await;
                return Err(e.into());
            }
        };
        // Azure has no upload to abort (its id names nothing), and aborting there
        // would drop the winner's uncommitted blocks.
        if recorded != mine && f.bucket.scheme() != Scheme::Azure {
            f.bucket.abort_multipart(&f.key, &created).await?;
        }
        self.upload_of_this_version(f, &recorded).await
    }

    /// The store's upload id in `recorded`, if the source is the version recorded
    /// with it; else the upload is aborted and the unit fails naming the file.
    async fn upload_of_this_version(
        &self,
        f: &ObjectFile,
        recorded: &str,
    ) -> anyhow::Result<String> {
        let Some((version, upload)) = Recorded::parse(recorded) else {
            bail!(
                "{}: the service recorded upload {recorded:?}, not one a worker offers",
                f.wire
            );
        };
        if version != Recorded::version(&f.source) {
            let _ = f.bucket.abort_multipart(&f.key, upload).await;
            bail!(
                "{}: changed since its first range was read (size or mtime); its upload was \
                 aborted",
                f.wire
            );
        }
        Ok(upload.to_string())
    }

    /// Uploads blocks `first..end` as their parts of the file's upload; reports them.
    async fn object_range(
        &self,
        u: &ClaimedUnit,
        f: ObjectFile,
        first: u64,
        end: u64,
        p: Pace,
    ) -> anyhow::Result<Done> {
        // The store's id to put parts into; the service's record to report them in.
        let id = self.file_upload(u, &f).await?;
        let upload = Recorded::of(&f.source, &id);
        let handle = tokio::runtime::Handle::current();
        let up = id;
        let (bytes, parts, digests) = tokio::task::spawn_blocking(move || {
            let mut sink = PartSink {
                handle,
                bucket: f.bucket.clone(),
                key: f.key.clone(),
                upload: up,
                cut: RangeCut {
                    part_blocks: f.part_blocks,
                    range_blocks: end - first,
                },
                end,
                part: Vec::new(),
                parts: Vec::new(),
                digests: Vec::new(),
            };
            let control = RangeControl {
                stop: Some(&p.stop),
                rate: Some(&p.rate),
                progress: Some(&p.progress),
                ..Default::default()
            };
            let shown = Path::new(&f.key);
            let out = ranges::read_range(
                &f.source,
                f.block_size,
                first..end,
                control,
                &mut sink,
                shown,
            )?;
            anyhow::Ok((out.bytes, sink.parts, sink.digests))
        })
        .await
        .map_err(|e| anyhow!("range task: {e}"))??;
        Ok(Done {
            files: 0,
            bytes,
            range: Some(RangeReport {
                upload,
                parts,
                size: bytes,
                digests,
            }),
        })
    }

    /// Checks what the file's ranges reported, and completes its upload with the
    /// file's BLAKE3 on the object; on a mismatch, aborts the upload.
    async fn object_commit(&self, u: &ClaimedUnit, f: ObjectFile) -> anyhow::Result<Done> {
        let req = RangesRequest {
            worker: self.worker.clone(),
            job: u.job.clone(),
            seq: u.seq,
            lease: u.lease.clone(),
            from: 0,
        };
        let page = self.api.ranges(&req).await?;
        let recorded = page
            .upload
            .clone()
            .ok_or_else(|| anyhow!("{}: no upload was recorded for its ranges", f.wire))?;
        let upload = self.upload_of_this_version(&f, &recorded).await?;
        let size = f.source.size();
        // Every range but the last has the first's blocks (check_ranges holds them to it).
        let per = page
            .ranges
            .first()
            .map_or(1, |r| r.end.saturating_sub(r.first));
        let cut = RangeCut {
            part_blocks: f.part_blocks,
            range_blocks: per.max(1),
        };
        let blocks = hetch_integrity::block_count(size, f.block_size);
        let checked = match per % f.part_blocks == 0 || per >= blocks {
            false => Err(format!(
                "ranges of {per} blocks are not whole parts of {}",
                f.part_blocks
            )),
            // Pages are read as the check goes: one page in memory, not the file's.
            true => {
                let api = self.api.clone();
                let handle = tokio::runtime::Handle::current();
                let failed = Arc::new(Mutex::new(None));
                let pages = Pages {
                    handle,
                    api,
                    req: req.clone(),
                    page: page.ranges.into_iter(),
                    next: page.next,
                    failed: failed.clone(),
                };
                let bs = f.block_size;
                let r = tokio::task::spawn_blocking(move || check_ranges(size, bs, cut, pages))
                    .await
                    .map_err(|e| anyhow!("commit task: {e}"))?;
                let failed = failed.lock().expect("not poisoned").take();
                if let Some(e) = failed {
                    bail!("{}: reading its ranges: {e}", f.wire);
                }
                r
            }
        };
        let unchanged = f.source.check_unchanged().map_err(|e| e.to_string());
        let (blake3, ids) = match checked.and_then(|c| unchanged.map(|()| c)) {
            Ok(c) => c,
            Err(e) => {
                let _ = f.bucket.abort_multipart(&f.key, &upload).await;
                bail!("{}: {e}; its upload was aborted", f.wire);
            }
        };
        let m = f.source.meta();
        let meta = PutMeta {
            mtime: Some((m.mtime_sec, m.mtime_nsec)),
            blake3: Some(blake3),
        };
        match f
            .bucket
            .complete_with_blake3(&f.key, &upload, ids, &meta)
            .await
        {
            Ok(()) => Ok(Done::moved(1, 0)),
            Err(e) if e.is_upload_gone() => {
                retag_completed(&f, &meta, &blake3)
                    .await
                    .map_err(|why| anyhow!("{e} ({why})"))?;
                Ok(Done::moved(1, 0))
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// A commit run again after its first run completed the upload but was lost before
/// tagging the object with its BLAKE3 (S3 takes them in two requests): the upload is
/// gone, the object is there. It is this file's object if it has the source's size and
/// the source mtime its upload was created with; then it gets its tag. Anything else
/// (another object under the key, or none) is not ours to tag.
async fn retag_completed(f: &ObjectFile, meta: &PutMeta, blake3: &Digest) -> Result<(), String> {
    let head = f.bucket.head(&f.key).await.map_err(|e| e.to_string())?;
    let Some(h) = head else {
        return Err("and no object is under its key".into());
    };
    if h.info.size != f.source.size() || h.source_mtime != meta.mtime {
        return Err("and the object under its key is not this file's".into());
    }
    f.bucket
        .tag_blake3(&f.key, blake3)
        .await
        .map_err(|e| e.to_string())
}
