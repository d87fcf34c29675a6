//! `hetch-lab bench write`, the growing-file writer of the streaming tests, end to end: it
//! writes files of the exact size asked for, and a file it cannot create fails the
//! command with one line that names it.

use crate::util;

use util::*;

#[test]
fn writes_two_files_of_the_exact_size_with_markers() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("run/a.raw"), t.path().join("run/b.raw"));
    let out = hetch(
        &args![
            "bench",
            "write",
            "--size",
            "100K",
            "--write-size",
            "30000",
            "--rate",
            "100M",
            "--done-suffix",
            ".done",
            "--seed",
            "9",
            &a,
            &b
        ],
        &[],
    );
    out.ok();
    for f in [&a, &b] {
        assert_eq!(std::fs::metadata(f).unwrap().len(), 100 << 10, "{out:?}");
        let mut marker = f.clone().into_os_string();
        marker.push(".done");
        assert!(std::path::Path::new(&marker).exists(), "{out:?}");
    }
    assert_ne!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    // 100 KiB in writes of 30000: 4 per file (3 full, one of 12400 bytes).
    let line = out.stdout.trim();
    assert_eq!(line.lines().count(), 1, "{out:?}");
    assert!(
        line.contains("204800 bytes") && line.contains("8 writes"),
        "{out:?}"
    );
}

#[test]
fn a_file_that_cannot_be_created_fails_with_one_line_naming_it() {
    let t = tempfile::tempdir().unwrap();
    let plain = t.path().join("plain");
    std::fs::write(&plain, b"not a directory").unwrap();
    let bad = plain.join("f.raw");
    let out = hetch(
        &args![
            "bench",
            "write",
            "--size",
            "1K",
            t.path().join("ok.raw"),
            &bad
        ],
        &[],
    );
    out.failed().one_line_naming(&[&bad.display().to_string()]);
}
