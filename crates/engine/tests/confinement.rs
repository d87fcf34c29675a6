//! A hostile source against a real sink: crafted entry sequences that try to make the
//! receiver write, rename or read outside its destination (issue 13: H1, H2, M4).
//!
//! The sink is the one every receiver runs (a server receiving a push, a client
//! receiving a pull), so each case holds in both directions; the source is a test-only
//! peer that speaks the protocol frame by frame through in-memory pipes.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use hetch_engine::wire::{FrameReader, FrameWriter};
use hetch_engine::Transport;
use hetch_engine::{run_sink, BoxStream, DestSpec, EngineError, Options, Progress, Report};
use hetch_proto::{DataHeader, Entry, EntryKind, Frame, PlanAction};
use tokio::io::{split, ReadHalf, WriteHalf};
use tokio::task::JoinHandle;

/// The source end of a session with a real sink.
struct Crafted {
    ctl_r: FrameReader<ReadHalf<BoxStream>>,
    ctl_w: FrameWriter<WriteHalf<BoxStream>>,
    data: FrameWriter<BoxStream>,
    sink: JoinHandle<Result<Report, EngineError>>,
    next_id: u64,
}

impl Crafted {
    /// Starts a sink receiving into `dest` with `opts`, and one data stream.
    fn start(opts: Options, dest: DestSpec) -> Crafted {
        let (c1, c2) = tokio::io::duplex(1 << 20);
        let (d1, d2) = tokio::io::duplex(1 << 20);
        let transport = Transport {
            control: Box::new(c2),
            data: vec![Box::new(d2)],
            peer: "hostile source".into(),
        };
        let sink = tokio::spawn(run_sink(
            opts,
            dest,
            transport,
            Arc::new(Progress::default()),
        ));
        let (r, w) = split(Box::new(c1) as BoxStream);
        Crafted {
            ctl_r: FrameReader::new(r, "sink"),
            ctl_w: FrameWriter::new(w, "sink"),
            data: FrameWriter::new(Box::new(d1) as BoxStream, "sink"),
            sink,
            next_id: 1,
        }
    }

    fn entry(&mut self, path: &str, kind: EntryKind) -> Entry {
        self.next_id += 1;
        Entry {
            id: self.next_id,
            path: path.as_bytes().to_vec(),
            kind,
            mode: 0o755,
            mtime_sec: 1_600_000_000,
            mtime_nsec: 0,
        }
    }

    /// Announces a batch; returns the sink's plan (which ids it wants data for), or
    /// `None` when the sink ended the session instead.
    async fn announce(&mut self, batch: Vec<Entry>) -> Option<Vec<u64>> {
        let n = batch.len();
        self.ctl_w.send(&Frame::Entries(batch)).await.ok()?;
        self.ctl_w.flush().await.ok()?;
        let mut wanted = Vec::new();
        let mut planned = 0;
        while planned < n {
            match self.ctl_r.next_control().await.ok()?? {
                Frame::Plan(items) => {
                    planned += items.len();
                    for it in items {
                        if matches!(it.action, PlanAction::Send(_)) {
                            wanted.push(it.id);
                        }
                    }
                }
                Frame::FileDone { .. } => {}
                _ => return None,
            }
        }
        Some(wanted)
    }

    /// Sends the single block of a small file.
    async fn send_block(&mut self, id: u64, data: &[u8]) {
        let h = DataHeader {
            file: id,
            block: 0,
            digest: hetch_integrity::block_digest(data.len() as u64, 64 << 10, 0, data),
            zero: false,
            zero_len: 0,
        };
        let _ = self.data.send_data(&h, data).await;
        let _ = self.data.flush().await;
    }

    /// Ends the session: no more entries; collects the errors the sink reported per
    /// file until it finishes, then its result.
    async fn finish(mut self) -> (Vec<String>, Result<Report, EngineError>) {
        let _ = self.ctl_w.send(&Frame::EndOfEntries).await;
        let _ = self.ctl_w.flush().await;
        let mut errors = Vec::new();
        loop {
            match self.ctl_r.next_control().await {
                Ok(Some(Frame::FileDone { error: Some(e), .. })) => errors.push(e),
                Ok(Some(Frame::Finished(_))) | Ok(None) | Err(_) => break,
                Ok(Some(Frame::Error(e))) => {
                    errors.push(e.message);
                    break;
                }
                Ok(Some(_)) => {}
            }
        }
        let _ = self.data.send(&Frame::StreamEnd).await;
        let _ = self.data.shutdown().await;
        let _ = self.ctl_w.shutdown().await;
        drop(self.ctl_r);
        (errors, self.sink.await.expect("sink task"))
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
