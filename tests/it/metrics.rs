//! `hetch serve --metrics ADDR` end to end: the real server, real `hetch cp` pushes,
//! pulls and relays, and every scrape read by a real Prometheus text-format parser. The counters
//! equal what the clients moved, bytes advance while a session runs, a wrong token is
//! counted, and nothing a client chose (paths, its address) shows in the exposition.
//! (`hetch worker --metrics` is tested with the service, in tests/it/service.rs.)

use crate::util;

use hetch_testkit::prometheus::Scrape;
use util::*;

/// A name no exposition may ever hold: it is only ever a path a client pushed.
const MARKER: &str = "zq-client-chose-this";

/// One session of `op` ended well, and what it moved in `direction` is what its
/// client's summary says.
fn assert_one_session(m: &Scrape, op: &str, direction: &str, moved: &Summary) {
    let ok = [("op", op), ("outcome", "ok")];
    assert_eq!(m.value("hetch_serve_sessions_ended_total", &ok), 1);
    let way = [("direction", direction)];
    assert_eq!(m.value("hetch_serve_bytes_total", &way), moved.bytes);
    assert_eq!(m.value("hetch_serve_files_total", &way), moved.files);
}

/// `hetch serve --metrics 127.0.0.1:0` with `extra` flags, its root and state in `dir`;
/// the server and the metrics address it printed.
fn serve_with_metrics(dir: &std::path::Path, extra: &[&str]) -> (Server, String) {
    let flags = [&["--metrics", "127.0.0.1:0"][..], extra].concat();
    let srv = Server::start_with(&dir.join("root"), &dir.join("state"), &flags, &[]);
    let addr = srv.metrics_addr();
    (srv, addr)
}

#[test]
fn serve_metrics_count_what_sessions_moved_and_refused_tokens() {
    let dir = tempdir();
    let src = Tree::new(dir.path().join("src"));
    src.file("a.bin", 300_000, 1)
        .file("sub/b.bin", 70_001, 2)
        .bytes("empty", b"")
        .bytes(&format!("{MARKER}/x\"}} 9"), b"forged_total 1\n");
    let (srv, addr) = serve_with_metrics(dir.path(), &[]);
    let (m, _) = scrape(&addr);
    assert_eq!(m.value("hetch_serve_sessions_running", &[]), 0);
    assert_eq!(m.kind("hetch_serve_sessions_running"), "gauge");
    assert_eq!(m.sum("hetch_serve_bytes_total"), 0);

    let pushed = srv
        .cp(&args!["--json", &src.root, srv.url("in/")])
        .ok()
        .json();
    assert!(pushed.files >= 4 && pushed.bytes >= 370_001, "{pushed:?}");
    let (m, _) = scrape(&addr);
    assert_one_session(&m, "push", "received", &pushed);
    assert_eq!(m.kind("hetch_serve_bytes_total"), "counter");
    assert_eq!(m.value("hetch_serve_files_failed_total", &[]), 0);

    let out = dir.path().join("out");
    let pulled = srv
        .cp(&args!["--json", srv.url("in/src"), &out])
        .ok()
        .json();
    let (m, _) = scrape(&addr);
    assert_one_session(&m, "pull", "sent", &pulled);
    assert_eq!(pulled.bytes, pushed.bytes);

    // A wrong token: refused, counted, and not a session.
    let wrong = "0123456789abcdef0123456789abcdef";
    srv.cp_env(
        &args![src.path("a.bin"), srv.url("w")],
        &[("HETCH_TOKEN", wrong)],
    )
    .failed()
    .one_line_naming(&["token"]);
    // A pull of nothing: a session that ends in an error.
    srv.cp(&args![srv.url("nothing-zq"), dir.path().join("none")])
        .failed();
    let (m, body) = scrape(&addr);
    let push_ok = [("op", "push"), ("outcome", "ok")];
    let wrong = [("reason", "wrong")];
    assert_eq!(m.value("hetch_serve_tokens_refused_total", &wrong), 1);
    assert!(m.value("hetch_serve_unauthenticated_total", &[]) >= 1);
    assert_eq!(m.value("hetch_serve_sessions_running", &[]), 0);
    assert_eq!(m.value("hetch_serve_sessions_ended_total", &push_ok), 1);
    let pull_failed = [("op", "pull"), ("outcome", "failed")];
    assert_eq!(m.value("hetch_serve_sessions_ended_total", &pull_failed), 1);

    // Nothing a client chose or is: labels only from the sets the server writes.
    for leaked in [MARKER, "forged", "127.0.0.1", "nothing-zq", &srv.token] {
        assert!(!body.contains(leaked), "{leaked:?} in\n{body}");
    }
    let allowed = [
        ("op", &["push", "pull", "relay"][..]),
        ("outcome", &["ok", "failed"]),
        ("direction", &["received", "sent"]),
        ("reason", &["wrong", "throttled"]),
        (
            "cap",
            &[
                "streams",
                "address_sessions",
                "address_connections",
                "sessions",
                "connections",
                "address_idle",
                "idle",
            ],
        ),
    ];
    for s in &m.samples {
        assert!(s.name.starts_with("hetch_serve_"), "{s:?}");
        for (k, v) in &s.labels {
            let set = allowed.iter().find(|(name, _)| name == k);
            assert!(set.is_some_and(|(_, vs)| vs.contains(&v.as_str())), "{s:?}");
        }
    }
}

/// Bytes count while a session runs, not only at its end (so that rate() is the
/// throughput): a push slowed by its rate limit is seen part way, still running.
#[test]
fn serve_metrics_count_bytes_while_a_session_runs() {
    let dir = tempdir();
    let src = Tree::new(dir.path().join("src"));
    let size = 3 << 20;
    src.file("slow.bin", size, 7);
    let (srv, addr) = serve_with_metrics(dir.path(), &[]);
    let push = srv.spawn_cp(
        &args![
            "--rate-limit",
            "1M",
            "--block-size",
            "64K",
            src.path("slow.bin"),
            srv.url("slow.bin")
        ],
        &[],
    );
    let received = [("direction", "received")];
    wait_for("bytes counted part way through the push", || {
        let (m, _) = scrape(&addr);
        let bytes = m.value("hetch_serve_bytes_total", &received);
        let running = m.value("hetch_serve_sessions_running", &[]);
        assert!(
            bytes < size || running == 0,
            "more than the file while running"
        );
        running == 1 && bytes > 0 && bytes < size
    });
    push.wait().ok();
    let (m, _) = scrape(&addr);
    assert_eq!(m.value("hetch_serve_bytes_total", &received), size);
    assert_eq!(m.value("hetch_serve_sessions_running", &[]), 0);
}

/// A copy between two servers: the source server counts a relay session and what it
/// sent, the destination a push and what it received, each what the client was told.
#[test]
fn serve_metrics_count_a_relay_at_both_servers() {
    let dir = tempdir();
    let (b, b_metrics) = serve_with_metrics(&dir.path().join("b"), &[]);
    let (a, a_metrics) = serve_with_metrics(&dir.path().join("a"), &["--relay-to", &b.addr]);
    Tree::new(a.root.join("run1"))
        .file("one.bin", 200_000, 3)
        .file(&format!("{MARKER}/two.bin"), 1234, 4);
    let relay = relay_args(&a, &b, "run1", "copy/", &[]);
    let s = hetch(&os_args(&relay), &[("HETCH_TOKEN", &a.token)])
        .ok()
        .json();
    assert_eq!(s.bytes, 201_234, "{s:?}");
    let (m, body) = scrape(&a_metrics);
    assert_one_session(&m, "relay", "sent", &s);
    assert!(!body.contains(MARKER) && !body.contains(&b.addr), "{body}");
    assert_one_session(&scrape(&b_metrics).0, "push", "received", &s);
    assert_same_tree(&a.root.join("run1"), &b.root.join("copy/run1"));
}

/// Connections over the limits on unauthenticated connections are counted as refused,
/// and those admitted that never authenticate (closed by the client, or by the server
/// once --auth-timeout is up) as such.
#[test]
fn serve_metrics_count_connections_refused_before_authentication() {
    let dir = tempdir();
    let limits = [
        "--max-unauthenticated-per-address",
        "1",
        "--auth-timeout",
        "1",
    ];
    let (srv, addr) = serve_with_metrics(dir.path(), &limits);
    // Holds the one slot without a word.
    let held = std::net::TcpStream::connect(&srv.addr).unwrap();
    wait_for("a second connection refused and counted", || {
        drop(std::net::TcpStream::connect(&srv.addr));
        let (m, _) = scrape(&addr);
        m.value("hetch_serve_connections_refused_total", &[]) >= 1
    });
    wait_for("connections that never authenticated counted", || {
        let (m, _) = scrape(&addr);
        m.value("hetch_serve_unauthenticated_total", &[]) >= 1
    });
    drop(held);
}

/// An address that cannot be bound stops the server at once, with one line naming it.
#[test]
fn serve_metrics_on_a_taken_address_is_one_line_naming_it() {
    let dir = tempdir();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let out = hetch(
        &args![
            "serve",
            "--root",
            &root,
            "--state-dir",
            dir.path().join("state"),
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            &addr
        ],
        &[],
    );
    out.failed().one_line_naming(&[&addr, "metrics"]);
}
