//! Kept sessions against a real server on 127.0.0.1: what a token holder may not do
//! on kept connections (a wrong token, other streams than the session joined), and a
//! kept session that went away while idle.

use std::sync::Arc;
use std::time::Duration;

use hetch_engine::wire::{read_frame_exact, write_frame_exact};
use hetch_engine::{run_source_from, Operand, Options};
use hetch_proto::{FilterRequest, Frame, Hello, Op};
use tokio::io::AsyncReadExt;

use crate::client::{open_again, Again};
use crate::reuse::{lend, Conns, SessionPool, Wanted};
use crate::{open_session, session_request, ClientConfig, ServeConfig, ServeRoot, Server};

/// A server of `root` on 127.0.0.1, a client keeping its sessions in a pool, and a
/// directory of one file to push.
async fn server_and_client(
    dir: &std::path::Path,
) -> (String, ClientConfig, Arc<SessionPool>, std::path::PathBuf) {
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let srv = Server::bind(ServeConfig {
        root: ServeRoot::Local(root),
        listen: "127.0.0.1:0".into(),
        state_dir: dir.join("state"),
        token_file: None,
        socket: Default::default(),
        engine: Options::default(),
        limits: Default::default(),
        fair: Default::default(),
        metrics: None,
        relay: Default::default(),
    })
    .await
    .unwrap();
    let addr = srv.addr.to_string();
    let token = std::fs::read(&srv.token_path).unwrap();
    let pool = Arc::new(SessionPool::new());
    let cfg = ClientConfig {
        token: token.trim_ascii().to_vec(),
        fingerprint: Some(srv.fingerprint),
        known_hosts: Some(dir.join("known_hosts")),
        socket: Default::default(),
        timeout: Duration::from_secs(20),
        opened: Arc::default(),
        autotune: None,
        reuse: Some(pool.clone()),
    };
    tokio::spawn(srv.run());
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"kept").unwrap();
    (addr, cfg, pool, src)
}

fn push() -> hetch_proto::SessionRequest {
    let op = Op::Push {
        dest: Vec::new(),
        sources: 1,
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

/// Pushes `src` through a session that the pool keeps, then takes it from the pool.
async fn kept_after_a_push(
    addr: &str,
    cfg: &ClientConfig,
    pool: &SessionPool,
    src: &std::path::Path,
) -> (hetch_net::SessionKey, Conns) {
    let transport = open_session(addr, cfg, push()).await.unwrap();
    let ops = vec![Operand::Local(src.to_path_buf())];
    run_source_from(Options::default(), ops, transport, Arc::default())
        .await
        .unwrap();
    let want = Wanted {
        host: addr,
        cfg,
        encrypt: true,
        streams: 2,
    };
    pool.take(&want).await.expect("the session was kept")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_session_checks_the_token_and_streams_of_every_operation() {
    let t = tempfile::tempdir().unwrap();
    let (addr, cfg, pool, src) = server_and_client(t.path()).await;

    // A wrong token on kept connections is refused as on new ones.
    let (key, conns) = kept_after_a_push(&addr, &cfg, &pool, &src).await;
    let mut wrong = cfg.clone();
    wrong.token[0] ^= 1;
    let Err(Again::Refused(e)) = open_again(&addr, &wrong, push(), key, conns).await else {
        panic!("a wrong token ran an operation on a kept session");
    };
    let msg = format!("{e:#}");
    assert!(msg.contains(&addr) && msg.contains("token"), "{msg}");

    // Other streams than the session joined: refused, and the connections closed.
    let (_, conns) = kept_after_a_push(&addr, &cfg, &pool, &src).await;
    let (mut control, _data, _lent) = lend(conns);
    let mut request = push();
    request.reuse = true;
    request.streams = 1;
    let hello = Frame::Hello(Hello::Control {
        token: cfg.token.clone(),
        request,
    });
    write_frame_exact(&mut control, &addr, false, &hello)
        .await
        .unwrap();
    match read_frame_exact(&mut control, &addr).await.unwrap() {
        Frame::Error(e) => assert!(e.message.contains("as many as it has"), "{e:?}"),
        other => panic!("{other:?}"),
    }
    let mut rest = Vec::new();
    let _ = control.read_to_end(&mut rest).await;
    assert!(rest.is_empty(), "{rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_session_gone_while_idle_gives_way_to_a_new_one() {
    let t = tempfile::tempdir().unwrap();
    let (addr, cfg, pool, src) = server_and_client(t.path()).await;
    let (key, conns) = kept_after_a_push(&addr, &cfg, &pool, &src).await;
    // The server side of the kept connections is gone: closed under the pool, which
    // still holds them (as many streams as a push asks for, so they match).
    drop(conns);
    let closed = || -> hetch_engine::BoxStream {
        let (ours, theirs) = tokio::io::duplex(64);
        drop(theirs);
        Box::new(ours)
    };
    let dead = Conns {
        control: closed(),
        data: vec![closed(), closed()],
    };
    let want = Wanted {
        host: &addr,
        cfg: &cfg,
        encrypt: true,
        streams: 2,
    };
    pool.put(&want, key, dead);
    let before = pool.reused();
    let transport = open_session(&addr, &cfg, push()).await.unwrap();
    let ops = vec![Operand::Local(src.clone())];
    run_source_from(Options::default(), ops, transport, Arc::default())
        .await
        .unwrap();
    assert_eq!(pool.reused(), before, "the dead session ran nothing");
    // The dead session was taken and dropped: the pool holds the new one alone.
    assert!(pool.take(&want).await.is_some(), "the new session was kept");
    assert!(pool.take(&want).await.is_none(), "the dead session is gone");
}
