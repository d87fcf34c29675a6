//! Connecting and accepting, with or without TLS.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};

use crate::growbuf::GrowBuf;
use crate::{BoxStream, NetError, SessionKey, SocketOptions, TlsClient};

/// How long one TCP connection attempt (and name resolution) may take, so an
/// unreachable or firewalled host fails with a clear error instead of the kernel's
/// minutes-long SYN retries.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// First byte of a TLS handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Connects to `host` (`host:port`), applies `opts`, and wraps the socket in TLS when
/// `tls` is given. A first-use fingerprint is learned after a successful handshake
/// (see [`TlsClient::record_learned`]); a mismatch is [`NetError::HostKeyChanged`].
///
/// Every resolved address is tried in turn, each for at most [`CONNECT_TIMEOUT`]. The
/// options are applied before the TCP handshake so the receive buffer takes part in
/// window scaling. Errors name `host` for TCP failures and [`TlsClient::host`] for TLS
/// ones (normally the same string).
pub async fn connect(
    host: &str,
    opts: &SocketOptions,
    tls: Option<&TlsClient>,
) -> Result<BoxStream, NetError> {
    Ok(connect_keyed(host, opts, tls).await?.0)
}

/// [`connect`], also returning the TLS connection's [`SessionKey`] (`None` without
/// TLS): the control connection's key authenticates the session's data streams; and
/// how long the TCP handshake took: one round trip to the host, which autotuning
/// sizes the session by.
pub async fn connect_keyed(
    host: &str,
    opts: &SocketOptions,
    tls: Option<&TlsClient>,
) -> Result<(BoxStream, Option<SessionKey>, Duration), NetError> {
    let (tcp, rtt) = connect_tcp(host, opts).await?;
    match tls {
        Some(client) => {
            let (stream, key) = client.handshake(tcp).await?;
            Ok((stream, Some(key), rtt))
        }
        None => Ok((Box::new(tcp), None, rtt)),
    }
}

pub(crate) async fn connect_tcp(
    host: &str,
    opts: &SocketOptions,
) -> Result<(TcpStream, Duration), NetError> {
    let fail = |source: io::Error| NetError::Connect {
        host: host.to_string(),
        source,
    };
    let addrs: Vec<SocketAddr> =
        tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host(host))
            .await
            .map_err(|_| fail(timed_out("name resolution")))?
            .map_err(fail)?
            .collect();
    let mut last_error = io::Error::new(io::ErrorKind::NotFound, "name resolved to no address");
    for addr in addrs {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(fail)?;
        // Option errors (e.g. an unknown congestion algorithm) are not address
        // specific, so they end the attempt at once.
        opts.apply_fd(&socket, host)?;
        let started = std::time::Instant::now();
        match tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(addr)).await {
            Ok(Ok(stream)) => return Ok((stream, started.elapsed())),
            Ok(Err(e)) => last_error = io::Error::new(e.kind(), format!("{addr}: {e}")),
            Err(_) => last_error = timed_out(&addr.to_string()),
        }
    }
    Err(fail(last_error))
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("{what}: no answer within {} s", CONNECT_TIMEOUT.as_secs()),
    )
}

/// Bytes read from the socket at once under TLS. rustls asks for one record (~16 KiB)
/// per read; a buffer underneath turns sixteen such system calls into one.
pub(crate) const TLS_READ_BUFFER: usize = 256 << 10;

/// The read buffer of a connection that has not authenticated yet: enough for the
/// handshake, small enough that thousands of strangers cost little memory.
const PRE_AUTH_READ_BUFFER: usize = 4 << 10;

/// Wraps a TCP stream in a read buffer of `size` bytes for use under TLS (writes pass
/// straight through); the handle grows it later.
pub(crate) fn read_buffered(tcp: TcpStream, size: usize) -> (GrowBuf<TcpStream>, ReadBuffer) {
    let want = Arc::new(AtomicUsize::new(size));
    (GrowBuf::new(tcp, want.clone()), ReadBuffer(Some(want)))
}

/// Grows the read buffer under an accepted TLS connection to its full size, once the
/// peer has authenticated: strangers never get the server to allocate it.
#[derive(Debug, Clone)]
pub struct ReadBuffer(Option<Arc<AtomicUsize>>);

impl ReadBuffer {
    /// Switches to the full-size buffer (at the next refill).
    pub fn grow(&self) {
        if let Some(want) = &self.0 {
            want.store(TLS_READ_BUFFER, Ordering::Relaxed);
        }
    }
}

/// Accepted connection: the stream, whether it is TLS, and the peer address.
pub struct Accepted {
    /// The stream.
    pub stream: BoxStream,
    /// True when the client started TLS.
    pub encrypted: bool,
    /// The TLS connection's exported key (`None` for plain TCP).
    pub key: Option<SessionKey>,
    /// Grows the read buffer once the peer has authenticated.
    pub read_buffer: ReadBuffer,
    /// Peer address, for logs.
    pub peer: SocketAddr,
    /// Another handle to the same TCP socket, for tuning it after the handshake (the
    /// stream itself may be wrapped in TLS by then).
    pub socket: socket2::Socket,
}

impl std::fmt::Debug for Accepted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accepted")
            .field("encrypted", &self.encrypted)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

/// Finishes accepting `socket`: applies `opts`, peeks the first byte, and performs
/// the TLS handshake when it is a TLS record (0x16); otherwise returns the plain stream.
///
/// This waits for the client's first byte and has no timeout of its own: run it in a
/// task per connection (under the pre-authentication deadline) so a silent client
/// cannot hold up the accept loop. Before authentication a TLS connection reads
/// through a small buffer; [`Accepted::read_buffer`] grows it afterwards. Whether a plain connection is acceptable is the caller's decision. Errors
/// name the peer address.
pub async fn accept(
    socket: TcpStream,
    opts: &SocketOptions,
    tls: &Arc<rustls::ServerConfig>,
) -> Result<Accepted, NetError> {
    let peer = socket.peer_addr().map_err(|source| NetError::Connect {
        host: "unknown peer".to_string(),
        source,
    })?;
    let host = peer.to_string();
    opts.apply(&socket, &host)?;
    let tune = socket2::SockRef::from(&socket)
        .try_clone()
        .map_err(|source| NetError::Connect {
            host: host.clone(),
            source,
        })?;
    let mut first = [0u8; 1];
    // peek returns as soon as at least one byte is readable; 0 means end of stream.
    let n = socket
        .peek(&mut first)
        .await
        .map_err(|source| NetError::Connect {
            host: host.clone(),
            source,
        })?;
    if n == 0 {
        return Err(NetError::Connect {
            host,
            source: io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed the connection before sending anything",
            ),
        });
    }
    if first[0] != TLS_HANDSHAKE_RECORD {
        return Ok(Accepted {
            stream: Box::new(socket),
            encrypted: false,
            key: None,
            read_buffer: ReadBuffer(None),
            peer,
            socket: tune,
        });
    }
    let (buffered, read_buffer) = read_buffered(socket, PRE_AUTH_READ_BUFFER);
    let tls_error = |reason: String| NetError::Tls {
        host: host.clone(),
        reason,
    };
    let stream = tokio_rustls::TlsAcceptor::from(tls.clone())
        .accept(buffered)
        .await
        .map_err(|e| tls_error(e.to_string()))?;
    let key = SessionKey::export(stream.get_ref().1)
        .map_err(|e| tls_error(format!("cannot export the session key: {e}")))?;
    Ok(Accepted {
        stream: Box::new(stream),
        encrypted: true,
        key: Some(key),
        read_buffer,
        peer,
        socket: tune,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fingerprint, KnownHosts, ServerIdentity, Trust};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A server that accepts connections until dropped and echoes one message per
    /// connection, prefixed with whether the connection was encrypted.
    struct EchoServer {
        addr: String,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for EchoServer {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    async fn echo_server(listener: TcpListener, identity: &ServerIdentity) -> EchoServer {
        let addr = listener.local_addr().unwrap().to_string();
        let config = identity.server_config();
        let task = tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                let config = config.clone();
                tokio::spawn(async move {
                    // Handshake failures are the client's business in these tests.
                    let Ok(mut acc) = accept(socket, &SocketOptions::default(), &config).await
                    else {
                        return;
                    };
                    let mut buf = [0u8; 5];
                    if acc.stream.read_exact(&mut buf).await.is_err() {
                        return;
                    }
                    let tag: &[u8] = if acc.encrypted { b"tls:" } else { b"tcp:" };
                    let _ = acc.stream.write_all(&[tag, &buf].concat()).await;
                    let _ = acc.stream.flush().await;
                    let _ = acc.stream.shutdown().await;
                });
            }
        });
        EchoServer { addr, task }
    }

    async fn server(identity: &ServerIdentity) -> EchoServer {
        echo_server(TcpListener::bind("127.0.0.1:0").await.unwrap(), identity).await
    }

    fn identity() -> (tempfile::TempDir, ServerIdentity) {
        let dir = tempfile::tempdir().unwrap();
        let (id, _) = ServerIdentity::load_or_create(dir.path()).unwrap();
        (dir, id)
    }

    async fn round_trip(mut stream: BoxStream) -> Vec<u8> {
        stream.write_all(b"hello").await.unwrap();
        stream.flush().await.unwrap();
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.unwrap();
        out
    }

    fn known_hosts(dir: &tempfile::TempDir) -> KnownHosts {
        KnownHosts {
            path: dir.path().join("cfg/known_hosts"),
        }
    }

    #[tokio::test]
    async fn pinned_tls_round_trip() {
        let (_d, id) = identity();
        let srv = server(&id).await;
        let client = TlsClient::new(&srv.addr, Trust::Pinned(id.fingerprint)).unwrap();
        let stream = connect(&srv.addr, &SocketOptions::default(), Some(&client))
            .await
            .unwrap();
        assert_eq!(round_trip(stream).await, b"tls:hello");
        assert_eq!(client.pinned(), Some(id.fingerprint));
    }

    #[tokio::test]
    async fn many_connections_through_one_client() {
        let (_d, id) = identity();
        let srv = server(&id).await;
        let client = TlsClient::new(&srv.addr, Trust::Pinned(id.fingerprint)).unwrap();
        // Later connections may resume the session; they must work all the same.
        for _ in 0..4 {
            let s = connect(&srv.addr, &SocketOptions::default(), Some(&client))
                .await
                .unwrap();
            assert_eq!(round_trip(s).await, b"tls:hello");
        }
    }

    #[tokio::test]
    async fn wrong_pin_is_host_key_changed() {
        let (_d, id) = identity();
        let srv = server(&id).await;
        let wrong = Fingerprint([7; 32]);
        let client = TlsClient::new(&srv.addr, Trust::Pinned(wrong)).unwrap();
        let err = connect(&srv.addr, &SocketOptions::default(), Some(&client))
            .await
            .err()
            .expect("must be refused");
        match err {
            NetError::HostKeyChanged {
                host,
                expected,
                actual,
                known_hosts,
            } => {
                assert_eq!(host, srv.addr);
                assert_eq!(expected, wrong);
                assert_eq!(actual, id.fingerprint);
                assert_eq!(known_hosts, "--fingerprint");
            }
            other => panic!("unexpected {other}"),
        }
    }

    #[tokio::test]
    async fn trust_on_first_use_then_refuse_new_key() {
        let cfg = tempfile::tempdir().unwrap();
        let kh = known_hosts(&cfg);
        let (_d, id) = identity();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let srv = echo_server(listener, &id).await;

        // First use: accepted and recorded.
        let client = TlsClient::new(&srv.addr, Trust::KnownHosts(kh.clone())).unwrap();
        assert_eq!(client.pinned(), None);
        assert!(!kh.path.exists(), "nothing is written before a handshake");
        let s = connect(&srv.addr, &SocketOptions::default(), Some(&client))
            .await
            .unwrap();
        assert_eq!(round_trip(s).await, b"tls:hello");
        assert_eq!(client.pinned(), Some(id.fingerprint));
        // Learned, but written only once the caller says the server speaks hetch.
        assert_eq!(kh.lookup(&srv.addr).unwrap(), None);
        assert_eq!(client.record_learned().unwrap(), Some(id.fingerprint));
        assert_eq!(client.record_learned().unwrap(), None, "recorded once");
        assert_eq!(kh.lookup(&srv.addr).unwrap(), Some(id.fingerprint));

        // Second use, new client: the recorded key matches.
        let client = TlsClient::new(&srv.addr, Trust::KnownHosts(kh.clone())).unwrap();
        assert_eq!(client.pinned(), Some(id.fingerprint));
        let s = connect(&srv.addr, &SocketOptions::default(), Some(&client))
            .await
            .unwrap();
        assert_eq!(round_trip(s).await, b"tls:hello");
        let lines = std::fs::read_to_string(&kh.path).unwrap().lines().count();
        assert_eq!(lines, 1, "a known host is not recorded again");

        // A different server identity on the same host:port is refused.
        drop(srv);
        let (_d2, other) = identity();
        let listener = bind_retry(port).await;
        let srv = echo_server(listener, &other).await;
        let client = TlsClient::new(&srv.addr, Trust::KnownHosts(kh.clone())).unwrap();
        let err = connect(&srv.addr, &SocketOptions::default(), Some(&client))
            .await
            .err()
            .expect("changed key must be refused");
        match err {
            NetError::HostKeyChanged {
                expected,
                actual,
                known_hosts,
                ..
            } => {
                assert_eq!(expected, id.fingerprint);
                assert_eq!(actual, other.fingerprint);
                assert_eq!(known_hosts, kh.path.display().to_string());
            }
            other => panic!("unexpected {other}"),
        }
        // The file still holds the original key.
        assert_eq!(kh.lookup(&srv.addr).unwrap(), Some(id.fingerprint));
    }

    /// Rebinds a port just released by an aborted listener task (the abort completes
    /// asynchronously, so the first attempts may still find it in use).
    async fn bind_retry(port: u16) -> TcpListener {
        for _ in 0..200 {
            if let Ok(l) = TcpListener::bind(("127.0.0.1", port)).await {
                return l;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("port {port} did not become free");
    }

    #[tokio::test]
    async fn learned_pin_applies_to_later_connections_of_same_client() {
        let cfg = tempfile::tempdir().unwrap();
        let kh = known_hosts(&cfg);
        let (_d, id) = identity();
        let (_d2, other) = identity();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let srv = echo_server(listener, &id).await;
        let client = TlsClient::new(&srv.addr, Trust::KnownHosts(kh.clone())).unwrap();
        connect(&srv.addr, &SocketOptions::default(), Some(&client))
            .await
            .unwrap();
        drop(srv);
        let srv = echo_server(bind_retry(port).await, &other).await;
        let err = connect(&srv.addr, &SocketOptions::default(), Some(&client))
            .await
            .err()
            .expect("refused");
        assert!(matches!(err, NetError::HostKeyChanged { .. }), "{err}");
    }

    /// Both ends of a TLS connection export the same session key, and every connection
    /// its own; a plain connection has none.
    #[tokio::test]
    async fn both_ends_export_the_same_session_key() {
        let (_d, id) = identity();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let config = id.server_config();
        let server = tokio::spawn(async move {
            let mut keys = Vec::new();
            for _ in 0..3 {
                let (s, _) = listener.accept().await.unwrap();
                let acc = accept(s, &SocketOptions::default(), &config).await.unwrap();
                keys.push(acc.key.map(|k| k.frame_mac_key()));
            }
            keys
        });
        let client = TlsClient::new(&addr, Trust::Pinned(id.fingerprint)).unwrap();
        let mut mine = Vec::new();
        let mut open = Vec::new();
        for tls in [Some(&client), Some(&client), None] {
            let (mut s, k, _) = connect_keyed(&addr, &SocketOptions::default(), tls)
                .await
                .unwrap();
            // A plain connection is told apart by its first byte.
            s.write_all(b"x").await.unwrap();
            mine.push(k.map(|k| k.frame_mac_key()));
            open.push(s);
        }
        let theirs = server.await.unwrap();
        assert_eq!(mine, theirs);
        assert!(mine[0].is_some() && mine[2].is_none());
        assert_ne!(mine[0], mine[1]);
    }

    #[tokio::test]
    async fn plain_connection_is_accepted_unencrypted() {
        let (_d, id) = identity();
        let srv = server(&id).await;
        let stream = connect(&srv.addr, &SocketOptions::default(), None)
            .await
            .unwrap();
        assert_eq!(round_trip(stream).await, b"tcp:hello");
    }

    #[tokio::test]
    async fn accept_reports_peer_and_eof() {
        let (_d, id) = identity();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let client_addr = client.local_addr().unwrap();
        let (socket, _) = listener.accept().await.unwrap();
        drop(client);
        let err = accept(socket, &SocketOptions::default(), &id.server_config())
            .await
            .unwrap_err();
        assert!(err.to_string().contains(&client_addr.to_string()), "{err}");

        let mut client = TcpStream::connect(addr).await.unwrap();
        client.write_all(b"x").await.unwrap();
        let (socket, _) = listener.accept().await.unwrap();
        let acc = accept(socket, &SocketOptions::default(), &id.server_config())
            .await
            .unwrap();
        assert!(!acc.encrypted);
        assert_eq!(acc.peer, client.local_addr().unwrap());
    }

    #[tokio::test]
    async fn negotiates_tls13() {
        let (_d, id) = identity();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TlsClient::new(&addr.to_string(), Trust::Pinned(id.fingerprint)).unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(id.server_config());
        let connector = tokio_rustls::TlsConnector::from(client.config.clone());
        let server = async {
            let (s, _) = listener.accept().await.unwrap();
            acceptor.accept(s).await.unwrap()
        };
        let client = async {
            let s = TcpStream::connect(addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("hetch").unwrap();
            connector.connect(name, s).await.unwrap()
        };
        let (s, c) = tokio::join!(server, client);
        assert_eq!(
            s.get_ref().1.protocol_version(),
            Some(rustls::ProtocolVersion::TLSv1_3)
        );
        assert_eq!(
            c.get_ref().1.protocol_version(),
            Some(rustls::ProtocolVersion::TLSv1_3)
        );
    }

    #[tokio::test]
    async fn tls12_only_client_is_refused() {
        let (_d, id) = identity();
        let srv = server(&id).await;
        // A TLS 1.2-only client with a permissive verifier: the server must still refuse.
        let config = rustls::ClientConfig::builder_with_provider(crate::identity::provider())
            .with_protocol_versions(&[&rustls::version::TLS12])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert))
            .with_no_client_auth();
        let s = TcpStream::connect(&srv.addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("hetch").unwrap();
        let res = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, s)
            .await;
        assert!(res.is_err());
    }

    #[derive(Debug)]
    struct AnyCert;

    impl rustls::client::danger::ServerCertVerifier for AnyCert {
        fn verify_server_cert(
            &self,
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &[rustls::pki_types::CertificateDer<'_>],
            _: &rustls::pki_types::ServerName<'_>,
            _: &[u8],
            _: rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            crate::identity::provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    #[tokio::test]
    async fn tls_to_a_plain_server_is_a_tls_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let _ = s.write_all(b"not tls at all\n").await;
        });
        let client = TlsClient::new(&addr, Trust::Pinned(Fingerprint([0; 32]))).unwrap();
        let err = connect(&addr, &SocketOptions::default(), Some(&client))
            .await
            .err()
            .expect("no TLS");
        assert!(
            matches!(&err, NetError::Tls { host, .. } if *host == addr),
            "{err}"
        );
        task.await.unwrap();
    }

    /// Presents `cert` but signs the handshake with an unrelated key, which rustls's
    /// own configuration builder would refuse to set up.
    #[derive(Debug)]
    struct MismatchedKey(Arc<rustls::sign::CertifiedKey>);

    impl rustls::server::ResolvesServerCert for MismatchedKey {
        fn resolve(
            &self,
            _: rustls::server::ClientHello<'_>,
        ) -> Option<Arc<rustls::sign::CertifiedKey>> {
            Some(self.0.clone())
        }
    }

    #[tokio::test]
    async fn pinned_cert_without_its_key_is_refused() {
        use rustls::pki_types::pem::PemObject;
        let (cert_dir, id) = identity();
        let (key_dir, _) = identity();
        let provider = crate::identity::provider();
        let cert =
            rustls::pki_types::CertificateDer::from_pem_file(cert_dir.path().join("cert.pem"))
                .unwrap();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key_dir.path().join("key.pem"))
            .unwrap();
        let signer = provider.key_provider.load_private_key(key).unwrap();
        let certified = rustls::sign::CertifiedKey::new(vec![cert], signer);
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(MismatchedKey(Arc::new(certified))));
        let config = Arc::new(config);

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let _ = accept(s, &SocketOptions::default(), &config).await;
        });
        let client = TlsClient::new(&addr, Trust::Pinned(id.fingerprint)).unwrap();
        let err = connect(&addr, &SocketOptions::default(), Some(&client))
            .await
            .err()
            .expect("a forged handshake signature must be refused");
        assert!(
            matches!(&err, NetError::Tls { reason, .. } if reason.contains("BadSignature")),
            "{err}"
        );
        task.await.unwrap();
    }

    #[tokio::test]
    async fn connect_errors_name_the_host() {
        // Bind then drop to get a port nobody listens on.
        let port = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let host = format!("127.0.0.1:{port}");
        let err = connect(&host, &SocketOptions::default(), None)
            .await
            .err()
            .expect("refused");
        assert!(matches!(&err, NetError::Connect { host: h, .. } if *h == host));
        assert!(err.to_string().contains(&host), "{err}");

        let err = connect("no-port-here", &SocketOptions::default(), None)
            .await
            .err()
            .expect("invalid");
        assert!(err.to_string().contains("no-port-here"), "{err}");
    }

    #[tokio::test]
    async fn connect_applies_congestion_and_rejects_bogus() {
        let (_d, id) = identity();
        let srv = server(&id).await;
        let opts = SocketOptions {
            congestion: Some("bogus-cc".into()),
            ..Default::default()
        };
        let err = connect(&srv.addr, &opts, None).await.err().expect("bogus");
        assert!(matches!(
            err,
            NetError::SocketOption {
                option: "TCP_CONGESTION",
                ..
            }
        ));
    }
}
