//! Runs of blocks read with one ranged GET: through a store that counts the GETs and
//! hands bodies back in small, odd chunks, so that chunks straddle the blocks.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::stream::{BoxStream, StreamExt};
use object_store::memory::InMemory;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartId, MultipartUpload,
    ObjectMeta, ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload,
    PutResult, Result,
};

use crate::bucket::Bucket;
use crate::url::Scheme;
use crate::ObjectError;

/// Bytes of each chunk of a body (odd, so chunks straddle every block boundary).
const CHUNK: usize = 1000;

#[derive(Debug, Default)]
struct Counting {
    inner: InMemory,
    gets: AtomicUsize,
}

impl fmt::Display for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("counting")
    }
}

#[async_trait]
impl ObjectStore for Counting {
    async fn put_opts(&self, p: &Path, data: PutPayload, o: PutOptions) -> Result<PutResult> {
        self.inner.put_opts(p, data, o).await
    }
    async fn put_multipart_opts(
        &self,
        p: &Path,
        o: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(p, o).await
    }
    async fn get_opts(&self, p: &Path, o: GetOptions) -> Result<GetResult> {
        self.gets.fetch_add(1, Relaxed);
        let mut r = self.inner.get_opts(p, o).await?;
        // (Memory bodies are streams: the crate is built without the `fs` feature.)
        let GetResultPayload::Stream(body) =
            std::mem::replace(&mut r.payload, GetResultPayload::Stream(empty()));
        let chunks = body
            .flat_map(|b| {
                let pieces: Vec<Result<bytes::Bytes>> = match b {
                    Ok(b) => (0..b.len())
                        .step_by(CHUNK)
                        .map(|at| Ok(b.slice(at..(at + CHUNK).min(b.len()))))
                        .collect(),
                    Err(e) => vec![Err(e)],
                };
                futures_util::stream::iter(pieces)
            })
            .boxed();
        r.payload = GetResultPayload::Stream(chunks);
        Ok(r)
    }
    fn delete_stream(
        &self,
        ps: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(ps)
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(&self, from: &Path, to: &Path, o: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, o).await
    }
}

#[async_trait]
impl MultipartStore for Counting {
    async fn create_multipart(&self, p: &Path) -> Result<MultipartId> {
        self.inner.create_multipart(p).await
    }
    async fn put_part(
        &self,
        p: &Path,
        id: &MultipartId,
        idx: usize,
        data: PutPayload,
    ) -> Result<PartId> {
        self.inner.put_part(p, id, idx, data).await
    }
    async fn complete_multipart(
        &self,
        p: &Path,
        id: &MultipartId,
        parts: Vec<PartId>,
    ) -> Result<PutResult> {
        self.inner.complete_multipart(p, id, parts).await
    }
    async fn abort_multipart(&self, p: &Path, id: &MultipartId) -> Result<()> {
        self.inner.abort_multipart(p, id).await
    }
}

fn empty() -> BoxStream<'static, Result<bytes::Bytes>> {
    futures_util::stream::empty().boxed()
}

/// A bucket on a fresh counting store holding `data` as "k", and its ETag.
async fn bucket_with(data: &[u8]) -> (Bucket, Arc<Counting>, Option<String>) {
    let store = Arc::new(Counting::default());
    let bucket = Bucket::of(Scheme::S3, "b", "memory".into(), store.clone());
    let put = store
        .put(&Path::from("k"), data.to_vec().into())
        .await
        .unwrap();
    (bucket, store, put.e_tag)
}

/// Reads `range` of "k" as a run of blocks of `block` bytes.
async fn read_run(
    bucket: &Bucket,
    etag: Option<&str>,
    range: Range<usize>,
    block: usize,
) -> Result<Vec<u8>, ObjectError> {
    let mut out = vec![0u8; range.len()];
    let mut bufs: Vec<&mut [u8]> = out.chunks_mut(block).collect();
    bucket
        .get_run_into("k", range.start as u64, etag, &mut bufs)
        .await?;
    Ok(out)
}

#[tokio::test]
async fn a_run_of_blocks_is_one_get_split_as_it_arrives() {
    let data: Vec<u8> = (0..40_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let (bucket, store, etag) = bucket_with(&data).await;
    // Blocks 1 to 4 of 4 KiB and a short last one: five buffers, one GET.
    let got = read_run(&bucket, etag.as_deref(), 4096..4096 * 5 + 300, 4096).await;
    assert_eq!(got.unwrap(), &data[4096..4096 * 5 + 300]);
    assert_eq!(store.gets.load(Relaxed), 1);
}

#[tokio::test]
async fn a_run_of_an_object_replaced_or_cut_short_fails() {
    let data = vec![5u8; 20_000];
    let (bucket, store, etag) = bucket_with(&data).await;
    store
        .put(&Path::from("k"), vec![6u8; 20_000].into())
        .await
        .unwrap();
    let err = read_run(&bucket, etag.as_deref(), 0..16_384, 4096).await;
    assert!(matches!(err, Err(ObjectError::Changed { .. })), "{err:?}");
    // Shorter than listed (no ETag to tell): the run is not filled.
    let err = read_run(&bucket, None, 16_384..24_576, 4096).await;
    assert!(err.is_err(), "{err:?}");
}
