//! Interrupted transfers through the `hetch` binary: `kill -9` of the client or the
//! server in the middle of a large file, then the same command again. The rerun must
//! continue from the blocks the receiver had verified (fewer bytes than the file) and
//! end with an identical file and no temporary files.
//!
//! The transfers are slowed down with `--rate-limit` so that they can be interrupted;
//! the tests wait for conditions (the journal holding enough records, a process having
//! exited), never for fixed times.

use crate::util;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use util::*;

/// Size of the large file.
const SIZE: u64 = 128 << 20;
/// Block size of the interrupted transfers.
const BS: u64 = 64 << 10;
const BLOCK_SIZE: &str = "64K";
/// Slow enough to interrupt the transfer around a third of the way.
const RATE: &str = "20M";
/// Waits until the journal of `final_path` records at least 30% of the file's blocks
/// (the transfer must still be running), and returns the number of records seen.
fn wait_for_progress(final_path: &Path, running: &mut Running) -> u64 {
    let blocks = SIZE.div_ceil(BS);
    let want = blocks * 3 / 10;
    let deadline = Instant::now() + COMMAND_LIMIT;
    loop {
        let n = journal_records(final_path);
        if n >= want {
            assert!(
                n < blocks,
                "the transfer was not slow enough to interrupt ({n} of {blocks} blocks)"
            );
            assert!(part_of(final_path).exists(), "journal without a part file");
            return n;
        }
        assert!(
            !running.exited(),
            "`{}` ended before it could be interrupted ({n} records seen)",
            running.cmd
        );
        assert!(
            Instant::now() < deadline,
            "no progress on {}",
            final_path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until the server has logged more than `lines` lines (it logs each session's end).
fn wait_for_server_log(srv: &Server, lines: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while srv.log().lines().count() <= lines {
        assert!(
            Instant::now() < deadline,
            "the server never noticed; log:\n{}",
            srv.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Checks the outcome of an interrupted run: nothing under the final name, a part file.
fn assert_interrupted(final_path: &Path) {
    assert!(
        !final_path.exists(),
        "an unfinished file appeared under its final name"
    );
    assert!(
        part_of(final_path).exists(),
        "the part file is gone; nothing to resume from"
    );
}

/// Checks the rerun: success, fewer bytes than the file (at most what the journal did not
/// hold when the first run was killed), identical result, no temporary files.
fn assert_resumed(out: &Out, src: &Path, dst: &Path, records_at_kill: u64, roots: &[&Path]) {
    out.ok();
    let s = out.json();
    eprintln!(
        "interrupted with {records_at_kill} of {} blocks verified; the rerun sent {} of {SIZE} bytes",
        SIZE.div_ceil(BS),
        s.bytes
    );
    assert_eq!((s.files, s.failed), (1, 0), "{out:?}");
    assert!(s.bytes > 0, "nothing was left to send?\n{out:?}");
    assert!(
        s.bytes <= SIZE - records_at_kill * BS,
        "the rerun sent {} bytes, but {} blocks ({} bytes) were already verified: it did not resume\n{out:?}",
        s.bytes,
        records_at_kill,
        records_at_kill * BS
    );
    assert_same_tree(src, dst);
    for r in roots {
        assert_no_temp_files(r);
    }
}

fn big_source(t: &Path) -> PathBuf {
    let src = t.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let f = src.join("big.bin");
    write_random(&f, SIZE, 1234);
    f
}

/// kill -9 of the client while it pushes; the server keeps the verified blocks.
#[test]
fn client_killed_during_push_then_rerun_resumes() {
    let t = tempdir();
    let src = big_source(t.path());
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let dst = srv.root.join("big.bin");
    let cmd = args![
        "--json",
        "--block-size",
        BLOCK_SIZE,
        "--rate-limit",
        RATE,
        &src,
        srv.url("big.bin")
    ];

    let mut first = srv.spawn_cp(&cmd, &[]);
    let records = wait_for_progress(&dst, &mut first);
    let log_lines = srv.log().lines().count();
    first.kill9();
    let out = first.wait();
    assert_eq!(out.code(), None, "the client was not killed\n{out:?}");
    // Let the server notice that its client is gone before the rerun.
    wait_for_server_log(&srv, log_lines);
    assert_interrupted(&dst);

    let again = srv.cp(&cmd);
    assert_resumed(&again, &src, &dst, records, &[&srv.root, t.path()]);
}

/// kill -9 of the client while it pulls: the client is the receiver and its part file
/// and journal survive it.
#[test]
fn client_killed_during_pull_then_rerun_resumes() {
    let t = tempdir();
    let src = big_source(t.path());
    let srv = Server::start(&t.path().join("src"), &t.path().join("state"));
    let local = t.path().join("local");
    std::fs::create_dir(&local).unwrap();
    let dst = local.join("big.bin");
    let cmd = args![
        "--json",
        "--block-size",
        BLOCK_SIZE,
        "--rate-limit",
        RATE,
        srv.url("big.bin"),
        &dst
    ];

    let mut first = srv.spawn_cp(&cmd, &[]);
    let records = wait_for_progress(&dst, &mut first);
    first.kill9();
    let out = first.wait();
    assert_eq!(out.code(), None, "the client was not killed\n{out:?}");
    assert_interrupted(&dst);

    let again = srv.cp(&cmd);
    assert_resumed(&again, &src, &dst, records, &[t.path()]);
}

/// kill -9 of the server while it receives; a new server on the same root and state
/// directory (another port, same key) lets the client continue.
#[test]
fn server_killed_during_push_then_rerun_to_restarted_server_resumes() {
    let t = tempdir();
    let src = big_source(t.path());
    let root = t.path().join("root");
    let state = t.path().join("state");
    let mut srv = Server::start(&root, &state);
    let dst = root.join("big.bin");
    let cmd = |srv: &Server| {
        args![
            "--json",
            "--block-size",
            BLOCK_SIZE,
            "--rate-limit",
            RATE,
            // About the next run resuming, not this one recovering (tests/it/recover.rs).
            "--retries",
            "0",
            &src,
            srv.url("big.bin")
        ]
    };

    let mut first = srv.spawn_cp(&cmd(&srv), &[]);
    let records = wait_for_progress(&dst, &mut first);
    srv.kill9();
    let out = first.wait();
    out.expect_code(1);
    out.one_line_naming(&[&srv.addr]);
    assert_interrupted(&dst);

    let srv2 = Server::start(&root, &state);
    assert_eq!(
        srv2.fingerprint, srv.fingerprint,
        "same state directory, same key"
    );
    let again = srv2.cp(&cmd(&srv2));
    assert_resumed(&again, &src, &dst, records, &[&root, t.path()]);
}

/// An interrupted file whose source changed before the rerun is sent again in full (the
/// old journal is stale) and ends up identical to the new source.
#[test]
fn changed_source_after_interruption_is_sent_in_full() {
    let t = tempdir();
    let src = big_source(t.path());
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let dst = srv.root.join("big.bin");
    let cmd = args![
        "--json",
        "--block-size",
        BLOCK_SIZE,
        "--rate-limit",
        RATE,
        &src,
        srv.url("big.bin")
    ];

    let mut first = srv.spawn_cp(&cmd, &[]);
    wait_for_progress(&dst, &mut first);
    let log_lines = srv.log().lines().count();
    first.kill9();
    first.wait();
    wait_for_server_log(&srv, log_lines);
    assert_interrupted(&dst);

    // Same size, different content and mtime.
    write_random(&src, SIZE, 4321);
    set_mtime(&src, 1_650_000_000, 7);
    let fast = args![
        "--json",
        "--block-size",
        BLOCK_SIZE,
        &src,
        srv.url("big.bin")
    ];
    let again = srv.cp(&fast);
    again.ok();
    let s = again.json();
    assert_eq!((s.files, s.bytes), (1, SIZE), "{again:?}");
    assert_same_tree(&src, &dst);
    assert_no_temp_files(&srv.root);
}

/// Resume trusts only verified blocks: with `--verify-schedule sequential` nothing is
/// read back until everything is written, so a push killed half-way has written many
/// blocks but journaled none, and the rerun sends the whole file again.
#[test]
fn written_but_unverified_blocks_are_not_trusted_on_resume() {
    let t = tempdir();
    let src = big_source(t.path());
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let dst = srv.root.join("big.bin");
    let flags = Vec::from(args![
        "--json",
        "--block-size",
        BLOCK_SIZE,
        "--verify-schedule",
        "sequential"
    ]);
    let mut cmd = flags.clone();
    cmd.extend(args!["--rate-limit", RATE, &src, srv.url("big.bin")]);

    let mut first = srv.spawn_cp(&cmd, &[]);
    let part = part_of(&dst);
    let deadline = Instant::now() + COMMAND_LIMIT;
    // Wait until a third of the file is written into the part file.
    while std::fs::metadata(&part).map_or(0, |m| m.len()) < SIZE / 3 {
        assert!(!first.exited(), "`{}` ended too early", first.cmd);
        assert!(
            Instant::now() < deadline,
            "no progress on {}",
            dst.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        journal_records(&dst),
        0,
        "blocks were journaled before their read-back check"
    );
    let log_lines = srv.log().lines().count();
    first.kill9();
    let _ = first.wait();
    wait_for_server_log(&srv, log_lines);
    assert_interrupted(&dst);

    let mut cmd = flags;
    cmd.extend(args![&src, srv.url("big.bin")]);
    let again = srv.cp(&cmd);
    again.ok();
    assert_eq!(
        again.json().bytes,
        SIZE,
        "unverified blocks were trusted\n{again:?}"
    );
    assert_same_tree(&src, &dst);
    assert_no_temp_files(&srv.root);
}

/// Journaled block indexes, in record order (journal.rs: `index u64 | digest | crc`).
fn journaled_blocks(journal: &Path) -> Vec<u64> {
    let bytes = std::fs::read(journal).unwrap();
    bytes[JOURNAL_HEADER as usize..]
        .chunks_exact(JOURNAL_RECORD as usize)
        .map(|r| u64::from_le_bytes(r[..8].try_into().unwrap()))
        .collect()
}

/// A local copy killed with journal records written: the source, the destination and
/// the command (without the rate limit, for the rerun).
fn interrupted_local_copy(t: &Path) -> (PathBuf, PathBuf, Vec<std::ffi::OsString>) {
    let src = big_source(t);
    let dst = t.join("big.bin");
    let flags = Vec::from(args!["cp", "--json", "--block-size", BLOCK_SIZE]);
    let mut slow = flags.clone();
    slow.extend(args!["--rate-limit", RATE, &src, &dst]);
    let mut first = spawn(&slow, &[]);
    wait_for_progress(&dst, &mut first);
    first.kill9();
    let _ = first.wait();
    assert_interrupted(&dst);
    let mut again = flags;
    again.extend(args![&src, &dst]);
    (src, dst, again)
}

/// A byte flipped in a journaled block of the part file between the runs: the rerun
/// reads journaled blocks back, finds that one damaged and has it sent again.
#[test]
fn a_damaged_journaled_block_is_sent_again_on_resume() {
    let t = tempdir();
    let (src, dst, cmd) = interrupted_local_copy(t.path());
    let journaled = journaled_blocks(&journal_of(&dst));
    let victim = journaled[journaled.len() / 2];
    let part = part_of(&dst);
    let mut bytes = std::fs::read(&part).unwrap();
    bytes[(victim * BS + 100) as usize] ^= 0x40;
    std::fs::write(&part, bytes).unwrap();

    let again = hetch(&cmd, &[]);
    again.ok();
    let s = again.json();
    assert!(
        s.retried_blocks >= 1,
        "the damaged block was not re-sent\n{again:?}"
    );
    assert_eq!(
        s.reverified_blocks,
        journaled.len() as u64 - 1,
        "every other journaled block is read back and kept\n{again:?}"
    );
    assert!(
        s.bytes <= SIZE - (journaled.len() as u64 - 1) * BS,
        "{again:?}"
    );
    assert_eq!(std::fs::read(&dst).unwrap(), std::fs::read(&src).unwrap());
    assert_no_temp_files(t.path());
}

/// A host crash between a block's data and its record (simulated: the part file lost
/// its journaled tail, as if those blocks never reached the disk) costs a resend, never
/// a wrong file.
#[test]
fn journaled_blocks_missing_from_the_part_file_are_sent_again() {
    let t = tempdir();
    let (src, dst, cmd) = interrupted_local_copy(t.path());
    let journaled = journaled_blocks(&journal_of(&dst));
    let last = *journaled.iter().max().unwrap();
    let part = std::fs::OpenOptions::new()
        .write(true)
        .open(part_of(&dst))
        .unwrap();
    part.set_len(last * BS).unwrap();
    drop(part);

    let again = hetch(&cmd, &[]);
    again.ok();
    let s = again.json();
    assert!(
        s.retried_blocks >= 1,
        "the lost block was not re-sent\n{again:?}"
    );
    assert!(s.reverified_blocks < journaled.len() as u64, "{again:?}");
    assert_eq!(std::fs::read(&dst).unwrap(), std::fs::read(&src).unwrap());
    assert_no_temp_files(t.path());
}

/// `--trust-journal` takes journaled blocks as they are: nothing is read back.
#[test]
fn trust_journal_skips_the_read_back() {
    let t = tempdir();
    let (src, dst, mut cmd) = interrupted_local_copy(t.path());
    let journaled = journaled_blocks(&journal_of(&dst)).len() as u64;
    cmd.insert(1, "--trust-journal".into());

    let again = hetch(&cmd, &[]);
    again.ok();
    let s = again.json();
    assert_eq!(s.reverified_blocks, 0, "{again:?}");
    assert!(
        s.bytes <= SIZE - journaled * BS,
        "it did not resume\n{again:?}"
    );
    assert_eq!(std::fs::read(&dst).unwrap(), std::fs::read(&src).unwrap());
}
