//! Authentication and pre-authentication limits against a real `hetch serve`: the token
//! never travels outside TLS, plain data streams are MAC-protected, strangers cannot
//! exhaust the server, and token guessing is throttled.

use crate::util;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hetch_proto::{
    encode, preamble, Frame, FrameKind, Hello, IntegrityRequest, Op, Schedule, SessionRequest,
    Verify, DATA_FIXED_LEN, HEADER_LEN, SESSION_ID_LEN, STREAM_PROOF_LEN,
};
use util::*;

/// Bytes of the tag after each frame on a plain data stream.
const MAC_LEN: usize = hetch_engine::wire::MAC_LEN;

/// What a relay does to the bytes of a plain (non-TLS) connection, client to server
/// and server to client.
#[derive(Clone, Copy, PartialEq)]
enum Tamper {
    Nothing,
    /// Flips a byte of the first data frame's digest and one of its payload.
    ClientToServer,
    ServerToClient,
}

/// A TCP relay on 127.0.0.1 in front of `upstream` that records every byte it passes,
/// in both directions, and may alter plain data streams.
struct Relay {
    addr: String,
    capture: Arc<Mutex<Vec<u8>>>,
}

impl Relay {
    fn start(upstream: &str, tamper: Tamper) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let capture = Arc::new(Mutex::new(Vec::new()));
        let upstream = upstream.to_string();
        let cap = capture.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    return;
                };
                let mut first = [0u8; 1];
                let plain = matches!(client.peek(&mut first), Ok(1) if first[0] != 0x16);
                let pipe = |from: &TcpStream, to: &TcpStream, tamper_here: bool, skip| {
                    let (from, to, cap) = (
                        from.try_clone().unwrap(),
                        to.try_clone().unwrap(),
                        cap.clone(),
                    );
                    std::thread::spawn(move || {
                        if tamper_here {
                            tamper_frames(&from, &to, skip, &cap);
                        }
                        copy(&from, &to, &cap);
                    });
                };
                // Client to server, a plain stream starts with preamble and data hello;
                // server to client, with the server's preamble and welcome.
                let hello = 8 + HEADER_LEN + 1 + SESSION_ID_LEN + 2 + 4 + STREAM_PROOF_LEN;
                let mut welcome = Vec::new();
                hetch_proto::encode(
                    &hetch_proto::Frame::Welcome(hetch_proto::Welcome {
                        session: [0; SESSION_ID_LEN],
                        server: format!("hetch {}", env!("CARGO_PKG_VERSION")),
                    }),
                    &mut welcome,
                );
                pipe(
                    &client,
                    &server,
                    plain && tamper == Tamper::ClientToServer,
                    hello,
                );
                pipe(
                    &server,
                    &client,
                    plain && tamper == Tamper::ServerToClient,
                    8 + welcome.len(),
                );
            }
        });
        Relay { addr, capture }
    }

    fn captured(&self) -> Vec<u8> {
        self.capture.lock().unwrap().clone()
    }
}

/// Copies until end of stream, recording.
fn copy(mut from: &TcpStream, mut to: &TcpStream, cap: &Mutex<Vec<u8>>) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                cap.lock().unwrap().extend_from_slice(&buf[..n]);
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Reads `n` bytes, records them, flips the bytes at `flip` and forwards them.
fn pass(
    mut from: &TcpStream,
    mut to: &TcpStream,
    cap: &Mutex<Vec<u8>>,
    n: usize,
    flip: &[usize],
) -> bool {
    let mut b = vec![0u8; n];
    if from.read_exact(&mut b).is_err() {
        return false;
    }
    cap.lock().unwrap().extend_from_slice(&b);
    for &i in flip {
        b[i] ^= 0x01;
    }
    to.write_all(&b).is_ok()
}

/// Passes `skip` bytes, then frames until the first data frame, which it forwards with
/// one digest byte and one payload byte flipped.
fn tamper_frames(from: &TcpStream, to: &TcpStream, skip: usize, cap: &Mutex<Vec<u8>>) {
    if !pass(from, to, cap, skip, &[]) {
        return;
    }
    loop {
        let mut h = [0u8; HEADER_LEN];
        if (&mut &*from).read_exact(&mut h).is_err() {
            return;
        }
        cap.lock().unwrap().extend_from_slice(&h);
        let _ = (&mut &*to).write_all(&h);
        let len = u32::from_le_bytes(h[..4].try_into().unwrap()) as usize;
        if h[4] != FrameKind::Data as u8 {
            if !pass(from, to, cap, len + MAC_LEN, &[]) {
                return;
            }
            continue;
        }
        let payload = len - DATA_FIXED_LEN;
        // The digest follows the file id and block index.
        let digest_byte = 16;
        let flips: Vec<usize> = if payload > 0 {
            vec![digest_byte, DATA_FIXED_LEN + MAC_LEN + payload / 2]
        } else {
            vec![digest_byte]
        };
        pass(from, to, cap, DATA_FIXED_LEN + MAC_LEN + payload, &flips);
        return;
    }
}

/// Whether `needle` occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A `--no-encrypt` push and pull through a relay: the token appears nowhere in what
/// the relay saw (the control connection is TLS, the data streams carry no token),
/// while the plain file contents do (so the capture really holds the data streams).
#[test]
fn no_encrypt_sessions_never_show_the_token() {
    let t = tempdir();
    let src = Tree::new(t.path().join("src"));
    src.file("f", 300_000, 1);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let relay = Relay::start(&srv.addr, Tamper::Nothing);
    let url = |p: &str| format!("hetch://{}/{p}", relay.addr);
    srv.cp(&args![
        "--no-encrypt",
        "--streams",
        "3",
        src.path("f"),
        url("f")
    ])
    .ok();
    let pulled = t.path().join("pulled");
    srv.cp(&args!["--no-encrypt", "--streams", "2", url("f"), &pulled])
        .ok();
    assert_eq!(hash_file(&pulled), hash_file(&src.path("f")));
    let seen = relay.captured();
    let data = std::fs::read(src.path("f")).unwrap();
    assert!(
        contains(&seen, &data[1000..1032]),
        "data streams not captured"
    );
    assert!(
        !contains(&seen, srv.token.as_bytes()),
        "the token went in clear"
    );
    assert!(
        !contains(&seen, &srv.token.as_bytes()[..16]),
        "part of the token in clear"
    );
}

/// Plain TCP, preamble and a control hello: the reply bytes.
fn plain_control_hello(addr: &str, token: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(COMMAND_LIMIT)).unwrap();
    let mut bytes = preamble().to_vec();
    encode(
        &Frame::Hello(Hello::Control {
            token: token.to_vec(),
            request: SessionRequest {
                op: Op::Pull {
                    sources: vec![b"x".to_vec()],
                },
                streams: 1,
                encrypt_data: false,
                block_size: 1 << 20,
                congestion: None,
                send_buffer: 0,
                recv_buffer: 0,
                rate_limit: 0,
                no_clobber: false,
                fsync: false,
                integrity: IntegrityRequest {
                    checksum: "blake3".into(),
                    verify: Verify::Received,
                    schedule: Schedule::Block,
                    hash_threads: 0,
                    file_digests: false,
                    checksum_skip: false,
                    compare_only: false,
                    retry_changed: false,
                    trust_journal: false,
                },
                preserve_special_modes: false,
                specials: false,
                devices: false,
                hard_links: false,
                xattrs: false,
                acls: false,
                filter: Default::default(),
                delete: None,
                compression: Default::default(),
                dry_run: false,
                reuse: false,
                chosen_entries: false,
            },
        }),
        &mut bytes,
    );
    s.write_all(&bytes).unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    reply
}

/// A control hello on plain TCP is refused before its token is looked at: the right
/// token gets exactly the answer a wrong one gets, and such attempts do not count as
/// failed guesses.
#[test]
fn plain_control_hello_is_refused_whatever_the_token() {
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let right = plain_control_hello(&srv.addr, srv.token.as_bytes());
    let wrong = plain_control_hello(&srv.addr, b"a wrong token, long enough");
    assert_eq!(right, wrong);
    assert!(
        contains(&right, b"control connections must use TLS"),
        "{right:?}"
    );
    for _ in 0..8 {
        plain_control_hello(&srv.addr, b"a wrong token, long enough");
    }
    let src = Tree::new(t.path().join("src"));
    src.file("f", 1000, 2);
    srv.cp(&args![src.path("f"), srv.url("f")]).ok();
}

/// With `--verify none` (the receiver does not check payloads against digests), a
/// relay changes a plain data frame's digest and payload: the MAC catches it, the
/// session fails naming the integrity check, and no file appears under its final name.
#[test]
fn tampered_plain_data_frames_end_the_session() {
    let t = tempdir();
    let src = Tree::new(t.path().join("src"));
    src.file("f", 200_000, 3);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));

    // Push: the server's sink finds the bad frame, and reports it as damage; the client
    // opens a new session (the link may have done it), which finds nothing more
    // verified: no progress, and the retries end.
    let relay = Relay::start(&srv.addr, Tamper::ClientToServer);
    let out = srv.cp(&args![
        "--no-encrypt",
        "--verify",
        "none",
        "--retries",
        "1",
        src.path("f"),
        format!("hetch://{}/f", relay.addr)
    ]);
    out.failed();
    eprintln!(
        "TIMING push done {:?}\n{}",
        std::time::SystemTime::now(),
        out.stderr
    );
    assert!(out.stderr.contains("integrity check"), "{out:?}");
    assert!(!srv.root.join("f").exists(), "a tampered file was finished");

    // Pull: the client's sink does.
    std::fs::copy(src.path("f"), srv.root.join("g")).unwrap();
    let relay = Relay::start(&srv.addr, Tamper::ServerToClient);
    let dst = t.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    // The client takes a damaged stream for a lost session and opens a new one (each
    // as damaged); one retry shows that, without the whole backoff (1+2+4+8+16 s).
    let out = srv.cp(&args![
        "--no-encrypt",
        "--verify",
        "none",
        "--retries",
        "1",
        format!("hetch://{}/g", relay.addr),
        dst.join("g")
    ]);
    out.failed();
    eprintln!(
        "TIMING pull done {:?}\n{}",
        std::time::SystemTime::now(),
        out.stderr
    );
    assert!(out.stderr.contains("integrity check"), "{out:?}");
    assert!(!dst.join("g").exists(), "a tampered file was finished");

    // The same session without tampering goes through (the relay itself is harmless).
    let relay = Relay::start(&srv.addr, Tamper::Nothing);
    srv.cp(&args![
        "--no-encrypt",
        "--verify",
        "none",
        src.path("f"),
        format!("hetch://{}/f", relay.addr)
    ])
    .ok();
    assert_eq!(hash_file(&srv.root.join("f")), hash_file(&src.path("f")));
}

/// A TCP connection from `source` (any 127.x.y.z address) to `addr`.
fn connect_from(source: &str, addr: &str) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: SocketAddr = format!("{source}:0").parse().unwrap();
    sock.bind(&from.into()).unwrap();
    let to: SocketAddr = addr.parse().unwrap();
    sock.connect(&to.into()).unwrap();
    sock.into()
}

/// Open file descriptors of process `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

/// Hundreds of silent connections, and some that send one TLS byte and stop, do not
/// lock a legitimate client out: connections over the per-address cap are closed at
/// once (and logged in a few lines, not hundreds).
#[test]
fn silent_connections_do_not_lock_clients_out() {
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let mut held = Vec::new();
    for _ in 0..400 {
        held.push(connect_from("127.0.0.2", &srv.addr));
    }
    for _ in 0..20 {
        let mut s = connect_from("127.0.0.3", &srv.addr);
        s.write_all(&[0x16]).unwrap();
        held.push(s);
    }
    let src = Tree::new(t.path().join("src"));
    src.file("f", 100_000, 4);
    srv.cp(&args![src.path("f"), srv.url("f")]).ok();
    assert_eq!(hash_file(&srv.root.join("f")), hash_file(&src.path("f")));
    // The server holds at most its caps' worth of them (2 x 32), not 420.
    let open = fds(srv.pid());
    assert!(open < 150, "server has {open} descriptors open");
    let log = srv.log();
    let refusals = log
        .lines()
        .filter(|l| l.contains("refused 127.0.0."))
        .count();
    assert!(refusals >= 1, "refusals not logged:\n{log}");
    assert!(refusals <= 10, "refusals flood the log ({refusals} lines)");
    drop(held);
}

/// Connections announcing huge hello frames and sending megabytes after the header
/// make the server allocate nothing of the kind: they are refused at the header.
#[test]
fn huge_pre_auth_frames_do_not_grow_the_server() {
    let t = tempdir();
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let before = rss(srv.pid());
    let junk = vec![0x5au8; 4 << 20];
    let mut held = Vec::new();
    for i in 0..64 {
        // Several addresses, so that the per-address cap is not what stops them.
        let mut s = connect_from(&format!("127.0.1.{}", i % 8 + 1), &srv.addr);
        s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut head = preamble().to_vec();
        head.extend_from_slice(&((16u32 << 20) - 1).to_le_bytes());
        head.push(FrameKind::Hello as u8);
        let _ = s.write_all(&head);
        let _ = s.write_all(&junk);
        held.push(s);
    }
    let after = rss(srv.pid());
    let grown = after.saturating_sub(before);
    assert!(
        grown < 64 << 20,
        "server grew by {} MiB for 64 unauthenticated connections",
        grown >> 20
    );
    drop(held);
}

/// After a few wrong tokens from one address, even the right token is refused for a
/// while, with a message that says so.
#[test]
fn failed_tokens_are_throttled() {
    let t = tempdir();
    let src = Tree::new(t.path().join("src"));
    src.file("f", 1000, 5);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    for i in 0..hetch_net::FREE_FAILURES {
        let out = srv.cp_env(
            &args![src.path("f"), srv.url("f")],
            &[("HETCH_TOKEN", &format!("wrong token number {i}"))],
        );
        out.failed();
        assert!(out.stderr.contains("wrong token"), "{out:?}");
    }
    let out = srv.cp(&args![src.path("f"), srv.url("f")]);
    out.failed();
    let line = out.one_line_naming(&[&srv.addr]);
    assert!(line.contains("too many failed attempts"), "{line}");
    assert!(line.contains("retry in"), "{line}");
    assert!(!srv.root.join("f").exists());
}

/// Short tokens and secret files others can read are refused, naming the file and the
/// fix.
#[test]
fn weak_tokens_and_open_secret_files_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempdir();
    let src = Tree::new(t.path().join("src"));
    src.file("f", 1000, 6);
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));

    let out = srv.cp_env(
        &args![src.path("f"), srv.url("f")],
        &[("HETCH_TOKEN", "short")],
    );
    out.failed();
    out.one_line_naming(&["HETCH_TOKEN", "at least 16"]);

    let client_token = t.path().join("client-token");
    std::fs::write(&client_token, &srv.token).unwrap();
    std::fs::set_permissions(&client_token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let shown_fix = format!("chmod 600 {}", client_token.display());
    let out = srv.cp_token_file(&client_token, &args![src.path("f"), srv.url("f")]);
    out.failed();
    out.one_line_naming(&[&shown_fix]);

    // A server with a short token file, then with one others can read, does not start.
    let server_token = t.path().join("server-token");
    std::fs::write(&server_token, "0123456789\n").unwrap();
    std::fs::set_permissions(&server_token, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir(t.path().join("root2")).unwrap();
    let serve = |token: &std::path::Path| {
        hetch(
            &args![
                "serve",
                "--root",
                t.path().join("root2"),
                "--state-dir",
                t.path().join("state2"),
                "--listen",
                "127.0.0.1:0",
                "--token-file",
                token
            ],
            &[],
        )
    };
    let out = serve(&server_token);
    out.failed();
    out.one_line_naming(&["server-token", "at least 16"]);
    std::fs::write(&server_token, "0123456789abcdef0123\n").unwrap();
    std::fs::set_permissions(&server_token, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = serve(&server_token);
    out.failed();
    out.one_line_naming(&[&format!("chmod 600 {}", server_token.display())]);
}

/// A TLS server that is not hetch (here: one that answers like a web server) leaves no
/// known-hosts entry behind; a real hetch server does.
#[test]
fn non_hetch_tls_server_is_not_pinned() {
    let t = tempdir();
    let src = Tree::new(t.path().join("src"));
    src.file("f", 1000, 7);
    let cfg = t.path().join("cfg");
    let known_hosts = cfg.join("known_hosts");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (identity, _) = hetch_net::ServerIdentity::load_or_create(&t.path().join("fake")).unwrap();
    let tls = identity.server_config();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    rt.spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((s, _)) = listener.accept().await {
            let tls = tls.clone();
            tokio::spawn(async move {
                let opts = hetch_net::SocketOptions::default();
                if let Ok(mut acc) = hetch_net::accept(s, &opts, &tls).await {
                    let _ = acc
                        .stream
                        .write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                        .await;
                    let _ = acc.stream.shutdown().await;
                }
            });
        }
    });
    let env = [
        ("HETCH_TOKEN", "a token of enough length"),
        ("HETCH_CONFIG_DIR", cfg.to_str().unwrap()),
    ];
    let out = hetch(
        &args!["cp", "-q", src.path("f"), format!("hetch://{addr}/f")],
        &env,
    );
    out.failed();
    out.one_line_naming(&[&addr]);
    let recorded = std::fs::read_to_string(&known_hosts).unwrap_or_default();
    assert!(
        !recorded.contains(&addr),
        "pinned a non-hetch server:\n{recorded}"
    );

    // A real server is pinned on first use.
    let srv = Server::start(&t.path().join("root"), &t.path().join("state"));
    let env = [
        ("HETCH_TOKEN", srv.token.as_str()),
        ("HETCH_CONFIG_DIR", cfg.to_str().unwrap()),
    ];
    hetch(&args!["cp", "-q", src.path("f"), srv.url("f")], &env).ok();
    let recorded = std::fs::read_to_string(&known_hosts).unwrap();
    assert!(recorded.contains(&srv.addr), "{recorded}");
}
