//! Resume from the receiver's journal, without processes: a part file and journal as an
//! interrupted run leaves them, then the same copy again.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use hetch_engine::{copy_local, DestSpec, Options, Progress};
use hetch_integrity::block_digest;
use hetch_storage::journal::{Journal, JournalHeader};
use hetch_storage::part::{journal_path, part_path};

const BS: u64 = 64 << 10;

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

fn interrupted_copy(src: &Path, dst: &Path, done_blocks: u64) {
    let bytes = std::fs::read(src).unwrap();
    let md = std::fs::metadata(src).unwrap();
    let size = bytes.len() as u64;
    let part = part_path(dst);
    let mut partial = vec![0u8; size as usize];
    partial[..(done_blocks * BS) as usize].copy_from_slice(&bytes[..(done_blocks * BS) as usize]);
    std::fs::write(&part, &partial).unwrap();
    let header = JournalHeader {
        block_size: BS,
        file_size: size,
        mtime_sec: md.mtime(),
        mtime_nsec: md.mtime_nsec() as u32,
        checksum: 0,
    };
    let dir = hetch_storage::confined::Dir::open(dst.parent().unwrap()).unwrap();
    let name = journal_path(dst).file_name().unwrap().to_os_string();
    let j = Journal::create(&dir, &name, &header).unwrap();
    for i in 0..done_blocks {
        let block = &bytes[(i * BS) as usize..((i + 1) * BS) as usize];
        j.append(i, &block_digest(size, BS, i, block)).unwrap();
    }
}

fn opts() -> Options {
    Options {
        block_size: BS,
        buffer_memory: 1 << 20,
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continues_from_verified_blocks() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("f");
    let size = (1 << 20) + 17;
    std::fs::write(&src, data(size)).unwrap();
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    interrupted_copy(&src, &out.join("f"), 8);
    let spec = DestSpec {
        path: out.clone(),
        sources: 1,
        trailing_slash: false,
        confine_to: None,
        as_operand: false,
    };
    let r = copy_local(
        opts(),
        vec![src.clone()],
        spec,
        2,
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert_eq!(
        r.summary.bytes,
        size as u64 - 8 * BS,
        "resent verified blocks"
    );
    assert_eq!(std::fs::read(out.join("f")).unwrap(), data(size));
    assert!(!part_path(&out.join("f")).exists());
    assert!(!journal_path(&out.join("f")).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_for_another_version_of_the_file_is_ignored() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("f");
    let size = 300 << 10;
    std::fs::write(&src, data(size)).unwrap();
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    interrupted_copy(&src, &out.join("f"), 3);
    // The source changes after the interruption: new content, new mtime.
    let mut changed = data(size);
    changed[0] ^= 0xff;
    std::fs::write(&src, &changed).unwrap();
    let f = std::fs::File::options().write(true).open(&src).unwrap();
    f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000))
        .unwrap();
    let spec = DestSpec {
        path: out.clone(),
        sources: 1,
        trailing_slash: false,
        confine_to: None,
        as_operand: false,
    };
    let r = copy_local(
        opts(),
        vec![src.clone()],
        spec,
        2,
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert_eq!(r.summary.bytes, size as u64, "stale journal was trusted");
    assert_eq!(std::fs::read(out.join("f")).unwrap(), changed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_blocks_verified_but_not_renamed_finishes_without_sending() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("f");
    let size = 4 * BS as usize;
    std::fs::write(&src, data(size)).unwrap();
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    interrupted_copy(&src, &out.join("f"), 4);
    let spec = DestSpec {
        path: out.clone(),
        sources: 1,
        trailing_slash: false,
        confine_to: None,
        as_operand: false,
    };
    let r = copy_local(
        opts(),
        vec![src.clone()],
        spec,
        1,
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert_eq!(r.summary.bytes, 0);
    assert_eq!(std::fs::read(out.join("f")).unwrap(), data(size));
    let digest = hetch_storage::meta::load_digest(&out.join("f"));
    if let Some(d) = digest {
        assert_eq!(
            d,
            *blake3::hash(&data(size)).as_bytes(),
            "stored digest is not b3sum's"
        );
    }
}
