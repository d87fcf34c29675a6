//! `hetch job`'s command line against a real `hetch service` on 127.0.0.1: the
//! `--service` forms it takes (what the service prints, a host alone for the default
//! port) and refuses (bad usage, one line naming the value), a changed service key
//! explained as `hetch cp` explains a server's, and `wait` through a restart of the
//! service, with its own exit code once the service stays away.

use crate::util;

use util::service::{args, free_port, launch, start, submit};
use util::{hetch, spawn, wait_for};

#[test]
fn service_is_taken_as_it_prints_itself_and_anything_else_is_bad_usage() {
    let dir = tempfile::tempdir().unwrap();
    let svc = start(dir.path());
    let env = svc.env();
    let ls = |service: &str| hetch(&args(&["job", "--service", service, "ls"]), &env);
    for given in [
        format!("https://{}", svc.addr),
        format!("https://{}/", svc.addr),
        svc.addr.clone(),
    ] {
        ls(&given).ok();
    }
    let port = svc.addr.rsplit(':').next().unwrap();
    for bad in [
        format!("http://{}", svc.addr),
        format!("https://{}/api/jobs", svc.addr),
        format!("{}/x", svc.addr),
        "127.0.0.1:0".to_string(),
        format!("[::1:{port}"),
        "not a host".to_string(),
    ] {
        ls(&bad)
            .expect_code(2)
            .one_line_naming(&["--service", &bad]);
        let worker = args(&["worker", "--service", &bad, "--root", "/nonexistent"]);
        hetch(&worker, &env)
            .expect_code(2)
            .one_line_naming(&["--service", &bad]);
    }
    // A host alone is the service's default port.
    let default = std::net::TcpListener::bind("127.0.0.1:7879").map(drop);
    if default.is_err() {
        return util::skipped("127.0.0.1:7879, the service's default port, is taken");
    }
    let other = tempfile::tempdir().unwrap();
    let on_default = launch(other.path(), "127.0.0.1:7879", &[]);
    let env = on_default.env();
    for given in ["127.0.0.1", "https://127.0.0.1", "https://127.0.0.1/"] {
        hetch(&args(&["job", "--service", given, "ls"]), &env).ok();
    }
}

#[test]
fn a_changed_service_key_is_explained_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let svc = start(dir.path());
    let zeros = format!("sha256:{}", "00".repeat(32));
    let known = dir.path().join("config/known_hosts");
    std::fs::create_dir_all(known.parent().unwrap()).unwrap();
    std::fs::write(&known, format!("{} {zeros}\n", svc.addr)).unwrap();
    for cmd in [&["ls"][..], &["wait", "0123456789abcdef"]] {
        let out = svc.job(cmd);
        let line = out.expect_code(1).one_line_naming(&[
            "HOST KEY CHANGED",
            &svc.addr,
            &zeros,
            "remove its line from",
            &known.display().to_string(),
        ]);
        assert!(!line.contains("PinMismatch"), "{out:?}");
    }
    let pinned = args(&["job", "--service", &svc.addr, "--fingerprint", &zeros, "ls"]);
    let out = hetch(&pinned, &svc.env());
    out.expect_code(1)
        .one_line_naming(&[&svc.addr, "given with --fingerprint"]);
}

/// `hetch job wait` on a job of a service that is killed and started again (same
/// state and database) still ends with the job's end; with the service gone for good,
/// it gives up after `--retry-for` with exit code 4, as every `hetch job` command does
/// that cannot reach the service.
#[test]
fn wait_outlasts_a_restart_of_the_service_and_has_its_own_code_when_it_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut svc = launch(dir.path(), &listen, &[]);
    svc.job(&["ls"]).ok(); // pins the key
                           // No worker yet: the job waits, queued.
    let id = submit(&svc, &["run1", "copy"]);
    let waiting = spawn(
        &args(&["job", "--service", &listen, "wait", &id]),
        &svc.env(),
    );
    svc.proc.kill9();
    wait_for("wait to find the service gone", || {
        waiting.stderr_so_far().contains("asking again")
    });
    let svc = launch(dir.path(), &listen, &[]);
    let worker = svc.worker(dir.path(), "w");
    let out = waiting.wait();
    out.ok();
    assert!(out.stdout.contains("done"), "{out:?}");
    util::assert_same_tree(
        &dir.path().join("root/run1"),
        &dir.path().join("root/copy/run1"),
    );

    let (token, config) = (svc.token.clone(), svc.config.clone());
    let env = [
        ("HETCH_TOKEN", &token[..]),
        ("HETCH_CONFIG_DIR", &config[..]),
    ];
    drop((worker, svc));
    let wait = args(&[
        "job",
        "--service",
        &listen,
        "wait",
        &id,
        "--retry-for",
        "1s",
    ]);
    let out = hetch(&wait, &env);
    out.expect_code(4);
    assert!(out.stderr.contains(&listen), "{out:?}");
    let ls = hetch(&args(&["job", "--service", &listen, "ls"]), &env);
    ls.expect_code(4).one_line_naming(&[&listen]);
}
