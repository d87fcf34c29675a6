//! Trees on disk for tests: one with every boundary case of the data path, and a
//! comparison of two trees as `cp -a` would have them agree.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::data::random_bytes;

/// A tree with every boundary case the data path has: an empty file and directory, a
/// deep path, a file of whole blocks and one of blocks and a bit (of 64 or 128 KiB), a Unicode
/// name, a sparse file, files ending in or made of zero blocks, a symlink and a
/// dangling one.
pub fn mixed_tree(root: &Path) {
    std::fs::create_dir_all(root.join("a/b/c/d")).unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::write(root.join("zero"), b"").unwrap();
    std::fs::write(root.join("small"), random_bytes(1000, 1)).unwrap();
    std::fs::write(root.join("a/b/c/d/deep"), random_bytes(70_000, 2)).unwrap();
    std::fs::write(root.join("a/exact"), random_bytes(128 << 10, 3)).unwrap();
    std::fs::write(root.join("a/odd"), random_bytes((300 << 10) + 17, 4)).unwrap();
    std::fs::write(root.join("ünïcødé ✓"), random_bytes(5, 5)).unwrap();
    let sparse = std::fs::File::create(root.join("sparse")).unwrap();
    sparse.set_len(1 << 20).unwrap();
    use std::os::unix::fs::FileExt;
    sparse.write_all_at(b"tail", (1 << 20) - 4).unwrap();
    // Zero blocks travel without payload and become holes: the size must still be right.
    let mut zero_tail = random_bytes(64 << 10, 6);
    zero_tail.resize(200 << 10, 0);
    std::fs::write(root.join("zero-tail"), zero_tail).unwrap();
    std::fs::write(root.join("all-zero"), vec![0u8; 300 << 10]).unwrap();
    std::fs::write(root.join("small-zero"), vec![0u8; 100]).unwrap();
    std::os::unix::fs::symlink("a/odd", root.join("link")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/target", root.join("dangling")).unwrap();
}

/// Every entry of `a` has an identical twin in `b` (content, mode, mtime, link target),
/// and `b` has no others.
pub fn assert_same_tree(a: &Path, b: &Path) {
    for e in walk(a) {
        let rel = e.strip_prefix(a).unwrap();
        let other = b.join(rel);
        let ma = std::fs::symlink_metadata(&e).unwrap();
        let mb = std::fs::symlink_metadata(&other).unwrap_or_else(|_| panic!("missing {other:?}"));
        assert_eq!(ma.file_type(), mb.file_type(), "{rel:?}");
        assert_eq!(ma.mode(), mb.mode(), "mode of {rel:?}");
        if ma.file_type().is_symlink() {
            assert_eq!(
                std::fs::read_link(&e).unwrap(),
                std::fs::read_link(&other).unwrap()
            );
            continue;
        }
        if ma.is_file() {
            assert_eq!(
                blake3::hash(&std::fs::read(&e).unwrap()),
                blake3::hash(&std::fs::read(&other).unwrap()),
                "content of {rel:?}"
            );
        }
        assert_eq!(
            (ma.mtime(), ma.mtime_nsec()),
            (mb.mtime(), mb.mtime_nsec()),
            "mtime of {rel:?}"
        );
    }
    assert_eq!(walk(a).len(), walk(b).len(), "extra entries in {b:?}");
}

/// Every entry below `p` (not `p` itself), directories included, not following links.
pub fn walk(p: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            if std::fs::symlink_metadata(&path).unwrap().is_dir() {
                stack.push(path.clone());
            }
            out.push(path);
        }
    }
    out
}
