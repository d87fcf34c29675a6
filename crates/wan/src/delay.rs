//! One direction of an emulated link, without I/O and without a clock: the caller
//! passes the time (a [`Duration`] since any fixed start) to every call.
//!
//! A packet offered at time `now` starts leaving when the link is free (after the
//! packets before it), takes `len / rate` to serialise, and arrives `delay` after it
//! has left: `arrival = max(now, link_free) + len / rate + delay`. With a fixed delay
//! and a FIFO link, arrivals keep the offered order. A packet is dropped when the
//! queue in front of the link would hold more than `queue_bytes` (tail drop, what a
//! router's buffer does) or, independently, with probability `loss` (random loss, what
//! the papers' loss experiments inject).

use std::collections::VecDeque;
use std::time::Duration;

/// The emulated link, one direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Bytes per second; 0 means no rate limit (packets leave when offered).
    pub rate: u64,
    /// One-way propagation delay (half the round-trip time).
    pub delay: Duration,
    /// Probability in `0.0..=1.0` that a packet is lost.
    pub loss: f64,
    /// Probability in `0.0..=1.0` that a TCP segment's payload is damaged with its
    /// checksum fixed, so that TCP delivers the damage (see [`crate::damage`]).
    pub corrupt: f64,
    /// Most bytes waiting for the link (ignored without a rate limit).
    pub queue_bytes: u64,
}

/// Why a packet did not make it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Random loss.
    Loss,
    /// The queue in front of the link was full.
    QueueFull,
}

/// One direction of a link: packets in flight, in arrival order.
#[derive(Debug)]
pub struct DelayLine {
    cfg: LinkConfig,
    /// When the link finishes sending what it has already accepted.
    link_free: Duration,
    /// Accepted packets and their arrival times, in order.
    in_flight: VecDeque<(Duration, Vec<u8>)>,
    rng: XorShift,
    /// Segments damaged so far.
    damaged: u64,
}

impl DelayLine {
    /// A link with `cfg`; `seed` makes its random losses reproducible.
    pub fn new(cfg: LinkConfig, seed: u64) -> Self {
        DelayLine {
            cfg,
            link_free: Duration::ZERO,
            in_flight: VecDeque::new(),
            rng: XorShift::new(seed),
            damaged: 0,
        }
    }

    /// Offers a packet at time `now`; returns its arrival time, or why it was dropped.
    pub fn offer(&mut self, now: Duration, mut packet: Vec<u8>) -> Result<Duration, Dropped> {
        let start = self.link_free.max(now);
        if self.cfg.rate > 0 {
            // Bytes still waiting for the link when this packet arrives.
            let backlog = bytes_in(start - now, self.cfg.rate);
            if backlog + packet.len() as u64 > self.cfg.queue_bytes {
                return Err(Dropped::QueueFull);
            }
        }
        if self.cfg.loss > 0.0 && self.rng.next_f64() < self.cfg.loss {
            // A lost packet still used the link (it is lost on the way).
            self.link_free = start + self.serialisation(packet.len());
            return Err(Dropped::Loss);
        }
        if self.cfg.corrupt > 0.0 && self.rng.next_f64() < self.cfg.corrupt {
            let (pick, mask) = (self.rng.next_u64(), 1u8 << (self.rng.next_u64() % 8));
            if crate::damage::damage_tcp_payload(&mut packet, pick, mask) {
                self.damaged += 1;
            }
        }
        self.link_free = start + self.serialisation(packet.len());
        let arrival = self.link_free + self.cfg.delay;
        self.in_flight.push_back((arrival, packet));
        Ok(arrival)
    }

    /// When the next packet arrives, if any is in flight.
    pub fn next_arrival(&self) -> Option<Duration> {
        self.in_flight.front().map(|(t, _)| *t)
    }

    /// The next packet that has arrived by `now`, in order.
    pub fn take_arrived(&mut self, now: Duration) -> Option<Vec<u8>> {
        match self.in_flight.front() {
            Some((t, _)) if *t <= now => self.in_flight.pop_front().map(|(_, p)| p),
            _ => None,
        }
    }

    /// TCP segments damaged so far (see [`LinkConfig::corrupt`]).
    pub fn damaged(&self) -> u64 {
        self.damaged
    }

    /// Packets in flight.
    pub fn len(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }

    fn serialisation(&self, len: usize) -> Duration {
        if self.cfg.rate == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos((len as u128 * 1_000_000_000 / self.cfg.rate as u128) as u64)
    }
}

/// Bytes a link of `rate` bytes/s sends in `d`.
fn bytes_in(d: Duration, rate: u64) -> u64 {
    (d.as_nanos() * rate as u128 / 1_000_000_000) as u64
}

/// A small, fast, seeded generator: loss decisions need to be reproducible, not secure.
#[derive(Debug)]
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        // Zero is a fixed point of xorshift; mix the seed so that 0 is usable too.
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `[0, 1)`.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn link(rate: u64, delay: Duration, loss: f64) -> DelayLine {
        DelayLine::new(
            LinkConfig {
                rate,
                delay,
                loss,
                corrupt: 0.0,
                queue_bytes: 1 << 20,
            },
            7,
        )
    }

    #[test]
    fn without_a_rate_each_packet_arrives_one_delay_later() {
        let mut l = link(0, 25 * MS, 0.0);
        assert_eq!(l.offer(Duration::ZERO, vec![1; 1500]), Ok(25 * MS));
        assert_eq!(l.offer(3 * MS, vec![2; 1500]), Ok(28 * MS));
        assert_eq!(l.next_arrival(), Some(25 * MS));
        assert_eq!(l.take_arrived(24 * MS), None, "too early");
        assert_eq!(l.take_arrived(25 * MS).unwrap()[0], 1);
        assert_eq!(l.take_arrived(27 * MS), None);
        assert_eq!(l.take_arrived(30 * MS).unwrap()[0], 2);
        assert!(l.is_empty());
    }

    #[test]
    fn the_rate_spaces_back_to_back_packets_by_their_serialisation_time() {
        // 1 MB/s: 1000 bytes take 1 ms on the link.
        let mut l = link(1_000_000, 10 * MS, 0.0);
        let arrivals: Vec<_> = (0..5)
            .map(|_| l.offer(Duration::ZERO, vec![0; 1000]).unwrap())
            .collect();
        let expected: Vec<_> = (1..=5).map(|i| i * MS + 10 * MS).collect();
        assert_eq!(arrivals, expected);
        // A packet offered after the link went idle does not wait.
        assert_eq!(l.offer(100 * MS, vec![0; 1000]), Ok(111 * MS));
    }

    #[test]
    fn packets_arrive_in_the_order_offered() {
        let mut l = link(10_000_000, 50 * MS, 0.0);
        for i in 0..200u32 {
            let len = 40 + (i as usize * 37) % 1460;
            let mut p = vec![0; len];
            p[..4].copy_from_slice(&i.to_le_bytes());
            l.offer(Duration::from_micros(i as u64 * 13), p).unwrap();
        }
        let mut next = 0u32;
        let mut now = Duration::ZERO;
        while let Some(t) = l.next_arrival() {
            now = now.max(t);
            let p = l.take_arrived(now).unwrap();
            assert_eq!(u32::from_le_bytes(p[..4].try_into().unwrap()), next);
            next += 1;
        }
        assert_eq!(next, 200);
    }

    #[test]
    fn a_full_queue_drops_at_the_tail() {
        // 1 MB/s with room for 3000 bytes of backlog.
        let mut l = DelayLine::new(
            LinkConfig {
                rate: 1_000_000,
                delay: MS,
                loss: 0.0,
                corrupt: 0.0,
                queue_bytes: 3000,
            },
            1,
        );
        let results: Vec<_> = (0..5)
            .map(|_| l.offer(Duration::ZERO, vec![0; 1000]))
            .collect();
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 3);
        assert_eq!(results[3], Err(Dropped::QueueFull));
        // Once the link has drained, packets are accepted again.
        assert!(l.offer(10 * MS, vec![0; 1000]).is_ok());
    }

    #[test]
    fn random_loss_drops_about_the_configured_fraction() {
        for loss in [0.001, 0.01, 0.1] {
            let mut l = link(0, MS, loss);
            let n = 200_000;
            let lost = (0..n)
                .filter(|_| l.offer(Duration::ZERO, vec![0; 100]) == Err(Dropped::Loss))
                .count();
            let expected = loss * n as f64;
            // Binomial: 5 standard deviations either way.
            let sd = (n as f64 * loss * (1.0 - loss)).sqrt();
            assert!(
                (lost as f64 - expected).abs() < 5.0 * sd,
                "loss {loss}: {lost} of {n} lost, expected about {expected}"
            );
        }
        let mut l = link(0, MS, 0.0);
        assert!((0..10_000).all(|_| l.offer(Duration::ZERO, vec![0; 100]).is_ok()));
    }

    #[test]
    fn corruption_damages_about_the_configured_fraction_of_segments_and_nothing_else() {
        let mut l = DelayLine::new(
            LinkConfig {
                rate: 0,
                delay: MS,
                loss: 0.0,
                corrupt: 0.1,
                queue_bytes: 0,
            },
            3,
        );
        let clean = crate::damage::tests::segment(&[7u8; 1000]);
        let n = 20_000;
        for _ in 0..n {
            l.offer(Duration::ZERO, clean.clone()).unwrap();
        }
        let mut changed = 0;
        while let Some(p) = l.take_arrived(2 * MS) {
            changed += usize::from(p != clean);
        }
        assert_eq!(changed as u64, l.damaged(), "every damage is counted");
        let sd = (n as f64 * 0.1 * 0.9).sqrt();
        assert!(
            (changed as f64 - 0.1 * n as f64).abs() < 5.0 * sd,
            "{changed} of {n} damaged"
        );
        // Packets that are not TCP segments with payload pass untouched.
        let before = l.damaged();
        for _ in 0..1000 {
            l.offer(Duration::ZERO, vec![0x60; 100]).unwrap();
        }
        assert_eq!(l.damaged(), before);
    }

    #[test]
    fn the_same_seed_loses_the_same_packets() {
        let run = |seed| {
            let mut l = DelayLine::new(
                LinkConfig {
                    rate: 0,
                    delay: MS,
                    loss: 0.05,
                    corrupt: 0.0,
                    queue_bytes: 0,
                },
                seed,
            );
            (0..1000)
                .map(|_| l.offer(Duration::ZERO, vec![0; 10]).is_ok())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }
}
