//! `hetch sum`: manifests whose digests equal BLAKE3 of each file and that `b3sum -c`
//! accepts (when b3sum is installed; CI installs it), whatever the names; `hetch sum
//! --check`.

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

/// `hetch ARGS` run in `dir` (names in manifests are relative to it), its output raw:
/// a lossy `String` would hide bytes that are not UTF-8.
fn hetch_in(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let out = Command::new(util::BIN).args(args).current_dir(dir).output();
    out.unwrap()
}

/// `b3sum --check MANIFEST` in `dir`: its exit code, how many names it says are OK,
/// and its stdout and stderr.
fn b3sum_check(dir: &std::path::Path, manifest: &str) -> (Option<i32>, usize, String) {
    let out = Command::new("b3sum")
        .args(["--check", manifest])
        .current_dir(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let oks = stdout.lines().filter(|l| l.ends_with(": OK")).count();
    let said = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code(), oks, said)
}

/// Issue 40: `b3sum --check` checks every line of a hetch BLAKE3 manifest (`hetch sum`,
/// `cp --manifest`) whose name it can represent (newline, backslash), and fails only
/// the line of a name that is not UTF-8, which comes first here, instead of stopping
/// there; hetch says so once and `hetch sum --check` checks every line.
#[test]
fn b3sum_checks_every_line_it_can_and_hetch_checks_all() {
    use std::os::unix::ffi::OsStrExt;
    let t = tempdir();
    let tree = t.path().join("tree");
    Tree::new(&tree)
        .bytes("b-new\nline", b"newline")
        .bytes("c-back\\slash", b"backslash")
        .bytes("d-both \\n\n", b"both")
        .bytes("e-plain", b"plain");
    let not_utf8 = std::ffi::OsStr::from_bytes(b"a-caf\xe9");
    std::fs::write(tree.join(not_utf8), b"latin-1 name").unwrap();
    let sum = hetch_in(t.path(), &["sum", "--threads", "1", "tree"]);
    let stderr = String::from_utf8_lossy(&sum.stderr);
    assert!(sum.status.success(), "{stderr}");
    std::fs::write(t.path().join("M"), &sum.stdout).unwrap();
    assert!(std::str::from_utf8(&sum.stdout).is_ok(), "{:?}", sum.stdout);
    let warnings: Vec<_> = stderr.lines().collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("tree/a-caf\\xe9: b3sum --check cannot"),
        "{stderr}"
    );
    // hetch checks every line.
    let check = hetch_in(t.path(), &["sum", "-c", "M"]);
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{said}");
    assert_eq!(said.lines().filter(|l| l.ends_with(": OK")).count(), 5);

    // The copy's manifest: the same, and one warning.
    let dst = t.path().join("dst");
    let m2 = t.path().join("M2");
    let cp = hetch(
        &args!["cp", "--manifest", &m2, &tree, with_slash(&dst)],
        &[],
    );
    cp.ok();
    let named = cp
        .stderr
        .lines()
        .filter(|l| l.contains("b3sum --check cannot"));
    assert_eq!(named.count(), 1, "{cp:?}");

    let b3sum = Command::new("b3sum").arg("--version").output();
    if !b3sum.is_ok_and(|o| o.status.success()) {
        util::skipped("b3sum --check of names it cannot all represent: no b3sum");
        return;
    }
    for (dir, m) in [(t.path(), "M"), (dst.as_path(), "../M2")] {
        let (code, oks, said) = b3sum_check(dir, m);
        assert_eq!(oks, 4, "{said}");
        assert!(!said.contains("FAILED"), "{said}");
        assert_eq!(code, Some(1), "the one line it cannot check fails: {said}");
    }
    // Both checks can fail.
    std::fs::write(tree.join("e-plain"), b"changed").unwrap();
    let (_, oks, said) = b3sum_check(t.path(), "M");
    assert_eq!(oks, 3, "{said}");
    let check = hetch_in(t.path(), &["sum", "-c", "-q", "M"]);
    assert_eq!(check.status.code(), Some(3));
    assert_eq!(check.stdout, b"tree/e-plain: FAILED\n");
}
