//! Whole-file digests of local trees, as a manifest that `b3sum -c` checks.
//!
//! Files are hashed block by block with the same block digests a transfer uses and
//! merged into the standard BLAKE3 hash, so a manifest made here and the digests a
//! receiver stores agree. Several files are hashed at once (`threads`), each by one
//! thread; memory is one block buffer per thread. [`check_manifest`] hashes them
//! again and compares, any byte in a name.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

mod check;
pub use check::{check_manifest, Checked, Checks};
pub use hetch_integrity::manifest_line;
use hetch_integrity::{self as integrity, Algorithm, Digest, FileDigest};
use hetch_storage::walk::{self, SourceKind};
use hetch_storage::StorageError;

/// Reads open file `f` (`path` names it in errors) block by block into `buf`, calling
/// `each(size, index, block)`; returns the file's size.
fn for_each_block(
    f: &std::fs::File,
    path: &Path,
    block_size: u64,
    buf: &mut Vec<u8>,
    mut each: impl FnMut(u64, u64, &[u8]),
) -> Result<u64, StorageError> {
    let size = f.metadata().map_err(|e| StorageError::io(path, e))?.len();
    for index in 0..integrity::block_count(size, block_size) {
        let len = integrity::block_len(size, block_size, index) as usize;
        buf.resize(len, 0);
        f.read_exact_at(&mut buf[..len], index * block_size)
            .map_err(|e| StorageError::io(path, e))?;
        each(size, index, &buf[..len]);
    }
    Ok(size)
}

/// Hashes one file with BLAKE3 the way a transfer does: block digests, merged.
pub fn sum_file(path: &Path, block_size: u64, buf: &mut Vec<u8>) -> Result<Digest, StorageError> {
    sum_open(&open(path)?, path, block_size, buf)
}

fn open(path: &Path) -> Result<std::fs::File, StorageError> {
    std::fs::File::open(path).map_err(|e| StorageError::io(path, e))
}

/// [`sum_file`] of a file already open (`path` names it in errors).
fn sum_open(
    f: &std::fs::File,
    path: &Path,
    block_size: u64,
    buf: &mut Vec<u8>,
) -> Result<Digest, StorageError> {
    let mut merged: Option<FileDigest> = None;
    for_each_block(f, path, block_size, buf, |size, index, block| {
        let m = merged.get_or_insert_with(|| FileDigest::new(size, block_size));
        let d = integrity::block_digest(size, block_size, index, block);
        m.add(index, d).expect("index in range");
    })?;
    // An empty file has one (empty) block, so `merged` is always set.
    Ok(merged
        .expect("at least one block")
        .finish()
        .expect("every block added"))
}

/// Hashes one file with `algo`: BLAKE3 through the block digests ([`sum_file`]), the
/// other algorithms in order.
pub fn sum_file_with(
    algo: Algorithm,
    path: &Path,
    block_size: u64,
    buf: &mut Vec<u8>,
) -> Result<Vec<u8>, StorageError> {
    sum_open_with(algo, &open(path)?, path, block_size, buf)
}

/// [`sum_file_with`] of a file already open (a receiver opens its files through its
/// confined directory handle); `path` names it in errors.
pub fn sum_open_with(
    algo: Algorithm,
    f: &std::fs::File,
    path: &Path,
    block_size: u64,
    buf: &mut Vec<u8>,
) -> Result<Vec<u8>, StorageError> {
    if algo == Algorithm::Blake3 {
        return sum_open(f, path, block_size, buf).map(|d| d.to_vec());
    }
    let mut h = algo.hasher();
    for_each_block(f, path, block_size, buf, |_, _, block| h.update(block))?;
    Ok(h.finish())
}

/// The whole-file digest of bytes in memory, as [`sum_open_with`] computes it for a
/// file with these contents.
pub fn sum_bytes(algo: Algorithm, data: &[u8], block_size: u64) -> Vec<u8> {
    if algo == Algorithm::Blake3 {
        let size = data.len() as u64;
        let mut merged = FileDigest::new(size, block_size);
        let chunks: Vec<&[u8]> = if data.is_empty() {
            vec![data]
        } else {
            data.chunks(block_size as usize).collect()
        };
        for (i, block) in chunks.into_iter().enumerate() {
            let d = integrity::block_digest(size, block_size, i as u64, block);
            merged.add(i as u64, d).expect("index in range");
        }
        return merged.finish().expect("every block added").to_vec();
    }
    let mut h = algo.hasher();
    h.update(data);
    h.finish()
}

/// What [`write_manifest`] has to say besides the manifest.
#[derive(Debug, Default)]
pub struct Written {
    /// Files that could not be read, one line each naming the file: left out.
    pub errors: Vec<String>,
    /// Names of a BLAKE3 manifest's files that `b3sum --check` cannot check (not
    /// UTF-8: see [`manifest_line`]), escaped for printing; their lines are there all
    /// the same, for `hetch sum --check`.
    pub not_for_b3sum: Vec<String>,
}

/// Writes a manifest (digests by `algo`) of every regular file under `operands` to
/// `out`, paths as walked from each operand.
pub fn write_manifest(
    operands: &[PathBuf],
    algo: Algorithm,
    block_size: u64,
    threads: usize,
    out: &mut (dyn Write + Send),
) -> std::io::Result<Written> {
    use std::os::unix::ffi::OsStrExt;
    let files = Mutex::new(operands.iter().flat_map(|op| list_files(op)));
    let out = Mutex::new(out);
    let errors = Mutex::new(Vec::new());
    let not_for_b3sum = Mutex::new(Vec::new());
    let write_failed = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                let mut buf = Vec::new();
                loop {
                    let next = files.lock().expect("files lock").next();
                    let Some(item) = next else { break };
                    let result = item.and_then(|p| {
                        sum_file_with(algo, &p, block_size, &mut buf).map(|d| (p, d))
                    });
                    match result {
                        Ok((p, d)) => {
                            let name = p.as_os_str().as_bytes();
                            if algo == Algorithm::Blake3 && !integrity::b3sum_checks(name) {
                                let shown = hetch_proto::escape_bytes(name);
                                not_for_b3sum.lock().expect("names lock").push(shown);
                            }
                            let line = manifest_line(algo, &d, &p);
                            if let Err(e) = out.lock().expect("out lock").write_all(&line) {
                                *write_failed.lock().expect("lock") = Some(e);
                                break;
                            }
                        }
                        Err(e) => errors.lock().expect("errors lock").push(e.to_string()),
                    }
                }
            });
        }
    });
    if let Some(e) = write_failed.into_inner().expect("lock") {
        return Err(e);
    }
    Ok(Written {
        errors: errors.into_inner().expect("errors lock"),
        not_for_b3sum: not_for_b3sum.into_inner().expect("names lock"),
    })
}

/// Regular files under `operand`, with paths as given plus the path inside it.
fn list_files(operand: &Path) -> Box<dyn Iterator<Item = Result<PathBuf, StorageError>> + Send> {
    match walk::walk(operand) {
        Err(e) => Box::new(std::iter::once(Err(e))),
        Ok(iter) => Box::new(iter.filter_map(|item| match item {
            Ok(e) if matches!(e.kind, SourceKind::File { .. }) => Some(Ok(e.abs)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_equal_blake3_of_the_whole_file_at_block_boundaries() {
        let t = tempfile::tempdir().unwrap();
        let bs = 4096u64;
        let mut buf = Vec::new();
        for len in [
            0usize,
            1,
            1023,
            1024,
            1025,
            4095,
            4096,
            4097,
            3 * 4096 + 5,
            40_000,
        ] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
            let p = t.path().join(format!("f{len}"));
            std::fs::write(&p, &data).unwrap();
            assert_eq!(
                sum_file(&p, bs, &mut buf).unwrap(),
                *blake3::hash(&data).as_bytes(),
                "len {len}"
            );
        }
    }
}
