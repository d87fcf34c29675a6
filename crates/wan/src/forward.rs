//! The forwarder: moves packets between two TUN devices through a [`DelayLine`] in each
//! direction. Per direction, one thread reads packets and offers them to the line, and
//! another writes each packet out when its arrival time comes.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::delay::{DelayLine, LinkConfig};
use crate::tun::Tun;

/// Largest packet a TUN device hands over (jumbo frames included).
const MAX_PACKET: usize = 65536;

/// Counters of one direction.
#[derive(Debug, Default)]
pub struct Counters {
    /// Packets delivered.
    pub delivered: std::sync::atomic::AtomicU64,
    /// Packets dropped (loss or full queue).
    pub dropped: std::sync::atomic::AtomicU64,
}

struct Direction {
    line: Mutex<DelayLine>,
    arrived: Condvar,
    counters: Arc<Counters>,
}

/// Forwards between `a` and `b` with `cfg` in each direction, until the process ends.
/// While `cut` is set, every packet offered is dropped (a link cut without any reset
/// or ICMP, as a failed path looks to the hosts). Returns the counters of a->b and b->a.
pub fn start(
    a: Tun,
    b: Tun,
    cfg: LinkConfig,
    seed: u64,
    cut: Arc<AtomicBool>,
) -> [Arc<Counters>; 2] {
    let (a, b) = (Arc::new(a), Arc::new(b));
    let epoch = Instant::now();
    let ab = spawn_direction(a.clone(), b.clone(), cfg, seed, epoch, cut.clone());
    let ba = spawn_direction(b, a, cfg, seed.wrapping_add(1), epoch, cut);
    [ab, ba]
}

fn spawn_direction(
    from: Arc<Tun>,
    to: Arc<Tun>,
    cfg: LinkConfig,
    seed: u64,
    epoch: Instant,
    cut: Arc<AtomicBool>,
) -> Arc<Counters> {
    let dir = Arc::new(Direction {
        line: Mutex::new(DelayLine::new(cfg, seed)),
        arrived: Condvar::new(),
        counters: Arc::new(Counters::default()),
    });
    let counters = dir.counters.clone();
    {
        let dir = dir.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; MAX_PACKET];
            while let Ok(n) = from.recv(&mut buf) {
                if cut.load(Relaxed) {
                    dir.counters.dropped.fetch_add(1, Relaxed);
                    continue;
                }
                let now = epoch.elapsed();
                let accepted = dir
                    .line
                    .lock()
                    .expect("line lock")
                    .offer(now, buf[..n].to_vec());
                match accepted {
                    Ok(_) => dir.arrived.notify_one(),
                    Err(_) => {
                        dir.counters
                            .dropped
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
        });
    }
    {
        let dir = dir.clone();
        std::thread::spawn(move || loop {
            let packet = {
                let mut line = dir.line.lock().expect("line lock");
                loop {
                    let now = epoch.elapsed();
                    if let Some(p) = line.take_arrived(now) {
                        break p;
                    }
                    line = match line.next_arrival() {
                        Some(t) => {
                            let wait = t.saturating_sub(now).max(Duration::from_micros(1));
                            dir.arrived.wait_timeout(line, wait).expect("line lock").0
                        }
                        None => dir.arrived.wait(line).expect("line lock"),
                    };
                }
            };
            if to.send(&packet).is_ok() {
                dir.counters
                    .delivered
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
    }
    counters
}
