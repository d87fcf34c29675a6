//! Network helpers that work inside a testbed host's network namespace: picking a free
//! port there and checking that a server accepts connections, from a short-lived
//! thread that joins the namespace (setns affects only the calling thread).

use std::collections::hash_map::RandomState;
use std::collections::BTreeSet;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::place::Place;

/// Ports servers are placed on: below Linux's ephemeral range (32768-60999), so that
/// a port found free is not taken by an outgoing connection before the server binds.
const PORTS: std::ops::Range<u16> = 20000..32000;

/// Ports already handed out by this process, so that two peers started one after the
/// other (before either has bound) never get the same one.
static TAKEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Runs `f` in network namespace `ns` (as `ip netns` names it), or here for `None`.
pub(crate) fn in_netns<T: Send>(ns: Option<&str>, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    let Some(ns) = ns else {
        return Ok(f());
    };
    let file = File::open(Path::new("/run/netns").join(ns))?;
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns takes a valid open descriptor (`file` outlives the call)
            // and changes only this thread's network namespace; the thread ends after
            // `f`, so no other code runs in the namespace by accident.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(f())
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// A TCP port that is free on `place` (any address), chosen at random from [`PORTS`].
pub(crate) fn free_port(place: &Place) -> Result<u16> {
    let any: IpAddr = match place.addr.parse::<IpAddr>() {
        Ok(IpAddr::V6(_)) => Ipv6Addr::UNSPECIFIED.into(),
        _ => Ipv4Addr::UNSPECIFIED.into(),
    };
    let span = u64::from(PORTS.end - PORTS.start);
    let seed = RandomState::new().build_hasher().finish();
    for i in 0..200u64 {
        let offset = seed.wrapping_add(i.wrapping_mul(7919)) % span;
        let port = PORTS.start + u16::try_from(offset).unwrap_or_default();
        let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
        if taken.contains(&port) {
            continue;
        }
        let free = in_netns(place.netns.as_deref(), || {
            TcpListener::bind(SocketAddr::new(any, port)).is_ok()
        })?;
        if free {
            taken.insert(port);
            return Ok(port);
        }
    }
    bail!("no free TCP port in {PORTS:?} on {}", place.addr)
}

/// Whether a TCP connection from `from` to `addr:port` succeeds.
pub(crate) fn accepts(from: &Place, addr: &str, port: u16) -> bool {
    let Some(target) = (addr, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
    else {
        return false;
    };
    in_netns(from.netns.as_deref(), || {
        TcpStream::connect_timeout(&target, Duration::from_millis(500)).is_ok()
    })
    .unwrap_or(false)
}
