//! Deciding, per announced entry, what the source must send to an object store:
//! nothing (the object is there already), everything, or the parts an interrupted
//! upload still lacks.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use futures_util::stream::{self, StreamExt};
use hetch_integrity::{self as integrity, to_hex};
use hetch_object::journal::{self, UploadHeader, UploadJournal};
use hetch_object::{ObjectError, ObjectHead, PartPlan};
use hetch_proto::{Entry, EntryKind, Frame, PlanAction, PlanItem};
use tokio::sync::mpsc;

use super::upload::Upload;
use super::ObjectShared;
use crate::error::EngineError;
use crate::progress::Progress;
use crate::source_object::{object_digest, ObjectRef};

/// HEAD requests in flight while planning a batch.
const PLAN_CONCURRENCY: usize = 32;

/// What planning one entry came to.
enum Planned {
    Action(PlanAction),
    /// Skip, and report this (a failure, or a present file's digest).
    Report(PlanAction, Box<Frame>),
}

/// Plans a batch (entries are looked up at the store concurrently). Per-entry problems
/// become a `Skip` plus a failed `FileDone`; errors about the whole store end the
/// session.
pub(crate) async fn plan_batch(
    sh: &Arc<ObjectShared>,
    batch: Vec<Entry>,
    ctl: &mpsc::Sender<Frame>,
) -> Result<(Vec<PlanItem>, Vec<Frame>), EngineError> {
    let results: Vec<(u64, Result<Planned, ObjectError>)> = stream::iter(batch)
        .map(|e| {
            let sh = sh.clone();
            let ctl = ctl.clone();
            async move { (e.id, plan_entry(&sh, e, ctl).await) }
        })
        .buffered(PLAN_CONCURRENCY)
        .collect()
        .await;
    let mut items = Vec::with_capacity(results.len());
    let mut follow = Vec::new();
    for (id, r) in results {
        match r {
            Ok(Planned::Action(action)) => items.push(PlanItem { id, action }),
            Ok(Planned::Report(action, frame)) => {
                items.push(PlanItem { id, action });
                follow.push(*frame);
            }
            Err(e) if e.is_fatal() => return Err(e.into()),
            Err(e) => {
                items.push(PlanItem {
                    id,
                    action: PlanAction::Skip,
                });
                follow.push(sh.failure(id, e.to_string()));
            }
        }
    }
    Ok((items, follow))
}

fn refuse(url: String, what: &str) -> ObjectError {
    ObjectError::Other {
        url,
        what: what.to_string(),
    }
}

async fn plan_entry(
    sh: &Arc<ObjectShared>,
    e: Entry,
    ctl: mpsc::Sender<Frame>,
) -> Result<Planned, ObjectError> {
    let rel = String::from_utf8(e.path.clone()).map_err(|_| {
        refuse(
            sh.url(&String::from_utf8_lossy(&e.path)),
            "name is not UTF-8, which S3 keys must be; not copied",
        )
    })?;
    let key = sh.dest.key_for(&rel);
    let url = sh.url(&key);
    if let Some(del) = sh.opts.delete {
        sh.seen.lock().expect("seen lock").insert(key.clone());
        if matches!(e.kind, EntryKind::Dir) && !rel.contains('/') {
            sh.dir_tops.lock().expect("tops lock").insert(key.clone());
        }
        if del.dry_run {
            return would_copy(sh, &e, &key).await;
        }
    }
    match &e.kind {
        // Object stores have no directories: keys with '/' stand for them.
        EntryKind::Dir => Ok(Planned::Action(PlanAction::Skip)),
        EntryKind::Symlink { .. } => Err(refuse(
            url,
            "is a symbolic link, which an object store cannot hold; not copied",
        )),
        EntryKind::File { growing: true, .. } => Err(refuse(
            url,
            "following growing files into an object store is not supported; not copied",
        )),
        EntryKind::File { size, digest, .. } => {
            if key.is_empty() {
                return Err(refuse(url, "no key to write a file to; name one"));
            }
            let src = Src {
                id: e.id,
                key,
                size: *size,
                mtime: (e.mtime_sec, e.mtime_nsec),
                digest: digest.clone(),
            };
            if sh.opts.compare_only {
                return compare(sh, &src).await;
            }
            plan_file(sh, src, ctl).await
        }
    }
}

/// Dry runs: a change line for a file whose object is missing or differs in size.
async fn would_copy(sh: &ObjectShared, e: &Entry, key: &str) -> Result<Planned, ObjectError> {
    let EntryKind::File { size, .. } = e.kind else {
        return Ok(Planned::Action(PlanAction::Skip));
    };
    let head = sh.dest.location.bucket.head(key).await?;
    if head.is_some_and(|h| h.info.size == size) {
        return Ok(Planned::Action(PlanAction::Skip));
    }
    let path = sh.rel_path(key);
    sh.progress
        .change(hetch_proto::ChangeAction::WouldCopy, &path);
    let frame = Frame::Change(hetch_proto::Change {
        action: hetch_proto::ChangeAction::WouldCopy,
        path,
    });
    Ok(Planned::Report(PlanAction::Skip, Box::new(frame)))
}

/// A file entry as announced.
struct Src {
    id: u64,
    key: String,
    size: u64,
    mtime: (i64, u32),
    digest: Option<Vec<u8>>,
}

/// The digest of the object at `key`, as this session's algorithm computes it.
async fn digest_of(sh: &ObjectShared, head: &ObjectHead) -> Result<Vec<u8>, ObjectError> {
    let o = ObjectRef {
        bucket: sh.dest.location.bucket.clone(),
        key: head.info.key.clone(),
        etag: head.info.etag.clone(),
    };
    object_digest(&o, head.info.size, sh.opts.checksum, sh.opts.block_size).await
}

async fn plan_file(
    sh: &Arc<ObjectShared>,
    src: Src,
    ctl: mpsc::Sender<Frame>,
) -> Result<Planned, ObjectError> {
    let bucket = &sh.dest.location.bucket;
    let url = sh.url(&src.key);
    if let Some(head) = bucket.head(&src.key).await? {
        let same_size = head.info.size == src.size;
        let mut known = None;
        let same = if sh.opts.checksum_skip {
            // Only a matching digest counts; size and times are not trusted.
            match &src.digest {
                Some(theirs) if same_size => {
                    let ours = digest_of(sh, &head).await?;
                    let equal = &ours == theirs;
                    known = Some(ours);
                    equal
                }
                _ => false,
            }
        } else {
            // Objects hetch wrote in one request carry the source's mtime; for others,
            // an object written after the file last changed counts as its copy (as
            // `aws s3 sync` decides).
            same_size
                && match head.source_mtime {
                    Some(m) => m == src.mtime,
                    // (Whole seconds: that is all a HEAD tells.)
                    None => head.info.modified.0 >= src.mtime.0,
                }
        };
        if same {
            Progress::add(&sh.progress.skipped, 1);
            Progress::add(&sh.progress.skipped_bytes, src.size);
            if sh.opts.file_digests {
                let digest = match known {
                    Some(d) => d,
                    None => digest_of(sh, &head).await?,
                };
                let frame = Frame::FileDone {
                    file: src.id,
                    error: None,
                    digest: sh.manifest_entry(&src.key, Some(digest)),
                };
                return Ok(Planned::Report(PlanAction::Skip, Box::new(frame)));
            }
            return Ok(Planned::Action(PlanAction::Skip));
        }
        if sh.opts.no_clobber {
            return Err(refuse(
                url,
                "exists and differs; not replaced (--no-clobber)",
            ));
        }
    }
    let bs = sh.opts.block_size;
    let parts = PartPlan::new(src.size, bs).map_err(|what| refuse(url.clone(), &what))?;
    let blocks = integrity::block_count(src.size, bs);
    let endpoint = sh.dest.location.bucket.endpoint().to_string();
    let jpath = journal::journal_path(&sh.dest.state_dir, &endpoint, &url);
    let header = UploadHeader {
        url: url.clone(),
        upload: String::new(),
        size: src.size,
        mtime: src.mtime,
        block_size: bs,
        part_blocks: parts.part_blocks,
        checksum: sh.opts.checksum.name().to_string(),
    };
    let up = Upload::new(
        src.id,
        src.key.clone(),
        header,
        parts,
        blocks,
        src.digest,
        jpath,
    );
    // An upload this file began in an earlier run: send only the parts it lacks.
    if !sh.keys.lock().expect("keys lock").insert(src.key.clone()) {
        return Err(refuse(
            url,
            "another source entry is being copied to this key; not copied",
        ));
    }
    let resumed = up.resume(sh).await;
    let ranges = up.missing_ranges();
    sh.files
        .lock()
        .expect("files lock")
        .insert(src.id, Arc::new(up));
    sh.pending.fetch_add(1, SeqCst);
    if resumed {
        let have = blocks - ranges.iter().map(|(a, b)| b - a).sum::<u64>();
        Progress::add(&sh.progress.skipped_bytes, (have * bs).min(src.size));
    }
    if ranges.is_empty() {
        // Every part is uploaded; only the completion was missing.
        let up = sh.files.lock().expect("files lock").get(&src.id).cloned();
        if let Some(up) = up {
            let sh = sh.clone();
            // After the plan goes out (the source must know the file before its end).
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                up.complete_now(&sh, &ctl).await
            });
        }
    }
    Ok(Planned::Action(PlanAction::Send(ranges)))
}

/// Compare-only sessions: the object must exist with the same size and digest.
async fn compare(sh: &ObjectShared, src: &Src) -> Result<Planned, ObjectError> {
    let url = sh.url(&src.key);
    let differs = |what: String| Err(refuse(url.clone(), &what));
    let Some(head) = sh.dest.location.bucket.head(&src.key).await? else {
        return differs("missing at the destination".into());
    };
    if head.info.size != src.size {
        return differs(format!(
            "size differs (source {} bytes, destination {})",
            src.size, head.info.size
        ));
    }
    let ours = digest_of(sh, &head).await?;
    match &src.digest {
        Some(theirs) if *theirs == ours => {
            Progress::add(&sh.progress.files, 1);
            Progress::add(&sh.progress.bytes, src.size);
            Ok(Planned::Action(PlanAction::Skip))
        }
        Some(theirs) => differs(format!(
            "content differs ({} source {}, destination {})",
            sh.opts.checksum,
            to_hex(theirs),
            to_hex(&ours)
        )),
        None => differs("the source sent no digest to compare".into()),
    }
}

/// Drops the journal (and the store's upload) of an upload that cannot be resumed.
pub(crate) async fn discard_old(sh: &ObjectShared, path: &std::path::Path, key: &str) {
    if let Some((old, _)) = UploadJournal::load(path) {
        if !old.upload.is_empty() {
            let _ = sh
                .dest
                .location
                .bucket
                .abort_multipart(key, &old.upload)
                .await;
        }
    }
    journal::remove(path);
}
