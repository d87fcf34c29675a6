//! `-X/--xattrs` and `-A/--acls`: user attributes and POSIX ACLs of files and
//! directories kept locally, pushed and pulled; brought in step on a current file
//! without copying it; compared by `verify`; listed by the dry run; left alone
//! without the flags and where they are hetch's own.

use crate::util;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use util::*;

/// The attributes of `path` hetch keeps with `-X -A` (its own left out).
fn kept(path: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut all = xattrs(path);
    all.retain(|name, _| !name.starts_with(b"user.hetch."));
    all
}

/// The kept attributes of every entry of `tree`, by path.
fn kept_tree(tree: &Path) -> BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>> {
    ["", "f", "plain", "d", "d/g"]
        .into_iter()
        .map(|rel| (rel.to_string(), kept(&tree.join(rel))))
        .collect()
}

/// A tree with attributes on files and directories, ACLs (access and default) among
/// them.
fn attributed(root: &Path) {
    Tree::new(root)
        .file("f", 100, 1)
        .file("plain", 100, 2)
        .file("d/g", 100, 3);
    set_xattr(&root.join("f"), "user.a", b"1");
    set_xattr(&root.join("f"), "user.empty", b"");
    set_xattr(&root.join("d"), "user.on_dir", b"dir");
    run_tool(
        Command::new("setfacl")
            .args(["-m", "u:nobody:r"])
            .arg(root.join("d/g")),
    );
    run_tool(
        Command::new("setfacl")
            .args(["-d", "-m", "u:nobody:rx"])
            .arg(root.join("d")),
    );
}

#[test]
fn attributes_and_acls_are_kept_with_x_and_a_locally_pushed_and_pulled() {
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let src = t.path().join("src");
    attributed(&src);
    attributed(&srv.root.join("offered"));
    let runs = srv.three_ways(t.path(), &src, &["-X", "-A"]);
    for (args, at, from) in &runs {
        srv.cp(args).ok();
        assert_same_tree(from, at);
        assert_eq!(kept_tree(from), kept_tree(at), "{args:?}");
        assert!(kept(&at.join("d/g")).contains_key(&b"system.posix_acl_access"[..]));
        assert!(kept(&at.join("d")).contains_key(&b"system.posix_acl_default"[..]));
        hetch(&args!["verify", "-q", "-X", "-A", from, at], &[]).ok();
    }
    // Without the flags: nothing of theirs, hetch's own still there.
    let plain = t.path().join("plain");
    hetch(&args!["cp", "-q", &src, &plain], &[]).ok();
    assert!(kept(&plain.join("f")).is_empty());
    assert!(xattrs(&plain.join("f")).contains_key(&b"user.hetch.blake3"[..]));
}

#[test]
fn changed_attributes_of_a_current_file_are_applied_without_copying_it() {
    let t = tempdir();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    attributed(&src);
    hetch(&args!["cp", "-q", "-X", "-A", &src, &dst], &[]).ok();
    // At the source: a value changed, one removed, an ACL entry changed; at the
    // destination: one the source never had (hetch's own stays).
    set_xattr(&src.join("f"), "user.a", b"2");
    remove_xattr(&src.join("f"), "user.empty");
    run_tool(
        Command::new("setfacl")
            .args(["-m", "u:nobody:rw"])
            .arg(src.join("d/g")),
    );
    set_xattr(&dst.join("plain"), "user.planted", b"x");
    set_xattr(&dst.join("plain"), "user.hetch.mine", b"kept");

    let differs = hetch(&args!["verify", "-X", "-A", &src, &dst], &[]);
    differs.expect_code(3);
    for (path, what) in [
        ("f", "user.a has another value"),
        ("f", "user.empty only at the destination"),
        ("d/g", "system.posix_acl_access has another value"),
        ("plain", "user.planted only at the destination"),
    ] {
        assert!(
            differs.stderr_lines().iter().any(|l| l
                .contains(&format!("/{path}: extended attributes differ"))
                && l.contains(what)),
            "{path}: {what}\n{differs:?}"
        );
    }
    // Without the flags the trees compare equal: the attributes are not looked at.
    hetch(&args!["verify", &src, &dst], &[]).ok();

    let dry = hetch(&args!["sync", "-n", "-X", "-A", &src, &dst], &[]);
    dry.ok();
    let listed: Vec<&str> = dry
        .stderr_lines()
        .into_iter()
        .filter(|l| l.starts_with("would update the metadata of "))
        .collect();
    assert_eq!(listed.len(), 3, "{dry:?}");

    let out = hetch(&args!["sync", "--json", "-X", "-A", &src, &dst], &[]);
    out.ok();
    assert_eq!(out.json_value()["files"], 0, "nothing copied: {out:?}");
    assert_eq!(kept_tree(&src), kept_tree(&dst));
    assert_eq!(
        xattrs(&dst.join("plain")).get(&b"user.hetch.mine"[..]),
        Some(&b"kept".to_vec()),
        "hetch's own attributes are left alone"
    );
    hetch(&args!["verify", "-X", "-A", &src, &dst], &[]).ok();
}
