//! Recovery inside one run: one `hetch cp` survives its server being killed and
//! restarted, shut down with SIGTERM, or stopped (SIGSTOP), by opening a new session
//! that resumes from what the destination verified; a peer that stops answering is
//! noticed by both sides within the stall timeout.
//!
//! Transfers are slowed with `--rate-limit` so that they can be interrupted; the tests
//! wait for conditions (journal records, log lines), never for fixed times.

use crate::util;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use util::*;

const SIZE: u64 = 48 << 20;
const BS: &str = "64K";
const RATE: &str = "12M";
/// Waits until `final_path`'s journal holds `n` records while `running` still runs.
fn wait_for_records(final_path: &Path, n: u64, running: &mut Running) {
    let deadline = Instant::now() + COMMAND_LIMIT;
    while journal_records(final_path) < n {
        assert!(!running.exited(), "`{}` ended too early", running.cmd);
        assert!(Instant::now() < deadline, "no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn source(t: &Path) -> PathBuf {
    let src = t.join("src");
    std::fs::create_dir_all(&src).unwrap();
    write_random(&src.join("big.bin"), SIZE, 77);
    src.join("big.bin")
}

/// The `reconnects` field of the JSON summary.
fn reconnects(out: &Out) -> u64 {
    let line = out.stdout.lines().rev().find(|l| !l.trim().is_empty());
    let v: serde_json::Value = serde_json::from_str(line.expect("JSON on stdout")).unwrap();
    v["reconnects"].as_u64().expect("reconnects in --json")
}

/// A server on the same root, state directory and port as `old` (which must be gone).
fn restart(old: &Server) -> Server {
    let listen = old.addr.clone();
    Server::start_with(&old.root, &old.state_dir, &["--listen", &listen], &[])
}

/// Sends `sig` to `pid` (kill(2) itself: a fresh machine need not have procps).
fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a child process of this test.
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(
        r,
        0,
        "kill {sig} {pid}: {}",
        std::io::Error::last_os_error()
    );
}

fn push_args(src: &Path, srv: &Server, extra: &[&str]) -> Vec<std::ffi::OsString> {
    let mut a = Vec::from(args!["--json", "--block-size", BS, "--rate-limit", RATE]);
    a.extend(extra.iter().map(std::ffi::OsString::from));
    a.extend(args![src, srv.url("big.bin")]);
    a
}

/// A push of a fresh source to a new server (started with `server_flags`), running
/// with `cp_flags` and past `records` verified blocks.
struct Push {
    src: PathBuf,
    srv: Server,
    dst: PathBuf,
    cp: Running,
}

fn push_under_way(t: &Path, server_flags: &[&str], cp_flags: &[&str], records: u64) -> Push {
    let src = source(t);
    let srv = Server::start_with(&t.join("root"), &t.join("state"), server_flags, &[]);
    let dst = srv.root.join("big.bin");
    let mut cp = srv.spawn_cp(&push_args(&src, &srv, cp_flags), &[]);
    wait_for_records(&dst, records, &mut cp);
    Push { src, srv, dst, cp }
}

/// kill -9 of the server, and a new one on the same port: the same `cp` finishes.
#[test]
fn server_killed_and_restarted_under_one_push() {
    let t = tempdir();
    let Push {
        src,
        mut srv,
        dst,
        cp,
    } = push_under_way(t.path(), &[], &[], 64);
    srv.kill9();
    let srv = restart(&srv);
    let out = cp.wait();
    out.ok();
    assert!(reconnects(&out) >= 1, "{out:?}");
    assert!(
        out.stderr.contains("opening a new session"),
        "each recovery is a warning line\n{out:?}"
    );
    let s = out.json();
    assert_eq!((s.files, s.failed), (1, 0), "{out:?}");
    assert_same_tree(&src, &dst);
    assert_no_temp_files(&srv.root);
}

/// The same for a pull: the client is the receiver and resumes its own part file.
#[test]
fn server_killed_and_restarted_under_one_pull() {
    let t = tempdir();
    let mut srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let src = srv.root.join("big.bin");
    write_random(&src, SIZE, 78);
    let dst = t.path().join("dst");
    std::fs::create_dir_all(&dst).unwrap();
    let args = args![
        "--json",
        "--block-size",
        BS,
        "--rate-limit",
        RATE,
        srv.url("big.bin"),
        &dst
    ];
    let mut cp = srv.spawn_cp(&args, &[]);
    wait_for_records(&dst.join("big.bin"), 64, &mut cp);
    srv.kill9();
    let _srv = restart(&srv);
    let out = cp.wait();
    out.ok();
    assert!(reconnects(&out) >= 1, "{out:?}");
    assert_same_tree(&src, &dst.join("big.bin"));
    assert_no_temp_files(&dst);
}

/// SIGTERM: the server tells its client it is going away and exits; the client says
/// so, waits, and resumes once a server is back.
#[test]
fn server_shutdown_tells_the_client_which_resumes() {
    let t = tempdir();
    let Push {
        src,
        mut srv,
        dst,
        cp,
    } = push_under_way(t.path(), &[], &[], 64);
    signal(srv.pid(), libc::SIGTERM);
    wait_for("the server to exit", || !srv.alive());
    assert!(
        srv.log().contains("shutting down"),
        "the server says why it stops:\n{}",
        srv.log()
    );
    let _srv = restart(&srv);
    let out = cp.wait();
    out.ok();
    assert!(
        out.stderr.contains("shutting down"),
        "the client was told\n{out:?}"
    );
    assert!(reconnects(&out) >= 1, "{out:?}");
    assert_same_tree(&src, &dst);
}

/// A server that stops answering (SIGSTOP) is noticed within the stall timeout, in
/// both directions; with `--retries 0` the run ends there, naming the server.
#[test]
fn a_stopped_server_is_a_lost_session_both_ways() {
    let t = tempdir();
    let quick = ["--stall-timeout", "3s", "--retries", "0"];
    let Push {
        src,
        srv,
        dst,
        cp: push,
    } = push_under_way(t.path(), &[], &quick, 16);
    signal(srv.pid(), libc::SIGSTOP);
    let out = push.wait();
    signal(srv.pid(), libc::SIGCONT);
    out.expect_code(1);
    let line = out.one_line_naming(&[&srv.addr]);
    assert!(line.contains("stopped answering"), "{out:?}");

    let back = t.path().join("back");
    std::fs::create_dir_all(&back).unwrap();
    std::fs::remove_file(&dst).ok();
    std::fs::copy(&src, &dst).unwrap();
    let mut a = Vec::from(args!["--json", "--block-size", BS, "--rate-limit", RATE]);
    a.extend(quick.iter().map(std::ffi::OsString::from));
    a.extend(args![srv.url("big.bin"), &back]);
    let mut pull = srv.spawn_cp(&a, &[]);
    wait_for_records(&back.join("big.bin"), 16, &mut pull);
    signal(srv.pid(), libc::SIGSTOP);
    let out = pull.wait();
    signal(srv.pid(), libc::SIGCONT);
    out.expect_code(1);
    let line = out.one_line_naming(&[&srv.addr]);
    assert!(line.contains("stopped answering"), "{out:?}");
}

/// A client that stops answering is noticed by the server, which ends the session
/// instead of holding it open forever.
#[test]
fn a_stopped_client_is_noticed_by_the_server() {
    let t = tempdir();
    let Push { srv, mut cp, .. } = push_under_way(t.path(), &["--stall-timeout", "3s"], &[], 16);
    signal(cp.pid(), libc::SIGSTOP);
    wait_for("the server to give up on the session", || {
        srv.log().contains("stopped answering")
    });
    signal(cp.pid(), libc::SIGCONT);
    cp.kill9();
}

/// With plenty of retries, a stalled server that comes back is recovered from.
#[test]
fn a_server_stopped_then_continued_is_recovered_from() {
    let t = tempdir();
    let Push { src, srv, dst, cp } = push_under_way(t.path(), &[], &["--stall-timeout", "3s"], 16);
    signal(srv.pid(), libc::SIGSTOP);
    // The client gives up on the session while the server is stopped...
    wait_for("the client to notice", || {
        cp.stderr_so_far().contains("stopped answering")
    });
    // ...and its next session, once the server runs again, finishes the copy.
    signal(srv.pid(), libc::SIGCONT);
    let out = cp.wait();
    out.ok();
    assert!(reconnects(&out) >= 1, "{out:?}");
    assert_same_tree(&src, &dst);
}
