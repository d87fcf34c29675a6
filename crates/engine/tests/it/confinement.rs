//! A hostile source against a real sink: crafted entry sequences that try to make the
//! receiver write, rename or read outside its destination (issue 13: H1, H2, M4).
//!
//! The sink is the one every receiver runs (a server receiving a push, a client
//! receiving a pull), so each case holds in both directions; the source is a test-only
//! peer that speaks the protocol frame by frame through in-memory pipes.

use std::path::Path;

use crate::common::*;
use crate::hostile;
use hetch_engine::{DestSpec, EngineError, Options, Report};
use hetch_proto::{Entry, EntryKind, Frame, PlanAction};
use hostile::FakeSource;

/// A hostile source, numbering its entries.
struct Crafted {
    s: FakeSource,
    next_id: u64,
}

impl Crafted {
    /// Starts a real sink receiving into `dest` with `opts`.
    fn start(opts: Options, dest: DestSpec) -> Crafted {
        Crafted {
            s: FakeSource::start(opts, dest),
            next_id: 1,
        }
    }

    fn entry(&mut self, path: &str, kind: EntryKind) -> Entry {
        self.next_id += 1;
        hostile::entry(self.next_id, path, kind, 0o755)
    }

    /// Announces a batch; returns the ids the sink wants data for, or `None` when the
    /// sink ended the session instead.
    async fn announce(&mut self, batch: Vec<Entry>) -> Option<Vec<u64>> {
        let n = batch.len();
        if !self.s.send(Frame::Entries(batch)).await {
            return None;
        }
        let mut wanted = Vec::new();
        let mut planned = 0;
        while planned < n {
            match self.s.recv().await? {
                Frame::Plan(items) => {
                    planned += items.len();
                    let send = items
                        .iter()
                        .filter(|i| matches!(i.action, PlanAction::Send(_)));
                    wanted.extend(send.map(|i| i.id));
                }
                Frame::FileDone { .. } => {}
                _ => return None,
            }
        }
        Some(wanted)
    }

    /// Sends the single block of a small file.
    async fn send_block(&mut self, id: u64, data: &[u8]) {
        self.s.send_block(id, 0, data.len() as u64, data).await;
    }

    /// Ends the session: no more entries; collects the errors the sink reported until
    /// it finishes, then its result.
    async fn finish(mut self) -> (Vec<String>, Result<Report, EngineError>) {
        self.s.send(Frame::EndOfEntries).await;
        let mut errors = Vec::new();
        loop {
            match self.s.recv().await {
                Some(Frame::FileDone { error: Some(e), .. }) => errors.push(e),
                Some(Frame::Error(e)) => {
                    errors.push(e.message);
                    break;
                }
                Some(Frame::Finished(_)) | None => break,
                Some(_) => {}
            }
        }
        (errors, self.s.end().await)
    }
}

fn file(size: u64) -> EntryKind {
    EntryKind::File {
        size,
        digest: None,
        growing: false,
    }
}

fn link(to: &Path) -> EntryKind {
    EntryKind::Symlink {
        target: to.as_os_str().as_encoded_bytes().to_vec(),
    }
}

/// A destination directory and an outside directory that must stay empty.
fn place() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("dest");
    let outside = t.path().join("outside");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    (t, out, outside)
}

fn assert_empty(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "written outside the destination: {left:?}");
}

/// H1: a file under `d/a`, then `d/a` as a symlink to outside, in one batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_announced_before_its_parent_becomes_a_symlink_stays_inside() {
    for inside_target in [false, true] {
        let (_t, out, outside) = place();
        let target = if inside_target {
            // Even a link that stays inside is never written through.
            std::fs::create_dir_all(out.join("elsewhere")).unwrap();
            out.join("elsewhere")
        } else {
            outside.clone()
        };
        let mut s = Crafted::start(opts(), dest(&out, 2));
        let batch = vec![
            s.entry("d", EntryKind::Dir),
            s.entry("d/a/payload", file(5)),
            s.entry("d/a", link(&target)),
        ];
        let payload = batch[1].id;
        let wanted = s.announce(batch).await;
        if wanted.is_some_and(|w| w.contains(&payload)) {
            s.send_block(payload, b"owned").await;
        }
        let (errors, _) = s.finish().await;
        assert_empty(&outside);
        if inside_target {
            assert_empty(&out.join("elsewhere"));
        }
        assert!(
            errors
                .iter()
                .any(|e| e.contains("payload") && e.contains("symlink")),
            "{errors:?}"
        );
    }
}

/// H1 across batches: the file is planned in one batch, the symlink comes in the next,
/// and only then the data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_announced_in_a_later_batch_does_not_redirect_planned_files() {
    let (_t, out, outside) = place();
    let mut s = Crafted::start(opts(), dest(&out, 2));
    let first = vec![
        s.entry("d", EntryKind::Dir),
        s.entry("d/a/payload", file(5)),
    ];
    let payload = first[1].id;
    assert_eq!(s.announce(first).await, Some(vec![payload]));
    let second = vec![s.entry("d/a", link(&outside))];
    s.announce(second).await;
    s.send_block(payload, b"owned").await;
    let (errors, _) = s.finish().await;
    assert_empty(&outside);
    assert!(errors.iter().any(|e| e.contains("symlink")), "{errors:?}");
}

/// A symlink first, then files and directories through it (and a link already there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_created_through_a_symlink_already_there() {
    let (_t, out, outside) = place();
    std::os::unix::fs::symlink(&outside, out.join("planted")).unwrap();
    let mut s = Crafted::start(opts(), dest(&out, 2));
    let batch = vec![
        s.entry("l", link(&outside)),
        s.entry("l/x", file(3)),
        s.entry("l/dir", EntryKind::Dir),
        s.entry("l/ln", link(Path::new("/etc/passwd"))),
        s.entry("planted/y", file(3)),
    ];
    let wanted = s.announce(batch).await.unwrap_or_default();
    for id in wanted {
        s.send_block(id, b"bad").await;
    }
    let (errors, _) = s.finish().await;
    assert_empty(&outside);
    assert_eq!(errors.len(), 4, "{errors:?}");
    assert!(std::fs::symlink_metadata(out.join("l"))
        .unwrap()
        .file_type()
        .is_symlink());
}

/// H2: a pull's entries must lie under the operands asked for; anything else ends the
/// session before it is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_refuses_entries_outside_the_requested_operand() {
    let (_t, out, _outside) = place();
    let o = Options {
        pulled: Some(vec![b"data/dataset".to_vec()]),
        ..opts()
    };
    let mut s = Crafted::start(o, dest(&out, 1));
    // What was asked for is fine.
    let ok = vec![s.entry("dataset", EntryKind::Dir)];
    assert!(s.announce(ok).await.is_some());
    let bad = vec![s.entry(".bashrc", file(4))];
    assert!(
        s.announce(bad).await.is_none(),
        "the sink must end the session"
    );
    let (_, result) = s.finish().await;
    let err = result.expect_err("a hostile entry is a protocol violation");
    assert!(err.to_string().contains(".bashrc"), "{err}");
    assert!(!out.join(".bashrc").exists());
    assert!(!out.join("..bashrc.hetch-part").exists());
}

/// M4: a compare-only session does not read through a symlink out of the tree (which
/// would tell a token holder whether a file exists there, its size and its digest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_does_not_read_through_symlinks() {
    let (_t, out, outside) = place();
    let secret = b"top secret";
    std::fs::write(outside.join("secret"), secret).unwrap();
    std::fs::create_dir(out.join("cmp")).unwrap();
    std::os::unix::fs::symlink(&outside, out.join("cmp/link")).unwrap();
    let o = Options {
        compare_only: true,
        ..opts()
    };
    let spec = DestSpec {
        as_operand: true,
        ..dest(&out.join("cmp"), 1)
    };
    let digest = hetch_integrity::Algorithm::Blake3;
    let mut buf = Vec::new();
    let real =
        hetch_engine::sum::sum_file_with(digest, &outside.join("secret"), 64 << 10, &mut buf)
            .unwrap();
    let mut s = Crafted::start(o, spec);
    let batch = vec![
        s.entry("cmp", EntryKind::Dir),
        s.entry(
            "cmp/link/secret",
            EntryKind::File {
                size: secret.len() as u64,
                digest: Some(real),
                growing: false,
            },
        ),
    ];
    s.announce(batch).await;
    let (errors, _) = s.finish().await;
    let about: Vec<_> = errors.iter().filter(|e| e.contains("secret")).collect();
    assert_eq!(about.len(), 1, "{errors:?}");
    assert!(about[0].contains("symlink"), "{about:?}");
}
