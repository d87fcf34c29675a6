//! Object stores through the `hetch` binary, against a real MinIO server on 127.0.0.1:
//! the test process's shared one, a bucket per case, or (for the one case that edits
//! MinIO's own records) one of the case's own. The binary comes from
//! `bench/install-minio.sh` (which `bash test.sh` runs); no test builds it.
//!
//! Round trips file -> S3 -> file with identical contents, empty objects, objects of
//! several parts, 5,000 small objects, unicode keys, an interrupted upload that resumes,
//! a failed upload that leaves no parts behind, an object replaced while being read,
//! wrong credentials and a missing bucket, and `hetch serve` as an agent in front of
//! the bucket. Interruptions wait for conditions (a journal holding parts, a part file
//! existing), never for fixed times.

use crate::util;

use std::path::{Path, PathBuf};

use hetch_bench::minio::{minio_binary, Minio};
use util::*;

/// The MinIO server a case uses: the shared one, or one of its own.
enum Minios {
    Shared(&'static Minio),
    Own(Minio),
}

/// A MinIO server, a bucket of the case's own, and the environment that points hetch
/// at them.
struct Store {
    server: Minios,
    /// The case's bucket.
    bucket: String,
    /// Journals of multipart uploads in progress.
    state: PathBuf,
    env: Vec<(String, String)>,
}

impl Store {
    /// A fresh bucket of the shared MinIO.
    fn start(dir: &Path) -> Store {
        let bucket = hetch_testkit::minio::fresh_bucket("s3-");
        Store::on(
            Minios::Shared(hetch_testkit::minio::shared_minio()),
            bucket,
            dir,
        )
    }

    /// A MinIO of this case's own (for a case that edits MinIO's records, which name
    /// no bucket), with bucket `data`.
    fn start_own(dir: &Path) -> Store {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let bin = minio_binary(repo, false).unwrap_or_else(|e| panic!("{e:#}"));
        let minio = Minio::start(&bin, &dir.join("minio")).unwrap_or_else(|e| panic!("{e:#}"));
        minio.create_bucket("data").unwrap();
        Store::on(Minios::Own(minio), "data".into(), dir)
    }

    fn on(server: Minios, bucket: String, dir: &Path) -> Store {
        let minio = match &server {
            Minios::Shared(m) => m,
            Minios::Own(m) => m,
        };
        let state = dir.join("state");
        let mut env: Vec<(String, String)> = minio
            .env()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        env.push(("HETCH_STATE_DIR".into(), state.display().to_string()));
        // Nothing from the machine's own AWS setup may leak in.
        env.push(("AWS_PROFILE".into(), "hetch-test-none".into()));
        let none = dir.join("no-such-aws-file").display().to_string();
        env.push(("AWS_CONFIG_FILE".into(), none.clone()));
        env.push(("AWS_SHARED_CREDENTIALS_FILE".into(), none));
        Store {
            server,
            bucket,
            state,
            env,
        }
    }

    fn minio(&self) -> &Minio {
        match &self.server {
            Minios::Shared(m) => m,
            Minios::Own(m) => m,
        }
    }

    /// `s3://BUCKET/rest`.
    fn url(&self, rest: &str) -> String {
        format!("s3://{}/{rest}", self.bucket)
    }

    /// Multipart uploads open in the case's bucket: as the server lists them on the
    /// shared MinIO; on a MinIO of the case's own, as its records on disk hold them
    /// (the case that removes those records would still find its upload listed).
    fn open_uploads(&self) -> usize {
        match &self.server {
            Minios::Shared(m) => m.open_uploads_in(&self.bucket).unwrap(),
            Minios::Own(m) => m.open_uploads(),
        }
    }

    fn env(&self) -> Vec<(&str, &str)> {
        self.env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    fn env_with<'a>(&'a self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut e: Vec<(&str, &str)> = self
            .env()
            .into_iter()
            .filter(|(k, _)| !extra.iter().any(|(x, _)| x == k))
            .collect();
        e.extend_from_slice(extra);
        e
    }

    fn run(&self, args: &[std::ffi::OsString]) -> Out {
        hetch(args, &self.env())
    }

    fn spawn(&self, args: &[std::ffi::OsString]) -> Running {
        spawn(args, &self.env())
    }

    /// `hetch sum` of an s3:// location: digest by URL.
    fn sums(&self, url: &str) -> Vec<(String, String)> {
        let out = self.run(&args!["sum", url]);
        out.ok();
        let mut v: Vec<(String, String)> = out
            .stdout
            .lines()
            .map(|l| {
                let (d, p) = l.split_once("  ").expect("manifest line");
                (p.to_string(), d.to_string())
            })
            .collect();
        v.sort();
        v
    }

    /// `hetch sum` of the objects under prefix `url`, by path relative to it (the form
    /// [`contents`] gives for a directory).
    fn sums_under(&self, url: &str) -> Vec<(String, String)> {
        let prefix = format!("{}/", url.trim_end_matches('/'));
        self.sums(url)
            .into_iter()
            .map(|(p, d)| (p.strip_prefix(&prefix).unwrap_or(&p).to_string(), d))
            .collect()
    }

    /// Journal files of uploads in progress.
    fn journals(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.state.join("uploads"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "json"))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn sample_tree(root: &Path) -> Tree {
    let t = Tree::new(root);
    t.file("multi-part.bin", (20 << 20) + 12_345, 1)
        .file("one-block", 1 << 20, 2)
        .bytes("empty", b"")
        .bytes("nested/also-empty", b"")
        .file("nested/deeper/small.txt", 1000, 3)
        .file("日本語/ファイル 📁.txt", 2000, 4)
        .file("Ελληνικά/ñandú (1).bin", 3000, 5);
    t
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn files_round_trip_through_a_bucket_with_identical_digests() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::start(t.path());
    let src = t.path().join("src");
    sample_tree(&src);
    let url = &s.url("ünï prefix/run");
    // 1 MiB blocks: 8 MiB parts, so the 20 MiB file goes up in three parts.
    let manifest = t.path().join("up.b3");
    let up = s.run(&args![
        "cp",
        "-q",
        "--json",
        "--block-size",
        "1M",
        "--manifest",
        &manifest,
        &src,
        url
    ]);
    up.ok();
    assert_eq!(up.json().files, 7, "{up:?}");
    // The store holds the same bytes: hetch sum reads the objects back.
    let local: Vec<(String, String)> = contents(&src);
    assert_eq!(s.sums_under(url), local);
    // The upload's manifest has the whole-object digests, relative to the prefix.
    let mut listed: Vec<(String, String)> = std::fs::read_to_string(&manifest)
        .unwrap()
        .lines()
        .map(|l| {
            let (d, p) = l.split_once("  ").unwrap();
            (p.to_string(), d.to_string())
        })
        .collect();
    listed.sort();
    assert_eq!(listed, local);
    // And back: identical files.
    let back = t.path().join("back");
    s.run(&args!["cp", "-q", "--block-size", "1M", url, &back])
        .ok();
    assert_eq!(contents(&back), local);
    assert_no_temp_files(&back);
    // Nothing left over: no journals, no multipart uploads.
    assert!(s.journals().is_empty(), "{:?}", s.journals());
    assert_eq!(s.open_uploads(), 0);
    // The same copy again sends nothing.
    let again = s.run(&args![
        "cp",
        "-q",
        "--json",
        "--block-size",
        "1M",
        &src,
        url
    ]);
    again.ok();
    assert_eq!(
        (again.json().files, again.json().skipped),
        (0, 7),
        "{again:?}"
    );
    // verify compares the tree with the prefix by digest, and sees a change.
    s.run(&args!["verify", "-q", &src, url]).ok();
    std::fs::write(src.join("nested/deeper/small.txt"), b"changed").unwrap();
    let v = s.run(&args!["verify", "-q", &src, url]);
    v.expect_code(3);
    assert!(v.stderr.contains("small.txt"), "{v:?}");
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn objects_copy_between_prefixes_and_checksum_skip_reads_them() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::start(t.path());
    let src = t.path().join("src");
    sample_tree(&src);
    s.run(&args!["cp", "-q", &src, s.url("a/")]).ok();
    s.run(&args!["cp", "-q", s.url("a/src"), s.url("b")]).ok();
    assert_eq!(s.sums_under(&s.url("a/src")), s.sums_under(&s.url("b")));
    // With --checksum-skip, only digests decide: a same-size change is sent again.
    std::fs::write(src.join("nested/deeper/small.txt"), vec![b'x'; 1000]).unwrap();
    let out = s.run(&args![
        "cp",
        "-q",
        "--json",
        "--checksum-skip",
        &src,
        s.url("a/")
    ]);
    out.ok();
    assert_eq!((out.json().files, out.json().skipped), (1, 6), "{out:?}");
    // Three 4 MiB blocks in 8 MiB parts: the last part is one block, uploaded straight
    // from the buffer it arrived in; the others are assembled.
    let odd = t.path().join("odd.bin");
    write_random(&odd, (8 << 20) + 5, 12);
    s.run(&args!["cp", "-q", &odd, s.url("odd.bin")]).ok();
    assert_eq!(
        s.sums(&s.url("odd.bin")),
        vec![(s.url("odd.bin").to_string(), hash_file(&odd))]
    );
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn five_thousand_small_objects() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::start(t.path());
    let src = t.path().join("many");
    let tree = Tree::new(&src);
    for i in 0..5000u64 {
        tree.file(&format!("d{:02}/f{i:05}", i % 50), 100 + (i * 37) % 4000, i);
    }
    let up = s.run(&args!["cp", "-q", "--json", &src, s.url("many")]);
    up.ok();
    assert_eq!(up.json().files, 5000);
    let back = t.path().join("back");
    let down = s.run(&args!["cp", "-q", "--json", s.url("many"), &back]);
    down.ok();
    assert_eq!(down.json().files, 5000);
    assert_eq!(contents(&back), contents(&src));
}

/// Starts a slow upload of a 48 MiB file in 1 MiB blocks (8 MiB parts) and waits until
/// its journal records `parts` uploaded parts.
fn slow_upload(s: &Store, file: &Path, url: &str, parts: usize) -> Running {
    let run = s.spawn(&args![
        "cp",
        "-q",
        "--json",
        "--block-size",
        "1M",
        "--rate-limit",
        "6M",
        // Little read-ahead: the source reads the file as the upload goes.
        "--buffer-memory",
        "4M",
        file,
        url
    ]);
    wait_for("uploaded parts in the journal", || {
        s.journals()
            .first()
            .and_then(|j| std::fs::read_to_string(j).ok())
            .is_some_and(|text| text.lines().count() > parts)
    });
    run
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn an_interrupted_upload_resumes_its_parts() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::start(t.path());
    let file = t.path().join("big.bin");
    write_random(&file, 48 << 20, 7);
    let url = &s.url("resume/big.bin");
    let mut run = slow_upload(&s, &file, url, 2);
    run.kill9();
    let _ = run.wait();
    // Nothing under the final key: S3 shows an object only once it is complete.
    let sum = s.run(&args!["sum", url]);
    sum.expect_code(3);
    assert!(s.open_uploads() == 1, "the upload stays for the rerun");
    // The rerun continues: it sends less than the whole file.
    let again = s.run(&args![
        "cp",
        "-q",
        "--json",
        "--block-size",
        "1M",
        &file,
        url
    ]);
    again.ok();
    let j = again.json();
    assert_eq!(j.files, 1, "{again:?}");
    assert!(j.bytes <= (48 << 20) - (16 << 20), "resumed: {again:?}");
    assert_eq!(s.sums(url), vec![(url.to_string(), hash_file(&file))]);
    assert!(s.journals().is_empty());
    assert_eq!(s.open_uploads(), 0, "completed, nothing left behind");
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn a_failed_upload_leaves_no_parts_behind() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::start(t.path());
    let file = t.path().join("big.bin");
    write_random(&file, 48 << 20, 8);
    let url = &s.url("fail/big.bin");
    let run = slow_upload(&s, &file, url, 1);
    // The source shrinks under the copy: the file fails, its upload is aborted.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let out = run.wait();
    out.expect_code(3);
    assert!(out.stderr.contains("big.bin"), "{out:?}");
    s.run(&args!["sum", url]).expect_code(3);
    assert_eq!(s.open_uploads(), 0, "parts aborted");
    assert!(s.journals().is_empty());
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn an_object_replaced_while_read_fails_and_writes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::start(t.path());
    let a = t.path().join("a.bin");
    let b = t.path().join("b.bin");
    write_random(&a, 32 << 20, 1);
    write_random(&b, 32 << 20, 2);
    let url = &s.url("changing.bin");
    s.run(&args!["cp", "-q", &a, url]).ok();
    let out_dir = t.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let target = out_dir.join("changing.bin");
    let run = s.spawn(&args![
        "cp",
        "-q",
        "--block-size",
        "1M",
        "--rate-limit",
        "4M",
        "--buffer-memory",
        "4M",
        url,
        &out_dir
    ]);
    wait_for("the download to start", || !temp_files(&out_dir).is_empty());
    s.run(&args!["cp", "-q", &b, url]).ok();
    let out = run.wait();
    out.expect_code(3);
    assert!(out.stderr.contains("changed while being read"), "{out:?}");
    assert!(!target.exists(), "nothing under the final name");
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn bad_credentials_and_missing_buckets_are_one_clear_line() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::start(t.path());
    let src = t.path().join("src");
    sample_tree(&src);
    let wrong = s.env_with(&[("AWS_SECRET_ACCESS_KEY", "not-the-secret")]);
    let out = hetch(&args!["cp", "-q", &src, s.url("x")], &wrong);
    out.expect_code(1);
    out.one_line_naming(&[&s.url("x"), "access denied"]);
    let out = hetch(&args!["cp", "-q", s.url("x"), t.path().join("y")], &wrong);
    out.expect_code(1);
    out.one_line_naming(&["access denied"]);
    let out = s.run(&args!["cp", "-q", &src, "s3://no-such-bucket/x"]);
    out.expect_code(1);
    out.one_line_naming(&["s3://no-such-bucket", "no such bucket"]);
    let out = s.run(&args!["cp", "-q", s.url("not/there"), t.path().join("z")]);
    out.expect_code(1);
    out.one_line_naming(&[&s.url("not/there"), "no such object"]);
    let home = t.path().join("empty-home").display().to_string();
    let none = [("HOME", home.as_str()), ("AWS_ACCESS_KEY_ID", "")];
    let out = hetch(
        &args!["cp", "-q", &src, s.url("x")],
        &s.env_with(&[none[0], none[1], ("AWS_SECRET_ACCESS_KEY", "")]),
    );
    out.expect_code(1);
    out.one_line_naming(&["no S3 credentials"]);
    assert!(!t.path().join("y").exists() && !t.path().join("z").exists());
    assert_eq!(s.open_uploads(), 0);
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn a_server_in_front_of_a_bucket_takes_pushes_and_pulls() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::start(t.path());
    let src = t.path().join("src");
    sample_tree(&src);
    let srv = Server::start_with(
        Path::new(&s.url("agent")),
        &t.path().join("srv"),
        &[],
        &s.env(),
    );
    srv.cp(&args!["--block-size", "1M", &src, srv.url("")]).ok();
    assert_eq!(s.sums_under(&s.url("agent/src")), contents(&src));
    let back = t.path().join("back");
    srv.cp(&args![srv.url("src"), &back]).ok();
    assert_eq!(contents(&back), contents(&src));
    let v = hetch(
        &args![
            "verify",
            "-q",
            "--fingerprint",
            &srv.fingerprint,
            &src,
            srv.url("src")
        ],
        &[("HETCH_TOKEN", srv.token.as_str())],
    );
    v.ok();
    // Paths cannot leave the served prefix.
    let out = srv.cp(&args![&src, srv.url("../escape")]);
    out.failed();
}

/// A TCP proxy in front of MinIO that answers the first `fail` requests with
/// `503 SlowDown`, as S3 does when it throttles, and forwards everything after.
struct Throttle {
    addr: std::net::SocketAddr,
    rejected: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Throttle {
    fn start(upstream: std::net::SocketAddr, fail: usize) -> Throttle {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let rejected = std::sync::Arc::new(AtomicUsize::new(0));
        let count = rejected.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut client) = conn else { return };
                let count = count.clone();
                std::thread::spawn(move || {
                    // The request head, to answer it or pass it on.
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match client.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let reject = count
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                            (n < fail).then_some(n + 1)
                        })
                        .is_ok();
                    if reject {
                        let body = "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
                        let _ = write!(
                            client,
                            "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        return;
                    }
                    let Ok(mut up) = std::net::TcpStream::connect(upstream) else {
                        return;
                    };
                    let _ = up.write_all(&head);
                    let (mut c2, mut u2) = (client.try_clone().unwrap(), up.try_clone().unwrap());
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut c2, &mut u2);
                        let _ = u2.shutdown(std::net::Shutdown::Write);
                    });
                    let _ = std::io::copy(&mut up, &mut client);
                    let _ = client.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Throttle { addr, rejected }
    }
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn throttled_requests_are_retried_with_backoff() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::start(t.path());
    let src = t.path().join("src");
    sample_tree(&src);
    s.run(&args!["cp", "-q", &src, s.url("t")]).ok();
    let upstream: std::net::SocketAddr = s
        .minio()
        .endpoint
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let proxy = Throttle::start(upstream, 6);
    let endpoint = format!("http://{}", proxy.addr);
    let back = t.path().join("back");
    let out = hetch(
        &args!["cp", "-q", s.url("t"), &back],
        &s.env_with(&[("AWS_ENDPOINT_URL", endpoint.as_str())]),
    );
    out.ok();
    assert_eq!(
        proxy.rejected.load(std::sync::atomic::Ordering::SeqCst),
        6,
        "the store said SlowDown six times"
    );
    assert_eq!(contents(&back), contents(&src));
}

#[test]
fn growing_files_cannot_go_into_a_bucket_and_bad_urls_are_usage_errors() {
    let t = tempfile::tempdir().unwrap();
    let out = hetch(&args!["cp", "--follow", t.path(), "s3://data/x"], &[]);
    out.expect_code(2);
    out.one_line_naming(&["object store"]);
    let out = hetch(&args!["watch", t.path(), "s3://data/x"], &[]);
    out.expect_code(2);
    out.one_line_naming(&["object store"]);
    let out = hetch(&args!["cp", t.path(), "s3://Not_A_Bucket/x"], &[]);
    out.expect_code(2);
    out.one_line_naming(&["Not_A_Bucket"]);
    let out = hetch(&args!["cp", t.path(), "s3://data/a/../b"], &[]);
    out.expect_code(2);
    out.one_line_naming(&["s3://data/a/../b"]);
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn objects_go_to_and_come_from_a_server_with_a_directory_root() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::start(t.path());
    let src = t.path().join("src");
    sample_tree(&src);
    s.run(&args!["cp", "-q", &src, s.url("in")]).ok();
    // Attributes asked for where a bucket cannot keep them: copied, and said once.
    let out = s.run(&args!["cp", "-X", "-A", &src, s.url("attrs")]);
    out.ok();
    let said = out.stderr_lines();
    let said = said
        .iter()
        .filter(|l| l.contains("keeps no extended attributes"));
    assert_eq!(said.count(), 1, "{out:?}");
    assert_eq!(s.sums_under(&s.url("attrs")), contents(&src));
    let root = t.path().join("root");
    let srv = Server::start(&root, &t.path().join("srv"));
    // Object store -> server (push from the bucket), server -> object store (pull).
    srv.cp_env(&args![s.url("in"), srv.url("copy")], &s.env())
        .ok();
    assert_eq!(contents(&root.join("copy")), contents(&src));
    srv.cp_env(&args![srv.url("copy"), s.url("out")], &s.env())
        .ok();
    assert_eq!(s.sums_under(&s.url("out")), contents(&src));
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn an_upload_the_store_dropped_is_reported_and_the_next_run_starts_over() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::start_own(t.path());
    let file = t.path().join("big.bin");
    write_random(&file, 48 << 20, 9);
    let url = &s.url("gone/big.bin");
    let mut run = slow_upload(&s, &file, url, 1);
    run.kill9();
    let _ = run.wait();
    // The store loses the upload (a lifecycle rule, an operator): remove MinIO's record.
    let multipart = s.minio().data.join(".minio.sys/multipart");
    std::fs::remove_dir_all(&multipart).unwrap();
    std::fs::create_dir_all(&multipart).unwrap();
    let out = s.run(&args!["cp", "-q", "--block-size", "1M", &file, url]);
    out.expect_code(3);
    assert!(
        out.stderr.contains("no longer exists at the store"),
        "{out:?}"
    );
    assert!(s.journals().is_empty(), "the stale journal is dropped");
    s.run(&args!["cp", "-q", "--block-size", "1M", &file, url])
        .ok();
    assert_eq!(s.sums(url), vec![(url.to_string(), hash_file(&file))]);
    assert_eq!(s.open_uploads(), 0);
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn verify_reads_objects_back_and_finds_damage_in_the_store() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::start(t.path());
    let src = t.path().join("src");
    Tree::new(&src).file("data.bin", 3 << 20, 11);
    s.run(&args!["cp", "-q", &src, s.url("v")]).ok();
    s.run(&args!["verify", "-q", &src, s.url("v")]).ok();
    // Damage the stored bytes behind the store's back (MinIO keeps an object's data
    // in part files under BUCKET/KEY/).
    let parts: Vec<PathBuf> = walkdir(&s.minio().data.join(&s.bucket).join("v/data.bin"))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("part."))
        })
        .collect();
    assert!(!parts.is_empty(), "MinIO's part files not found");
    let mut bytes = std::fs::read(&parts[0]).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&parts[0], bytes).unwrap();
    let v = s.run(&args!["verify", "-q", &src, s.url("v")]);
    v.failed();
    assert!(v.stderr.contains("data.bin"), "{v:?}");
    let sum = s.run(&args!["sum", s.url("v")]);
    sum.failed();
}

/// Every file under `root`.
fn walkdir(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
#[ignore = "integration: needs MinIO (bash test.sh runs it)"]
fn sync_deletes_objects_the_source_lacks_under_its_prefix_only() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::start(t.path());
    let src = t.path().join("src");
    sample_tree(&src);
    s.run(&args!["sync", "-q", &src, s.url("m/")]).ok();
    let one = t.path().join("one");
    std::fs::write(&one, b"x").unwrap();
    for key in [
        "m/src/extra",
        "m/src/gone/deep",
        "m/src/keep.log",
        "m/beside",
        "m/srcx/y",
    ] {
        s.run(&args!["cp", "-q", &one, s.url(key)]).ok();
    }
    let keys = |s: &Store| -> Vec<String> {
        let mut v: Vec<String> = s.sums(&s.url("m")).into_iter().map(|(p, _)| p).collect();
        v.sort();
        v
    };
    let before = keys(&s);
    // A dry run lists and deletes nothing; --max-delete refuses.
    let out = s.run(&args![
        "sync",
        "-n",
        "--exclude",
        "*.log",
        &src,
        s.url("m/")
    ]);
    out.ok();
    assert!(
        out.stderr
            .contains(&format!("would delete {}", s.url("m/src/gone/deep"))),
        "{out:?}"
    );
    let out = s.run(&args!["sync", "-q", "--max-delete", "1", &src, s.url("m/")]);
    out.expect_code(3);
    assert_eq!(keys(&s), before, "{out:?}");
    // Excluded keys stay; the neighbours of the copied prefix are never looked at.
    let out = s.run(&args![
        "sync",
        "--json",
        "--exclude",
        "*.log",
        &src,
        s.url("m/")
    ]);
    out.ok();
    let v: serde_json::Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(v["deleted"], 2, "{out:?}");
    let after = keys(&s);
    for key in ["m/src/keep.log", "m/beside", "m/srcx/y"] {
        assert!(after.contains(&s.url(key)), "{key}: {after:?}");
    }
    assert!(!after.contains(&s.url("m/src/extra").to_string()));
    assert_eq!(s.sums_under(&s.url("m/src")).len(), before.len() - 4);
}
