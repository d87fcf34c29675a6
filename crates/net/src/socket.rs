//! Per-socket tuning: buffers, Nagle, congestion control.

use std::os::fd::AsFd;
use std::time::Duration;

use socket2::SockRef;

use crate::NetError;

/// Where Linux lists the congestion control algorithms it has loaded.
const AVAILABLE_CC: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
/// Where Linux lists the algorithms unprivileged processes may choose.
const ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

/// Idle time before the first keepalive probe.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Time between keepalive probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// Unanswered probes before the connection is declared dead.
pub const KEEPALIVE_PROBES: u32 = 3;
/// How long sent data may stay unacknowledged before the connection is declared dead
/// (long enough for any real RTT and for a slow receiver draining its buffers).
pub const USER_TIMEOUT: Duration = Duration::from_secs(120);

/// Per-socket tuning.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SocketOptions {
    /// TCP congestion control algorithm (e.g. "cubic", "bbr", "reno"); None = system default.
    pub congestion: Option<String>,
    /// SO_SNDBUF in bytes; 0 = leave to kernel autotuning. (Linux doubles the value
    /// for bookkeeping and caps it at `net.core.wmem_max`.)
    pub send_buffer: u32,
    /// SO_RCVBUF in bytes; 0 = leave to kernel autotuning. (Linux doubles the value
    /// and caps it at `net.core.rmem_max`; setting it disables receive autotuning.)
    pub recv_buffer: u32,
}

impl SocketOptions {
    /// Applies the options (and TCP_NODELAY) to a connected or listening socket.
    ///
    /// The receive buffer only affects the TCP window scale when set before the
    /// handshake, which is why [`connect`](crate::connect) applies the options before
    /// connecting and servers should use [`SocketOptions::apply_to_listener`] (accepted
    /// sockets inherit the listener's buffers and congestion control on Linux).
    pub fn apply(&self, socket: &tokio::net::TcpStream, host: &str) -> Result<(), NetError> {
        self.apply_fd(socket, host)
    }

    /// Applies the options to a listening socket, so that sockets it accepts start
    /// with them (buffers then take part in window scaling from the first segment).
    pub fn apply_to_listener(&self, listener: &tokio::net::TcpListener) -> Result<(), NetError> {
        self.apply_fd(listener, "listener")
    }

    /// Applies the options to any TCP socket descriptor (also unconnected ones), e.g.
    /// [`crate::Accepted::socket`] once a session says how it wants its sockets tuned.
    pub fn apply_fd(&self, fd: &impl AsFd, host: &str) -> Result<(), NetError> {
        let sock = SockRef::from(fd);
        let fail = |option: &'static str, e: std::io::Error| NetError::SocketOption {
            host: host.to_string(),
            option,
            reason: e.to_string(),
        };
        // Frames are written whole; Nagle would only add latency to small control
        // messages and the tail of each frame.
        sock.set_tcp_nodelay(true)
            .map_err(|e| fail("TCP_NODELAY", e))?;
        // A peer host that vanishes (power loss, a cut link) sends no FIN or RST:
        // keepalive probes notice it on an idle connection, and the user timeout when
        // sent data stays unacknowledged, so a transfer fails with an error instead of
        // hanging forever.
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL)
            .with_retries(KEEPALIVE_PROBES);
        sock.set_tcp_keepalive(&keepalive)
            .map_err(|e| fail("SO_KEEPALIVE", e))?;
        sock.set_tcp_user_timeout(Some(USER_TIMEOUT))
            .map_err(|e| fail("TCP_USER_TIMEOUT", e))?;
        if self.send_buffer != 0 {
            sock.set_send_buffer_size(self.send_buffer as usize)
                .map_err(|e| fail("SO_SNDBUF", e))?;
        }
        if self.recv_buffer != 0 {
            sock.set_recv_buffer_size(self.recv_buffer as usize)
                .map_err(|e| fail("SO_RCVBUF", e))?;
        }
        if let Some(cc) = &self.congestion {
            set_congestion(&sock, cc).map_err(|reason| NetError::SocketOption {
                host: host.to_string(),
                option: "TCP_CONGESTION",
                reason,
            })?;
        }
        Ok(())
    }
}

#[cfg(target_os = "linux")]
fn set_congestion(sock: &SockRef<'_>, name: &str) -> Result<(), String> {
    sock.set_tcp_congestion(name.as_bytes()).map_err(|e| {
        let list = |path: &str| {
            std::fs::read_to_string(path)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|e| format!("unreadable: {e}"))
        };
        let mut reason = format!(
            "algorithm {name:?}: {e}; this kernel offers: {} (see {AVAILABLE_CC})",
            list(AVAILABLE_CC)
        );
        // Loaded but not allowed for unprivileged processes gives EPERM.
        if e.raw_os_error() == Some(libc::EPERM) {
            reason.push_str(&format!(
                "; without CAP_NET_ADMIN only these are allowed: {} (see {ALLOWED_CC})",
                list(ALLOWED_CC)
            ));
        }
        reason
    })
}

#[cfg(not(target_os = "linux"))]
fn set_congestion(_sock: &SockRef<'_>, name: &str) -> Result<(), String> {
    Err(format!(
        "algorithm {name:?}: choosing TCP congestion control is only supported on Linux"
    ))
}

/// The congestion control algorithm a socket uses (e.g. `"cubic"`), as the kernel
/// reports it; lets callers and tests confirm what [`SocketOptions::apply`] set.
#[cfg(target_os = "linux")]
pub fn congestion(socket: &tokio::net::TcpStream) -> std::io::Result<String> {
    let raw = SockRef::from(socket).tcp_congestion()?;
    // The kernel returns a fixed-size, NUL-padded buffer.
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    Ok(String::from_utf8_lossy(&raw[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (c, s) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (c.unwrap(), s.unwrap().0)
    }

    fn with_cc(name: &str) -> SocketOptions {
        SocketOptions {
            congestion: Some(name.to_string()),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn congestion_reno_and_cubic_read_back() {
        let (c, _s) = pair().await;
        with_cc("reno").apply(&c, "test").unwrap();
        assert_eq!(congestion(&c).unwrap(), "reno");
        with_cc("cubic").apply(&c, "test").unwrap();
        assert_eq!(congestion(&c).unwrap(), "cubic");
        assert!(c.nodelay().unwrap());
    }

    #[tokio::test]
    async fn dead_peers_are_detected_by_keepalive_and_user_timeout() {
        let (c, _s) = pair().await;
        SocketOptions::default().apply(&c, "test").unwrap();
        let sock = SockRef::from(&c);
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), KEEPALIVE_IDLE);
        assert_eq!(sock.tcp_keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), KEEPALIVE_PROBES);
        assert_eq!(sock.tcp_user_timeout().unwrap(), Some(USER_TIMEOUT));
    }

    #[tokio::test]
    async fn bogus_congestion_is_a_socket_option_error() {
        let (c, _s) = pair().await;
        let err = with_cc("no-such-cc").apply(&c, "example:1").unwrap_err();
        match &err {
            NetError::SocketOption {
                host,
                option,
                reason,
            } => {
                assert_eq!(host, "example:1");
                assert_eq!(*option, "TCP_CONGESTION");
                assert!(reason.contains(AVAILABLE_CC), "{reason}");
                assert!(reason.contains("no-such-cc"), "{reason}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn buffers_are_set() {
        let (c, _s) = pair().await;
        let opts = SocketOptions {
            congestion: None,
            send_buffer: 64 * 1024,
            recv_buffer: 96 * 1024,
        };
        opts.apply(&c, "test").unwrap();
        let sock = SockRef::from(&c);
        // Linux doubles the requested size; other kernels keep it. Either way it is
        // at least what was asked for (the test sizes are below the default caps).
        assert!(sock.send_buffer_size().unwrap() >= 64 * 1024);
        assert!(sock.recv_buffer_size().unwrap() >= 96 * 1024);
    }

    #[tokio::test]
    async fn accepted_sockets_inherit_listener_congestion() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        with_cc("reno").apply_to_listener(&listener).unwrap();
        let addr = listener.local_addr().unwrap();
        let (c, s) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (_c, s) = (c.unwrap(), s.unwrap().0);
        assert_eq!(congestion(&s).unwrap(), "reno");
    }
}
