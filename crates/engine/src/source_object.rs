//! The source side for object store operands: listing a prefix as a tree of entries
//! (directories are made up from the keys' `/`s, in listing order), and reading blocks
//! with ranged GETs that check the object's ETag, so an object replaced mid-copy fails
//! instead of mixing two versions.

use std::sync::Arc;

use futures_util::StreamExt;
use hetch_integrity::{self as integrity, Algorithm, FileDigest};
use hetch_object::{Bucket, ObjectError, ObjectInfo};
use hetch_storage::walk::{SourceEntry, SourceKind};
use tokio::sync::mpsc;

use crate::error::EngineError;
use crate::operand::ObjectLocation;
use crate::source::{Listed, Shared};

/// Where an announced entry's bytes come from when it is an object.
#[derive(Debug, Clone)]
pub(crate) struct ObjectRef {
    pub bucket: Arc<Bucket>,
    pub key: String,
    pub etag: Option<String>,
}

/// Lists an object operand (on a blocking thread) and announces what it holds. Errors
/// about the whole store (credentials, missing bucket) end the session; a key that does
/// not map to a file name is reported and skipped.
pub(crate) fn walk_object(
    shared: &Shared,
    op: &ObjectLocation,
    tx: &mpsc::Sender<Listed>,
) -> Result<bool, EngineError> {
    let rt = tokio::runtime::Handle::current();
    let bucket = &op.bucket;
    let name = op.url.operand_name().to_string();
    let prefix = op.url.trimmed().to_string();
    if !op.url.is_dir_like() {
        if let Some(head) = rt.block_on(bucket.head(&prefix))? {
            let info = head.info;
            return Ok(announce_object(shared, bucket, name, info, tx));
        }
    }
    let now = now();
    let dir = |rel: String| (dir_entry(rel, now), None);
    let mut listing = bucket.list(&prefix);
    let mut stack: Vec<String> = Vec::new();
    let mut any = false;
    // A zero-length object "a/" or "a" followed by keys under "a/" is a folder marker.
    let mut held: Option<ObjectInfo> = None;
    loop {
        let next = rt.block_on(listing.next());
        let info = match next {
            None => None,
            Some(Ok(i)) => Some(i),
            Some(Err(e)) if e.is_fatal() => return Err(e.into()),
            Some(Err(e)) => return Ok(report(shared, tx, e.to_string())),
        };
        if let Some(h) = held.take() {
            let marker = info
                .as_ref()
                .is_some_and(|i| i.key.starts_with(&format!("{}/", h.key)));
            if !marker && !send_file(shared, bucket, &prefix, &name, &mut stack, h, tx, &dir) {
                return Ok(false);
            }
        }
        let Some(info) = info else { break };
        if !any {
            any = true;
            let (se, o) = dir(name.clone());
            if !crate::source::announce(shared, se, o, tx) {
                return Ok(false);
            }
        }
        if info.size == 0 {
            held = Some(info);
            continue;
        }
        if !send_file(shared, bucket, &prefix, &name, &mut stack, info, tx, &dir) {
            return Ok(false);
        }
    }
    if !any {
        let e = ObjectError::NotFound {
            url: op.url.to_string(),
        };
        return Ok(report(shared, tx, format!("{e} (nor objects under it)")));
    }
    Ok(true)
}

/// Announces one listed object under the operand, after the directories its key
/// implies that are not announced yet.
#[allow(clippy::too_many_arguments)]
fn send_file(
    shared: &Shared,
    bucket: &Arc<Bucket>,
    prefix: &str,
    name: &str,
    stack: &mut Vec<String>,
    info: ObjectInfo,
    tx: &mpsc::Sender<Listed>,
    dir: &dyn Fn(String) -> (SourceEntry, Option<ObjectRef>),
) -> bool {
    let inner = if prefix.is_empty() {
        info.key.as_str()
    } else {
        info.key
            .strip_prefix(prefix)
            .and_then(|k| k.strip_prefix('/'))
            .unwrap_or(&info.key)
    };
    let inner = inner.trim_end_matches('/');
    let parts: Vec<&str> = inner.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        let url = bucket.url(&info.key);
        return report(
            shared,
            tx,
            format!("{url}: key has an empty, '.' or '..' component; not copied"),
        );
    }
    // Directories: keep the announced chain equal to this key's parents.
    let parents = &parts[..parts.len() - 1];
    let common = stack
        .iter()
        .zip(parents.iter())
        .take_while(|(a, b)| a == *b)
        .count();
    stack.truncate(common);
    for p in &parents[common..] {
        stack.push(p.to_string());
        let rel = format!("{name}/{}", stack.join("/"));
        let (se, o) = dir(rel);
        if !crate::source::announce(shared, se, o, tx) {
            return false;
        }
    }
    let rel = format!("{name}/{inner}");
    announce_object(shared, bucket, rel, info, tx)
}

fn announce_object(
    shared: &Shared,
    bucket: &Arc<Bucket>,
    rel: String,
    info: ObjectInfo,
    tx: &mpsc::Sender<Listed>,
) -> bool {
    let se = SourceEntry {
        rel: rel.into_bytes(),
        abs: std::path::PathBuf::new(),
        kind: SourceKind::File { size: info.size },
        mode: 0o644,
        mtime_sec: info.modified.0,
        mtime_nsec: info.modified.1,
        ctime_sec: info.modified.0,
        ctime_nsec: info.modified.1,
        id: (0, 0),
    };
    let o = ObjectRef {
        bucket: bucket.clone(),
        key: info.key,
        etag: info.etag,
    };
    crate::source::announce(shared, se, Some(o), tx)
}

fn dir_entry(rel: String, now: (i64, u32)) -> SourceEntry {
    SourceEntry {
        rel: rel.into_bytes(),
        abs: std::path::PathBuf::new(),
        kind: SourceKind::Dir,
        mode: 0o755,
        mtime_sec: now.0,
        mtime_nsec: now.1,
        ctime_sec: now.0,
        ctime_nsec: now.1,
        id: (0, 0),
    }
}

fn now() -> (i64, u32) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as i64, d.subsec_nanos())
}

fn report(shared: &Shared, tx: &mpsc::Sender<Listed>, message: String) -> bool {
    let id = shared
        .next_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tx.blocking_send(Listed::Error(id, message)).is_ok()
}

/// Ranged GETs in flight while one object is hashed in order.
const DIGEST_READS: usize = 8;

/// The whole-object digest of `o` (`size` bytes) with `algo`, from the object's bytes:
/// blocks are fetched several at a time and hashed in order. The digest hetch stores
/// in the metadata is not trusted here: comparing and summing exist to find damage in
/// the store.
pub(crate) async fn object_digest(
    o: &ObjectRef,
    size: u64,
    algo: Algorithm,
    block_size: u64,
) -> Result<Vec<u8>, ObjectError> {
    let mut merged = FileDigest::new(size, block_size);
    let mut ordered = (algo != Algorithm::Blake3).then(|| algo.hasher());
    let mut blocks = futures_util::stream::iter(0..integrity::block_count(size, block_size))
        .map(|index| async move {
            let len = integrity::block_len(size, block_size, index);
            let start = index * block_size;
            let data = o
                .bucket
                .get_range(&o.key, start..start + len, o.etag.as_deref())
                .await?;
            Ok::<_, ObjectError>((index, data))
        })
        .buffered(DIGEST_READS);
    while let Some(r) = blocks.next().await {
        let (index, data) = r?;
        match &mut ordered {
            Some(h) => h.update(&data),
            None => {
                let d = integrity::block_digest(size, block_size, index, &data);
                let _ = merged.add(index, d);
            }
        }
    }
    Ok(match ordered {
        Some(h) => h.finish(),
        None => merged.finish().map(|d| d.to_vec()).unwrap_or_default(),
    })
}

/// `hetch sum` for object store operands: writes a manifest line (`DIGEST  s3://...`)
/// for every object of `loc` (one object, or all under a prefix), `threads` objects at
/// a time. Returns the per-object errors; errors about the whole store end it.
pub async fn sum_objects(
    loc: &crate::ObjectLocation,
    algo: Algorithm,
    block_size: u64,
    threads: usize,
    out: &mut (dyn std::io::Write + Send),
) -> Result<Vec<String>, EngineError> {
    let bucket = &loc.bucket;
    let key = loc.url.trimmed();
    let listing: futures_util::stream::BoxStream<'_, Result<ObjectInfo, ObjectError>> =
        match (!loc.url.is_dir_like()).then_some(key) {
            Some(k) => match bucket.head(k).await? {
                Some(h) => futures_util::stream::once(async { Ok(h.info) }).boxed(),
                None => bucket.list(key),
            },
            None => bucket.list(key),
        };
    let mut any = false;
    let mut errors = Vec::new();
    let mut digests = listing
        .map(|r| async move {
            let info = r?;
            let o = ObjectRef {
                bucket: bucket.clone(),
                key: info.key.clone(),
                etag: info.etag.clone(),
            };
            let d = object_digest(&o, info.size, algo, block_size).await?;
            Ok::<_, ObjectError>((bucket.url(&info.key), d))
        })
        .buffered(threads.max(1));
    while let Some(r) = digests.next().await {
        any = true;
        match r {
            Ok((url, d)) => {
                let line = crate::sum::manifest_line(&d, std::path::Path::new(&url));
                out.write_all(&line)
                    .map_err(|e| hetch_storage::StorageError::io("standard output", e))?;
            }
            Err(e) if e.is_fatal() => return Err(e.into()),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if !any {
        errors.push(format!(
            "{}: no such object (nor objects under it)",
            loc.url
        ));
    }
    Ok(errors)
}
