//! What `hetch serve --metrics ADDR` exposes: sessions, what they moved, and the
//! connections refused before authentication.
//!
//! Every label comes from a finite set written here (push/pull, ok/failed, received/
//! sent, a refusal's reason): never a path, a peer's address, a token or anything else
//! a client sends, so that no client can grow the exposition or read another's data
//! in it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use hetch_engine::{Progress, Tally, Tracked};
use hetch_metrics::{Exposition, Kind};
use hetch_proto::Op;

/// A server's counters, from its start.
#[derive(Debug, Default)]
pub(crate) struct ServeMetrics {
    /// What push sessions received, live.
    received: Arc<Tally>,
    /// What pull and relay sessions sent, live.
    sent: Arc<Tally>,
    /// Sessions ended, by [push, pull, relay] and [ok, failed].
    ended: [[AtomicU64; 2]; 3],
    /// Connections closed at once, over the limits on unauthenticated connections.
    pub(crate) refused: AtomicU64,
    /// Unauthenticated connections closed to make room for a newcomer, all places
    /// being taken.
    pub(crate) displaced: AtomicU64,
    /// Control connections that presented a wrong token.
    pub(crate) wrong_tokens: AtomicU64,
    /// Control connections refused unread, their address having failed too often.
    pub(crate) throttled: AtomicU64,
    /// Operations run on connections kept from an earlier one
    /// ([`hetch_proto::SessionRequest::reuse`]).
    pub(crate) reused: AtomicU64,
    /// Connections that failed before authenticating (TLS, preamble, hello, a wrong
    /// token or proof, or too slow).
    pub(crate) unauthenticated: AtomicU64,
    /// Accepts that failed (out of descriptors, mostly).
    pub(crate) accept_failed: AtomicU64,
}

/// What authenticated sessions hold now, and what their caps refused and closed.
#[derive(Debug, Default)]
pub(crate) struct Holding {
    /// Sessions open: running, joining their streams, or kept idle.
    pub open: usize,
    /// Of them, kept idle between operations.
    pub idle: usize,
    /// Connections they hold.
    pub connections: usize,
    /// The most they may hold (`--max-connections` in force).
    pub max_connections: usize,
    /// Sessions refused, by the cap that refused them.
    pub refused: Vec<(&'static str, u64)>,
    /// Idle sessions closed to make room, by the cap that was full.
    pub closed: Vec<(&'static str, u64)>,
}

/// Which way a session moves data (its operation's label, without its paths).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The client sends; this server receives.
    Push,
    /// The client receives; this server sends.
    Pull,
    /// This server sends to another server, for the client.
    Relay,
}

impl Side {
    /// The side of a session asking for `op`.
    pub(crate) fn of(op: &Op) -> Side {
        match op {
            // A range is a push of part of a file.
            Op::Push { .. } | Op::Range(_) => Side::Push,
            Op::Pull { .. } => Side::Pull,
            Op::Relay { .. } => Side::Relay,
        }
    }
}

/// Labels of [`Side`]s, in its order.
const OPS: [&str; 3] = ["push", "pull", "relay"];
/// Labels of outcomes: ended well, or in an error.
const OUTCOMES: [&str; 2] = ["ok", "failed"];

impl ServeMetrics {
    /// Counts what a session moves from now on, as it goes.
    pub(crate) fn track(&self, side: Side, progress: Arc<Progress>) -> Tracked {
        match side {
            Side::Push => self.received.track(progress),
            Side::Pull | Side::Relay => self.sent.track(progress),
        }
    }

    /// Counts a session that ended, well or not.
    pub(crate) fn session_ended(&self, side: Side, ok: bool) {
        self.ended[side as usize][usize::from(!ok)].fetch_add(1, Relaxed);
    }

    /// The exposition, with `running` sessions now and what sessions hold.
    pub(crate) fn render(&self, running: u64, held: &Holding) -> String {
        let mut e = Exposition::new();
        e.single(
            "hetch_serve_sessions_running",
            Kind::Gauge,
            "Sessions moving data now (kept idle sessions are in \
             hetch_serve_sessions_idle).",
            running,
        );
        let gauges = [
            (
                "hetch_serve_sessions_open",
                "Sessions holding connections now: running, joining their data streams, \
                 or kept idle between operations.",
                held.open,
            ),
            (
                "hetch_serve_sessions_idle",
                "Sessions kept idle between operations now (their connections are in \
                 hetch_serve_connections_held). The longest idle (or a session still \
                 waiting for its data streams) is closed when a newcomer needs its place.",
                held.idle,
            ),
            (
                "hetch_serve_connections_held",
                "Connections held by sessions now (control connections and data streams; \
                 a relay's onward ones), idle sessions' included.",
                held.connections,
            ),
            (
                "hetch_serve_connections_max",
                "The most connections sessions may hold (--max-connections, as sized from \
                 the open-file limit and memory at start).",
                held.max_connections,
            ),
        ];
        for (name, help, v) in gauges {
            e.single(name, Kind::Gauge, help, v as u64);
        }
        let mut f = e.family(
            "hetch_serve_sessions_refused_total",
            Kind::Counter,
            "Sessions refused before their welcome, by the cap that refused them: \
             streams (more connections than one address may hold), address_sessions, \
             address_connections (--max-sessions-per-address, \
             --max-connections-per-address), sessions, connections (--max-sessions, \
             --max-connections); each only when every session counting against the cap \
             was busy.",
        );
        for (cap, n) in &held.refused {
            f.sample(&[("cap", cap)], *n);
        }
        let mut f = e.family(
            "hetch_serve_sessions_closed_idle_total",
            Kind::Counter,
            "Idle sessions (kept, or joining their streams) closed to make room, by the \
             cap that was full: for a newcomer (address_sessions, address_connections, \
             sessions, connections), or past the caps on kept idle sessions \
             (address_idle: --max-idle-sessions-per-address, idle: --max-idle-sessions).",
        );
        for (cap, n) in &held.closed {
            f.sample(&[("cap", cap)], *n);
        }
        let mut f = e.family(
            "hetch_serve_sessions_ended_total",
            Kind::Counter,
            "Sessions ended, by operation (push: a client sent, pull: a client \
             received, relay: this server sent to another for a client) and outcome (failed: the session ended in an error; files that \
             failed in a session that ended well are in hetch_serve_files_failed_total).",
        );
        for (op, by_outcome) in OPS.iter().zip(&self.ended) {
            for (outcome, n) in OUTCOMES.iter().zip(by_outcome) {
                f.sample(&[("op", op), ("outcome", outcome)], n.load(Relaxed));
            }
        }
        let (received, sent) = (self.received.totals(), self.sent.totals());
        let directions = [("received", received), ("sent", sent)];
        let mut f = e.family(
            "hetch_serve_bytes_total",
            Kind::Counter,
            "Payload bytes received (pushes) and sent (pulls, relays), counted as \
             sessions run: rate() of it is the throughput.",
        );
        for (direction, s) in directions {
            f.sample(&[("direction", direction)], s.bytes);
        }
        let mut f = e.family(
            "hetch_serve_files_total",
            Kind::Counter,
            "Files received (pushes) and sent (pulls, relays) whole, counted as sessions \
             run.",
        );
        for (direction, s) in directions {
            f.sample(&[("direction", direction)], s.files);
        }
        let counters = [
            (
                "hetch_serve_files_failed_total",
                "Files that failed in sessions (each named in its client's report).",
                received.failed + sent.failed,
            ),
            (
                "hetch_serve_blocks_resent_total",
                "Blocks sent again after failing their check (retries).",
                received.retried_blocks + sent.retried_blocks,
            ),
            (
                "hetch_serve_sessions_reused_total",
                "Operations run on a session's connections kept from its earlier \
                 operation (no new TLS handshakes): a worker's units, one after another.",
                self.reused.load(Relaxed),
            ),
            (
                "hetch_serve_connections_refused_total",
                "Connections closed at once, over the limits on unauthenticated \
                 connections (--max-unauthenticated, --max-unauthenticated-per-address).",
                self.refused.load(Relaxed),
            ),
            (
                "hetch_serve_connections_displaced_total",
                "Unauthenticated connections closed to make room for a newcomer, all \
                 --max-unauthenticated places being taken (the oldest of the address \
                 holding the most).",
                self.displaced.load(Relaxed),
            ),
            (
                "hetch_serve_accept_failed_total",
                "Connections the server failed to accept (out of descriptors: something \
                 besides its sessions holds them; the caps leave a reserve).",
                self.accept_failed.load(Relaxed),
            ),
            (
                "hetch_serve_unauthenticated_total",
                "Connections that ended before authenticating: a failed TLS handshake, \
                 a bad hello, a wrong token or stream proof, or --auth-timeout passed.",
                self.unauthenticated.load(Relaxed),
            ),
        ];
        for (name, help, v) in counters {
            e.single(name, Kind::Counter, help, v);
        }
        let mut f = e.family(
            "hetch_serve_tokens_refused_total",
            Kind::Counter,
            "Control connections refused for their token: wrong, or not checked \
             because their address failed too often lately (throttled).",
        );
        f.sample(&[("reason", "wrong")], self.wrong_tokens.load(Relaxed));
        f.sample(&[("reason", "throttled")], self.throttled.load(Relaxed));
        e.into_text()
    }
}
