//! End-to-end transfers through the `hetch` binary: push, pull and local copies of
//! awkward trees, many small files, `cp -r` destination rules, reruns, `--no-clobber`,
//! `--no-encrypt`, `--json` and the corruption fault hook.

use crate::util;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use util::*;

/// Pushes the reference tree, checks every byte and attribute, then pushes again.
#[test]
fn push_mixed_tree_then_identical_rerun_skips_everything() {
    let t = tempdir();
    let src = t.path().join("src/tree");
    mixed_tree(&src);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let cmd = args!["--block-size", BLOCK, "--json", &src, srv.url("tree")];

    let out = srv.cp(&cmd);
    out.ok();
    let s = out.json();
    let n = count_files(&src);
    assert_eq!(s.files, n, "{out:?}");
    assert_eq!(s.bytes, total_bytes(&src), "{out:?}");
    assert_eq!(
        (s.skipped, s.failed, s.retried_blocks),
        (0, 0, 0),
        "{out:?}"
    );
    let dst = srv.root.join("tree");
    assert_same_tree(&src, &dst);
    assert_no_temp_files(&srv.root);
    // The summary says whether the kernel could have carried TLS (kTLS), as the
    // kernel's own list of loaded upper-layer protocols does after the probe, and
    // that records stayed in user space.
    let v = out.json_value();
    let ulps = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp").unwrap();
    let has_tls = ulps.split_whitespace().any(|u| u == "tls");
    assert_eq!(v["ktls"]["available"], has_tls, "{v}");
    assert_eq!(v["ktls"]["used"], false, "{v}");
    assert!(
        v["ktls"]["why"]
            .as_str()
            .is_some_and(|w| w.contains("user space")),
        "{v}"
    );
    // Autotuning chose the streams from the loopback round trip: the default 4, or
    // more when a loaded machine made the round trip look long (it says why).
    assert_eq!(v["autotune"]["enabled"], true, "{v}");
    let streams = v["autotune"]["streams"].as_u64().unwrap_or(0);
    assert!(streams >= 4, "{v}");
    let why = v["autotune"]["why"].as_str().unwrap_or_default();
    assert!(why.starts_with(&format!("{streams} streams")), "{v}");
    assert!(
        v["autotune"]["rtt_ms"].as_f64().is_some_and(|r| r < 50.0),
        "{v}"
    );
    // The sparse file's hole is not written out as zeros.
    let alloc = allocated(&dst.join("sparse.img"));
    assert!(
        alloc < 8 << 20,
        "sparse.img allocates {alloc} bytes at the destination"
    );

    let again = srv.cp(&cmd);
    again.ok();
    let s = again.json();
    assert_eq!(s.skipped, n, "{again:?}");
    assert_eq!((s.files, s.bytes, s.failed), (0, 0, 0), "{again:?}");
    assert_same_tree(&src, &dst);
    assert!(!dst.join("tree").exists(), "the rerun nested a second copy");
    assert_no_temp_files(&srv.root);
}

/// Pulls the reference tree from a server, then pulls again.
#[test]
fn pull_mixed_tree_then_identical_rerun_skips_everything() {
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let src = srv.root.join("tree");
    mixed_tree(&src);
    let local = t.path().join("local");
    std::fs::create_dir(&local).unwrap();
    let dst = local.join("pulled");
    let cmd = args!["--block-size", BLOCK, "--json", srv.url("tree"), &dst];

    let out = srv.cp(&cmd);
    out.ok();
    let s = out.json();
    let n = count_files(&src);
    assert_eq!(s.files, n, "{out:?}");
    assert_eq!(s.bytes, total_bytes(&src), "{out:?}");
    assert_eq!(
        (s.skipped, s.failed, s.retried_blocks),
        (0, 0, 0),
        "{out:?}"
    );
    assert_same_tree(&src, &dst);
    assert_no_temp_files(&local);
    assert_no_temp_files(&srv.root);
    let alloc = allocated(&dst.join("sparse.img"));
    assert!(
        alloc < 8 << 20,
        "sparse.img allocates {alloc} bytes after the pull"
    );

    let again = srv.cp(&cmd);
    again.ok();
    let s = again.json();
    assert_eq!(s.skipped, n, "{again:?}");
    assert_eq!((s.files, s.bytes, s.failed), (0, 0, 0), "{again:?}");
    assert_same_tree(&src, &dst);
    assert!(!dst.join("tree").exists(), "the rerun nested a second copy");
    assert_no_temp_files(&local);
}

/// 10,000 files of 1-4 KiB in one push (the "many small files" requirement).
#[test]
fn push_ten_thousand_small_files() {
    let t = tempdir();
    let src = t.path().join("many");
    let tree = Tree::new(&src);
    let mut rng = Rng::new(99);
    let mut total = 0;
    for d in 0..100 {
        tree.dir(&format!("d{d:03}"));
        for f in 0..100 {
            let len = rng.range(1024, 4096);
            total += len;
            let data = random_bytes(len as usize, rng.next_u64());
            std::fs::write(src.join(format!("d{d:03}/f{f:03}.dat")), data).unwrap();
        }
    }
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let cmd = args!["--json", &src, srv.url("")];
    let out = srv.cp(&cmd);
    out.ok();
    let s = out.json();
    assert_eq!(s.files, 10_000, "{out:?}");
    assert_eq!(s.bytes, total, "{out:?}");
    assert_eq!((s.skipped, s.failed), (0, 0), "{out:?}");
    assert_same_tree(&src, &srv.root.join("many"));
    assert_no_temp_files(&srv.root);

    let again = srv.cp(&cmd);
    again.ok();
    let s = again.json();
    assert_eq!((s.files, s.bytes, s.skipped), (0, 0, 10_000), "{again:?}");
}

/// Local to local copy through the same engine, with a rerun.
#[test]
fn local_copy_mixed_tree_then_rerun_skips_everything() {
    let t = tempdir();
    let src = t.path().join("tree");
    mixed_tree(&src);
    let dst = t.path().join("copy");
    let cmd = args!["cp", "-q", "--block-size", BLOCK, "--json", &src, &dst];
    let out = hetch(&cmd, &[]);
    out.ok();
    let s = out.json();
    let n = count_files(&src);
    assert_eq!(
        (s.files, s.bytes, s.skipped),
        (n, total_bytes(&src), 0),
        "{out:?}"
    );
    assert_same_tree(&src, &dst);
    assert_no_temp_files(t.path());

    let again = hetch(&cmd, &[]);
    again.ok();
    let s = again.json();
    assert_eq!((s.files, s.bytes, s.skipped), (0, 0, n), "{again:?}");
    assert!(!dst.join("tree").exists(), "the rerun nested a second copy");
    assert_same_tree(&src, &dst);
}

/// `--token-file` instead of `HETCH_TOKEN`.
#[test]
fn token_file_instead_of_environment() {
    let t = tempdir();
    let src = Tree::new(t.path().join("src"));
    src.file("f.bin", 100_000, 91);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let out = srv.cp_token_file(&srv.token_path, &args![src.path("f.bin"), srv.url("f.bin")]);
    out.ok();
    assert_same_tree(&src.path("f.bin"), &srv.root.join("f.bin"));
}

/// A source file modified (content, size or mtime) is replaced on the next run; the
/// others are skipped.
#[test]
fn modified_source_files_are_replaced_on_rerun() {
    let t = tempdir();
    let src = t.path().join("set");
    let tree = Tree::new(&src);
    tree.file("same-size.txt", 1000, 31)
        .file("grows.txt", 2000, 32)
        .file("big.bin", BIG, 33)
        .file("untouched-1", 500, 34)
        .file("untouched-2", 600, 35)
        .symlink("link", "untouched-1");
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let cmd = args!["--json", "--block-size", BLOCK, &src, srv.url("set")];
    srv.cp(&cmd).ok();
    let dst = srv.root.join("set");
    assert_same_tree(&src, &dst);

    // Same size, new content, new mtime.
    tree.file("same-size.txt", 1000, 310)
        .mtime("same-size.txt", 1_600_000_000, 1);
    // New size.
    tree.file("grows.txt", 2500, 320);
    // One block in the middle of a multi-block file changes; size stays.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(src.join("big.bin"))
            .unwrap();
        f.write_all_at(&random_bytes(100, 330), 5 * 65536 + 7)
            .unwrap();
    }
    tree.mtime("big.bin", 1_600_000_100, 2);
    // The directory's mtime changed with the rewrites above; keep it deterministic.
    tree.mtime("", 1_600_000_200, 3);

    let out = srv.cp(&cmd);
    out.ok();
    let s = out.json();
    assert_eq!(s.files, 3, "{out:?}");
    assert_eq!(s.skipped, 3, "{out:?}");
    assert_eq!(s.bytes, 1000 + 2500 + BIG, "{out:?}");
    assert_same_tree(&src, &dst);
    assert_no_temp_files(&srv.root);
}

/// `--no-clobber` refuses to replace a differing file (exit 3, file untouched) but
/// still copies the rest, and does not complain about identical files.
#[test]
fn no_clobber_refuses_differing_existing_file() {
    let t = tempdir();
    let src = Tree::new(t.path().join("src"));
    src.file("keep.txt", 3000, 41).file("new.txt", 1234, 42);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let root = Tree::new(&srv.root);
    root.file("keep.txt", 2999, 43)
        .mtime("keep.txt", 1_300_000_000, 0);
    let before = snapshot(&root.path("keep.txt"));

    let out = srv.cp(&args![
        "--no-clobber",
        "--json",
        src.path("keep.txt"),
        src.path("new.txt"),
        srv.url(""),
    ]);
    out.expect_code(3);
    out.one_line_naming(&["keep.txt"]);
    let s = out.json();
    assert_eq!((s.files, s.failed), (1, 1), "{out:?}");
    assert_same_snapshot(
        &before,
        &snapshot(&root.path("keep.txt")),
        "keep.txt after --no-clobber",
    );
    assert_same_tree(&src.path("new.txt"), &root.path("new.txt"));
    assert_no_temp_files(&srv.root);

    // An identical existing file is not a conflict.
    let out = srv.cp(&args![
        "--no-clobber",
        "--json",
        src.path("new.txt"),
        srv.url("")
    ]);
    out.ok();
    assert_eq!(out.json().skipped, 1, "{out:?}");
}

/// The fault hook corrupts the first three data blocks the server sends; each is
/// detected, re-sent once, and the copy is identical. (Damage in either direction, and
/// plain data streams, are tested in process: crates/session/tests/in_process.rs.)
#[test]
fn corrupted_blocks_are_detected_and_resent_on_pull() {
    let t = tempdir();
    let srv = Server::start_with(
        &t.path().join("root"),
        &t.path().join("state"),
        &[],
        &[("HETCH_FAULT_CORRUPT_BLOCKS", "3")],
    );
    let src = srv.root.join("data");
    Tree::new(&src)
        .file("big.bin", BIG, 61)
        .file("small.txt", 5000, 62);
    let dst = t.path().join("pulled");
    let out = srv.cp(&args![
        "--json",
        "--block-size",
        BLOCK,
        srv.url("data"),
        &dst
    ]);
    out.ok();
    let s = out.json();
    assert_eq!(s.retried_blocks, 3, "{out:?}");
    assert_same_tree(&src, &dst);
    assert_no_temp_files(t.path());
}

// ---------------------------------------------------------------------------------------
// cp -r destination rules, checked the same way for local copies, pushes and pulls
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Mode {
    Local,
    Push,
    Pull,
}

/// Sources and destination of one mode: where operands live and how they are named.
struct Rig {
    mode: Mode,
    _t: tempfile::TempDir,
    srv: Option<Server>,
    src_dir: PathBuf,
    dst_dir: PathBuf,
}

impl Rig {
    fn new(mode: Mode) -> Rig {
        let t = tempdir();
        let srv = match mode {
            Mode::Local => None,
            _ => Some(Server::start(
                &t.path().join("root"),
                &t.path().join("state"),
            )),
        };
        let (src_dir, dst_dir) = match mode {
            Mode::Local => (t.path().join("src"), t.path().join("dst")),
            Mode::Push => (t.path().join("src"), t.path().join("root")),
            Mode::Pull => (t.path().join("root"), t.path().join("dst")),
        };
        std::fs::create_dir_all(&src_dir).unwrap();
        std::fs::create_dir_all(&dst_dir).unwrap();
        let src = Tree::new(src_dir.join("tree"));
        src.file("a/x.bin", 70_000, 71)
            .bytes("b.txt", b"bee\n")
            .dir("empty")
            .symlink("a/link", "x.bin");
        Tree::new(src_dir.join("one")).file("1.txt", 11, 72);
        Tree::new(src_dir.join("two")).file("2.txt", 22, 73);
        Tree::new(&src_dir).file("f.txt", 3333, 74);
        Rig {
            mode,
            _t: t,
            srv,
            src_dir,
            dst_dir,
        }
    }

    fn src(&self, rel: &str) -> OsString {
        match self.mode {
            Mode::Pull => self.srv.as_ref().unwrap().url(rel).into(),
            _ => self.src_dir.join(rel).into(),
        }
    }

    fn dst(&self, rel: &str) -> OsString {
        match self.mode {
            Mode::Push => self.srv.as_ref().unwrap().url(rel).into(),
            _ => {
                let mut s = self
                    .dst_dir
                    .join(rel.trim_end_matches('/'))
                    .into_os_string();
                if rel.ends_with('/') {
                    s.push("/");
                }
                s
            }
        }
    }

    fn src_path(&self, rel: &str) -> PathBuf {
        self.src_dir.join(rel)
    }

    fn dst_path(&self, rel: &str) -> PathBuf {
        self.dst_dir.join(rel)
    }

    /// `hetch cp --json SOURCES... DEST`.
    fn cp(&self, sources: &[&str], dest: &str) -> Out {
        let mut a: Vec<OsString> = vec!["--json".into()];
        a.extend(sources.iter().map(|s| self.src(s)));
        a.push(self.dst(dest));
        match &self.srv {
            Some(srv) => srv.cp(&a),
            None => {
                let mut full = Vec::from(args!["cp", "-q"]);
                full.extend(a);
                hetch(&full, &[])
            }
        }
    }
}

fn cp_rules(mode: Mode) {
    let r = Rig::new(mode);
    let tree_files = count_files(&r.src_path("tree"));
    let ctx = |what: &str| format!("{mode:?}: {what}");

    // 1. Existing directory: copied into it.
    std::fs::create_dir(r.dst_path("existing")).unwrap();
    r.cp(&["tree"], "existing").ok();
    assert_same_tree(&r.src_path("tree"), &r.dst_path("existing/tree"));
    // Again: still into it, everything skipped.
    let out = r.cp(&["tree"], "existing");
    out.ok();
    assert_eq!(
        out.json().skipped,
        tree_files,
        "{}\n{out:?}",
        ctx("rerun into")
    );
    assert!(
        !r.dst_path("existing/tree/tree").exists(),
        "{}",
        ctx("nested")
    );

    // 2. Missing destination, one source: copied as the new name...
    r.cp(&["tree"], "newname").ok();
    assert_same_tree(&r.src_path("tree"), &r.dst_path("newname"));
    // ...and the same command again resumes into the same place, no nested copy.
    let out = r.cp(&["tree"], "newname");
    out.ok();
    let s = out.json();
    assert_eq!(
        (s.skipped, s.bytes),
        (tree_files, 0),
        "{}\n{out:?}",
        ctx("rerun as")
    );
    assert!(
        !r.dst_path("newname/tree").exists(),
        "{}",
        ctx("rerun nested a copy")
    );
    assert_same_tree(&r.src_path("tree"), &r.dst_path("newname"));

    // 3. Trailing slash: the directory is created and the source copied into it.
    r.cp(&["tree"], "made/").ok();
    assert_same_tree(&r.src_path("tree"), &r.dst_path("made/tree"));
    r.cp(&["f.txt"], "made2/").ok();
    assert_same_tree(&r.src_path("f.txt"), &r.dst_path("made2/f.txt"));

    // 4. Several sources into an existing directory.
    std::fs::create_dir(r.dst_path("several")).unwrap();
    r.cp(&["one", "two", "f.txt"], "several").ok();
    assert_same_tree(&r.src_path("one"), &r.dst_path("several/one"));
    assert_same_tree(&r.src_path("two"), &r.dst_path("several/two"));
    assert_same_tree(&r.src_path("f.txt"), &r.dst_path("several/f.txt"));

    // 5. Several sources, trailing slash: created.
    r.cp(&["one", "two"], "multi/").ok();
    assert_same_tree(&r.src_path("one"), &r.dst_path("multi/one"));
    assert_same_tree(&r.src_path("two"), &r.dst_path("multi/two"));

    // 6. Several sources, missing destination without a slash: refused, nothing made.
    let before = snapshot(&r.dst_dir);
    let out = r.cp(&["one", "two"], "nodir");
    out.expect_code(1);
    out.one_line_naming(&["nodir"]);
    assert_same_snapshot(&before, &snapshot(&r.dst_dir), &ctx("after refused nodir"));

    // 7. One file onto an existing file: replaced; onto a new name: created.
    Tree::new(&r.dst_dir).file("target.txt", 10, 75);
    r.cp(&["f.txt"], "target.txt").ok();
    assert_same_tree(&r.src_path("f.txt"), &r.dst_path("target.txt"));
    r.cp(&["f.txt"], "renamed.txt").ok();
    assert_same_tree(&r.src_path("f.txt"), &r.dst_path("renamed.txt"));

    assert_no_temp_files(&r.dst_dir);
}

#[test]
fn cp_r_destination_rules_local() {
    cp_rules(Mode::Local);
}

#[test]
fn cp_r_destination_rules_push() {
    cp_rules(Mode::Push);
}

#[test]
fn cp_r_destination_rules_pull() {
    cp_rules(Mode::Pull);
}

/// A single file pushed to the root of the server by URL without a path.
#[test]
fn push_file_to_server_root_without_path() {
    let t = tempdir();
    let src = Tree::new(t.path().join("src"));
    src.file("alone.bin", 70_000, 81);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let url = format!("hetch://{}", srv.addr);
    srv.cp(&args![src.path("alone.bin"), url]).ok();
    assert_same_tree(&src.path("alone.bin"), &srv.root.join("alone.bin"));
    assert_no_temp_files(Path::new(&srv.root));
}

/// `--cc` and socket buffers apply to this side's sockets and, through the session
/// request, to the server's data sockets: during a slow pull, the server's sockets show
/// the requested algorithm in `ss` (the system default here is another one).
#[test]
fn congestion_control_reaches_the_servers_data_sockets() {
    let t = tempdir();
    let src = t.path().join("cc");
    Tree::new(&src).file("f.bin", 6 << 20, 31);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    srv.cp(&args![
        "--cc",
        "reno",
        "--sndbuf",
        "1M",
        "--rcvbuf",
        "1M",
        &src,
        srv.url("cc")
    ])
    .ok();
    assert_same_tree(&src, &srv.root.join("cc"));

    let default_cc =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap_or_default();
    let ss_works = Command::new("ss")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if default_cc.trim() == "reno" || !ss_works {
        util::skipped("server-side check: default algorithm is reno or `ss` is missing");
        return;
    }
    let back = t.path().join("back");
    let mut pull = srv.spawn_cp(
        &args!["--cc", "reno", "--rate-limit", "2M", srv.url("cc"), &back],
        &[],
    );
    let filter = format!("( sport = :{} )", srv.port());
    let mut seen_reno = false;
    while !pull.exited() && !seen_reno {
        let out = Command::new("ss")
            .args(["-tni", "state", "established", &filter])
            .output()
            .unwrap();
        seen_reno = String::from_utf8_lossy(&out.stdout).contains("reno");
        std::thread::sleep(Duration::from_millis(20));
    }
    pull.wait().ok();
    assert!(
        seen_reno,
        "server's data sockets never used the requested algorithm"
    );
    assert_same_tree(&src, &back);
}
