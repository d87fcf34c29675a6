//! One object uploaded in parts by two writers at once (each with its own client, as
//! two workers are), one part uploaded twice (a range run again after its first
//! writer was lost), checked from the ranges' digests and completed with the source's
//! BLAKE3: against a real MinIO and a real Azurite. A report that does not add up
//! fails the check and leaves no object under the key.

use std::collections::HashMap;

use bytes::Bytes;
use hetch_integrity::block_digest;
use hetch_object::shared::{check_ranges, part_index, parts_of, RangePart};
use hetch_object::{
    AzureConfig, Bucket, PartLimits, PutMeta, RangeCut, S3Config, S3Options, Scheme,
};
use hetch_testkit::emulators::Emulator;

const MIB: u64 = 1 << 20;
const BS: u64 = MIB;

fn minio_bucket() -> impl Fn() -> Bucket {
    let name = hetch_testkit::minio::fresh_bucket("shared");
    let env: HashMap<String, String> = hetch_testkit::minio::shared_minio()
        .env()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let cfg = S3Config::resolve_from(&S3Options::default(), &env).unwrap();
    move || Bucket::open(&cfg, &name).unwrap()
}

fn azurite_container() -> impl Fn() -> Bucket {
    let az = Emulator::shared_azurite();
    let name = hetch_testkit::shared::unique_name("shared");
    az.create_container(&name).unwrap();
    let env: HashMap<String, String> = [
        ("AZURE_STORAGE_USE_EMULATOR", "true".to_string()),
        ("AZURITE_BLOB_STORAGE_URL", az.url.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let cfg = AzureConfig::resolve_from(&env).unwrap();
    move || Bucket::open_azure(&cfg, &name).unwrap()
}

/// A source of `size` bytes no two blocks of which are alike.
fn source(size: u64) -> Vec<u8> {
    let mut v = vec![0u8; size as usize];
    hetch_testkit::data::Rng::new(size).fill(&mut v);
    v
}

/// Writer `bucket` uploads the ranges starting at `which` of `data` (cut as `cut`
/// says) as parts of `upload`, one part in memory at a time; returns their reports.
async fn write_ranges(
    bucket: Bucket,
    key: String,
    upload: String,
    data: std::sync::Arc<Vec<u8>>,
    cut: RangeCut,
    which: Vec<u64>,
) -> Vec<RangePart> {
    let per = cut.range_blocks;
    let size = data.len() as u64;
    let blocks = hetch_integrity::block_count(size, BS);
    let mut out = Vec::new();
    for first in which {
        let end = (first + per).min(blocks);
        let (a, b) = ((first * BS) as usize, ((end * BS).min(size)) as usize);
        let digests = (first..end)
            .map(|i| {
                let (x, y) = ((i * BS) as usize, ((i + 1) * BS).min(size) as usize);
                block_digest(size, BS, i, &data[x..y])
            })
            .collect();
        let mut parts = Vec::new();
        for (n, blocks) in parts_of(first, end, cut) {
            let (x, y) = (blocks.start * BS, (blocks.end * BS).min(size));
            let body = Bytes::copy_from_slice(&data[x as usize..y as usize]);
            parts.push(
                bucket
                    .put_part(&key, &upload, n as usize, body)
                    .await
                    .unwrap(),
            );
        }
        out.push(RangePart {
            first,
            end,
            parts,
            size: (b - a) as u64,
            digests,
        });
    }
    out
}

/// Uploads a 43 MiB source in ranges of two parts from two writers at once, the
/// second range twice, and completes it; then a bad report, which must fail.
async fn two_writers(open: impl Fn() -> Bucket, scheme: Scheme) {
    let size = 43 * MIB + 12_345;
    let data = std::sync::Arc::new(source(size));
    let cut = PartLimits::of(scheme).cut(size, BS, 10, 1 << 20).unwrap();
    assert_eq!(
        cut,
        RangeCut {
            part_blocks: 8,
            range_blocks: 16
        }
    );
    let per = cut.range_blocks;
    let blocks = hetch_integrity::block_count(size, BS);
    let firsts: Vec<u64> = (0..blocks).step_by(per as usize).collect();
    assert!(firsts.len() >= 3, "{firsts:?}");
    let key = "dir/big.bin".to_string();
    let first = open();
    let meta = PutMeta {
        mtime: Some((1_700_000_000, 7)),
        blake3: None,
    };
    let upload = first.create_multipart(&key, &meta).await.unwrap();
    // Even ranges from one writer, odd ones from the other, at once; the second range
    // is also run again by the first writer (its first run "lost"), the rerun's part
    // replacing the first's.
    let (even, odd): (Vec<u64>, Vec<u64>) =
        firsts.iter().partition(|f| part_index(**f, cut) % 4 == 0);
    let a = tokio::spawn(write_ranges(
        open(),
        key.clone(),
        upload.clone(),
        data.clone(),
        cut,
        even,
    ));
    let b = tokio::spawn(write_ranges(
        open(),
        key.clone(),
        upload.clone(),
        data.clone(),
        cut,
        odd,
    ));
    let mut reports: Vec<RangePart> = a.await.unwrap();
    reports.extend(b.await.unwrap());
    let rerun = write_ranges(
        open(),
        key.clone(),
        upload.clone(),
        data.clone(),
        cut,
        vec![firsts[1]],
    );
    let rerun = rerun.await.remove(0);
    reports.retain(|r| r.first != rerun.first);
    reports.push(rerun);
    reports.sort_by_key(|r| r.first);
    // Nothing under the key before the completion.
    assert!(first.head(&key).await.unwrap().is_none());
    let (whole, ids) = check_ranges(size, BS, cut, reports.clone()).unwrap();
    assert_eq!(whole, *blake3::hash(&data).as_bytes());
    let meta = PutMeta {
        blake3: Some(whole),
        ..meta
    };
    first
        .complete_with_blake3(&key, &upload, ids, &meta)
        .await
        .unwrap();
    let got = first.get_range(&key, 0..size, None).await.unwrap();
    assert!(got[..] == data[..], "the object's bytes are the source's");
    assert_eq!(first.stored_blake3(&key).await.unwrap(), Some(whole));
    let head = first.head(&key).await.unwrap().unwrap();
    assert_eq!(head.source_mtime, Some((1_700_000_000, 7)));

    // A range whose part is not its size (a source that changed between ranges):
    // the check fails, nothing is completed, no object appears.
    let key2 = "dir/changed.bin".to_string();
    let upload2 = first.create_multipart(&key2, &meta).await.unwrap();
    let mut bad = write_ranges(
        open(),
        key2.clone(),
        upload2.clone(),
        data.clone(),
        cut,
        firsts.clone(),
    )
    .await;
    bad[1].size -= 1;
    let e = check_ranges(size, BS, cut, bad).unwrap_err();
    assert!(e.contains("bytes"), "{e}");
    first.abort_multipart(&key2, &upload2).await.unwrap();
    assert!(first.head(&key2).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
async fn two_writers_into_minio() {
    two_writers(minio_bucket(), Scheme::S3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "integration: needs Azurite (bash test.sh runs it)"]
async fn two_writers_into_azurite() {
    two_writers(azurite_container(), Scheme::Azure).await;
}

/// A commit lost between the completion and the tag (S3 takes them in two requests):
/// completing again finds the upload gone (`is_upload_gone`, which is how a commit
/// run again knows to re-tag), and the object, untagged, gets its BLAKE3 tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
async fn a_commit_run_again_after_completion_tags_the_object_on_minio() {
    let open = minio_bucket();
    let size = 11 * MIB + 7;
    let data = std::sync::Arc::new(source(size));
    let cut = PartLimits::of(Scheme::S3)
        .cut(size, BS, 16, 1 << 20)
        .unwrap();
    let key = "crash/big.bin".to_string();
    let b = open();
    let meta = PutMeta {
        mtime: Some((1_700_000_000, 9)),
        blake3: None,
    };
    let upload = b.create_multipart(&key, &meta).await.unwrap();
    let reports = write_ranges(
        open(),
        key.clone(),
        upload.clone(),
        data.clone(),
        cut,
        vec![0],
    )
    .await;
    let (whole, ids) = check_ranges(size, BS, cut, reports).unwrap();
    // The first commit completes, then is lost before tagging.
    b.complete_multipart(&key, &upload, ids.clone())
        .await
        .unwrap();
    assert_eq!(b.stored_blake3(&key).await.unwrap(), None);
    // Run again: the upload is gone, which is told apart from other failures.
    let meta = PutMeta {
        blake3: Some(whole),
        ..meta
    };
    let e = b
        .complete_with_blake3(&key, &upload, ids, &meta)
        .await
        .unwrap_err();
    assert!(e.is_upload_gone(), "{e}");
    let head = b.head(&key).await.unwrap().unwrap();
    assert_eq!((head.info.size, head.source_mtime), (size, meta.mtime));
    b.tag_blake3(&key, &whole).await.unwrap();
    assert_eq!(b.stored_blake3(&key).await.unwrap(), Some(whole));
    let got = b.get_range(&key, 0..size, None).await.unwrap();
    assert!(got[..] == data[..]);
}
