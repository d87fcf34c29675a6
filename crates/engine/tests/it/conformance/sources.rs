//! The cases of the conformance suite about a backend as a source: what it holds at a
//! path is copied into a real directory (`copy_out`), and must arrive whole, or be
//! reported naming it.

use super::*;
use futures_util::future::BoxFuture;
use hetch_engine::store::origin::{Found, Origin, OriginFile};
use hetch_engine::store::StoreError;
use hetch_storage::walk::SourceKind;

/// Sizes around the suite's block size, and one of many blocks.
const SIZES: [usize; 6] = [
    0,
    1,
    BS as usize - 1,
    BS as usize,
    BS as usize + 1,
    9 * BS as usize + 5,
];

/// A tree of every size in `SIZES` under `root`, one level down and under a unicode
/// name; returns the files' paths below `root` and their contents.
fn put_tree(b: &B, root: &str) -> Vec<(String, Vec<u8>)> {
    b.mkdir(&format!("{root}/sub/ünï ✓"));
    let mut files = Vec::new();
    for (i, n) in SIZES.iter().enumerate() {
        let dir = ["", "sub/", "sub/ünï ✓/"][i % 3];
        let p = format!("{dir}f{n}");
        let data = bytes(i as u64 + 40, *n);
        b.put_file(&format!("{root}/{p}"), &data, 1_000_000 + i as i64);
        files.push((p, data));
    }
    files
}

pub async fn as_a_source_every_size_and_name_arrives(b: &B) {
    let files = put_tree(b, "src");
    let (r, out) = copy_out(b, suite_opts(), "src").await;
    assert!(r.errors.is_empty(), "{}: {:?}", b.name(), r.errors);
    assert_eq!(r.summary.files, SIZES.len() as u64, "{}", b.name());
    for (p, data) in &files {
        let got = out.file(&format!("out/{p}"));
        assert_eq!(got.as_ref(), Some(data), "{}: {p}", b.name());
    }
    // One file as the operand is copied as the destination's name.
    let (p, data) = &files[SIZES.len() - 1];
    let (r, out) = copy_out(b, suite_opts(), &format!("src/{p}")).await;
    assert_eq!(r.summary.files, 1, "{}", b.name());
    assert_eq!(out.file("out").as_ref(), Some(data), "{}", b.name());
}

pub async fn as_a_source_a_missing_operand_is_named(b: &B) {
    let (r, out) = copy_out(b, suite_opts(), "no-such-thing").await;
    assert_eq!(r.errors.len(), 1, "{}: {:?}", b.name(), r.errors);
    assert!(
        r.errors[0].contains("no-such-thing"),
        "{}: {:?}",
        b.name(),
        r.errors
    );
    assert_eq!(out.visible(), BTreeSet::new(), "{}", b.name());
}

pub async fn as_a_source_blocks_damaged_in_flight_are_read_again(b: &B) {
    let data = bytes(51, 12 * BS as usize);
    b.put_file("big", &data, 5);
    let o = Options {
        corrupt_blocks: 3,
        ..suite_opts()
    };
    let (r, out) = copy_out(b, o, "big").await;
    assert_eq!(r.summary.retried_blocks, 3, "{}", b.name());
    assert_eq!(out.file("out"), Some(data), "{}", b.name());
}

pub async fn as_a_source_its_digest_decides_checksum_skip(b: &B) {
    let data = bytes(52, 3 * BS as usize + 9);
    b.mkdir("d");
    b.put_file("d/f", &data, 7);
    let out = Posix(tempfile::tempdir().unwrap());
    let o = Options {
        checksum_skip: true,
        ..suite_opts()
    };
    // Same contents under another mtime: only the source's digest says so.
    out.put_file("out", &data, 1);
    let r = copy_into(b, o.clone(), vec![b.origin("d/f")], out.store("out", 1)).await;
    assert_eq!((r.summary.skipped, r.summary.bytes), (1, 0), "{}", b.name());
    // Same size, one bit off: replaced.
    let mut other = data.clone();
    other[BS as usize] ^= 4;
    out.put_file("out", &other, 1);
    let r = copy_into(b, o, vec![b.origin("d/f")], out.store("out", 1)).await;
    assert_eq!(r.summary.skipped, 0, "{}", b.name());
    assert_eq!(out.file("out"), Some(data), "{}", b.name());
}

fn se_kind(f: &Found) -> SourceKind {
    match f {
        Found::Entry(se, _) => se.kind.clone(),
        Found::Error(_) => SourceKind::Dir,
    }
}

/// An origin that replaces every file right after listing it, before the session
/// reads a byte of it.
struct Replacing {
    inner: Arc<dyn Origin>,
    backend: Arc<dyn Backend>,
}

impl Origin for Replacing {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn concurrent_reads(&self) -> usize {
        self.inner.concurrent_reads()
    }
    fn list(&self, found: &mut dyn FnMut(Found) -> bool) -> Result<(), StoreError> {
        self.inner.list(&mut |f| {
            if let (Found::Entry(se, Some(_)), SourceKind::File { size }) = (&f, &se_kind(&f)) {
                // Same size, other bytes: only the origin's own check can tell.
                let p = String::from_utf8(se.rel.clone()).unwrap();
                self.backend.put_file(&p, &bytes(99, *size as usize), 9);
            }
            found(f)
        })
    }
}

pub async fn as_a_source_a_file_replaced_after_listing_is_refused(b: &B) {
    b.put_file("r", &bytes(53, 4 * BS as usize), 3);
    let Operand::Origin(inner) = b.origin("r") else {
        eprintln!(
            "{}: local files are checked against their listing after every read \
             (tests/local.rs)",
            b.name()
        );
        return;
    };
    let shown = inner.name();
    let replacing = Replacing {
        inner,
        backend: b.clone(),
    };
    let out = Posix(tempfile::tempdir().unwrap());
    let operands = vec![Operand::Origin(Arc::new(replacing))];
    let r = copy_into(b, suite_opts(), operands, out.store("out", 1)).await;
    assert_eq!(r.summary.failed, 1, "{}: {:?}", b.name(), r.errors);
    assert!(r.errors[0].contains(&shown), "{}: {:?}", b.name(), r.errors);
    assert_eq!(out.kind("out"), None, "{}: a torn copy arrived", b.name());
    assert_eq!(out.leftovers(), 0, "{}", b.name());
}

/// An origin whose files count the requests the session makes of them.
struct Counting {
    inner: Arc<dyn Origin>,
    requests: Arc<std::sync::atomic::AtomicUsize>,
}

/// A file of a [`Counting`] origin.
struct CountingFile {
    inner: Arc<dyn OriginFile>,
    requests: Arc<std::sync::atomic::AtomicUsize>,
}

impl CountingFile {
    fn count(&self) {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl OriginFile for CountingFile {
    fn read<'a>(&'a self, offset: u64, buf: &'a mut [u8]) -> BoxFuture<'a, Result<(), String>> {
        self.count();
        self.inner.read(offset, buf)
    }
    fn read_run<'a, 'b: 'a>(
        &'a self,
        offset: u64,
        bufs: &'a mut [&'b mut [u8]],
    ) -> BoxFuture<'a, Result<(), String>> {
        self.count();
        self.inner.read_run(offset, bufs)
    }
    fn digest(
        &self,
        size: u64,
        algo: hetch_integrity::Algorithm,
        block_size: u64,
    ) -> BoxFuture<'_, Result<Vec<u8>, String>> {
        self.inner.digest(size, algo, block_size)
    }
}

impl Origin for Counting {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn concurrent_reads(&self) -> usize {
        self.inner.concurrent_reads()
    }
    fn list(&self, found: &mut dyn FnMut(Found) -> bool) -> Result<(), StoreError> {
        self.inner.list(&mut |f| match f {
            Found::Entry(se, Some(inner)) => {
                let requests = self.requests.clone();
                found(Found::Entry(
                    se,
                    Some(Arc::new(CountingFile { inner, requests })),
                ))
            }
            other => found(other),
        })
    }
}

/// The blocks of a file are asked for in runs (one ranged GET of an object store
/// each), not one request per block; and arrive whole.
pub async fn as_a_source_a_file_of_many_blocks_is_read_in_runs(b: &B) {
    let blocks = 16;
    let data = bytes(54, blocks * BS as usize + 7);
    b.put_file("runs", &data, 3);
    let Operand::Origin(inner) = b.origin("runs") else {
        eprintln!("{}: local files are read by the engine itself", b.name());
        return;
    };
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counting = Counting {
        inner,
        requests: requests.clone(),
    };
    let out = Posix(tempfile::tempdir().unwrap());
    let operands = vec![Operand::Origin(Arc::new(counting))];
    let r = copy_into(b, suite_opts(), operands, out.store("out", 1)).await;
    assert_eq!(r.summary.failed, 0, "{}: {:?}", b.name(), r.errors);
    assert_eq!(out.file("out"), Some(data), "{}", b.name());
    let requests = requests.load(std::sync::atomic::Ordering::Relaxed);
    // Runs of up to four blocks (a reader's turn): 17 blocks in 5 requests, a few more
    // when the pool is short; one per block without runs.
    assert!(requests <= blocks / 2, "{}: {requests} requests", b.name());
}
