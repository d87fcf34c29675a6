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
