//! Extended attributes from a hostile source: a sink sets only the classes its session
//! keeps, and a name that would grant privilege (`security.*`, `trusted.*`) or touch
//! hetch's own attributes ends the session before anything is set.

use crate::common::*;
use crate::hostile;
use crate::hostile_bounds::{assert_protocol_error, file_done, finish};
use hetch_proto::{Frame, Xattr};
use hostile::FakeSource;

fn attr(name: &str, value: &str) -> Xattr {
    Xattr {
        name: name.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    }
}

/// The user attributes of `path` (hetch's own left out).
fn user_attrs(path: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let h = std::fs::File::open(path).unwrap();
    use std::os::fd::AsFd;
    let h = hetch_storage::xattr::Handle::Open(h.as_fd());
    let mut names = hetch_storage::xattr::names(h).unwrap();
    names.sort();
    names
        .into_iter()
        .filter(|n| n.starts_with(b"user.") && !n.starts_with(b"user.hetch."))
        .map(|n| {
            let v = hetch_storage::xattr::get(h, &n, 1 << 16).unwrap().unwrap();
            (String::from_utf8(n).unwrap(), v)
        })
        .collect()
}

/// Sends one file `top/f` carrying `attrs` to a sink with `opts`; the sink's copy.
async fn send_with(opts: hetch_engine::Options, attrs: Vec<Xattr>) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let mut s = FakeSource::start(opts, dest(&out, 1));
    let mut f = hostile::file(1, "top/f", 5);
    f.xattrs = attrs;
    s.send(Frame::Entries(vec![hostile::dir(0, "top"), f]))
        .await;
    // The plan first, as a source waits for it: a block of a file not planned yet is
    // dropped as a late one.
    let plan = s.recv().await;
    assert!(matches!(plan, Some(Frame::Plan(_))), "{plan:?}");
    s.send_block(1, 0, 5, b"hello").await;
    assert_eq!(file_done(&mut s, 1).await, None);
    finish(s, 1, 0).await;
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attributes_a_session_did_not_ask_for_are_not_set() {
    let t = send_with(opts(), vec![attr("user.planted", "x")]).await;
    assert_eq!(user_attrs(&t.path().join("out/f")), vec![]);
    // The same entry in a session that keeps them.
    let mut keeping = opts();
    keeping.xattrs = true;
    let t = send_with(keeping, vec![attr("user.planted", "x")]).await;
    assert_eq!(
        user_attrs(&t.path().join("out/f")),
        vec![("user.planted".to_string(), b"x".to_vec())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privileged_or_own_attribute_names_end_the_session() {
    for name in ["security.capability", "trusted.x", "user.hetch.blake3"] {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("out");
        let mut o = opts();
        o.xattrs = true;
        o.acls = true;
        let mut s = FakeSource::start(o, dest(&out, 1));
        let mut f = hostile::file(1, "top/f", 5);
        f.xattrs = vec![attr(name, "\x01\x00\x00\x02")];
        s.send(Frame::Entries(vec![hostile::dir(0, "top"), f]))
            .await;
        let err = s.expect_error().await;
        assert_protocol_error(&err, "extended attribute outside user.*");
        assert!(s.end().await.is_err());
        assert!(!out.join("f").exists(), "{name}: nothing written");
    }
}
