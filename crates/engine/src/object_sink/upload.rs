//! Blocks into parts, parts into the store: the object sink's writers.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use hetch_integrity::{self as integrity, to_hex, Digest, FileDigest};
use hetch_object::journal::{self, PartRecord, UploadHeader, UploadJournal};
use hetch_object::{ObjectError, PartPlan, PutMeta};
use hetch_proto::{DataHeader, Frame};
use tokio::sync::{mpsc, OnceCell};

use super::ObjectShared;
use crate::error::EngineError;
use crate::pool::PooledBuf;
use crate::progress::Progress;
use crate::source_object::{object_digest, ObjectRef};

/// One file on its way into the store.
pub(crate) struct Upload {
    pub id: u64,
    pub key: String,
    header: UploadHeader,
    plan: PartPlan,
    blocks: u64,
    /// The source's whole-file digest (checksum sessions): checked before completing.
    expected: Option<Vec<u8>>,
    journal_path: PathBuf,
    /// The multipart upload, once started.
    upload_id: OnceCell<String>,
    st: std::sync::Mutex<UpState>,
}

#[derive(Default)]
struct UpState {
    /// Uploaded parts: index -> what completing needs.
    done: BTreeMap<u64, String>,
    /// Digest of every block received (or recorded in the journal). Sparse, so that
    /// its memory follows the blocks that arrived, not the size the source announced.
    digests: BTreeMap<u64, Digest>,
    /// Parts being filled.
    filling: HashMap<u64, PartBuf>,
    /// Parts complete and on their way to the store.
    uploading: std::collections::HashSet<u64>,
    journal: Option<UploadJournal>,
    retries: HashMap<u64, u32>,
}

/// A part whose blocks are arriving.
struct PartBuf {
    data: Vec<u8>,
    /// Blocks of the part received.
    have: u64,
    seen: Vec<bool>,
}

/// A part with all its blocks.
struct FullPart {
    index: u64,
    data: Bytes,
}

/// A block that passed its check.
enum Checked {
    /// Copied into its part; the part, if this completed it.
    Copied(Option<FullPart>),
    /// A whole part by itself (one block per part): uploaded from the buffer it came in.
    Whole(Digest, PooledBuf),
}

impl Upload {
    pub fn new(
        id: u64,
        key: String,
        header: UploadHeader,
        plan: PartPlan,
        blocks: u64,
        expected: Option<Vec<u8>>,
        journal_path: PathBuf,
    ) -> Upload {
        let st = UpState::default();
        Upload {
            id,
            key,
            header,
            plan,
            blocks,
            expected,
            journal_path,
            upload_id: OnceCell::new(),
            st: std::sync::Mutex::new(st),
        }
    }

    fn size(&self) -> u64 {
        self.header.size
    }

    /// Whether the file is still being received (not failed, not finished).
    fn alive(&self, sh: &ObjectShared) -> bool {
        sh.files.lock().expect("files lock").contains_key(&self.id)
    }

    /// Takes up the upload an earlier run left in the journal, if it is for this very
    /// file (same size, mtime, block and part sizes, algorithm); otherwise aborts it.
    /// Returns whether parts were taken over.
    pub async fn resume(&self, sh: &ObjectShared) -> bool {
        let Some((old, parts)) = UploadJournal::load(&self.journal_path) else {
            return false;
        };
        let same = old.upload.is_empty()
            || (old.size == self.header.size
                && old.mtime == self.header.mtime
                && old.block_size == self.header.block_size
                && old.part_blocks == self.header.part_blocks
                && old.checksum == self.header.checksum);
        if !same || old.upload.is_empty() || self.plan.single() {
            super::plan::discard_old(sh, &self.journal_path, &self.key).await;
            return false;
        }
        let Ok(j) = UploadJournal::reopen(&self.journal_path) else {
            return false;
        };
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
            for (b, d) in range.zip(digests) {
                st.digests.insert(b, d);
            }
            st.done.insert(rec.part, rec.id);
        }
        st.journal = Some(j);
        let _ = self.upload_id.set(old.upload);
        !st.done.is_empty()
    }

    /// Block ranges of the parts not uploaded yet.
    pub fn missing_ranges(&self) -> Vec<(u64, u64)> {
        let st = self.st.lock().expect("upload lock");
        let mut out: Vec<(u64, u64)> = Vec::new();
        for p in 0..self.plan.parts {
            if st.done.contains_key(&p) {
                continue;
            }
            let r = self.plan.blocks_of(p, self.blocks);
            match out.last_mut() {
                Some(last) if last.1 == r.start => last.1 = r.end,
                _ => out.push((r.start, r.end)),
            }
        }
        out
    }

    /// Stores a checked block; returns the part it completed, if any.
    fn add_block(
        &self,
        buffers: &super::PartBuffers,
        bs: u64,
        block: u64,
        digest: Digest,
        data: &[u8],
    ) -> Option<FullPart> {
        let part = self.plan.part_of(block);
        let mut st = self.st.lock().expect("upload lock");
        if st.done.contains_key(&part) || st.uploading.contains(&part) {
            return None; // a duplicate (a resend that crossed a good copy)
        }
        let range = self.plan.blocks_of(part, self.blocks);
        let part_len = self.size().min(range.end * bs) - (range.start * bs).min(self.size());
        let pb = st.filling.entry(part).or_insert_with(|| PartBuf {
            data: buffers.get(part_len as usize),
            have: 0,
            seen: vec![false; (range.end - range.start) as usize],
        });
        let i = (block - range.start) as usize;
        if pb.seen[i] {
            return None;
        }
        pb.seen[i] = true;
        pb.have += 1;
        let off = i * bs as usize;
        pb.data[off..off + data.len()].copy_from_slice(data);
        let full = pb.have == range.end - range.start;
        st.digests.insert(block, digest);
        if !full {
            return None;
        }
        let pb = st.filling.remove(&part).expect("part being filled");
        st.uploading.insert(part);
        Some(FullPart {
            index: part,
            data: Bytes::from(pb.data),
        })
    }

    /// Takes a block that is a whole part by itself; false for a duplicate.
    fn take_whole_block(&self, block: u64, digest: Digest) -> bool {
        let part = self.plan.part_of(block);
        let mut st = self.st.lock().expect("upload lock");
        if st.done.contains_key(&part) || !st.uploading.insert(part) {
            return false;
        }
        st.digests.insert(block, digest);
        true
    }

    /// The whole-file digest from the block digests, where the algorithm merges them.
    fn merged_digest(&self, sh: &ObjectShared) -> Option<Vec<u8>> {
        if !sh.opts.checksum.merges_blocks() {
            return None;
        }
        let st = self.st.lock().expect("upload lock");
        let mut m = FileDigest::new(self.size(), sh.opts.block_size);
        if st.digests.len() as u64 != self.blocks {
            return None;
        }
        for (&i, d) in &st.digests {
            m.add(i, *d).ok()?;
        }
        m.finish().ok().map(|d| d.to_vec())
    }

    /// Uploads a full part; finishes the file when it was the last. Returns the frame
    /// that settles the file, if it ended.
    async fn store_part(&self, sh: &ObjectShared, part: FullPart) -> Option<Frame> {
        match self.try_store_part(sh, part).await {
            Ok(frame) => frame,
            Err(e) => self.fail(sh, e.to_string()).await,
        }
    }

    async fn try_store_part(
        &self,
        sh: &ObjectShared,
        part: FullPart,
    ) -> Result<Option<Frame>, ObjectError> {
        let bucket = &sh.dest.location.bucket;
        if self.plan.single() {
            let whole = self.merged_digest(sh);
            self.check_expected(sh, whole.as_deref())?;
            let meta = PutMeta {
                mtime: Some(self.header.mtime),
                blake3: match (&whole, sh.opts.checksum) {
                    (Some(d), integrity::Algorithm::Blake3) => d.as_slice().try_into().ok(),
                    _ => None,
                },
            };
            let body = part.data;
            bucket.put(&self.key, body.clone(), &meta).await?;
            sh.buffers.put(body);
            return Ok(self.finished(sh, whole).await);
        }
        let upload = self
            .upload_id
            .get_or_try_init(|| async {
                let meta = PutMeta {
                    mtime: Some(self.header.mtime),
                    // Known only at the end, unless the source sent it (checksum skip).
                    blake3: self.expected_blake3(sh),
                };
                let id = bucket.create_multipart(&self.key, &meta).await?;
                let header = UploadHeader {
                    upload: id.clone(),
                    ..self.header.clone()
                };
                // Without a journal the upload still works; it just cannot resume.
                let j = UploadJournal::create(&self.journal_path, &header).ok();
                self.st.lock().expect("upload lock").journal = j;
                Ok::<_, ObjectError>(id)
            })
            .await?
            .clone();
        let body = part.data;
        let content_id = bucket
            .put_part(&self.key, &upload, part.index as usize, body.clone())
            .await?;
        sh.buffers.put(body);
        if !self.alive(sh) {
            // The file failed while this part was on its way (its upload may have been
            // aborted before this one started it): abort again, leave nothing behind.
            self.abandon(sh).await;
            return Ok(None);
        }
        let complete = {
            let mut st = self.st.lock().expect("upload lock");
            let range = self.plan.blocks_of(part.index, self.blocks);
            let digests = range
                .map(|b| st.digests.get(&b).map(|d| to_hex(d)).unwrap_or_default())
                .collect();
            let rec = PartRecord {
                part: part.index,
                id: content_id.clone(),
                digests,
            };
            if let Some(j) = st.journal.as_mut() {
                let _ = j.add(&rec);
            }
            st.uploading.remove(&part.index);
            st.done.insert(part.index, content_id);
            st.done.len() as u64 == self.plan.parts
        };
        if !complete {
            return Ok(None);
        }
        self.complete(sh, &upload).await
    }

    /// Completes a multipart upload whose parts are all in.
    async fn complete(
        &self,
        sh: &ObjectShared,
        upload: &str,
    ) -> Result<Option<Frame>, ObjectError> {
        let whole = self.merged_digest(sh);
        self.check_expected(sh, whole.as_deref())?;
        let parts: Vec<String> = self
            .st
            .lock()
            .expect("upload lock")
            .done
            .values()
            .cloned()
            .collect();
        sh.dest
            .location
            .bucket
            .complete_multipart(&self.key, upload, parts)
            .await?;
        journal::remove(&self.journal_path);
        Ok(self.finished(sh, whole).await)
    }

    /// A resumed upload that only lacked its completion.
    pub async fn complete_now(&self, sh: &ObjectShared, ctl: &mpsc::Sender<Frame>) {
        let upload = self.upload_id.get().cloned().unwrap_or_default();
        let frame = match self.complete(sh, &upload).await {
            Ok(f) => f,
            Err(e) => self.fail(sh, e.to_string()).await,
        };
        if let Some(f) = frame {
            sh.settle(ctl, f).await;
        }
    }

    /// The source's BLAKE3 digest, when the session sent whole-file BLAKE3 digests
    /// (checked against the received blocks before the object is completed).
    fn expected_blake3(&self, sh: &ObjectShared) -> Option<[u8; 32]> {
        match (&self.expected, sh.opts.checksum) {
            (Some(d), integrity::Algorithm::Blake3) => d.as_slice().try_into().ok(),
            _ => None,
        }
    }

    fn check_expected(&self, sh: &ObjectShared, whole: Option<&[u8]>) -> Result<(), ObjectError> {
        match (&self.expected, whole) {
            (Some(exp), Some(got)) if exp.as_slice() != got => Err(ObjectError::Other {
                url: sh.url(&self.key),
                what: format!(
                    "the received blocks' {} digest {} differs from the source's {}; not written",
                    sh.opts.checksum,
                    to_hex(got),
                    to_hex(exp)
                ),
            }),
            _ => Ok(()),
        }
    }

    /// The object is in place: counts it and makes its `FileDone` (`None` if the file
    /// was settled meanwhile).
    async fn finished(&self, sh: &ObjectShared, whole: Option<Vec<u8>>) -> Option<Frame> {
        let whole = match whole {
            Some(w) => Some(w),
            // Algorithms whose block digests do not merge: read the object back.
            None if sh.opts.file_digests => {
                let o = ObjectRef {
                    bucket: sh.dest.location.bucket.clone(),
                    key: self.key.clone(),
                    etag: None,
                };
                object_digest(&o, self.size(), sh.opts.checksum, sh.opts.block_size)
                    .await
                    .ok()
            }
            None => None,
        };
        sh.take(self.id)?;
        Progress::add(&sh.progress.files, 1);
        Some(Frame::FileDone {
            file: self.id,
            error: None,
            digest: sh.manifest_entry(&self.key, whole),
        })
    }

    /// Fails the file: aborts its upload so no parts stay behind. `None` when it was
    /// settled already.
    async fn fail(&self, sh: &ObjectShared, message: String) -> Option<Frame> {
        sh.take(self.id)?;
        self.abandon(sh).await;
        Some(sh.failure(self.id, message))
    }

    /// Aborts the multipart upload (if one was started) and drops the journal.
    pub async fn abandon(&self, sh: &ObjectShared) {
        self.st.lock().expect("upload lock").filling.clear();
        if let Some(id) = self.upload_id.get() {
            if let Err(e) = sh.dest.location.bucket.abort_multipart(&self.key, id).await {
                sh.progress.warn(&format!(
                    "{}: upload {id} could not be aborted ({e}); its parts remain until the bucket's lifecycle rules remove them",
                    sh.url(&self.key)
                ));
            }
        }
        journal::remove(&self.journal_path);
    }
}

/// Takes blocks off the queue: checks, buffers and uploads them.
pub(crate) async fn writer(
    sh: Arc<ObjectShared>,
    rx: async_channel::Receiver<(DataHeader, Option<PooledBuf>)>,
    ctl: mpsc::Sender<Frame>,
) -> Result<(), EngineError> {
    let bs = sh.opts.block_size;
    while let Ok((h, payload)) = rx.recv().await {
        let Some(up) = sh.files.lock().expect("files lock").get(&h.file).cloned() else {
            continue; // the file failed meanwhile: drop its late blocks
        };
        if h.block >= up.blocks {
            return Err(EngineError::unexpected(
                &sh.peer,
                format!("block {} beyond the end of {}", h.block, sh.url(&up.key)),
            ));
        }
        let want = integrity::block_len(up.size(), bs, h.block) as usize;
        let got_len = payload.as_ref().map_or(h.zero_len as usize, |b| b.len());
        if got_len != want {
            return Err(EngineError::unexpected(
                &sh.peer,
                format!(
                    "block {} of {} has {got_len} bytes, expected {want}",
                    h.block,
                    sh.url(&up.key)
                ),
            ));
        }
        // A block that is a whole part (a small file, a part of one block) is uploaded from the pooled
        // buffer it came in, in the background: the pool's budget then bounds the
        // uploads in flight, and a long link can have many. Others are copied into
        // their part, which the writer uploads once complete.
        let part_blocks = up.plan.blocks_of(up.plan.part_of(h.block), up.blocks);
        let whole = part_blocks.end - part_blocks.start == 1 && payload.is_some();
        let (s, u) = (sh.clone(), up.clone());
        let checked = tokio::task::spawn_blocking(move || {
            let digest = {
                let zeros;
                let data: &[u8] = match &payload {
                    Some(b) => &b[..],
                    None => {
                        zeros = vec![0u8; want];
                        &zeros
                    }
                };
                let algo = s.opts.checksum;
                let digest = s
                    .gate
                    .run(|| algo.block_digest(u.size(), bs, h.block, data));
                if digest != h.digest {
                    return Err(digest);
                }
                Progress::add(&s.progress.bytes, data.len() as u64);
                if !whole {
                    let part = u.add_block(&s.buffers, bs, h.block, digest, data);
                    return Ok(Checked::Copied(part));
                }
                digest
            };
            let buf = payload.expect("a whole-part block has its bytes");
            Ok(Checked::Whole(digest, buf))
        })
        .await
        .expect("block task panicked");
        let frame = match checked {
            Ok(Checked::Copied(None)) => None,
            Ok(Checked::Copied(Some(part))) => up.store_part(&sh, part).await,
            Ok(Checked::Whole(digest, buf)) => {
                if up.take_whole_block(h.block, digest) {
                    let part = FullPart {
                        index: up.plan.part_of(h.block),
                        data: Bytes::from_owner(buf),
                    };
                    let (sh, ctl) = (sh.clone(), ctl.clone());
                    tokio::spawn(async move {
                        if let Some(f) = up.store_part(&sh, part).await {
                            sh.settle(&ctl, f).await;
                        }
                    });
                }
                None
            }
            Err(got) => mismatch(&sh, &up, &h, &got).await,
        };
        match frame {
            Some(f @ Frame::Resend { .. }) => {
                let _ = ctl.send(f).await;
            }
            Some(f) => sh.settle(&ctl, f).await,
            None => {}
        }
    }
    Ok(())
}

/// A block failed its check: ask for it again, or fail the file after `max_retries`.
async fn mismatch(sh: &ObjectShared, up: &Upload, h: &DataHeader, got: &Digest) -> Option<Frame> {
    let tries = {
        let mut st = up.st.lock().expect("upload lock");
        let n = st.retries.entry(h.block).or_insert(0);
        *n += 1;
        *n
    };
    if tries > sh.opts.max_retries {
        let n = sh.opts.checksum.digest_len();
        let message = format!(
            "{}: block {} failed its {} check {tries} times (expected {}, got {}); not written",
            sh.url(&up.key),
            h.block,
            sh.opts.checksum,
            to_hex(&h.digest[..n]),
            to_hex(&got[..n]),
        );
        return up.fail(sh, message).await;
    }
    Progress::add(&sh.progress.retried_blocks, 1);
    Some(Frame::Resend {
        file: h.file,
        block: h.block,
    })
}
