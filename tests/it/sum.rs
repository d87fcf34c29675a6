//! `hetch sum`: manifests whose digests equal BLAKE3 of each file and that `b3sum -c`
//! accepts (when b3sum is installed; CI installs it).

use crate::util;

use std::process::Command;

use util::*;

#[test]
fn manifest_matches_blake3_and_b3sum_checks_it() {
    let t = tempdir();
    let root = t.path().join("tree");
    Tree::new(&root)
        .bytes("empty", b"")
        .bytes("one", b"x")
        .file("a/exact", 64 << 10, 1)
        .file("a/b/odd", (3 << 16) + 17, 2)
        .file("big", 5 << 20, 3)
        .bytes("ünï ✓", b"unicode")
        .bytes("back\\slash", b"escaped")
        .symlink("link", "big");
    let out = hetch(&args!["sum", "--block-size", "64K", &root], &[]);
    out.ok();
    let mut seen = 0;
    for line in out.stdout.lines() {
        let (hex, name) = line.split_once("  ").expect("HEX  PATH");
        let (hex, name) = match hex.strip_prefix('\\') {
            Some(h) => (h, name.replace("\\\\", "\\")),
            None => (hex, name.to_string()),
        };
        let data = std::fs::read(&name).unwrap();
        assert_eq!(hex, blake3::hash(&data).to_hex().as_str(), "{name}");
        seen += 1;
    }
    assert_eq!(
        seen, 7,
        "symlinks and directories are not listed: {}",
        out.stdout
    );

    let b3sum_works = Command::new("b3sum")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !b3sum_works {
        util::skipped("b3sum -c check: b3sum is not installed");
        return;
    }
    let manifest = t.path().join("MANIFEST");
    std::fs::write(&manifest, &out.stdout).unwrap();
    let check = Command::new("b3sum")
        .arg("-c")
        .arg(&manifest)
        .current_dir(t.path())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    // The check can fail: damage one byte and b3sum must notice.
    let mut big = std::fs::read(root.join("big")).unwrap();
    big[12345] ^= 1;
    std::fs::write(root.join("big"), big).unwrap();
    let check = Command::new("b3sum")
        .arg("-c")
        .arg(&manifest)
        .current_dir(t.path())
        .output()
        .unwrap();
    assert!(!check.status.success());
}

#[test]
fn unreadable_or_missing_paths_are_named_and_exit_3() {
    let t = tempdir();
    Tree::new(t.path().join("tree")).bytes("f", b"data");
    let missing = t.path().join("nope");
    let out = hetch(&args!["sum", t.path().join("tree"), &missing], &[]);
    out.expect_code(3);
    out.one_line_naming(&[missing.to_str().unwrap()]);
    assert_eq!(out.stdout.lines().count(), 1);
}

#[test]
fn md5_and_sha256_manifests_pass_coreutils_checks() {
    let t = tempdir();
    let root = t.path().join("tree");
    Tree::new(&root)
        .bytes("empty", b"")
        .file("a/odd", (3 << 16) + 17, 4)
        .file("big", 3 << 20, 5)
        .bytes("back\\slash", b"escaped");
    for (algo, tool) in [("md5", "md5sum"), ("sha256", "sha256sum")] {
        let out = hetch(
            &args!["sum", "--checksum", algo, "--block-size", "64K", &root],
            &[],
        );
        out.ok();
        assert_eq!(out.stdout.lines().count(), 4, "{}", out.stdout);
        let manifest = t.path().join(format!("MANIFEST.{algo}"));
        std::fs::write(&manifest, &out.stdout).unwrap();
        let check = Command::new(tool)
            .arg("-c")
            .arg(&manifest)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{tool}: {}",
            String::from_utf8_lossy(&check.stdout)
        );
    }
    let out = hetch(&args!["sum", "--checksum", "sha1", &root], &[]);
    out.expect_code(2);
}
