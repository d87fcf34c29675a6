//! Object store operands as an [`Origin`]: a prefix listed as a tree of entries
//! (directories are made up from the keys' `/`s, in listing order), blocks read with
//! ranged GETs that check the object's ETag, so an object replaced mid-copy fails
//! instead of mixing two versions.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use hetch_integrity::{self as integrity, Algorithm, FileDigest};
use hetch_storage::walk::{SourceEntry, SourceKind};
use hetch_store::origin::{Found, Origin, OriginFile};
use hetch_store::StoreError;

use crate::location::ObjectLocation;
use crate::{Bucket, ObjectError, ObjectInfo};

/// Ranged GETs in flight for a transfer from an object store, at least: each waits a
/// round trip, so across a long link many must be out. Each holds a pool buffer while
/// out, so the session's buffer budget bounds their memory.
const CONCURRENT_READS: usize = 64;

/// One object, as listed: what its bytes are read from.
#[derive(Debug, Clone)]
pub struct ObjectRef {
    /// Its bucket.
    pub bucket: Arc<Bucket>,
    /// Its key.
    pub key: String,
    /// Its version as listed: reads fail when the object is no longer that.
    pub etag: Option<String>,
}

impl OriginFile for ObjectRef {
    fn read<'a>(&'a self, offset: u64, buf: &'a mut [u8]) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let got = self
                .bucket
                .get_range_into(&self.key, offset, self.etag.as_deref(), buf);
            got.await.map_err(|e| e.to_string())
        })
    }

    fn read_run<'a, 'b: 'a>(
        &'a self,
        offset: u64,
        bufs: &'a mut [&'b mut [u8]],
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let got = self
                .bucket
                .get_run_into(&self.key, offset, self.etag.as_deref(), bufs);
            got.await.map_err(|e| e.to_string())
        })
    }

    fn digest(
        &self,
        size: u64,
        algo: Algorithm,
        block_size: u64,
    ) -> BoxFuture<'_, Result<Vec<u8>, String>> {
        Box::pin(async move {
            object_digest(self, size, algo, block_size)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// An object or a prefix of objects to copy from.
pub struct ObjectOrigin {
    location: ObjectLocation,
    rt: tokio::runtime::Handle,
}

impl ObjectOrigin {
    /// Reads `location`. Must be called within a Tokio runtime: the requests run on it.
    pub fn new(location: ObjectLocation) -> Self {
        ObjectOrigin {
            location,
            rt: tokio::runtime::Handle::current(),
        }
    }
}

impl Origin for ObjectOrigin {
    fn name(&self) -> String {
        self.location.url.to_string()
    }

    fn concurrent_reads(&self) -> usize {
        CONCURRENT_READS
    }

    fn list(&self, found: &mut dyn FnMut(Found) -> bool) -> Result<(), StoreError> {
        Listing {
            bucket: &self.location.bucket,
            name: self.location.url.operand_name().to_string(),
            prefix: self.location.url.trimmed().to_string(),
            stack: Vec::new(),
            now: now(),
            found,
        }
        .run(&self.rt, &self.location)
    }
}

/// One listing of an operand under way.
struct Listing<'a> {
    bucket: &'a Arc<Bucket>,
    /// The operand's name (the first component of every entry).
    name: String,
    prefix: String,
    /// The directories announced for the last key (below the operand).
    stack: Vec<String>,
    /// Made-up directories' mtime.
    now: (i64, u32),
    found: &'a mut dyn FnMut(Found) -> bool,
}

impl Listing<'_> {
    fn run(mut self, rt: &tokio::runtime::Handle, op: &ObjectLocation) -> Result<(), StoreError> {
        let bucket = self.bucket;
        if !op.url.is_dir_like() {
            if let Some(head) = rt.block_on(bucket.head(&self.prefix))? {
                let name = self.name.clone();
                self.object(name, head.info);
                return Ok(());
            }
        }
        let mut listing = bucket.list(&self.prefix);
        let mut any = false;
        // A zero-length object "a/" or "a" followed by keys under "a/" is a folder
        // marker.
        let mut held: Option<ObjectInfo> = None;
        loop {
            let next = rt.block_on(listing.next());
            let info = match next {
                None => None,
                Some(Ok(i)) => Some(i),
                Some(Err(e)) if e.is_fatal() => return Err(e.into()),
                Some(Err(e)) => {
                    (self.found)(Found::Error(e.to_string()));
                    return Ok(());
                }
            };
            if let Some(h) = held.take() {
                let marker = info
                    .as_ref()
                    .is_some_and(|i| i.key.starts_with(&format!("{}/", h.key)));
                if !marker && !self.file(h) {
                    return Ok(());
                }
            }
            let Some(info) = info else { break };
            if !any {
                any = true;
                if !self.dir(self.name.clone()) {
                    return Ok(());
                }
            }
            if info.size == 0 {
                held = Some(info);
                continue;
            }
            if !self.file(info) {
                return Ok(());
            }
        }
        if !any {
            let e = ObjectError::NotFound {
                url: op.url.to_string(),
            };
            (self.found)(Found::Error(format!("{e} (nor objects under it)")));
        }
        Ok(())
    }

    /// Hands on one listed object under the operand, after the directories its key
    /// implies that were not handed on yet. False when the session is over.
    fn file(&mut self, info: ObjectInfo) -> bool {
        let inner = if self.prefix.is_empty() {
            info.key.as_str()
        } else {
            info.key
                .strip_prefix(self.prefix.as_str())
                .and_then(|k| k.strip_prefix('/'))
                .unwrap_or(&info.key)
        };
        let inner = inner.trim_end_matches('/').to_string();
        let parts: Vec<&str> = inner.split('/').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            let url = self.bucket.url(&info.key);
            let message = format!("{url}: key has an empty, '.' or '..' component; not copied");
            return (self.found)(Found::Error(message));
        }
        // Directories: keep the announced chain equal to this key's parents.
        let parents = &parts[..parts.len() - 1];
        let common = self
            .stack
            .iter()
            .zip(parents.iter())
            .take_while(|(a, b)| a == *b)
            .count();
        self.stack.truncate(common);
        for p in &parents[common..] {
            self.stack.push(p.to_string());
            let rel = format!("{}/{}", self.name, self.stack.join("/"));
            if !self.dir(rel) {
                return false;
            }
        }
        let rel = format!("{}/{inner}", self.name);
        self.object(rel, info)
    }

    fn object(&mut self, rel: String, info: ObjectInfo) -> bool {
        let kind = SourceKind::File { size: info.size };
        let o = ObjectRef {
            bucket: self.bucket.clone(),
            key: info.key,
            etag: info.etag,
        };
        self.entry(rel, kind, 0o644, info.modified, Some(Arc::new(o)))
    }

    /// A directory its keys imply: made up, so it has a plain mode and the time now.
    fn dir(&mut self, rel: String) -> bool {
        self.entry(rel, SourceKind::Dir, 0o755, self.now, None)
    }

    fn entry(
        &mut self,
        rel: String,
        kind: SourceKind,
        mode: u32,
        mtime: (i64, u32),
        file: Option<Arc<dyn OriginFile>>,
    ) -> bool {
        let se = SourceEntry::unlinked(rel.into_bytes(), Default::default(), kind, mode, mtime);
        (self.found)(Found::Entry(se, file))
    }
}

fn now() -> (i64, u32) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as i64, d.subsec_nanos())
}

/// Ranged GETs in flight while one object is hashed in order.
const DIGEST_READS: usize = 8;

/// The whole-object digest of `o` (`size` bytes) with `algo`, from the object's bytes:
/// blocks are fetched several at a time and hashed in order. The digest hetch stores
/// in the metadata is not trusted here: comparing and summing exist to find damage in
/// the store.
pub async fn object_digest(
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
    loc: &ObjectLocation,
    algo: Algorithm,
    block_size: u64,
    threads: usize,
    out: &mut (dyn std::io::Write + Send),
) -> Result<Vec<String>, StoreError> {
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
                let line = hetch_integrity::manifest_line(algo, &d, std::path::Path::new(&url));
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
