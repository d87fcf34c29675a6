//! The backend conformance suite: every case runs against every backend (a directory
//! tree, memory, an S3 bucket on a real MinIO, a GCS bucket on fake-gcs-server and an
//! Azure container on Azurite), through the whole engine. As a
//! destination (`Store`), each receives from a real source tree on disk; as a source
//! (a local path, or an `Origin`), each is copied into a real directory. A backend
//! passes the cases its capabilities claim; a case it cannot run says so.
//!
//! A new backend adds one `Backend` implementation and one line in `backends()`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::common::{bytes, opts};
use hetch_engine::store::posix::PosixStore;
use hetch_engine::store::{Capabilities, FileSpec, Kind, Size, Store};
use hetch_engine::{copy_between, DestSpec, Destination, Operand, Options, Progress, Report};
use hetch_storage::part::FinalMeta;
use hetch_storage::StorageError;
use hetch_testkit::{MemoryOrigin, MemoryStore, MemoryTree, Node};

/// A backend under test, and ways to look at (and prepare) what it holds.
trait Backend: Send + Sync {
    fn name(&self) -> &'static str;
    /// What it holds at `p`, as a source operand.
    fn origin(&self, p: &str) -> Operand;
    /// A store writing `sources` operands to `dest` (relative; trailing `/` kept).
    fn store(&self, dest: &str, sources: u32) -> Arc<dyn Store>;
    /// The committed file at `p`.
    fn file(&self, p: &str) -> Option<Vec<u8>>;
    /// What is at `p`.
    fn kind(&self, p: &str) -> Option<Kind>;
    /// Every visible entry below the root (no temporary file of a transfer).
    fn visible(&self) -> BTreeSet<String>;
    /// Unfinished transfers' leftovers (part files, journals, uploads).
    fn leftovers(&self) -> usize;
    /// Puts a file at `p` as another program would, with mtime `mtime` seconds.
    fn put_file(&self, p: &str, data: &[u8], mtime: i64);
    /// Makes directory `p`.
    fn mkdir(&self, p: &str);
    /// Whether it runs the cases about a destination: a backend whose server cannot
    /// take the writes a `Store` makes runs only the cases about a source.
    fn is_destination(&self) -> bool {
        true
    }
    /// What its stores can do.
    fn caps(&self) -> Capabilities {
        self.store("x", 1).capabilities()
    }
}

/// How the cases hold a backend (one may hand it to an origin of its own).
type B = Arc<dyn Backend>;

struct Posix(tempfile::TempDir);

impl Backend for Posix {
    fn name(&self) -> &'static str {
        "posix"
    }
    fn origin(&self, p: &str) -> Operand {
        Operand::Local(self.0.path().join(p))
    }
    fn store(&self, dest: &str, sources: u32) -> Arc<dyn Store> {
        Arc::new(PosixStore::new(DestSpec {
            path: self.0.path().join(dest.trim_end_matches('/')),
            sources,
            trailing_slash: dest.ends_with('/'),
            confine_to: None,
            as_operand: false,
        }))
    }
    fn file(&self, p: &str) -> Option<Vec<u8>> {
        let md = std::fs::symlink_metadata(self.0.path().join(p)).ok()?;
        md.is_file()
            .then(|| std::fs::read(self.0.path().join(p)).unwrap())
    }
    fn kind(&self, p: &str) -> Option<Kind> {
        let md = std::fs::symlink_metadata(self.0.path().join(p)).ok()?;
        Some(Kind::of(md.file_type()))
    }
    fn visible(&self) -> BTreeSet<String> {
        walkdir(self.0.path())
            .into_iter()
            .filter(|p| !p.contains(".hetch-"))
            .collect()
    }
    fn leftovers(&self) -> usize {
        walkdir(self.0.path())
            .iter()
            .filter(|p| p.contains(".hetch-"))
            .count()
    }
    fn put_file(&self, p: &str, data: &[u8], mtime: i64) {
        let path = self.0.path().join(p);
        std::fs::write(&path, data).unwrap();
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime as u64);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    fn mkdir(&self, p: &str) {
        std::fs::create_dir_all(self.0.path().join(p)).unwrap();
    }
}

fn walkdir(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            out.push(p.strip_prefix(root).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

struct Memory(Arc<Mutex<MemoryTree>>);

impl Backend for Memory {
    fn name(&self) -> &'static str {
        "memory"
    }
    fn origin(&self, p: &str) -> Operand {
        Operand::Origin(Arc::new(MemoryOrigin::new(self.0.clone(), p)))
    }
    fn store(&self, dest: &str, sources: u32) -> Arc<dyn Store> {
        Arc::new(MemoryStore::new(self.0.clone(), dest, sources))
    }
    fn file(&self, p: &str) -> Option<Vec<u8>> {
        match self.0.lock().unwrap().nodes.get(Path::new(p)) {
            Some(Node::File { data, .. }) => Some(data.clone()),
            _ => None,
        }
    }
    fn kind(&self, p: &str) -> Option<Kind> {
        Some(match self.0.lock().unwrap().nodes.get(Path::new(p))? {
            Node::Dir(_) => Kind::Dir,
            Node::File { .. } => Kind::File,
            Node::Symlink { .. } => Kind::Symlink,
        })
    }
    fn visible(&self) -> BTreeSet<String> {
        let t = self.0.lock().unwrap();
        t.nodes.keys().map(|p| p.display().to_string()).collect()
    }
    fn leftovers(&self) -> usize {
        self.0.lock().unwrap().unfinished.len()
    }
    fn put_file(&self, p: &str, data: &[u8], mtime: i64) {
        let meta = FinalMeta {
            mode: 0o644,
            mtime_sec: mtime,
            mtime_nsec: 0,
        };
        let node = Node::File {
            data: data.to_vec(),
            meta,
        };
        self.0.lock().unwrap().nodes.insert(PathBuf::from(p), node);
    }
    fn mkdir(&self, p: &str) {
        let mut t = self.0.lock().unwrap();
        let mut at = PathBuf::new();
        for c in Path::new(p).components() {
            at.push(c);
            let meta = FinalMeta {
                mode: 0o755,
                mtime_sec: 0,
                mtime_nsec: 0,
            };
            t.nodes.entry(at.clone()).or_insert(Node::Dir(meta));
        }
    }
}

/// A bucket of its own (a fresh one per case) on a server the whole test process shares:
/// S3 on MinIO, GCS on fake-gcs-server, an Azure container on Azurite. Each server is
/// started on first use and stopped when the process ends (`hetch_testkit::shared`);
/// a bucket per case keeps the cases independent of each other while they run in
/// parallel, and every look at a backend (`visible`, `leftovers`, ...) sees only the
/// case's own bucket.
struct Bucketed {
    name: &'static str,
    server: Server,
    /// The case's bucket (or container) on `server`.
    bucket_name: String,
    bucket: Arc<hetch_object::Bucket>,
    /// Journals of multipart uploads in progress.
    state: tempfile::TempDir,
}

/// What serves a bucket: one server per test process, never dropped.
enum Server {
    Minio(&'static hetch_bench::minio::Minio),
    Emulator(&'static hetch_testkit::emulators::Emulator),
}

impl Bucketed {
    /// A fresh bucket of fake-gcs-server: a source only, as it does not serve the XML
    /// API object_store writes with (its files are put through the JSON API).
    fn gcs() -> Bucketed {
        let e = hetch_testkit::emulators::Emulator::shared_gcs();
        let name = hetch_testkit::shared::unique_name("case-");
        e.create_bucket(&name).unwrap();
        let cfg = hetch_object::GcsConfig {
            emulator: Some(e.url.clone()),
            ..Default::default()
        };
        let bucket = hetch_object::Bucket::open_gcs(&cfg, &name).unwrap();
        Bucketed::of("gcs", Server::Emulator(e), name, bucket)
    }

    /// A fresh container of Azurite.
    fn azure() -> Bucketed {
        use hetch_testkit::emulators::{Emulator, AZURITE_ACCOUNT, AZURITE_KEY};
        let e = Emulator::shared_azurite();
        let name = hetch_testkit::shared::unique_name("case-");
        e.create_container(&name).unwrap();
        let cfg = hetch_object::AzureConfig {
            account: AZURITE_ACCOUNT.into(),
            key: Some(AZURITE_KEY.into()),
            sas: None,
            endpoint: Some(format!("{}/{AZURITE_ACCOUNT}", e.url)),
        };
        let bucket = hetch_object::Bucket::open_azure(&cfg, &name).unwrap();
        Bucketed::of("azure", Server::Emulator(e), name, bucket)
    }

    fn of(
        name: &'static str,
        server: Server,
        bucket_name: String,
        bucket: hetch_object::Bucket,
    ) -> Bucketed {
        Bucketed {
            name,
            server,
            bucket_name,
            bucket: Arc::new(bucket),
            state: tempfile::tempdir().unwrap(),
        }
    }

    /// A fresh bucket of MinIO.
    fn s3() -> Bucketed {
        let minio = hetch_testkit::minio::shared_minio();
        let name = hetch_testkit::minio::fresh_bucket("case-");
        let env: std::collections::HashMap<_, _> = minio.env().into_iter().collect();
        let cfg = hetch_object::S3Config {
            access_key: Some(env["AWS_ACCESS_KEY_ID"].clone()),
            secret_key: Some(env["AWS_SECRET_ACCESS_KEY"].clone()),
            session_token: None,
            region: "us-east-1".into(),
            endpoint: Some(minio.endpoint.clone()),
            ca_bundle: None,
        };
        let bucket = hetch_object::Bucket::open(&cfg, &name).unwrap();
        Bucketed::of("s3", Server::Minio(minio), name, bucket)
    }

    /// Key or prefix `p` of the bucket.
    fn location(&self, p: &str) -> hetch_object::ObjectLocation {
        hetch_object::ObjectLocation {
            bucket: self.bucket.clone(),
            url: hetch_object::ObjectUrl::parse(&self.bucket.url(p)).unwrap(),
        }
    }

    /// Runs a request from the test's (multi-threaded) runtime (or a blocking thread).
    fn wait<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
    }
}

impl Backend for Bucketed {
    fn name(&self) -> &'static str {
        self.name
    }
    fn origin(&self, p: &str) -> Operand {
        let origin = hetch_object::ObjectOrigin::new(self.location(p));
        Operand::Origin(Arc::new(origin))
    }
    fn store(&self, dest: &str, sources: u32) -> Arc<dyn Store> {
        let dest = hetch_object::ObjectDest {
            location: self.location(dest),
            sources,
            as_operand: false,
            state_dir: self.state.path().to_path_buf(),
        };
        Arc::new(hetch_object::BucketStore::new(dest, 64 << 20))
    }
    fn file(&self, p: &str) -> Option<Vec<u8>> {
        let head = self.wait(self.bucket.head(p)).unwrap()?;
        let data = self.wait(self.bucket.get_range(p, 0..head.info.size, None));
        Some(data.unwrap().to_vec())
    }
    fn kind(&self, p: &str) -> Option<Kind> {
        if self.wait(self.bucket.head(p)).unwrap().is_some() {
            return Some(Kind::File);
        }
        let (objects, dirs) = self.wait(self.bucket.list_dir(p)).unwrap();
        (!objects.is_empty() || !dirs.is_empty()).then_some(Kind::Dir)
    }
    fn visible(&self) -> BTreeSet<String> {
        use futures_util::StreamExt;
        let keys: Vec<_> = self.wait(self.bucket.list("").collect::<Vec<_>>());
        let mut out = BTreeSet::new();
        for k in keys {
            let key = k.unwrap().key;
            // The "directories" its key implies, as a file system would show them.
            let mut at = String::new();
            for part in key.split('/') {
                if !at.is_empty() {
                    at.push('/');
                }
                at.push_str(part);
                out.insert(at.clone());
            }
        }
        out
    }
    fn leftovers(&self) -> usize {
        let uploads = self.state.path().join("uploads");
        let journals = std::fs::read_dir(uploads).map_or(0, |d| d.count());
        // MinIO shows the uploads it holds (in this case's bucket: other cases use
        // the server at the same time); the emulators do not, so for them only the
        // journals tell.
        let held = match &self.server {
            Server::Minio(m) => {
                tokio::task::block_in_place(|| m.open_uploads_in(&self.bucket_name))
                    .unwrap_or_else(|e| panic!("{e:#}"))
            }
            Server::Emulator(_) => 0,
        };
        held + journals
    }
    fn is_destination(&self) -> bool {
        self.name != "gcs"
    }
    fn put_file(&self, p: &str, data: &[u8], mtime: i64) {
        if let Server::Emulator(e) = &self.server {
            if self.name == "gcs" {
                return e.gcs_put(&self.bucket_name, p, data).unwrap();
            }
        }
        let meta = hetch_object::PutMeta {
            mtime: Some((mtime, 0)),
            blake3: None,
        };
        let body = bytes::Bytes::copy_from_slice(data);
        self.wait(self.bucket.put(p, body, &meta)).unwrap();
    }
    fn mkdir(&self, _p: &str) {
        // Keys with '/' stand for directories: there is nothing to make.
    }
}

/// The backends to run, comma-separated (posix, memory, s3, gcs, azure):
/// `HETCH_CONFORMANCE`, else the two that need no server (`bash test.sh` names all five:
/// S3, GCS and Azure run against MinIO and the emulators, integration tests).
fn wanted_list() -> String {
    std::env::var("HETCH_CONFORMANCE").unwrap_or_else(|_| "posix,memory".into())
}

/// Whether backend `name` is to run (see [`wanted_list`]).
fn wanted(name: &str) -> bool {
    wanted_list().split(',').any(|n| n.trim() == name)
}

/// The backends to run (see [`wanted`]); buckets are fresh ones on shared servers.
fn backends() -> Vec<Arc<dyn Backend>> {
    let only = wanted_list();
    let mut out: Vec<Arc<dyn Backend>> = Vec::new();
    if wanted("posix") {
        out.push(Arc::new(Posix(tempfile::tempdir().unwrap())));
    }
    if wanted("memory") {
        out.push(Arc::new(Memory(Arc::default())));
    }
    if wanted("s3") {
        out.push(Arc::new(Bucketed::s3()));
    }
    if wanted("gcs") {
        out.push(Arc::new(Bucketed::gcs()));
    }
    if wanted("azure") {
        out.push(Arc::new(Bucketed::azure()));
    }
    assert!(!out.is_empty(), "HETCH_CONFORMANCE={only}: no such backend");
    out
}

/// Block size of the suite: small, so that boundaries and many blocks are cheap.
const BS: u64 = 4096;

fn suite_opts() -> Options {
    Options {
        block_size: BS,
        ..opts()
    }
}

/// Copies local `srcs` into `dest` of `b`.
async fn copy(b: &B, o: Options, srcs: &[&Path], dest: &str) -> Report {
    let store = b.store(dest, srcs.len() as u32);
    let operands = srcs
        .iter()
        .map(|p| Operand::Local(p.to_path_buf()))
        .collect();
    copy_into(b, o, operands, store).await
}

/// Copies `operands` into `store`, for the cases about `b`.
async fn copy_into(b: &B, o: Options, operands: Vec<Operand>, store: Arc<dyn Store>) -> Report {
    let progress = Arc::new(Progress::default());
    copy_between(o, operands, Destination::Store(store), 2, progress)
        .await
        .unwrap_or_else(|e| panic!("{}: copy failed: {e}", b.name()))
}

/// Copies operand `p` of `b` to `out` in a fresh directory.
async fn copy_out(b: &B, o: Options, p: &str) -> (Report, Posix) {
    let dir = Posix(tempfile::tempdir().unwrap());
    let r = copy_into(b, o, vec![b.origin(p)], dir.store("out", 1)).await;
    (r, dir)
}

/// Each case, for every backend.
macro_rules! conformance {
    ($module:ident, destinations only: $dest:expr; $($case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            for b in backends() {
                if $dest && !b.is_destination() {
                    eprintln!("{}: a source only", b.name());
                    continue;
                }
                $module::$case(&b).await;
            }
        }
    )*};
}

/// A directory another writer of the same tree makes between this writer's look and
/// its `mkdir` (two units of one service job, each with the parent directories it
/// needs) is taken as made: the copy succeeds, whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_another_writer_makes_at_the_same_moment_is_taken() {
    let tree: Arc<Mutex<MemoryTree>> = Arc::default();
    tree.lock().unwrap().racing_dirs = true;
    let b: B = Arc::new(Memory(tree));
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(src.path().join("run/a/b")).unwrap();
    std::fs::write(src.path().join("run/a/b/f"), b"data").unwrap();
    std::fs::write(src.path().join("run/g"), b"more").unwrap();
    let r = copy(&b, suite_opts(), &[&src.path().join("run")], "out/").await;
    assert_eq!((r.summary.failed, r.errors.len()), (0, 0), "{r:?}");
    assert_eq!(b.file("out/run/a/b/f").as_deref(), Some(&b"data"[..]));
    assert_eq!(b.kind("out/run/a"), Some(Kind::Dir));
}

/// A file's size is the peer's word: a part file reserves disk ahead of its writes
/// (so that writers at their own offsets leave it in few extents), but never much more
/// than what arrived. A source that announces 64 GiB and sends one block holds a few
/// dozen MiB, not 64 GiB, in a part file kept for resume.
#[test]
fn an_announced_size_reserves_no_more_disk_than_what_was_sent() {
    use std::os::unix::fs::MetadataExt;
    let root = tempfile::tempdir().unwrap();
    let top = root.path().to_path_buf();
    let backend = Posix(root);
    let store = backend.store("g", 1);
    let announced = 64 << 30;
    let spec = FileSpec {
        size: Size::Known(announced),
        block_size: 1 << 20,
        meta: FinalMeta {
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
        },
        checksum: suite_opts().checksum,
        read_back_follows: false,
    };
    store.resolve(b"f", true).unwrap();
    let place = store.place(b"f").unwrap();
    let opened = store.open(&place, &spec).unwrap();
    opened.file.put(0, &[7; 1 << 20]).unwrap();
    let held: u64 = walkdir(&top)
        .iter()
        .filter_map(|p| std::fs::symlink_metadata(top.join(p)).ok())
        .filter(|m| m.is_file())
        .map(|m| m.blocks() * 512)
        .sum();
    assert!(held >= 1 << 20, "{held} bytes held: the block is not there");
    assert!(held <= 80 << 20, "{held} bytes held for one block of 1 MiB");
    opened.file.abort();
}

/// The S3 backend's `leftovers` counts the uploads MinIO holds in the case's own
/// bucket, and only those (other cases use the same server at the same time): what
/// makes "nothing left" checks on S3 mean something.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_leftovers_count_the_uploads_of_the_case_bucket_only() {
    if !wanted("s3") {
        return;
    }
    let (mine, other) = (Bucketed::s3(), Bucketed::s3());
    let meta = hetch_object::PutMeta::default();
    let upload = mine.wait(mine.bucket.create_multipart("k", &meta)).unwrap();
    assert_eq!((mine.leftovers(), other.leftovers()), (1, 0));
    mine.wait(mine.bucket.abort_multipart("k", &upload))
        .unwrap();
    assert_eq!(mine.leftovers(), 0);
}

mod sources;

conformance!(
    sources, destinations only: false;
    as_a_source_every_size_and_name_arrives,
    as_a_source_a_missing_operand_is_named,
    as_a_source_blocks_damaged_in_flight_are_read_again,
    as_a_source_its_digest_decides_checksum_skip,
    as_a_source_a_file_replaced_after_listing_is_refused,
    as_a_source_a_file_of_many_blocks_is_read_in_runs,
);

conformance!(
    cases, destinations only: true;
    boundary_sizes_arrive_whole,
    names_dirs_and_links_keep_their_shape,
    copy_rules_into_as_and_again,
    resume_takes_up_recorded_blocks_after_checking_them,
    an_older_writer_cannot_touch_the_file_a_newer_one_took_over,
    a_file_moved_in_ranges_by_several_writers_is_committed_once_whole,
    blocks_damaged_in_flight_are_sent_again,
    storage_damage_is_found_by_reading_back,
    a_file_that_cannot_be_repaired_leaves_nothing,
    no_clobber_keeps_a_differing_file,
    checksum_skip_trusts_only_the_digest,
    manifests_list_every_file_as_stored,
    damage_in_the_store_is_found_by_verify,
);

mod cases {
    use super::*;

    fn src_dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    pub async fn boundary_sizes_arrive_whole(b: &B) {
        let t = src_dir();
        let src = t.path().join("d");
        std::fs::create_dir(&src).unwrap();
        let mut sizes = vec![0, 1, BS - 1, BS, BS + 1, 7 * BS + 3, 64 * BS];
        let unit = b.caps().resume_unit;
        if unit > BS {
            // Parts: exactly one, one and a block, several and a byte.
            sizes.extend([unit, unit + BS, 3 * unit + 1]);
        }
        for (i, n) in sizes.iter().enumerate() {
            std::fs::write(src.join(format!("f{n}")), bytes(i as u64, *n as usize)).unwrap();
        }
        let r = copy(b, suite_opts(), &[&src], "out").await;
        assert_eq!(r.summary.failed, 0, "{}: {:?}", b.name(), r.errors);
        for (i, n) in sizes.iter().enumerate() {
            let got = b.file(&format!("out/f{n}"));
            assert_eq!(
                got.as_deref(),
                Some(&bytes(i as u64, *n as usize)[..]),
                "{}: f{n}",
                b.name()
            );
        }
        assert_eq!(b.leftovers(), 0, "{}", b.name());
    }

    pub async fn names_dirs_and_links_keep_their_shape(b: &B) {
        let t = src_dir();
        let src = t.path().join("tree");
        std::fs::create_dir_all(src.join("ünï/çødé 漢字")).unwrap();
        std::fs::create_dir_all(src.join("empty")).unwrap();
        std::fs::write(src.join("ünï/çødé 漢字/ファイル.txt"), b"hello").unwrap();
        std::fs::write(src.join("a b"), bytes(3, 5000)).unwrap();
        std::os::unix::fs::symlink("a b", src.join("link")).unwrap();
        let caps = b.caps();
        let r = copy(b, suite_opts(), &[&src], "out").await;
        // A store without symlinks refuses the link, naming it; everything else goes.
        let refused = usize::from(!caps.symlinks);
        assert_eq!(r.errors.len(), refused, "{}: {:?}", b.name(), r.errors);
        if !caps.symlinks {
            assert!(
                r.errors[0].contains("out/link"),
                "{}: {:?}",
                b.name(),
                r.errors
            );
            assert!(
                r.errors[0].contains("symbolic link"),
                "{}: {:?}",
                b.name(),
                r.errors
            );
        }
        let mut want: BTreeSet<String> = [
            "out",
            "out/ünï",
            "out/ünï/çødé 漢字",
            "out/ünï/çødé 漢字/ファイル.txt",
            "out/a b",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if caps.symlinks {
            want.insert("out/link".into());
            assert_eq!(b.kind("out/link"), Some(Kind::Symlink), "{}", b.name());
        }
        if caps.directories {
            // Empty directories exist only where directories are entries of their own.
            want.insert("out/empty".into());
            assert_eq!(b.kind("out/empty"), Some(Kind::Dir), "{}", b.name());
        }
        assert_eq!(b.visible(), want, "{}", b.name());
        assert_eq!(
            b.file("out/ünï/çødé 漢字/ファイル.txt").as_deref(),
            Some(&b"hello"[..])
        );
    }

    pub async fn copy_rules_into_as_and_again(b: &B) {
        let t = src_dir();
        let src = t.path().join("run7");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("x"), bytes(1, 3000)).unwrap();
        // A missing destination with one source: copied *as* it.
        copy(b, suite_opts(), &[&src], "as").await;
        assert_eq!(
            b.file("as/x").as_deref(),
            Some(&bytes(1, 3000)[..]),
            "{}",
            b.name()
        );
        // Again: the copy is found and resumed into, not nested.
        let r = copy(b, suite_opts(), &[&src], "as").await;
        assert_eq!(r.summary.bytes, 0, "{}", b.name());
        assert_eq!(
            b.kind("as/run7"),
            None,
            "{}: nested a second copy",
            b.name()
        );
        // An existing directory: copied *into* it. (Without directories there is none
        // to find: a name without '/' is copied *as* it.)
        b.mkdir("into");
        copy(b, suite_opts(), &[&src], "into").await;
        let into = match b.caps().directories {
            true => "into/run7/x",
            false => "into/x",
        };
        assert!(b.file(into).is_some(), "{}", b.name());
        // A trailing '/': created, and copied into.
        copy(b, suite_opts(), &[&src], "made/").await;
        assert!(b.file("made/run7/x").is_some(), "{}", b.name());
    }

    pub async fn resume_takes_up_recorded_blocks_after_checking_them(b: &B) {
        let t = src_dir();
        let src = t.path().join("f");
        // Three parts and a bit; the earlier run got through two and some.
        let part = (b.store("x", 1).capabilities().resume_unit / BS).max(1);
        let (blocks, put, taken_up) = match part {
            1 => (300, 260, 256),
            p => (3 * p + 5, 2 * p + 100, 2 * p),
        };
        let data = bytes(7, (blocks * BS) as usize - 100);
        std::fs::write(&src, &data).unwrap();
        let md = std::fs::metadata(&src).unwrap();
        let o = suite_opts();
        // An earlier, interrupted transfer put and recorded the first blocks (the
        // store's calls block: off the async threads).
        tokio::task::block_in_place(|| {
            let store = b.store("g", 1);
            store.resolve(b"f", true).unwrap();
            let place = store.place(b"f").unwrap();
            let opened = store.open(&place, &spec_of(&md, blocks, &o)).unwrap();
            assert!(opened.recorded.is_none(), "{}", b.name());
            for i in 0..put {
                let block = &data[(i * BS) as usize..((i + 1) * BS) as usize];
                let d = o.checksum.block_digest(data.len() as u64, BS, i, block);
                opened.file.put(i * BS, block).unwrap();
                opened.file.record(i, &d, BS).unwrap();
            }
            // Then it stopped: neither committed nor aborted.
        });
        assert_eq!(b.file("g"), None, "{}: visible before commit", b.name());
        let r = copy(b, o, &[&src], "g").await;
        assert_eq!(r.summary.failed, 0, "{}: {:?}", b.name(), r.errors);
        if b.store("x", 1).capabilities().read_back {
            assert!(
                r.summary.reverified >= taken_up,
                "{}: only {} blocks taken up",
                b.name(),
                r.summary.reverified
            );
        }
        let sent_at_most = data.len() as u64 - taken_up * BS;
        assert!(
            r.summary.bytes <= sent_at_most,
            "{}: sent {}",
            b.name(),
            r.summary.bytes
        );
        assert_eq!(b.file("g").as_deref(), Some(&data[..]), "{}", b.name());
        assert_eq!(b.leftovers(), 0, "{}", b.name());
    }

    /// How the engine would open a file like `md` of `blocks` blocks.
    fn spec_of(md: &std::fs::Metadata, blocks: u64, o: &Options) -> FileSpec {
        use std::os::unix::fs::MetadataExt;
        let spec = FileSpec {
            size: Size::Known(md.len()),
            block_size: BS,
            meta: FinalMeta {
                mode: md.mode() & 0o777,
                mtime_sec: md.mtime(),
                mtime_nsec: md.mtime_nsec() as u32,
            },
            checksum: o.checksum,
            read_back_follows: false,
        };
        assert_eq!(spec.blocks(), blocks);
        spec
    }

    /// A transfer resumed while an older session of it still runs (on a server that
    /// has not yet noticed the old connection is gone): whatever the older writer
    /// does after the newer one opened the file (write other bytes, give up) neither
    /// reaches the newer one's file nor removes its part file.
    pub async fn an_older_writer_cannot_touch_the_file_a_newer_one_took_over(b: &B) {
        let t = src_dir();
        let src = t.path().join("f");
        let blocks = 40;
        let data = bytes(9, (blocks * BS) as usize - 7);
        std::fs::write(&src, &data).unwrap();
        let md = std::fs::metadata(&src).unwrap();
        let o = suite_opts();
        let spec = spec_of(&md, blocks, &o);
        let block = |i: u64| &data[(i * BS) as usize..((i + 1) * BS).min(md.len()) as usize];
        let digest = |i: u64| o.checksum.block_digest(md.len(), BS, i, block(i));
        tokio::task::block_in_place(|| {
            let (old_store, new_store) = (b.store("g", 1), b.store("g", 1));
            for s in [&old_store, &new_store] {
                s.resolve(b"f", true).unwrap();
            }
            let place = old_store.place(b"f").unwrap();
            let old = old_store.open(&place, &spec).unwrap();
            for i in 0..blocks / 2 {
                old.file.put(i * BS, block(i)).unwrap();
                old.file.record(i, &digest(i), BS).unwrap();
            }
            let new = new_store.open(&place, &spec).unwrap();
            new.file.put(0, block(0)).unwrap();
            // The older writer goes on, then gives up: refused or without effect.
            let junk = vec![0xA5; BS as usize];
            let _ = old.file.put(0, &junk);
            let _ = old.file.put(BS, &junk);
            old.file.abort();
            for i in 0..blocks {
                new.file.put(i * BS, block(i)).unwrap();
                new.file.record(i, &digest(i), BS).unwrap();
            }
            new.file.commit(md.len(), spec.meta, None, false).unwrap();
            let _ = old.file.put(2 * BS, &junk);
            let _ = old.file.commit(md.len(), spec.meta, None, false);
        });
        assert_eq!(b.file("g").as_deref(), Some(&data[..]), "{}", b.name());
        assert_eq!(b.leftovers(), 0, "{}", b.name());
    }

    /// One file moved in three block ranges by three writers (as three nodes of a
    /// transfer service would, each with its own store), out of order, one of them
    /// twice (a range redone after its lease ran out): nothing has the final name
    /// until the commit, which is refused while a range is missing or a writer still
    /// holds the file, then checks the whole file from the ranges' records.
    pub async fn a_file_moved_in_ranges_by_several_writers_is_committed_once_whole(b: &B) {
        use hetch_engine::ranges::{commit_ranges, copy_range, RangeSource};
        let t = src_dir();
        let src = t.path().join("f");
        let blocks = 40;
        let mut data = bytes(11, (blocks * BS) as usize - 7);
        data[(5 * BS) as usize..(6 * BS) as usize].fill(0); // a zero block
        std::fs::write(&src, &data).unwrap();
        let open = || RangeSource::new(std::fs::File::open(&src).unwrap(), &src).unwrap();
        let store = || {
            let s = b.store("g", 1);
            s.resolve(b"f", true).unwrap();
            s
        };
        let v = hetch_engine::Verify::Written;
        tokio::task::block_in_place(|| {
            let first = store();
            let place = first.place(b"f").unwrap();
            if !b.caps().ranges {
                let e = first.open_range(&place, &open().spec(BS, v), 0..blocks);
                assert!(e.is_err(), "{}: takes ranges without saying so", b.name());
                eprintln!("{}: takes no ranges", b.name());
                return;
            }
            let ranges = [27..blocks, 0..13, 13..27];
            for r in &ranges[..2] {
                // Metrics read the bytes moved as the range goes.
                let progress = hetch_engine::Progress::default();
                let control = hetch_engine::ranges::RangeControl {
                    progress: Some(&progress),
                    ..Default::default()
                };
                let got =
                    copy_range(&*store(), &place, &open(), BS, r.clone(), v, control).unwrap();
                assert_eq!(
                    got.bytes,
                    (r.end * BS).min(data.len() as u64) - r.start * BS
                );
                assert_eq!(progress.summary().bytes, got.bytes, "{}", b.name());
            }
            let e = commit_ranges(&*store(), &place, &open(), BS).unwrap_err();
            assert!(
                e.to_string().contains("14 of its 40 blocks"),
                "{}: {e}",
                b.name()
            );
            assert_eq!(
                b.file("g"),
                None,
                "{}: committed with a range missing",
                b.name()
            );
            copy_range(
                &*store(),
                &place,
                &open(),
                BS,
                ranges[2].clone(),
                v,
                Default::default(),
            )
            .unwrap();
            // Redone: the recorded blocks read back intact and are kept.
            let again =
                copy_range(&*store(), &place, &open(), BS, 0..13, v, Default::default()).unwrap();
            assert_eq!((again.bytes, again.kept), (0, 13), "{}", b.name());
            // A writer still holding its range keeps the file from being committed.
            let held = store()
                .open_range(&place, &open().spec(BS, v), 13..27)
                .unwrap();
            // Busy, not refused: the same commit goes through once the writer lets go
            // (a node tells its client so: try again later).
            let e = commit_ranges(&*store(), &place, &open(), BS).unwrap_err();
            assert!(
                matches!(e, StorageError::Busy { .. })
                    && e.to_string().contains("still has it open"),
                "{}: {e}",
                b.name()
            );
            let frame = hetch_engine::EngineError::Storage(e).to_frame();
            assert_eq!(
                frame.code,
                hetch_proto::ErrorCode::Unavailable,
                "{}",
                b.name()
            );
            drop(held);
            let whole = commit_ranges(&*store(), &place, &open(), BS).unwrap();
            assert_eq!(whole, *blake3::hash(&data).as_bytes(), "{}", b.name());
            // A commit run again (its node lost before it reported) finds it done.
            let again = commit_ranges(&*store(), &place, &open(), BS).unwrap();
            assert_eq!(again, whole, "{}", b.name());
        });
        if !b.caps().ranges {
            return;
        }
        assert_eq!(b.file("g").as_deref(), Some(&data[..]), "{}", b.name());
        assert_eq!(b.leftovers(), 0, "{}", b.name());
    }

    pub async fn blocks_damaged_in_flight_are_sent_again(b: &B) {
        let t = src_dir();
        let src = t.path().join("f");
        std::fs::write(&src, bytes(5, 40 * BS as usize)).unwrap();
        let o = Options {
            corrupt_blocks: 3,
            ..suite_opts()
        };
        let r = copy(b, o, &[&src], "g").await;
        assert_eq!(r.summary.retried_blocks, 3, "{}", b.name());
        assert_eq!(
            b.file("g"),
            Some(bytes(5, 40 * BS as usize)),
            "{}",
            b.name()
        );
    }

    pub async fn storage_damage_is_found_by_reading_back(b: &B) {
        if !b.store("x", 1).capabilities().read_back {
            eprintln!(
                "{}: no read-back; storage damage is the store's to find",
                b.name()
            );
            return;
        }
        let t = src_dir();
        let src = t.path().join("f");
        std::fs::write(&src, bytes(6, 20 * BS as usize)).unwrap();
        let o = Options {
            corrupt_written: 2,
            verify: hetch_engine::Verify::Written,
            ..suite_opts()
        };
        let r = copy(b, o, &[&src], "g").await;
        assert_eq!(r.summary.retried_blocks, 2, "{}", b.name());
        assert_eq!(
            b.file("g"),
            Some(bytes(6, 20 * BS as usize)),
            "{}",
            b.name()
        );
    }

    pub async fn a_file_that_cannot_be_repaired_leaves_nothing(b: &B) {
        let t = src_dir();
        let src = t.path().join("f");
        // Several blocks, so that some are still in flight when the file fails.
        std::fs::write(&src, bytes(9, 10 * BS as usize)).unwrap();
        let o = Options {
            corrupt_blocks: 1000,
            max_retries: 1,
            ..suite_opts()
        };
        let r = copy(b, o, &[&src], "g").await;
        assert_eq!(r.summary.failed, 1, "{}", b.name());
        assert!(
            r.errors[0].contains("failed its"),
            "{}: {:?}",
            b.name(),
            r.errors
        );
        assert_eq!(b.kind("g"), None, "{}: something under the name", b.name());
        assert_eq!(b.leftovers(), 0, "{}", b.name());
    }

    pub async fn no_clobber_keeps_a_differing_file(b: &B) {
        let t = src_dir();
        let src = t.path().join("f");
        std::fs::write(&src, b"new contents").unwrap();
        b.put_file("g", b"old", 1);
        let o = Options {
            no_clobber: true,
            ..suite_opts()
        };
        let r = copy(b, o, &[&src], "g").await;
        assert_eq!(r.summary.failed, 1, "{}", b.name());
        assert!(
            r.errors[0].contains("--no-clobber"),
            "{}: {:?}",
            b.name(),
            r.errors
        );
        assert_eq!(b.file("g").as_deref(), Some(&b"old"[..]), "{}", b.name());
        // Without it, the file is replaced.
        copy(b, suite_opts(), &[&src], "g").await;
        assert_eq!(
            b.file("g").as_deref(),
            Some(&b"new contents"[..]),
            "{}",
            b.name()
        );
    }

    pub async fn checksum_skip_trusts_only_the_digest(b: &B) {
        let t = src_dir();
        let src = t.path().join("f");
        let data = bytes(4, 3 * BS as usize);
        std::fs::write(&src, &data).unwrap();
        // Same contents, another mtime: only the digest says it is the same.
        b.put_file("g", &data, 1);
        let o = Options {
            checksum_skip: true,
            file_digests: true,
            ..suite_opts()
        };
        let r = copy(b, o.clone(), &[&src], "g").await;
        assert_eq!((r.summary.skipped, r.summary.bytes), (1, 0), "{}", b.name());
        // Same size, other contents: the digest tells, so it is replaced.
        let mut other = data.clone();
        other[5] ^= 1;
        b.put_file("g", &other, 1);
        let r = copy(b, o, &[&src], "g").await;
        assert_eq!(r.summary.skipped, 0, "{}", b.name());
        assert_eq!(b.file("g").as_deref(), Some(&data[..]), "{}", b.name());
    }

    pub async fn manifests_list_every_file_as_stored(b: &B) {
        let t = src_dir();
        let src = t.path().join("d");
        std::fs::create_dir(&src).unwrap();
        for i in 0..5u64 {
            std::fs::write(src.join(format!("f{i}")), bytes(i, (i * 3000) as usize)).unwrap();
        }
        let path = t.path().join("MANIFEST");
        let m = Arc::new(
            hetch_engine::Manifest::create(&path, hetch_integrity::Algorithm::Blake3).unwrap(),
        );
        let o = Options {
            manifest: Some(m.clone()),
            file_digests: true,
            ..suite_opts()
        };
        let r = copy(b, o, &[&src], "out").await;
        assert_eq!(r.summary.failed, 0, "{}", b.name());
        m.commit().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: BTreeSet<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{}: {text}", b.name());
        for i in 0..5u64 {
            let stored = b.file(&format!("out/f{i}")).unwrap();
            let want = blake3::hash(&stored).to_hex();
            let line = format!("{want}  f{i}");
            assert!(
                lines.contains(line.as_str()),
                "{}: {line} not in {text}",
                b.name()
            );
        }
    }

    pub async fn damage_in_the_store_is_found_by_verify(b: &B) {
        let t = src_dir();
        let src = t.path().join("d");
        std::fs::create_dir(&src).unwrap();
        let data = bytes(8, 5 * BS as usize + 7);
        std::fs::write(src.join("a"), &data).unwrap();
        std::fs::write(src.join("b"), b"unchanged").unwrap();
        copy(b, suite_opts(), &[&src], "out").await;
        let compare = Options {
            compare_only: true,
            ..suite_opts()
        };
        let r = copy(b, compare.clone(), &[&src], "out").await;
        assert!(r.errors.is_empty(), "{}: {:?}", b.name(), r.errors);
        // One bit flipped in the store, size kept: only the digest can tell.
        let mut bad = data.clone();
        bad[3 * BS as usize] ^= 0x10;
        b.put_file("out/a", &bad, 1);
        let r = copy(b, compare, &[&src], "out").await;
        assert_eq!(r.errors.len(), 1, "{}: {:?}", b.name(), r.errors);
        assert!(
            r.errors[0].contains("out/a: content differs"),
            "{}: {:?}",
            b.name(),
            r.errors
        );
        assert_eq!(
            b.file("out/a"),
            Some(bad),
            "{}: verify changed the store",
            b.name()
        );
    }
}
