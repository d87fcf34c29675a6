//! What the commands print: `-q` prints nothing on success and still says what
//! failed; a reader that closes standard output early (`| true`, `| head -1`) ends
//! a command quietly, as SIGPIPE ends coreutils' (exit status 141, or death by that
//! signal), never with a panic (exit code 101) or an error line.

use crate::util;

use std::os::unix::process::ExitStatusExt;

use util::service::{args, start};
use util::{hetch, tempdir, with_stdout_closed, Out, Tree};

#[test]
fn quiet_prints_nothing_on_success_and_still_what_failed() {
    let t = tempdir();
    let src = Tree::new(t.path().join("src"));
    src.file("a.bin", 100_000, 1).file("sub/b.txt", 500, 2);
    let dst = t.path().join("dst");
    for cmd in ["cp", "sync", "verify"] {
        let out = hetch(&args![cmd, "-q", &src.root, &dst], &[]);
        out.ok();
        let said = (out.stdout.as_str(), out.stderr.as_str());
        assert_eq!(said, ("", ""), "{out:?}");
    }
    // What differs and what fails is still said, one line each, and nothing more.
    std::fs::write(dst.join("a.bin"), b"changed").unwrap();
    let out = hetch(&args!["verify", "-q", &src.root, &dst], &[]);
    out.expect_code(3);
    let line = out.one_line();
    assert!(
        line.starts_with("hetch: differs:") && line.contains("a.bin"),
        "{out:?}"
    );
    let out = hetch(&args!["cp", "-q", "--no-clobber", &src.root, &dst], &[]);
    out.expect_code(3);
    let line = out.one_line();
    assert!(
        line.starts_with("hetch: error:") && line.contains("a.bin"),
        "{out:?}"
    );
}

/// Asserts that `out` ended as if by SIGPIPE, or with 0, and said nothing of it.
#[track_caller]
fn quietly_ended(out: &Out) {
    let by_sigpipe = out.status.signal() == Some(libc::SIGPIPE);
    let code = out.code();
    assert!(
        by_sigpipe || matches!(code, Some(0 | 141)),
        "not ended as by SIGPIPE\n{out:?}"
    );
    assert_eq!(out.stderr, "", "{out:?}");
}

#[test]
fn a_closed_standard_output_ends_commands_quietly() {
    let t = tempdir();
    let src = Tree::new(t.path().join("src"));
    for i in 0..50 {
        src.file(&format!("d/f{i}"), 1000, i);
    }
    quietly_ended(&with_stdout_closed(&args!["sum", &src.root], &[]));
    let dst = t.path().join("dst");
    quietly_ended(&with_stdout_closed(
        &args!["cp", "--json", &src.root, &dst],
        &[],
    ));
    util::assert_same_tree(&src.root, &dst);

    let svc = start(t.path());
    svc.job(&["ls"]).ok(); // pins the key (one line saying so)
    svc.job(&["submit", "run1", "copy"]).ok();
    for json in [&[][..], &["--json"]] {
        let mut a = args(&["job", "--service", &svc.addr, "ls"]);
        a.extend(args(json));
        quietly_ended(&with_stdout_closed(&a, &svc.env()));
    }
}

/// A standard error or output that cannot be written (a closed pipe, `/dev/full`)
/// never makes a command panic (issue 40): on success and on failure the exit code is
/// the command's own, and nothing says "panicked". Only a command that writes to an
/// unwritable standard output may end otherwise: by SIGPIPE (closed pipe), or with
/// exit code 1 and a line saying so (`/dev/full`).
#[test]
fn an_unwritable_stderr_or_stdout_never_panics() {
    use util::Output::{Captured, ClosedPipe, DevFull};
    let t = tempdir();
    let src = Tree::new(t.path().join("src"));
    src.file("a.bin", 100_000, 1).file("sub/b.txt", 500, 2);
    let (dst, missing) = (t.path().join("dst"), t.path().join("missing"));
    // (arguments, exit code, whether it writes to stdout)
    let cases = [
        (args!["cp", &src.root, &dst].to_vec(), 0, false), // its summary on stderr
        (args!["cp", "--json", &src.root, &dst].to_vec(), 0, true),
        (args!["cp", &missing, &dst].to_vec(), 1, false),
        (args!["sum", &src.root].to_vec(), 0, true),
        (args!["sum", &missing].to_vec(), 3, false),
        (args!["sum", "hetch://127.0.0.1/x"].to_vec(), 2, false), // usage, after parsing
    ];
    let outputs = [
        (Captured, ClosedPipe),
        (Captured, DevFull),
        (ClosedPipe, Captured),
        (DevFull, Captured),
        (ClosedPipe, ClosedPipe), // `2>&1 | true`
    ];
    for (a, code, writes) in &cases {
        for (stdout, stderr) in outputs {
            let out = util::with_outputs(a, &[], stdout, stderr);
            let by_sigpipe = out.status.signal() == Some(libc::SIGPIPE) || out.code() == Some(141);
            let ended_as_allowed = out.code() == Some(*code)
                || (*writes && stdout == ClosedPipe && by_sigpipe)
                || (*writes && stdout == DevFull && out.code() == Some(1));
            let said = format!("{stdout:?} {stderr:?}\n{out:?}");
            assert!(ended_as_allowed, "{said}");
            assert!(!out.stderr.contains("panicked"), "{said}");
            assert!(!out.stdout.contains("panicked"), "{said}");
        }
    }
    util::assert_same_tree(&src.root, &dst);
}
