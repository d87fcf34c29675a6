//! Google Cloud Storage and Azure Blob Storage through the `hetch` binary, against
//! their emulators (fake-gcs-server, Azurite; `bench/install-emulators.sh`) started on
//! 127.0.0.1, pointed at with the variables their own tools read.
//!
//! Azure: a tree of several sizes (one in several blocks) pushed and pulled back with
//! identical digests, copied again without sending anything, checked by `verify`.
//! GCS: objects put through the emulator's own API are pulled with identical bytes
//! (the emulator does not serve the XML API object_store writes with, so pushes are
//! tested only as far as configuration). Both: bad URLs and an unreachable endpoint
//! are one clear line and a non-zero exit.

use crate::util;

use hetch_testkit::emulators::Emulator;
use util::*;

/// The environment of a hetch that may only reach `emulator`'s store.
fn azure_env<'a>(url: &'a str, state: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("AZURE_STORAGE_USE_EMULATOR", "true"),
        ("AZURITE_BLOB_STORAGE_URL", url),
        ("HETCH_STATE_DIR", state),
    ]
}

#[test]
#[ignore = "integration: needs Azurite (bash test.sh runs it)"]
fn a_tree_round_trips_through_an_azure_container() {
    let t = tempfile::tempdir().unwrap();
    let e = Emulator::shared_azurite();
    let container = hetch_testkit::shared::unique_name("cloud-");
    e.create_container(&container).unwrap();
    let state = t.path().join("state").display().to_string();
    let env = azure_env(&e.url, &state);
    let src = t.path().join("src");
    Tree::new(&src)
        .file("three-blocks.bin", (20 << 20) + 777, 1)
        .bytes("empty", b"")
        .file("nested/small.txt", 1000, 2)
        .file("日本語/ファイル 📁.txt", 2000, 3);
    let url = &format!("az://{container}/ünï run");
    let up = hetch(
        &args!["cp", "-q", "--json", "--block-size", "1M", &src, url],
        &env,
    );
    up.ok();
    assert_eq!(up.json().files, 4, "{up:?}");
    let back = t.path().join("back");
    hetch(&args!["cp", "-q", url, &back], &env).ok();
    assert_eq!(contents(&back), contents(&src));
    assert_no_temp_files(&back);
    // Nothing to send the second time: the objects' metadata says they are copies.
    let again = hetch(&args!["cp", "-q", "--json", &src, url], &env);
    again.ok();
    assert_eq!(
        (again.json().files, again.json().skipped),
        (0, 4),
        "{again:?}"
    );
    hetch(&args!["verify", "-q", &src, url], &env).ok();
    std::fs::write(src.join("nested/small.txt"), b"changed").unwrap();
    let v = hetch(&args!["verify", "-q", &src, url], &env);
    v.expect_code(3);
    assert!(v.stderr.contains("small.txt"), "{v:?}");
}

#[test]
#[ignore = "integration: needs fake-gcs-server (bash test.sh runs it)"]
fn objects_are_pulled_from_a_gcs_bucket() {
    let t = tempfile::tempdir().unwrap();
    let e = Emulator::shared_gcs();
    let bucket = hetch_testkit::shared::unique_name("cloud-");
    e.create_bucket(&bucket).unwrap();
    let mut want = Vec::new();
    for (i, (key, n)) in [("run/a.bin", 3_000_000), ("run/sub/b", 10), ("run/ü c", 0)]
        .into_iter()
        .enumerate()
    {
        let data: Vec<u8> = (0..n).map(|j| (j * 7 + i) as u8).collect();
        e.gcs_put(&bucket, key, &data).unwrap();
        want.push((key.trim_start_matches("run/").to_string(), data));
    }
    let env = [("STORAGE_EMULATOR_HOST", e.url.as_str())];
    let back = t.path().join("back");
    let run = format!("gs://{bucket}/run");
    let out = hetch(&args!["cp", "-q", "--json", run, &back], &env);
    out.ok();
    assert_eq!(out.json().files, 3, "{out:?}");
    for (p, data) in want {
        assert_eq!(std::fs::read(back.join(&p)).unwrap(), data, "{p}");
    }
}

#[test]
fn bad_urls_and_unreachable_stores_are_one_clear_line() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("f");
    std::fs::write(&src, b"x").unwrap();
    let state = t.path().join("state").display().to_string();
    // No account and no emulator: says what to set.
    let out = hetch(
        &args!["cp", "-q", &src, "az://data/x"],
        &[("HETCH_STATE_DIR", &state)],
    );
    out.failed();
    out.one_line_naming(&["AZURE_STORAGE_ACCOUNT_NAME"]);
    // Nothing listens there: the line names the store's URL.
    let env = azure_env("http://127.0.0.1:9", &state);
    let out = hetch(&args!["cp", "-q", &src, "az://data/x"], &env);
    out.failed();
    out.one_line_naming(&["az://data"]);
    // A URL without a bucket is a usage error.
    let out = hetch(&args!["cp", "-q", &src, "gs://"], &[]);
    out.expect_code(2);
    out.one_line_naming(&["gs://"]);
}
