//! Sessions opened in-process through the library, no binary spawned: a real server on
//! 127.0.0.1 over real TLS, pushes and pulls through the engine (over TLS and over plain
//! data streams, with blocks damaged in flight either way), and the hostile cases of a
//! wrong token, a wrong key and a client that never finishes the handshake. What the
//! command line adds (its flags, messages and exit codes) the binary's suite tests.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hetch_engine::{run_sink, run_source_from, DestSpec, Operand, Options, Report};
use hetch_net::PreAuthLimits;
use hetch_proto::{FilterRequest, Op};
use hetch_session::{open_session, session_request, ClientConfig, ServeConfig, ServeRoot, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A server on an OS-chosen port of 127.0.0.1 serving `root` with `limits` before
/// authentication; its address, fingerprint and token. It runs until the test's
/// runtime ends.
async fn serve(
    dir: &Path,
    root: &Path,
    limits: PreAuthLimits,
) -> (String, hetch_net::Fingerprint, Vec<u8>) {
    serve_with(dir, root, limits, Options::default()).await
}

/// [`serve`] with the server's engine options.
async fn serve_with(
    dir: &Path,
    root: &Path,
    limits: PreAuthLimits,
    engine: Options,
) -> (String, hetch_net::Fingerprint, Vec<u8>) {
    std::fs::create_dir_all(root).unwrap();
    let cfg = ServeConfig {
        root: ServeRoot::Local(root.to_path_buf()),
        listen: "127.0.0.1:0".into(),
        state_dir: dir.join("state"),
        token_file: None,
        socket: Default::default(),
        engine,
        limits,
        fair: Default::default(),
        metrics: None,
        relay: Default::default(),
    };
    let srv = Server::bind(cfg).await.unwrap();
    let addr = srv.addr.to_string();
    let fingerprint = srv.fingerprint;
    let token = std::fs::read(&srv.token_path).unwrap();
    tokio::spawn(srv.run());
    (addr, fingerprint, token.trim_ascii().to_vec())
}

fn client(dir: &Path, token: &[u8], fingerprint: hetch_net::Fingerprint) -> ClientConfig {
    ClientConfig {
        token: token.to_vec(),
        fingerprint: Some(fingerprint),
        known_hosts: Some(dir.join("known_hosts")),
        socket: Default::default(),
        timeout: Duration::from_secs(20),
        opened: Arc::default(),
        autotune: None,
        reuse: None,
    }
}

fn push(dest: &str, sources: u32) -> hetch_proto::SessionRequest {
    let op = Op::Push {
        dest: dest.as_bytes().to_vec(),
        sources,
    };
    request(op, &Options::default(), true)
}

/// The request of a session with `op`, two data streams, encrypted or not.
fn request(op: Op, opts: &Options, encrypt: bool) -> hetch_proto::SessionRequest {
    session_request(op, opts, 2, encrypt, None, FilterRequest::default())
}

/// Small blocks, so that a few files make many blocks; damaging the first `corrupt`
/// blocks this side sends (the engine's fault hook).
fn small_blocks(corrupt: u64) -> Options {
    Options {
        block_size: 64 << 10,
        corrupt_blocks: corrupt,
        ..Options::default()
    }
}

/// Pushes the local directory `src` to the server's root as `name`.
async fn push_tree(
    addr: &str,
    cfg: &ClientConfig,
    opts: Options,
    src: &Path,
    encrypt: bool,
) -> Report {
    let op = Op::Push {
        dest: Vec::new(),
        sources: 1,
    };
    let transport = open_session(addr, cfg, request(op, &opts, encrypt))
        .await
        .unwrap();
    let ops = vec![Operand::Local(src.to_path_buf())];
    run_source_from(opts, ops, transport, Arc::default())
        .await
        .unwrap()
}

/// Pulls `name` from the server's root into the local directory `into` (a `cp -r` of
/// one source into an existing directory).
async fn pull_tree(
    addr: &str,
    cfg: &ClientConfig,
    opts: Options,
    name: &str,
    into: &Path,
    encrypt: bool,
) -> Report {
    let sources = vec![name.as_bytes().to_vec()];
    let op = Op::Pull {
        sources: sources.clone(),
    };
    let transport = open_session(addr, cfg, request(op, &opts, encrypt))
        .await
        .unwrap();
    std::fs::create_dir_all(into).unwrap();
    let spec = DestSpec {
        path: into.to_path_buf(),
        sources: 1,
        trailing_slash: true,
        confine_to: None,
        as_operand: false,
    };
    let opts = Options {
        pulled: Some(sources),
        ..opts
    };
    run_sink(opts, spec, transport, Arc::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_opened_in_process_arrives_whole() {
    let t = tempfile::tempdir().unwrap();
    let (addr, fp, token) = serve(t.path(), &t.path().join("root"), Default::default()).await;
    let src = t.path().join("run7");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let big: Vec<u8> = (0..5_000_000u32)
        .map(|i| (i * 7 + i / 4099) as u8)
        .collect();
    std::fs::write(src.join("big"), &big).unwrap();
    std::fs::write(src.join("sub/small"), b"small").unwrap();

    let cfg = client(t.path(), &token, fp);
    let transport = open_session(&addr, &cfg, push("", 1)).await.unwrap();
    assert_eq!(transport.data.len(), 2);
    let ops = vec![Operand::Local(src.clone())];
    let report = run_source_from(Options::default(), ops, transport, Arc::default())
        .await
        .unwrap();
    assert_eq!(report.summary.failed, 0, "{:?}", report.errors);
    assert_eq!(std::fs::read(t.path().join("root/run7/big")).unwrap(), big);
    let small = std::fs::read(t.path().join("root/run7/sub/small")).unwrap();
    assert_eq!(small, b"small");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_or_key_opens_nothing() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let (addr, fp, token) = serve(t.path(), &root, Default::default()).await;
    // A token of the right length that is not the server's.
    let mut wrong = token.clone();
    wrong[0] ^= 1;
    let cfg = client(t.path(), &wrong, fp);
    let e = open_session(&addr, &cfg, push("", 1)).await.err().unwrap();
    let msg = format!("{e:#}");
    assert!(msg.contains(&addr), "{msg}");
    assert!(msg.to_lowercase().contains("token"), "{msg}");
    // The right token to a server whose key is not the pinned one: refused before the
    // token leaves the client.
    let other = tempfile::tempdir().unwrap();
    let (_, other_fp, _) =
        serve(other.path(), &other.path().join("root"), Default::default()).await;
    let cfg = client(t.path(), &token, other_fp);
    let e = open_session(&addr, &cfg, push("", 1)).await.err().unwrap();
    let msg = format!("{e:#}");
    assert!(msg.contains(&fp.to_string()), "{msg}");
    // Nothing was written by either attempt.
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_the_handshake_is_dropped() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let limits = PreAuthLimits {
        deadline: Duration::from_secs(1),
        ..Default::default()
    };
    let (addr, fp, token) = serve(t.path(), &root, limits).await;
    // Through TLS and the preambles, then silence where the hello should be.
    let tls = hetch_net::TlsClient::new(&addr, hetch_net::Trust::Pinned(fp)).unwrap();
    let (mut silent, _, _) = hetch_net::connect_keyed(&addr, &Default::default(), Some(&tls))
        .await
        .unwrap();
    let mut preamble = [0u8; hetch_proto::PREAMBLE_LEN];
    silent.read_exact(&mut preamble).await.unwrap();
    hetch_proto::check_preamble(&preamble).unwrap();
    silent.write_all(&hetch_proto::preamble()).await.unwrap();
    silent.flush().await.unwrap();
    // The server hangs up once the pre-authentication deadline passes: the read ends
    // (end of stream, or an error for a TLS session cut short) with nothing said. The
    // outer timeout only keeps a server that never hangs up from hanging the test.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(120), silent.read_to_end(&mut rest))
        .await
        .expect("the server never dropped a client that did not authenticate");
    assert!(rest.is_empty(), "{rest:?}");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // The server goes on serving: a real client opens a session.
    let cfg = client(t.path(), &token, fp);
    open_session(&addr, &cfg, push("", 1)).await.unwrap();
}

/// Blocks damaged in flight, by the client as a pushing source and by the server as a
/// pulled one, are each found by the receiving side, asked for again once, and the
/// copies come out identical; a second push finds everything in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_damaged_in_flight_either_way_are_sent_again() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("mixed");
    hetch_testkit::tree::mixed_tree(&src);
    let root = t.path().join("root");
    let damaging = small_blocks(3);
    let (addr, fp, token) = serve_with(t.path(), &root, Default::default(), damaging).await;
    let cfg = client(t.path(), &token, fp);

    let pushed = push_tree(&addr, &cfg, small_blocks(3), &src, true).await;
    assert_eq!(pushed.summary.failed, 0, "{:?}", pushed.errors);
    assert_eq!(pushed.summary.retried_blocks, 3, "{:?}", pushed.summary);
    hetch_testkit::tree::assert_same_tree(&src, &root.join("mixed"));

    let back = t.path().join("back");
    let pulled = pull_tree(&addr, &cfg, small_blocks(0), "mixed", &back, true).await;
    assert_eq!(pulled.summary.failed, 0, "{:?}", pulled.errors);
    assert_eq!(pulled.summary.retried_blocks, 3, "{:?}", pulled.summary);
    hetch_testkit::tree::assert_same_tree(&src, &back.join("mixed"));

    let again = push_tree(&addr, &cfg, small_blocks(0), &src, true).await;
    assert_eq!(again.summary.bytes, 0, "{:?}", again.summary);
    assert!(again.summary.skipped > 0, "{:?}", again.summary);
}

/// A damaged block is repaired from the one patch that differs, not sent whole: the
/// source damages the first byte of its first three 64 KiB blocks after hashing them
/// (as a link would), the sink finds each when it reads the block back, and asks for
/// it in 4 KiB patches; over TLS and over plain data streams, pushed and pulled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_block_is_repaired_from_the_patch_that_differs() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("one");
    std::fs::create_dir(&src).unwrap();
    let body: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(src.join("f"), &body).unwrap();
    let root = t.path().join("root");
    let (addr, fp, token) = serve_with(t.path(), &root, Default::default(), small_blocks(3)).await;
    let cfg = client(t.path(), &token, fp);
    let repaired = |r: &Report, how: &str| {
        let s = &r.summary;
        assert_eq!(s.failed, 0, "{how}: {:?}", r.errors);
        assert_eq!(s.retried_blocks, 3, "{how}: {s:?}");
        assert_eq!(s.failed_read_back, 3, "{how}: found when read back: {s:?}");
        assert_eq!(s.repaired_blocks, 3, "{how}: {s:?}");
        assert_eq!(
            s.patch_bytes,
            3 * 4096,
            "{how}: one 4 KiB patch each: {s:?}"
        );
    };
    for encrypt in [true, false] {
        let into = root.join(format!("pushed-{encrypt}"));
        std::fs::create_dir_all(&into).unwrap();
        let op = Op::Push {
            dest: format!("pushed-{encrypt}").into_bytes(),
            sources: 1,
        };
        let opts = small_blocks(3);
        let transport = open_session(&addr, &cfg, request(op, &opts, encrypt))
            .await
            .unwrap();
        let ops = vec![Operand::Local(src.clone())];
        let r = run_source_from(opts, ops, transport, Arc::default())
            .await
            .unwrap();
        repaired(&r, &format!("push, encrypt {encrypt}"));
        assert_eq!(std::fs::read(into.join("one/f")).unwrap(), body);
    }
    let back = t.path().join("back");
    let pulled = pull_tree(
        &addr,
        &cfg,
        small_blocks(0),
        "pushed-false/one",
        &back,
        false,
    )
    .await;
    repaired(&pulled, "pull");
    assert_eq!(std::fs::read(back.join("one/f")).unwrap(), body);
}

/// A TCP relay on 127.0.0.1 in front of `upstream` that breaks connections as a bad
/// link would: connection `n` (in the order they came, from 0), if `cut_at(n)` says
/// so, is closed at both ends at once once it has carried that many bytes (both ways;
/// the last chunk cut short to it), mid-record as it happens, until `cuts` have been
/// cut. Its address, and how many it cut.
async fn breaking_relay(
    upstream: String,
    cut_at: impl Fn(usize) -> Option<u64> + Send + 'static,
    cuts: usize,
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let cut = Arc::new(AtomicUsize::new(0));
    let made = cut.clone();
    tokio::spawn(async move {
        for n in 0.. {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
            let (cut, limit) = (cut.clone(), cut_at(n).unwrap_or(u64::MAX));
            tokio::spawn(async move {
                let carried = Arc::new(AtomicU64::new(0));
                let over = Arc::new(tokio::sync::Notify::new());
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                // Copies one way, counting; at the limit, takes a cut if one is left.
                let pipe = |mut r: tokio::net::tcp::OwnedReadHalf,
                            mut w: tokio::net::tcp::OwnedWriteHalf| {
                    let (carried, over, cut) = (carried.clone(), over.clone(), cut.clone());
                    async move {
                        let mut buf = vec![0u8; 16 << 10];
                        loop {
                            let n = match r.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n as u64,
                            };
                            let before = carried.fetch_add(n, SeqCst);
                            let breaks = before + n >= limit
                                && cut
                                    .fetch_update(SeqCst, SeqCst, |c| (c < cuts).then_some(c + 1))
                                    .is_ok();
                            let pass = if breaks {
                                limit.saturating_sub(before).min(n)
                            } else {
                                n
                            };
                            if w.write_all(&buf[..pass as usize]).await.is_err() {
                                return;
                            }
                            if breaks {
                                over.notify_one();
                                return;
                            }
                        }
                    }
                };
                let up = tokio::spawn(pipe(cr, sw));
                let down = tokio::spawn(pipe(sr, cw));
                over.notified().await;
                // Both directions dropped: both peers see the connection end.
                up.abort();
                down.abort();
            });
        }
    });
    (addr, made)
}

/// `dir/big/f`, `mib` MiB of bytes that do not repeat within a block; its bytes.
fn big_file(dir: &Path, mib: u32) -> Vec<u8> {
    std::fs::create_dir(dir.join("big")).unwrap();
    let body: Vec<u8> = (0..mib << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    std::fs::write(dir.join("big/f"), &body).unwrap();
    body
}

/// Blocks of 256 KiB: many frames per MiB, so that a break lands in one.
fn quarter_mib_blocks() -> Options {
    Options {
        block_size: 256 << 10,
        ..Options::default()
    }
}

/// A data stream broken mid-transfer (a damaged TLS record, a reset) is joined again
/// on a new connection and its session goes on: the sink says what arrived, the
/// source sends the rest again. Pushed over TLS, pulled over plain streams, four
/// connections broken each time; one session, the copies identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_data_stream_is_joined_again_and_the_session_goes_on() {
    let t = tempfile::tempdir().unwrap();
    let (src, body, root) = (
        t.path().join("big"),
        big_file(t.path(), 24),
        t.path().join("root"),
    );
    let (addr, fp, token) = serve(t.path(), &root, Default::default()).await;
    let cfg = client(t.path(), &token, fp);
    let opts = quarter_mib_blocks;
    let check = |r: &Report, cuts: usize, how: &str| {
        let s = &r.summary;
        assert_eq!(s.failed, 0, "{how}: {:?}", r.errors);
        assert_eq!(cuts, 4, "{how}: the relay broke four connections");
        assert_eq!(s.streams_rejoined, 4, "{how}: {s:?}");
    };

    let (relay, cut) = breaking_relay(addr.clone(), |_| Some(3 << 20), 4).await;
    let pushed = push_tree(&relay, &cfg, opts(), &src, true).await;
    check(
        &pushed,
        cut.load(std::sync::atomic::Ordering::SeqCst),
        "push over TLS",
    );
    assert_eq!(std::fs::read(root.join("big/f")).unwrap(), body);

    let (relay, cut) = breaking_relay(addr, |_| Some(3 << 20), 4).await;
    let back = t.path().join("back");
    let pulled = pull_tree(&relay, &cfg, opts(), "big", &back, false).await;
    check(
        &pulled,
        cut.load(std::sync::atomic::Ordering::SeqCst),
        "pull, plain",
    );
    assert_eq!(std::fs::read(back.join("big/f")).unwrap(), body);
}

/// The connection that joins a lost stream again crosses the same bad link, and can
/// break too: in its handshake (the client tries again, with the generation after),
/// or right after it. The session still goes on, pushed over TLS and pulled over
/// plain streams: connection 1 (a data stream) breaks after 2 MiB, connection 3 (the
/// first attempt to join it again) within its first 40 bytes, connection 4 (the
/// next) after 76 (mid-handshake over TLS; over plain TCP just when the server has
/// the hello and the client the server's preamble: joined, then lost at once), and
/// the copies are identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_joining_again_breaks_too_is_joined_once_more() {
    let t = tempfile::tempdir().unwrap();
    let (src, body, root) = (
        t.path().join("big"),
        big_file(t.path(), 12),
        t.path().join("root"),
    );
    let (addr, fp, token) = serve(t.path(), &root, Default::default()).await;
    let cfg = client(t.path(), &token, fp);
    let opts = quarter_mib_blocks;
    let plan = |n| match n {
        1 => Some(2 << 20),
        3 => Some(40),
        4 => Some(76),
        _ => None,
    };
    let (relay, cut) = breaking_relay(addr.clone(), plan, 3).await;
    let pushed = push_tree(&relay, &cfg, opts(), &src, true).await;
    assert_eq!(pushed.summary.failed, 0, "{:?}", pushed.errors);
    assert_eq!(cut.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(std::fs::read(root.join("big/f")).unwrap(), body);

    let (relay, cut) = breaking_relay(addr, plan, 3).await;
    let back = t.path().join("back");
    let pulled = pull_tree(&relay, &cfg, opts(), "big", &back, false).await;
    assert_eq!(pulled.summary.failed, 0, "{:?}", pulled.errors);
    assert_eq!(
        cut.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "{:?}",
        pulled.summary
    );
    assert_eq!(std::fs::read(back.join("big/f")).unwrap(), body);
}

/// Plain data streams (control still over TLS) carry a push and a pull whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_data_streams_carry_a_push_and_a_pull() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("plain");
    hetch_testkit::tree::mixed_tree(&src);
    let root = t.path().join("root");
    let (addr, fp, token) = serve(t.path(), &root, Default::default()).await;
    let cfg = client(t.path(), &token, fp);
    let pushed = push_tree(&addr, &cfg, small_blocks(0), &src, false).await;
    assert_eq!(pushed.summary.failed, 0, "{:?}", pushed.errors);
    hetch_testkit::tree::assert_same_tree(&src, &root.join("plain"));
    let back = t.path().join("back");
    let pulled = pull_tree(&addr, &cfg, small_blocks(0), "plain", &back, false).await;
    assert_eq!(pulled.summary.failed, 0, "{:?}", pulled.errors);
    hetch_testkit::tree::assert_same_tree(&src, &back.join("plain"));
}

/// A client that keeps its sessions: pushes and pulls one after another, over TLS and
/// over plain data streams (each operation with its own frame MAC key), with blocks
/// damaged in flight, all arrive whole over the connections of the first session of
/// each kind; the server counts the operations it ran on kept connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_sessions_carry_one_operation_after_another() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("kept");
    hetch_testkit::tree::mixed_tree(&src);
    let root = t.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let cfg = ServeConfig {
        root: ServeRoot::Local(root.clone()),
        listen: "127.0.0.1:0".into(),
        state_dir: t.path().join("state"),
        token_file: None,
        socket: Default::default(),
        engine: small_blocks(2),
        limits: Default::default(),
        fair: Default::default(),
        metrics: Some("127.0.0.1:0".into()),
        relay: Default::default(),
    };
    let srv = Server::bind(cfg).await.unwrap();
    let (addr, fp) = (srv.addr.to_string(), srv.fingerprint);
    let metrics = srv.metrics_addr.unwrap();
    let token = std::fs::read(&srv.token_path).unwrap();
    tokio::spawn(srv.run());
    let pool = Arc::new(hetch_session::SessionPool::new());
    let cfg = ClientConfig {
        reuse: Some(pool.clone()),
        ..client(t.path(), token.trim_ascii(), fp)
    };
    for encrypt in [true, false] {
        let back = t.path().join(format!("back-{encrypt}"));
        let pushed = push_tree(&addr, &cfg, small_blocks(0), &src, encrypt).await;
        assert_eq!(pushed.summary.failed, 0, "{:?}", pushed.errors);
        let pulled = pull_tree(&addr, &cfg, small_blocks(0), "kept", &back, encrypt).await;
        // The server's engine damages its first blocks sent in each operation: the
        // pull finds them, as in a session of its own.
        assert_eq!(pulled.summary.failed, 0, "{:?}", pulled.errors);
        assert_eq!(pulled.summary.retried_blocks, 2, "{:?}", pulled.summary);
        hetch_testkit::tree::assert_same_tree(&src, &back.join("kept"));
        std::fs::remove_dir_all(root.join("kept")).unwrap();
        let again = push_tree(&addr, &cfg, small_blocks(1), &src, encrypt).await;
        assert_eq!(again.summary.retried_blocks, 1, "{:?}", again.summary);
        hetch_testkit::tree::assert_same_tree(&src, &root.join("kept"));
    }
    // Three operations of each kind of stream, the first of each on new connections.
    assert_eq!(cfg.opened.load(std::sync::atomic::Ordering::Relaxed), 6);
    assert_eq!(pool.reused(), 4);
    let text = scrape(metrics).await;
    assert!(
        text.lines()
            .any(|l| l == "hetch_serve_sessions_reused_total 4"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "hetch_serve_sessions_ended_total{op=\"push\",outcome=\"ok\"} 4"),
        "{text}"
    );
}

/// The server's `/metrics` text at `addr`.
async fn scrape(addr: std::net::SocketAddr) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    text
}
