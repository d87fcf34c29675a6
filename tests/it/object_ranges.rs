//! A large file moved by a real `hetch service` and its workers into MinIO and into
//! Azurite in ranges: each range's parts go into one multipart upload the ranges
//! share, and the commit completes it with the file's BLAKE3 on the object. Two
//! workers both upload parts; a worker killed mid-range has its range run again by
//! another; a source changed between ranges fails the job and leaves no object.

use crate::util;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;

use hetch_object::{AzureConfig, Bucket, S3Config, S3Options};
use hetch_testkit::emulators::Emulator;
use util::service::{args, show, start_with, submit, Service};
use util::{spawn, wait_for, Running};

const MIB: u64 = 1 << 20;
/// About 40 MiB in blocks of 1 MiB, parts of 8 (the smallest hetch makes), ranges of
/// one part: six ranges, the last short.
const SIZE: u64 = 40 * MIB + 12_345;
const SPLIT: [&str; 6] = [
    "--split-size",
    "16M",
    "--range-size",
    "8M",
    "--lease-secs",
    "2",
];

/// A store the workers write into: their environment, the URL of its bucket or
/// container, and a client of it for the test's own reads.
struct Store {
    env: Vec<(String, String)>,
    url: String,
    bucket: Bucket,
    /// MinIO's bucket name (its open uploads can be listed).
    minio: Option<String>,
}

fn minio() -> Store {
    let name = hetch_testkit::minio::fresh_bucket("objranges");
    let env: Vec<(String, String)> = hetch_testkit::minio::shared_minio()
        .env()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let map: HashMap<String, String> = env.iter().cloned().collect();
    let cfg = S3Config::resolve_from(&S3Options::default(), &map).unwrap();
    Store {
        url: format!("s3://{name}"),
        bucket: Bucket::open(&cfg, &name).unwrap(),
        env,
        minio: Some(name),
    }
}

fn azurite() -> Store {
    let az = Emulator::shared_azurite();
    let name = hetch_testkit::shared::unique_name("objranges");
    az.create_container(&name).unwrap();
    let env = vec![
        ("AZURE_STORAGE_USE_EMULATOR".to_string(), "true".to_string()),
        ("AZURITE_BLOB_STORAGE_URL".to_string(), az.url.clone()),
    ];
    let map: HashMap<String, String> = env.iter().cloned().collect();
    let cfg = AzureConfig::resolve_from(&map).unwrap();
    Store {
        url: format!("az://{name}"),
        bucket: Bucket::open_azure(&cfg, &name).unwrap(),
        env,
        minio: None,
    }
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

impl Store {
    /// A worker of `svc` that reaches this store, with its metrics served.
    fn worker(&self, svc: &Service, dir: &Path, name: &str) -> Running {
        let mut a = args(&["worker", "--service", &svc.addr, "--name", name]);
        a.extend(args(&["--units", "2", "--metrics", "127.0.0.1:0"]));
        a.extend([OsString::from("--root"), dir.join("root").into()]);
        let mut env: Vec<(&str, &str)> = svc.worker_env().to_vec();
        env.extend(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        spawn(&a, &env)
    }

    /// Object `key`'s bytes, if it exists.
    fn object(&self, key: &str) -> Option<Vec<u8>> {
        block_on(async {
            let head = self.bucket.head(key).await.unwrap()?;
            let size = head.info.size;
            Some(
                self.bucket
                    .get_range(key, 0..size, None)
                    .await
                    .unwrap()
                    .to_vec(),
            )
        })
    }

    /// The BLAKE3 stored on object `key`.
    fn stored_blake3(&self, key: &str) -> Option<[u8; 32]> {
        block_on(self.bucket.stored_blake3(key)).unwrap()
    }

    /// Checks object `key` is `data` with its BLAKE3 stored on it, and no upload is
    /// left open (the losers' of the race to create one were aborted).
    fn assert_is(&self, key: &str, data: &[u8]) {
        let got = self
            .object(key)
            .unwrap_or_else(|| panic!("no object {key}"));
        assert!(got == data, "{key}: {} bytes, not the source's", got.len());
        let want = *blake3::hash(data).as_bytes();
        assert_eq!(self.stored_blake3(key), Some(want), "{key}");
        if let Some(b) = &self.minio {
            let open = hetch_testkit::minio::shared_minio()
                .open_uploads_in(b)
                .unwrap();
            assert_eq!(open, 0, "uploads left open in {b}");
        }
    }
}

/// A source of `SIZE` bytes no two blocks of which are alike, at `root/NAME/big.bin`.
fn source(root: &Path, name: &str, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; SIZE as usize];
    hetch_testkit::data::Rng::new(seed).fill(&mut v);
    std::fs::create_dir_all(root.join(name)).unwrap();
    std::fs::write(root.join(name).join("big.bin"), &v).unwrap();
    v
}

/// Ranges worker `w` finished (its metrics).
fn ranges_done(w: &Running) -> u64 {
    let line = util::service::printed_after(w, "metrics on http://");
    let addr = line.strip_suffix("/metrics").unwrap();
    let (m, _) = util::scrape(addr);
    m.value(
        "hetch_worker_units_ended_total",
        &[("kind", "range"), ("outcome", "done")],
    )
}

/// Units of job `id` done so far.
fn units_done(svc: &Service, id: &str) -> u64 {
    show(svc, id)["units"]["done"].as_u64().unwrap_or(0)
}

/// Two workers move one file in ranges into `store`; then one worker, killed
/// mid-range, leaves its range to another; then a source changed between ranges fails
/// its job.
fn ranges_into(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let svc = start_with(dir.path(), &SPLIT);
    svc.job(&["ls"]).ok(); // pins the key

    // Two workers, both uploading parts of the one file.
    let data = source(&root, "one", 1);
    let (a, b) = (
        store.worker(&svc, dir.path(), "a"),
        store.worker(&svc, dir.path(), "b"),
    );
    let dest = format!("{}/first/", store.url);
    let sub = ["--rate-limit", "24M", "--block-size", "1M", "one", &dest];
    let id = submit(&svc, &sub);
    svc.job(&["wait", &id]).ok();
    let v = show(&svc, &id);
    assert!(
        v["units"]["done"].as_u64() >= Some(7),
        "six ranges and a commit: {v}"
    );
    let (ra, rb) = (ranges_done(&a), ranges_done(&b));
    assert!(ra >= 1 && rb >= 1, "ranges done: a {ra}, b {rb}");
    store.assert_is("first/one/big.bin", &data);
    drop((a, b));

    // One worker, slowed by the job's rate, is killed while a range is half done:
    // once its lease runs out the other runs the range again into the same upload.
    let data = source(&root, "two", 2);
    let mut c = store.worker(&svc, dir.path(), "c");
    let dest = format!("{}/second/", store.url);
    let sub = ["--rate-limit", "8M", "--block-size", "1M", "two", &dest];
    let id = submit(&svc, &sub);
    wait_for("c to be half way through a range", || {
        let v = show(&svc, &id);
        v["bytes_live"].as_u64() > v["bytes_done"].as_u64()
    });
    c.kill9();
    let d = store.worker(&svc, dir.path(), "d");
    svc.job(&["wait", &id]).ok();
    assert!(ranges_done(&d) >= 1);
    store.assert_is("second/two/big.bin", &data);

    // The source changes between ranges (same size, another mtime): the range that
    // reads the new version, or the commit, fails naming the file, the upload is
    // aborted and no object is under the final key.
    source(&root, "three", 3);
    let dest = format!("{}/third/", store.url);
    let sub = ["--rate-limit", "8M", "--block-size", "1M", "three", &dest];
    let id = submit(&svc, &sub);
    wait_for("a range of the third job to be done", || {
        units_done(&svc, &id) >= 1
    });
    let path = root.join("three/big.bin");
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"changed", SIZE - 100).unwrap();
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
    f.set_modified(later).unwrap();
    drop(f);
    let out = svc.job(&["wait", &id]);
    assert!(!out.status.success(), "{}", out.stdout);
    let v = show(&svc, &id);
    assert_eq!(v["state"], "failed", "{v}");
    let text = v.to_string();
    assert!(text.contains("big.bin") && text.contains("changed"), "{v}");
    assert!(store.object("third/three/big.bin").is_none());
    drop(d);
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn a_file_goes_into_minio_in_ranges_from_several_workers() {
    ranges_into(minio());
}

#[test]
#[ignore = "integration: needs Azurite (bash test.sh runs it)"]
fn a_file_goes_into_azurite_in_ranges_from_several_workers() {
    ranges_into(azurite());
}
