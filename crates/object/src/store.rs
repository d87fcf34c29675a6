//! A bucket prefix as a [`Store`]: S3 and what speaks its protocol (MinIO, Ceph).
//!
//! A file's blocks gather into parts of [`PartPlan`]'s size (at least the 5 MiB S3
//! asks of every part but the last). A file of one part goes up in a single PUT when
//! it is committed, with its mtime (and BLAKE3 digest) as metadata; a larger one
//! becomes a multipart upload whose parts go up as soon as their blocks are in, from
//! as many writers as [`Capabilities::concurrent_puts`] lets the sink run. Every
//! request carries an `x-amz-checksum-sha256`, so the store checks what it stores.
//! Nothing appears under the key before the commit (S3 makes an object visible only
//! when its PUT or its multipart completion succeeds); an abort aborts the upload.
//!
//! Resume: a local journal (in the state directory) records each uploaded part with
//! its blocks' digests once they are recorded, so a later transfer of the same file
//! takes up the upload and is asked only for the parts it lacks. Uploaded parts cannot
//! be read back before completion: the store has no read-back, and the sink checks
//! blocks as they arrive.
//!
//! The store's methods block: they run the S3 requests on the runtime they were
//! created in, from the sink's blocking threads.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use hetch_integrity::{to_hex, Algorithm, Digest};
use hetch_storage::part::FinalMeta;
use hetch_storage::StorageError;
use hetch_store::StoreError;
use hetch_store::{Capabilities, FileSpec, Kind, Listed, Opened, Place, Present, Store, StoreFile};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::journal::{self, PartRecord, UploadHeader, UploadJournal};
use crate::location::ObjectDest;
use crate::origin::{object_digest, ObjectRef};
use crate::{Bucket, ObjectError, ObjectHead, PartPlan, PutMeta};

/// Part uploads in flight (writers of the sink).
const CONCURRENT_PUTS: usize = 16;

/// HEAD requests in flight while a batch is planned.
const HEADS_IN_FLIGHT: usize = 32;

/// An object store error as a storage error (one line; fatal ones stop the session).
fn storage(e: ObjectError) -> StorageError {
    StorageError::Service {
        whole_store: e.is_fatal(),
        message: e.to_string(),
    }
}

fn refused(url: &str, what: &str) -> StorageError {
    StorageError::Service {
        message: format!("{url}: {what}"),
        whole_store: false,
    }
}

/// What the S3 store and its files share.
struct Shared {
    bucket: Arc<Bucket>,
    rt: Handle,
    /// Part buffers for reuse.
    buffers: PartBuffers,
    /// Keys being received: two entries mapping to one key at once (two operands of
    /// the same name) would race for it and its journal. Bounded by files in flight.
    keys: Mutex<HashSet<String>>,
    /// Aborts under way (waited for by [`Store::sync`]).
    aborts: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }
}

/// An object store destination (see the module documentation).
pub struct BucketStore {
    dest: ObjectDest,
    sh: Arc<Shared>,
    /// The prefix the entries are placed in, and the name replacing the operand's
    /// (`Some("")`: the operand's contents go straight into the prefix).
    resolved: OnceLock<(String, Option<String>)>,
    /// HEAD answers fetched ahead for the batch being planned, by relative path.
    heads: Mutex<HashMap<PathBuf, Option<ObjectHead>>>,
}

impl BucketStore {
    /// A store writing to `dest`. Must be called within a Tokio runtime: the requests
    /// run on it.
    pub fn new(dest: ObjectDest, buffer_memory: usize) -> Self {
        let sh = Shared {
            bucket: dest.location.bucket.clone(),
            rt: Handle::current(),
            buffers: PartBuffers::new(buffer_memory),
            keys: Mutex::default(),
            aborts: Mutex::default(),
        };
        BucketStore {
            dest,
            sh: Arc::new(sh),
            resolved: OnceLock::new(),
            heads: Mutex::default(),
        }
    }

    fn base(&self) -> &(String, Option<String>) {
        self.resolved
            .get()
            .expect("destination resolved before use")
    }

    /// The key of relative path `rel`.
    fn key(&self, rel: &Path) -> String {
        crate::url::join_key(&self.base().0, &rel.to_string_lossy())
    }

    fn head(&self, rel: &Path) -> Result<Option<ObjectHead>, StorageError> {
        if let Some(h) = self.heads.lock().expect("heads lock").remove(rel) {
            return Ok(h);
        }
        let key = self.key(rel);
        if key.is_empty() {
            return Ok(None);
        }
        self.sh.block_on(self.sh.bucket.head(&key)).map_err(storage)
    }

    fn object(&self, rel: &Path, etag: Option<String>) -> ObjectRef {
        ObjectRef {
            bucket: self.sh.bucket.clone(),
            key: self.key(rel),
            etag,
        }
    }
}

impl Store for BucketStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            read_back: false,
            random_access: false,
            directories: false,
            symlinks: false,
            mtime_nanos: false,
            concurrent_puts: CONCURRENT_PUTS,
            resume_unit: crate::parts::TARGET_PART,
            ranges: false,
            xattrs: false,
        }
    }

    fn resolve(&self, _first_top: &[u8], _create: bool) -> Result<(), StoreError> {
        let url = &self.dest.location.url;
        // One request first: bad credentials or a missing bucket end the session with
        // one clear error instead of failing every file.
        self.sh.block_on(self.sh.bucket.probe(url.trimmed()))?;
        let resolved = self.dest.layout();
        let _ = self.resolved.set(resolved);
        Ok(())
    }

    fn place(&self, wire: &[u8]) -> Result<Place, StorageError> {
        let rel = hetch_storage::paths::rel_from_wire(wire)?;
        if std::str::from_utf8(wire).is_err() {
            let url = self.sh.bucket.url(&String::from_utf8_lossy(wire));
            return Err(refused(
                &url,
                "name is not UTF-8, which S3 keys must be; not copied",
            ));
        }
        let rel = match &self.base().1 {
            None => rel,
            // (Collected, not joined: joining an empty rest would add a '/'.)
            Some(name) => Path::new(name)
                .components()
                .chain(rel.components().skip(1))
                .collect(),
        };
        let shown = PathBuf::from(self.sh.bucket.url(&self.key(&rel)));
        Ok(Place { rel, shown })
    }

    fn manifest_path(&self, place: &Place) -> Vec<u8> {
        let key = self.key(&place.rel);
        let base = self.dest.location.url.trimmed();
        let rel = key
            .strip_prefix(base)
            .map(|r| r.trim_start_matches('/'))
            .filter(|r| !r.is_empty() && !base.is_empty())
            .unwrap_or(&key);
        rel.as_bytes().to_vec()
    }

    fn prefetch(&self, wires: &[&[u8]]) {
        let rels: Vec<PathBuf> = wires
            .iter()
            .filter_map(|w| self.place(w).ok().map(|p| p.rel))
            .collect();
        let lookups = stream::iter(rels.iter().filter(|r| !self.key(r).is_empty()))
            .map(|rel| async move {
                let h = self.sh.bucket.head(&self.key(rel)).await;
                (rel.clone(), h)
            })
            .buffer_unordered(HEADS_IN_FLIGHT)
            .collect::<Vec<_>>();
        let heads = self.sh.block_on(lookups);
        let mut cache = self.heads.lock().expect("heads lock");
        cache.clear();
        // Errors are left for `stat` to meet (and report) itself.
        cache.extend(heads.into_iter().filter_map(|(r, h)| Some((r, h.ok()?))));
    }

    fn stat(&self, rel: &Path) -> Result<Option<Present>, StorageError> {
        Ok(self.head(rel)?.map(|h| Present {
            kind: Kind::File,
            size: h.info.size,
            mtime: h.source_mtime.unwrap_or(h.info.modified),
            mode: None,
            kept_mtime: h.source_mtime.is_some(),
        }))
    }

    fn read_link(&self, rel: &Path) -> Result<OsString, StorageError> {
        Err(refused(
            &self.sh.bucket.url(&self.key(rel)),
            "is not a symlink",
        ))
    }

    fn digest(
        &self,
        rel: &Path,
        algo: Algorithm,
        block_size: u64,
    ) -> Result<Vec<u8>, StorageError> {
        let head = self.head(rel)?;
        let Some(head) = head else {
            let url = self.sh.bucket.url(&self.key(rel));
            return Err(storage(ObjectError::NotFound { url }));
        };
        let o = self.object(rel, head.info.etag.clone());
        let size = head.info.size;
        self.sh
            .block_on(object_digest(&o, size, algo, block_size))
            .map_err(storage)
    }

    fn make_dir(&self, _rel: &Path) -> Result<(), StorageError> {
        Ok(()) // keys with '/' stand for directories
    }

    fn finish_dir(&self, _rel: &Path, _meta: FinalMeta) -> Result<(), StorageError> {
        Ok(())
    }

    fn make_symlink(&self, rel: &Path, _: &[u8], _: FinalMeta) -> Result<(), StorageError> {
        let url = self.sh.bucket.url(&self.key(rel));
        Err(refused(&url, "an object store cannot hold a symbolic link"))
    }

    fn open(&self, place: &Place, spec: &FileSpec) -> Result<Opened, StorageError> {
        let key = self.key(&place.rel);
        let url = self.sh.bucket.url(&key);
        if key.is_empty() {
            return Err(refused(&url, "no key to write a file to; name one"));
        }
        let bs = spec.block_size;
        let Some(size) = spec.size.known() else {
            return Err(refused(
                &url,
                "a growing file cannot become an object; not copied",
            ));
        };
        let plan = PartPlan::new(size, bs).map_err(|what| refused(&url, &what))?;
        if !self.sh.keys.lock().expect("keys lock").insert(key.clone()) {
            return Err(refused(
                &url,
                "another source entry is being copied to this key; not copied",
            ));
        }
        let endpoint = self.sh.bucket.endpoint().to_string();
        let header = UploadHeader {
            url: url.clone(),
            upload: String::new(),
            size,
            mtime: (spec.meta.mtime_sec, spec.meta.mtime_nsec),
            block_size: bs,
            part_blocks: plan.part_blocks,
            checksum: spec.checksum.name().to_string(),
        };
        let file = BucketFile {
            sh: self.sh.clone(),
            journal_path: journal::journal_path(&self.dest.state_dir, &endpoint, &url),
            key,
            header,
            plan,
            blocks: spec.blocks(),
            checksum: spec.checksum,
            upload: Mutex::new(None),
            st: Mutex::default(),
        };
        let recorded = file.take_up();
        Ok(Opened {
            file: Arc::new(file),
            recorded,
        })
    }

    fn list(&self, rel: &Path) -> Result<Vec<Listed>, StorageError> {
        let prefix = self.key(rel);
        let (objects, dirs) = self
            .sh
            .block_on(self.sh.bucket.list_dir(&prefix))
            .map_err(storage)?;
        let file = |o: crate::ObjectInfo| Listed {
            name: o.key.rsplit('/').next().unwrap_or_default().into(),
            kind: Kind::File,
            temporary_of: None,
        };
        let dir = |name: String| Listed {
            name: name.into(),
            kind: Kind::Dir,
            temporary_of: None,
        };
        Ok(objects
            .into_iter()
            .map(file)
            .chain(dirs.into_iter().map(dir))
            .collect())
    }

    fn remove(&self, rel: &Path, dir: bool) -> Result<(), StorageError> {
        if dir {
            return Ok(()); // a prefix goes with its last object
        }
        let key = self.key(rel);
        self.sh
            .block_on(self.sh.bucket.delete(&key))
            .map_err(storage)
    }

    fn sync(&self) -> Result<(), StorageError> {
        // Objects are durable once written; aborts still under way are waited for, so
        // that a finished session leaves no upload behind.
        let aborts = std::mem::take(&mut *self.sh.aborts.lock().expect("aborts lock"));
        for a in aborts {
            let _ = self.sh.block_on(a);
        }
        Ok(())
    }

    fn shown_base(&self) -> Option<PathBuf> {
        let (base, _) = self.resolved.get()?;
        Some(PathBuf::from(self.sh.bucket.url(base)))
    }
}

/// One object on its way into the store.
struct BucketFile {
    sh: Arc<Shared>,
    key: String,
    header: UploadHeader,
    plan: PartPlan,
    blocks: u64,
    checksum: Algorithm,
    journal_path: PathBuf,
    /// The multipart upload, once started (created by the first full part).
    upload: Mutex<Option<String>>,
    st: Mutex<UpState>,
}

#[derive(Default)]
struct UpState {
    /// Uploaded parts: index -> what completing needs.
    done: BTreeMap<u64, String>,
    /// Uploaded parts not journaled yet (some of their blocks not recorded).
    unjournaled: HashSet<u64>,
    /// Recorded digests of blocks of parts not journaled yet.
    digests: HashMap<u64, Digest>,
    /// Parts being filled.
    filling: HashMap<u64, PartBuf>,
    /// Parts on their way up.
    uploading: HashSet<u64>,
    journal: Option<UploadJournal>,
    closed: bool,
}

/// A part whose blocks are arriving.
struct PartBuf {
    data: Vec<u8>,
    seen: Vec<bool>,
    have: u64,
}

impl BucketFile {
    fn url(&self) -> String {
        self.sh.bucket.url(&self.key)
    }

    /// Takes up the upload an earlier run left in the journal if it is one of this
    /// very file (size, mtime, block and part sizes, algorithm); otherwise aborts it.
    /// Returns the blocks of the parts taken over.
    fn take_up(&self) -> Option<Vec<(u64, Digest)>> {
        let (old, parts) = UploadJournal::load(&self.journal_path)?;
        let h = &self.header;
        let same = old.size == h.size
            && old.mtime == h.mtime
            && old.block_size == h.block_size
            && old.part_blocks == h.part_blocks
            && old.checksum == h.checksum;
        if !same || old.upload.is_empty() || self.plan.single() {
            if !old.upload.is_empty() {
                let _ = self
                    .sh
                    .block_on(self.sh.bucket.abort_multipart(&self.key, &old.upload));
            }
            journal::remove(&self.journal_path);
            return None;
        }
        let j = UploadJournal::reopen(&self.journal_path).ok()?;
        *self.upload.lock().expect("upload lock") = Some(old.upload);
        let mut recorded = Vec::new();
        let mut st = self.st.lock().expect("upload lock");
        for rec in parts {
            let range = self.plan.blocks_of(rec.part, self.blocks);
            if rec.part >= self.plan.parts || rec.digests.len() as u64 != range.end - range.start {
                continue;
            }
            let digests: Option<Vec<Digest>> = rec
                .digests
                .iter()
                .map(|h| hex::decode(h).ok().and_then(|d| d.try_into().ok()))
                .collect();
            let Some(digests) = digests else { continue };
            recorded.extend(range.zip(digests));
            st.done.insert(rec.part, rec.id);
        }
        st.journal = Some(j);
        Some(recorded)
    }

    /// Copies a block into its part; returns the part's bytes when this completed it.
    fn gather(&self, block: u64, data: &[u8]) -> Result<Option<(u64, Vec<u8>)>, StorageError> {
        let bs = self.header.block_size;
        let part = self.plan.part_of(block);
        let mut st = self.st.lock().expect("upload lock");
        if st.closed {
            return Err(refused(&self.url(), "upload already finished or dropped"));
        }
        if st.done.contains_key(&part) || st.uploading.contains(&part) {
            return Ok(None); // a duplicate (a resend that crossed a good copy)
        }
        let range = self.plan.blocks_of(part, self.blocks);
        let size = self.header.size;
        let part_len = size.min(range.end * bs) - (range.start * bs).min(size);
        let pb = st.filling.entry(part).or_insert_with(|| PartBuf {
            data: self.sh.buffers.get(part_len as usize),
            seen: vec![false; (range.end - range.start) as usize],
            have: 0,
        });
        let i = (block - range.start) as usize;
        let off = i * bs as usize;
        if pb.seen[i] || off + data.len() > pb.data.len() {
            return Ok(None);
        }
        pb.seen[i] = true;
        pb.have += 1;
        pb.data[off..off + data.len()].copy_from_slice(data);
        if pb.have < range.end - range.start || self.plan.single() {
            // One part: it goes up with its metadata when the file is committed.
            return Ok(None);
        }
        let pb = st.filling.remove(&part).expect("part being filled");
        st.uploading.insert(part);
        Ok(Some((part, pb.data)))
    }

    /// The multipart upload, started (and journaled) on first use.
    fn upload_id(&self) -> Result<String, StorageError> {
        let mut up = self.upload.lock().expect("upload lock");
        if let Some(id) = &*up {
            return Ok(id.clone());
        }
        // A part that was being filled when the file failed must not start a second
        // upload after the abort took the first: nobody would abort that one. (The
        // abort closes the file before it takes the id, and takes it under this lock.)
        if self.st.lock().expect("upload lock").closed {
            return Err(refused(&self.url(), "upload already finished or dropped"));
        }
        let meta = PutMeta {
            mtime: Some(self.header.mtime),
            blake3: None, // known only at the end
        };
        let id = self
            .sh
            .block_on(self.sh.bucket.create_multipart(&self.key, &meta))
            .map_err(storage)?;
        let header = UploadHeader {
            upload: id.clone(),
            ..self.header.clone()
        };
        // Without a journal the upload still works; it just cannot resume.
        self.st.lock().expect("upload lock").journal =
            UploadJournal::create(&self.journal_path, &header).ok();
        *up = Some(id.clone());
        Ok(id)
    }

    /// Uploads a full part.
    fn upload_part(&self, part: u64, data: Vec<u8>) -> Result<(), StorageError> {
        let upload = self.upload_id()?;
        let body = Bytes::from(data);
        let put = self
            .sh
            .bucket
            .put_part(&self.key, &upload, part as usize, body.clone());
        let r = self.sh.block_on(put);
        self.sh.buffers.put(body);
        let mut st = self.st.lock().expect("upload lock");
        st.uploading.remove(&part);
        let id = r.map_err(storage)?;
        st.done.insert(part, id);
        st.unjournaled.insert(part);
        self.journal_if_recorded(&mut st, part);
        Ok(())
    }

    /// Journals uploaded part `part` once every block of it is recorded: a resume may
    /// count on it from then on.
    fn journal_if_recorded(&self, st: &mut UpState, part: u64) {
        if !st.unjournaled.contains(&part) {
            return;
        }
        let range = self.plan.blocks_of(part, self.blocks);
        if !range.clone().all(|b| st.digests.contains_key(&b)) {
            return;
        }
        let digests = range
            .clone()
            .filter_map(|b| st.digests.remove(&b))
            .map(|d| to_hex(&d))
            .collect();
        let rec = PartRecord {
            part,
            id: st.done[&part].clone(),
            digests,
        };
        st.unjournaled.remove(&part);
        if let Some(j) = st.journal.as_mut() {
            let _ = j.add(&rec);
        }
    }

    fn close(&self) -> bool {
        let mut st = self.st.lock().expect("upload lock");
        let was_open = !std::mem::replace(&mut st.closed, true);
        st.filling.clear();
        self.sh.keys.lock().expect("keys lock").remove(&self.key);
        was_open
    }
}

impl StoreFile for BucketFile {
    fn put(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        match self.gather(offset / self.header.block_size, data)? {
            Some((part, bytes)) => self.upload_part(part, bytes),
            None => Ok(()),
        }
    }

    fn put_zeros(&self, offset: u64, len: u64, zeros: &[u8]) -> Result<(), StorageError> {
        self.put(offset, &zeros[..len as usize])
    }

    fn read_back(&self, _offset: u64, _buf: &mut [u8]) -> Result<(), StorageError> {
        Err(refused(&self.url(), "cannot be read before it is complete"))
    }

    fn record(&self, block: u64, digest: &Digest, _len: u64) -> Result<(), StorageError> {
        if self.plan.single() {
            return Ok(()); // nothing to resume: one request makes the object
        }
        let mut st = self.st.lock().expect("upload lock");
        st.digests.insert(block, *digest);
        self.journal_if_recorded(&mut st, self.plan.part_of(block));
        Ok(())
    }

    fn sync(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn digest(&self, _algo: Algorithm, _block_size: u64) -> Result<Vec<u8>, StorageError> {
        Err(refused(&self.url(), "cannot be read before it is complete"))
    }

    fn commit(
        &self,
        _size: u64,
        meta: FinalMeta,
        xattr: Option<&Digest>,
        _fsync: bool,
    ) -> Result<(), StorageError> {
        // A file given up (or committed) makes no object: a single-part one would be
        // put empty, over whatever a newer transfer of it made.
        if self.st.lock().expect("upload lock").closed {
            return Err(refused(&self.url(), "upload already finished or dropped"));
        }
        let mtime = Some((meta.mtime_sec, meta.mtime_nsec));
        let r = if self.plan.single() {
            let data = {
                let mut st = self.st.lock().expect("upload lock");
                st.filling.remove(&0).map(|p| p.data).unwrap_or_default()
            };
            let meta = PutMeta {
                mtime,
                blake3: xattr
                    .copied()
                    .filter(|_| self.checksum == Algorithm::Blake3),
            };
            let body = Bytes::from(data);
            let r = self
                .sh
                .block_on(self.sh.bucket.put(&self.key, body.clone(), &meta));
            self.sh.buffers.put(body);
            r
        } else {
            let upload = self.upload_id()?;
            let parts: Vec<String> = {
                let st = self.st.lock().expect("upload lock");
                st.done.values().cloned().collect()
            };
            let done = self.sh.bucket.complete_multipart(&self.key, &upload, parts);
            self.sh.block_on(done)
        };
        r.map_err(storage)?;
        journal::remove(&self.journal_path);
        self.close();
        Ok(())
    }

    fn abort(&self) {
        if !self.close() {
            return;
        }
        let upload = self.upload.lock().expect("upload lock").take();
        let Some(upload) = upload else {
            journal::remove(&self.journal_path);
            return;
        };
        // May be called from async code: the abort runs as a task of its own. Should it
        // fail, the journal stays, and the next transfer to this key aborts the upload.
        let (bucket, key, path) = (
            self.sh.bucket.clone(),
            self.key.clone(),
            self.journal_path.clone(),
        );
        let task = self.sh.rt.spawn(async move {
            if bucket.abort_multipart(&key, &upload).await.is_ok() {
                journal::remove(&path);
            }
        });
        self.sh.aborts.lock().expect("aborts lock").push(task);
    }
}

/// Part buffers kept for reuse, up to a byte budget: a fresh 8 MiB allocation costs a
/// page fault per 4 KiB, about a tenth of the upload's CPU time.
struct PartBuffers {
    free: Mutex<Vec<Vec<u8>>>,
    max_bytes: usize,
}

impl PartBuffers {
    fn new(max_bytes: usize) -> Self {
        PartBuffers {
            free: Mutex::default(),
            max_bytes,
        }
    }

    /// A buffer of `len` bytes (zeros where a reused one is not overwritten).
    fn get(&self, len: usize) -> Vec<u8> {
        let reused = {
            let mut free = self.free.lock().expect("buffers lock");
            let i = free.iter().position(|b| b.capacity() >= len);
            i.map(|i| free.swap_remove(i))
        };
        let mut v = reused.unwrap_or_else(|| Vec::with_capacity(len));
        v.clear();
        v.resize(len, 0);
        v
    }

    /// Takes back the buffer of an uploaded part, if nothing else holds it and the
    /// budget allows.
    fn put(&self, b: Bytes) {
        let Ok(m) = b.try_into_mut() else { return };
        let v: Vec<u8> = m.into();
        let mut free = self.free.lock().expect("buffers lock");
        let held: usize = free.iter().map(Vec::capacity).sum();
        if held + v.capacity() <= self.max_bytes {
            free.push(v);
        }
    }
}
