//! The forwarder: the router at the middle of a star of hosts. Each host's packets
//! pass through its own [`DelayLine`] (its uplink: the rate it may send at, and the
//! whole one-way delay), then go to the TUN device of the host their IPv4 destination
//! names ([`Routes`]). Per host, one thread reads packets and offers them to the line,
//! and another delivers each packet when its arrival time comes.
//!
//! Two hosts are the original testbed: a's uplink is the a->b direction of the link,
//! b's the b->a one.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::delay::{DelayLine, LinkConfig};
use crate::route::Routes;
use crate::tun::Tun;

/// Largest packet a TUN device hands over (jumbo frames included).
const MAX_PACKET: usize = 65536;

/// One host as the forwarder sees it: its end of the link and its address.
#[derive(Debug)]
pub struct Port {
    /// The host's TUN device (opened in its namespace).
    pub tun: Tun,
    /// The host's address: packets for it are written to `tun`.
    pub addr: Ipv4Addr,
}

/// Counters of one host's uplink.
#[derive(Debug, Default)]
pub struct Counters {
    /// Packets delivered.
    pub delivered: AtomicU64,
    /// Packets dropped on the link (loss, full queue, or the link cut).
    pub dropped: AtomicU64,
    /// Packets dropped because no host has their destination (or they are not IPv4).
    pub unroutable: AtomicU64,
}

struct Uplink {
    line: Mutex<DelayLine>,
    arrived: Condvar,
    counters: Arc<Counters>,
}

/// Forwards among `ports` until the process ends, each host's packets through a delay
/// line with `cfg`. While `cut` is set, every packet offered is dropped (a link cut
/// without any reset or ICMP, as a failed path looks to the hosts). Returns each
/// port's counters, in the order of `ports`.
pub fn start(
    ports: Vec<Port>,
    cfg: LinkConfig,
    seed: u64,
    cut: Arc<AtomicBool>,
) -> Vec<Arc<Counters>> {
    let routes = Routes::new(ports.iter().map(|p| p.addr).collect());
    let tuns: Arc<Vec<Tun>> = Arc::new(ports.into_iter().map(|p| p.tun).collect());
    let epoch = Instant::now();
    (0..tuns.len())
        .map(|i| {
            let up = Arc::new(Uplink {
                // Each line its own seed, so that two hosts do not lose alike.
                line: Mutex::new(DelayLine::new(cfg, seed.wrapping_add(i as u64))),
                arrived: Condvar::new(),
                counters: Arc::new(Counters::default()),
            });
            spawn_reader(i, tuns.clone(), up.clone(), epoch, cut.clone());
            spawn_writer(up.clone(), tuns.clone(), routes.clone(), epoch);
            up.counters.clone()
        })
        .collect()
}

/// Reads port `i`'s packets into its uplink.
fn spawn_reader(
    i: usize,
    tuns: Arc<Vec<Tun>>,
    up: Arc<Uplink>,
    epoch: Instant,
    cut: Arc<AtomicBool>,
) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; MAX_PACKET];
        while let Ok(n) = tuns[i].recv(&mut buf) {
            if cut.load(Relaxed) {
                up.counters.dropped.fetch_add(1, Relaxed);
                continue;
            }
            let now = epoch.elapsed();
            let accepted = up
                .line
                .lock()
                .expect("line lock")
                .offer(now, buf[..n].to_vec());
            match accepted {
                Ok(_) => up.arrived.notify_one(),
                Err(_) => {
                    up.counters.dropped.fetch_add(1, Relaxed);
                }
            }
        }
    });
}

/// Delivers what arrives at the end of `up` to the host each packet is for. Routing
/// here, after the line, keeps the reader to one job; what no host takes (IPv6 the
/// kernel sends by itself, mostly) is rare and small.
fn spawn_writer(up: Arc<Uplink>, tuns: Arc<Vec<Tun>>, routes: Routes, epoch: Instant) {
    std::thread::spawn(move || loop {
        let packet = {
            let mut line = up.line.lock().expect("line lock");
            loop {
                let now = epoch.elapsed();
                if let Some(p) = line.take_arrived(now) {
                    break p;
                }
                line = match line.next_arrival() {
                    Some(t) => {
                        let wait = t.saturating_sub(now).max(Duration::from_micros(1));
                        up.arrived.wait_timeout(line, wait).expect("line lock").0
                    }
                    None => up.arrived.wait(line).expect("line lock"),
                };
            }
        };
        let Some(to) = routes.port_for(&packet) else {
            up.counters.unroutable.fetch_add(1, Relaxed);
            continue;
        };
        if tuns[to].send(&packet).is_ok() {
            up.counters.delivered.fetch_add(1, Relaxed);
        }
    });
}
