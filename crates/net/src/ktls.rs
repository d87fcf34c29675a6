//! Whether this kernel could carry TLS itself (kTLS, the `tls` upper-layer protocol).
//!
//! hetch keeps TLS in user space (rustls) on every kernel: the probe only reports
//! what the host offers, so that `--json` can say why records are not offloaded.
//! Asking for the `tls` ULP on a connected socket is the one reliable test: it loads
//! the module where it exists as a module, and fails with `ENOENT` where the kernel
//! has none.

use std::net::{TcpListener, TcpStream};
use std::sync::OnceLock;

/// What the kernel offers for TLS offload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ktls {
    /// The kernel accepted the `tls` ULP on a TCP socket.
    pub available: bool,
    /// Why records stay in user space (one line).
    pub why: String,
}

/// The kernel's answer, probed once per process on a loopback connection.
pub fn ktls() -> &'static Ktls {
    static PROBED: OnceLock<Ktls> = OnceLock::new();
    PROBED.get_or_init(|| match probe() {
        Ok(()) => Ktls {
            available: true,
            why: "the kernel has kTLS, but hetch keeps TLS in user space (rustls): \
                  offloading records to it is not built yet"
                .into(),
        },
        Err(reason) => Ktls {
            available: false,
            why: format!("this kernel has no kTLS ({reason}): TLS stays in user space"),
        },
    })
}

fn probe() -> Result<(), String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("loopback: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("loopback: {e}"))?;
    let sock = TcpStream::connect(addr).map_err(|e| format!("loopback: {e}"))?;
    set_tls_ulp(&sock)
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn set_tls_ulp(sock: &TcpStream) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    const NAME: &[u8] = b"tls";
    // SAFETY: the descriptor is open for the call (borrowed from `sock`); the option
    // value is a valid buffer of the length given, which the kernel only reads.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_TCP,
            libc::TCP_ULP,
            NAME.as_ptr().cast(),
            NAME.len() as libc::socklen_t,
        )
    };
    match rc {
        0 => Ok(()),
        _ => {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ENOENT) => Err("no tls module: TCP_ULP \"tls\" is unknown".into()),
                _ => Err(format!("TCP_ULP \"tls\": {e}")),
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn set_tls_ulp(_sock: &TcpStream) -> Result<(), String> {
    Err("kTLS is a Linux feature".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe agrees with the kernel's own list of loaded ULPs: a kernel that took
    /// `tls` lists it afterwards (the probe loaded it), and one that refused it does
    /// not.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_probe_agrees_with_the_kernels_list_of_upper_layer_protocols() {
        let k = ktls();
        let listed = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
            .expect("read tcp_available_ulp");
        let has_tls = listed.split_whitespace().any(|u| u == "tls");
        assert_eq!(k.available, has_tls, "{k:?} vs {listed:?}");
        assert!(!k.why.is_empty() && !k.why.contains('\n'), "{k:?}");
    }
}
