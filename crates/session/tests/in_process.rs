//! Sessions opened in-process through the library, no binary spawned: a real server on
//! 127.0.0.1 over real TLS, a push through the engine, and the hostile cases of a wrong
//! token, a wrong key and a client that never finishes the handshake.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hetch_engine::{run_source_from, Operand, Options};
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
    std::fs::create_dir_all(root).unwrap();
    let cfg = ServeConfig {
        root: ServeRoot::Local(root.to_path_buf()),
        listen: "127.0.0.1:0".into(),
        state_dir: dir.join("state"),
        token_file: None,
        socket: Default::default(),
        engine: Options::default(),
        limits,
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
    }
}

fn push(dest: &str, sources: u32) -> hetch_proto::SessionRequest {
    let op = Op::Push {
        dest: dest.as_bytes().to_vec(),
        sources,
    };
    session_request(
        op,
        &Options::default(),
        2,
        true,
        None,
        FilterRequest::default(),
    )
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
