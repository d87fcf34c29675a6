//! Mirroring through the `hetch` binary: `hetch sync` and `hetch cp --delete`, local,
//! pushed to and pulled from a real `hetch serve`: extra files, directories and symlinks
//! go; nothing outside the destination is touched; dry runs change nothing;
//! `--max-delete`, excluded paths and failures stop deletion.

use crate::util;

use std::path::Path;

use util::*;

/// A source tree `src` and a mirror `dst` of it made by `hetch sync`, then given
/// extras: a file, a nested directory, a symlink to a directory outside the mirror and a
/// stale part file; returns the tempdir.
fn mirrored_with_extras() -> tempfile::TempDir {
    let t = tempdir();
    Tree::new(t.path().join("src"))
        .file("a", 1000, 1)
        .file("d/b", 2000, 2)
        .dir("empty")
        .symlink("link", "a");
    Tree::new(t.path().join("outside")).bytes("secret", b"keep me");
    hetch(
        &args!["sync", "-q", t.path().join("src"), t.path().join("dst")],
        &[],
    )
    .ok();
    let outside = t.path().join("outside");
    Tree::new(t.path().join("dst"))
        .bytes("extra", b"x")
        .file("gone/deep/f", 10, 3)
        .symlink("out", outside.to_str().unwrap())
        .bytes("d/.old.hetch-part", b"stale");
    t
}

/// Paths below `root` as sorted strings, for comparisons.
fn listing(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = paths_under(root)
        .into_iter()
        .map(|(p, _)| p.strip_prefix(root).unwrap().display().to_string())
        .collect();
    v.sort();
    v
}

/// `deleted ...` lines of a command, sorted.
fn deleted_lines(out: &Out) -> Vec<String> {
    let mut v: Vec<String> = out
        .stderr_lines()
        .into_iter()
        .filter(|l| l.starts_with("deleted ") || l.starts_with("would delete "))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// Asserts that one stderr line holds every needle.
#[track_caller]
fn line_with(out: &Out, needles: &[&str]) {
    let found = out
        .stderr_lines()
        .into_iter()
        .any(|l| needles.iter().all(|n| l.contains(n)));
    assert!(found, "no line with {needles:?}\n{out:?}");
}

#[test]
fn local_sync_deletes_extra_files_dirs_and_links_and_nothing_outside() {
    let t = mirrored_with_extras();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    let out = hetch(&args!["sync", "--json", &src, &dst], &[]);
    out.ok();
    let v: serde_json::Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(v["deleted"], 6, "{out:?}");
    assert_eq!(v["deleted_truncated"], false);
    let shown = |rel: &str| format!("deleted {}", dst.join(rel).display());
    let mut want: Vec<String> = ["extra", "gone/deep/f", "gone/deep", "gone", "out"]
        .iter()
        .map(|r| shown(r))
        .collect();
    want.push(shown("d/.old.hetch-part"));
    want.sort();
    assert_eq!(deleted_lines(&out), want, "{out:?}");
    assert_same_tree(&src, &dst);
    // The link went, not what it pointed to.
    assert_eq!(
        std::fs::read(t.path().join("outside/secret")).unwrap(),
        b"keep me"
    );
    // Run again: nothing left to delete.
    let again = hetch(&args!["sync", "--json", &src, &dst], &[]);
    again.ok();
    assert!(deleted_lines(&again).is_empty(), "{again:?}");
}

#[test]
fn sync_into_a_directory_touches_only_the_copied_tree() {
    let t = tempdir();
    Tree::new(t.path().join("src")).bytes("a", b"a");
    Tree::new(t.path().join("dir"))
        .bytes("unrelated", b"mine")
        .bytes("src/old", b"old");
    // cp rules: an existing directory receives dir/src; only dir/src is mirrored.
    let out = hetch(
        &args![
            "cp",
            "--delete",
            "-q",
            t.path().join("src"),
            t.path().join("dir")
        ],
        &[],
    );
    out.ok();
    assert_eq!(
        listing(&t.path().join("dir")),
        ["src", "src/a", "unrelated"]
    );
}

#[test]
fn dry_run_lists_and_changes_nothing() {
    let t = mirrored_with_extras();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    Tree::new(&src).bytes("new", b"new file");
    let before = listing(&dst);
    let out = hetch(&args!["sync", "--dry-run", "--json", &src, &dst], &[]);
    out.ok();
    assert_eq!(listing(&dst), before, "{out:?}");
    assert_eq!(deleted_lines(&out).len(), 6, "{out:?}");
    let would_copy = format!("would copy {}", dst.join("new").display());
    assert!(out.stderr_lines().contains(&would_copy.as_str()), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        (v["dry_run"].clone(), v["would_copy"].clone()),
        (true.into(), 1.into())
    );
}

#[test]
fn max_delete_refuses_and_deletes_nothing() {
    let t = mirrored_with_extras();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    let before = listing(&dst);
    let out = hetch(&args!["sync", "-q", "--max-delete", "5", &src, &dst], &[]);
    out.expect_code(3);
    line_with(&out, &["deletions skipped", "6 entries", "--max-delete 5"]);
    assert_eq!(listing(&dst), before);
    hetch(&args!["sync", "-q", "--max-delete", "6", &src, &dst], &[]).ok();
    assert_same_tree(&src, &dst);
}

#[test]
fn excluded_paths_are_protected_unless_delete_excluded() {
    let t = tempdir();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    Tree::new(&src).bytes("a.h5", b"a").bytes("tmp/x", b"x");
    hetch(&args!["sync", "-q", &src, &dst], &[]).ok();
    Tree::new(&dst)
        .bytes("scratch.log", b"log")
        .bytes("tmp/y", b"y")
        .bytes("stale/z.log", b"z")
        .bytes("stale/z.h5", b"z");
    let filter = args!["--exclude", "*.log", "--exclude", "tmp"];
    let mut cmd = Vec::from(args!["sync", "-q"]);
    cmd.extend(filter.iter().cloned());
    cmd.extend(args![&src, &dst]);
    hetch(&cmd, &[]).ok();
    // tmp/ and *.log are excluded: kept, and so is the directory holding one.
    assert_eq!(
        listing(&dst),
        [
            "a.h5",
            "scratch.log",
            "stale",
            "stale/z.log",
            "tmp",
            "tmp/x",
            "tmp/y"
        ]
    );
    cmd.insert(2, "--delete-excluded".into());
    hetch(&cmd, &[]).ok();
    assert_eq!(listing(&dst), ["a.h5"]);
}

#[test]
fn a_failed_file_leaves_everything_undeleted() {
    let t = mirrored_with_extras();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    // A file that cannot be put in place, by root either: the directory in its way
    // holds an entry the filter protects.
    std::fs::remove_file(dst.join("a")).unwrap();
    Tree::new(&dst).bytes("a/x.keep", b"k");
    let before = listing(&dst);
    let out = hetch(&args!["sync", "-q", "--exclude", "*.keep", &src, &dst], &[]);
    out.expect_code(3);
    line_with(
        &out,
        &["deletions skipped", "1 entry failed", "nothing was deleted"],
    );
    line_with(
        &out,
        &["a: is a directory holding entries the filter excludes"],
    );
    assert_eq!(listing(&dst), before, "{out:?}");
}

#[test]
fn mirroring_flags_without_mirroring_are_usage_errors() {
    let t = tempdir();
    Tree::new(t.path().join("src")).bytes("a", b"a");
    let (src, d) = (t.path().join("src"), t.path().join("d"));
    for flags in [&args!["--max-delete", "3"][..], &args!["--delete-excluded"]] {
        let mut a = Vec::from(args!["cp"]);
        a.extend(flags.iter().cloned());
        a.extend(args![&src, &d]);
        let out = hetch(&a, &[]);
        out.expect_code(2);
        line_with(&out, &["apply to mirroring"]);
        assert!(!d.exists());
    }
}

#[test]
fn push_with_delete_mirrors_below_the_served_destination_only() {
    let t = tempdir();
    let src = t.path().join("src");
    Tree::new(&src).file("a", 3000, 1).file("d/b", 100, 2);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    srv.cp(&args![&src, srv.url("copy")]).ok();
    let outside = t.path().join("outside");
    Tree::new(&outside).bytes("secret", b"keep me");
    Tree::new(srv.root.join("copy"))
        .bytes("extra", b"x")
        .bytes("d/old/f", b"f")
        .symlink("out", outside.to_str().unwrap());
    Tree::new(&srv.root).bytes("beside", b"not mirrored");
    let out = srv.cp(&args!["--delete", "--json", &src, srv.url("copy")]);
    out.ok();
    let v: serde_json::Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(v["deleted"], 4, "{out:?}");
    let line = format!("deleted {}/extra", srv.url("copy"));
    assert!(out.stderr_lines().contains(&line.as_str()), "{out:?}");
    assert_same_tree(&src, &srv.root.join("copy"));
    assert!(srv.root.join("beside").exists());
    assert!(outside.join("secret").exists());
    // Excluded on the client: the server keeps it.
    Tree::new(srv.root.join("copy")).bytes("keep.log", b"log");
    srv.cp(&args![
        "--delete",
        "--exclude",
        "*.log",
        &src,
        srv.url("copy")
    ])
    .ok();
    assert!(srv.root.join("copy/keep.log").exists());
}

#[test]
fn pull_with_delete_mirrors_the_local_copy() {
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    Tree::new(srv.root.join("set"))
        .file("a", 3000, 1)
        .file("b.log", 10, 2);
    let here = t.path().join("here");
    srv.cp(&args![srv.url("set"), &here]).ok();
    Tree::new(&here).bytes("extra", b"x").bytes("sub/y", b"y");
    // The server applies --exclude to what it sends; the client keeps excluded entries.
    std::fs::write(here.join("local.log"), b"mine").unwrap();
    let out = srv.cp(&args![
        "--delete",
        "--exclude",
        "*.log",
        srv.url("set"),
        &here
    ]);
    out.ok();
    assert_eq!(listing(&here), ["a", "b.log", "local.log"], "{out:?}");
    srv.cp(&args!["--delete", srv.url("set"), &here]).ok();
    assert_same_tree(&srv.root.join("set"), &here);
}

/// `cp --dry-run` without mirroring, locally and pushed to a real server: what would
/// be copied (new), replaced (another size) and skipped, with bytes and a predicted
/// duration; nothing written, not even a part file or a directory.
#[test]
fn plain_copy_dry_run_counts_new_replaced_and_skipped_and_writes_nothing() {
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let src = t.path().join("src");
    Tree::new(&src)
        .file("same", 3000, 1)
        .file("d/changed", 4000, 2);
    let local = t.path().join("local");
    hetch(&args!["cp", "-q", &src, &local], &[]).ok();
    srv.cp(&args![&src, srv.url("remote")]).ok();
    // Then the source moves on: one file grows, one is new (in a new directory).
    Tree::new(&src)
        .file("d/changed", 5000, 3)
        .file("new/file", 6000, 4);
    let remote = srv.root.join("remote");
    for (dest, shown, at) in [
        (
            local.clone().into_os_string(),
            local.display().to_string(),
            &local,
        ),
        (srv.url("remote").into(), srv.url("remote"), &remote),
    ] {
        let before = listing(at);
        let out = srv.cp(&args!["--dry-run", "--json", &src, &dest]);
        out.ok();
        assert_eq!(listing(at), before, "{out:?}");
        assert_no_temp_files(at);
        let v = out.json_value();
        assert_eq!(v["dry_run"], true, "{v}");
        // New: the directory `new` and its file; replaced: d/changed.
        assert_eq!(
            (v["would_copy"].as_u64(), v["would_copy_bytes"].as_u64()),
            (Some(2), Some(6000)),
            "{v}"
        );
        assert_eq!(
            (
                v["would_replace"].as_u64(),
                v["would_replace_bytes"].as_u64()
            ),
            (Some(1), Some(5000)),
            "{v}"
        );
        assert_eq!(v["would_skip"], 1, "{v}");
        assert_eq!(v["files"], 0, "{v}");
        assert!(
            v["predicted"]["seconds"].as_f64().is_some_and(|s| s > 0.0),
            "{v}"
        );
        for line in ["would copy {}/new/file", "would replace {}/d/changed"] {
            let want = line.replace("{}", &shown);
            assert!(
                out.stderr_lines().contains(&want.as_str()),
                "{want}: {out:?}"
            );
        }
    }
    // Text: the counts and the prediction, one line each.
    let out = hetch(&args!["cp", "--dry-run", &src, &local], &[]);
    out.ok();
    line_with(
        &out,
        &[
            "dry run",
            "2 entries",
            "would be copied",
            "1 (4.88 KiB) replaced",
            "1 files skipped",
        ],
    );
    line_with(&out, &["predicted", "limited by"]);
    // Still refused where it cannot mean anything.
    let out = hetch(
        &args![
            "cp",
            "--dry-run",
            "--manifest",
            t.path().join("m"),
            &src,
            &local
        ],
        &[],
    );
    out.expect_code(2);
    assert!(!t.path().join("m").exists());
}

/// A dry run into a `dir/` destination that does not exist yet creates nothing, locally
/// or on a server, and shows the names the copy would give.
#[test]
fn dry_run_into_a_new_directory_creates_nothing() {
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let src = t.path().join("src");
    Tree::new(&src).file("f", 100, 1);
    let local = t.path().join("new/deeper");
    for (dest, at) in [
        (format!("{}/", local.display()), t.path().join("new")),
        (srv.url("fresh/deeper/"), srv.root.join("fresh")),
    ] {
        let out = srv.cp(&args!["--dry-run", "--json", &src, &dest]);
        out.ok();
        assert!(!at.exists(), "{dest}: the dry run created {}", at.display());
        assert_eq!(out.json_value()["would_copy"], 2, "{out:?}");
        let want = format!("would copy {dest}src/f");
        assert!(
            out.stderr_lines().contains(&want.as_str()),
            "{want}: {out:?}"
        );
    }
}
