//! Serving the API: TLS 1.3 with the service's identity (clients pin its fingerprint
//! as they pin `hetch serve`'s), then HTTP/1.1, one task per connection, with the
//! number of connections and the time a handshake may take bounded.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::ConnectInfo;
use axum::Router;
use hetch_net::ServerIdentity;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// Connections served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 512;
/// A client must finish its TLS handshake within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The identity's TLS configuration, speaking HTTP/1.1.
pub fn tls_config(identity: &ServerIdentity) -> Arc<rustls::ServerConfig> {
    let mut cfg = (*identity.server_config()).clone();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// Accepts connections on `listener` and serves `app` on each, until an accept error
/// that is not about one connection.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
) -> std::io::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = slots.clone().acquire_owned().await.expect("never closed");
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            // Out of descriptors or a connection reset before accept: not fatal.
            Err(e) if is_transient(&e) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
            else {
                return;
            };
            let svc = app.map_request(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                req
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(svc))
                .await;
        });
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || e.raw_os_error() == Some(libc_emfile())
}

/// EMFILE: too many open files (the limit may rise again as connections close).
fn libc_emfile() -> i32 {
    24
}
