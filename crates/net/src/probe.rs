//! Probing the path to a peer with plain TCP connections: the round trip (the
//! handshake's time, the least of a few) and the segment size both ends agreed on.
//! No byte is sent: any listening port will do, a hetch server's included.

use std::net::SocketAddr;
use std::time::Duration;

use crate::NetError;

/// Connections made by [`probe`]; the least handshake time of them is the round trip.
pub const PROBES: usize = 5;

/// What connecting to a peer showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathProbe {
    /// The peer's address as resolved.
    pub addr: SocketAddr,
    /// The least TCP handshake time of [`PROBES`] connections.
    pub rtt: Duration,
    /// The connection's maximum segment size (`TCP_MAXSEG`).
    pub mss: u32,
}

/// Connects to `host` (`host:port`) [`PROBES`] times, one after the other, as a
/// session's connections are made (same resolution, timeouts and errors).
pub async fn probe(host: &str) -> Result<PathProbe, NetError> {
    let fail = |source: std::io::Error| NetError::Connect {
        host: host.to_string(),
        source,
    };
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..PROBES {
        let (s, rtt) = crate::conn::connect_tcp(host, &Default::default()).await?;
        best = best.min(rtt);
        last = Some(s);
    }
    let s = last.expect("PROBES > 0");
    Ok(PathProbe {
        addr: s.peer_addr().map_err(fail)?,
        rtt: best,
        mss: socket2::SockRef::from(&s).tcp_mss().map_err(fail)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn loopback_is_probed_and_a_closed_port_is_named() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let accept = tokio::spawn(async move {
            for _ in 0..PROBES {
                drop(l.accept().await.unwrap());
            }
        });
        let p = probe(&addr.to_string()).await.unwrap();
        accept.await.unwrap();
        assert_eq!(p.addr, addr);
        assert!(p.rtt < Duration::from_secs(1), "{p:?}");
        // Loopback's MTU is 65536: far above Ethernet's segments.
        assert!(p.mss > 1448, "{p:?}");
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let e = probe(&closed.to_string()).await.unwrap_err().to_string();
        assert!(e.contains(&closed.to_string()), "{e}");
    }
}
