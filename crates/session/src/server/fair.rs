//! Fair shares of `hetch serve`'s sessions once authenticated: no token holder can take
//! the server away from other clients by holding sessions and their connections.
//!
//! A session is admitted, before it is welcomed, for the connections it will hold (its
//! control connection and data streams; a relay's onward ones too), against the caps
//! of [`Caps`]: sessions and connections from its address (IPv6: one /64), and in all
//! (the server has one token: what its holders hold together is the totals). When a
//! cap is full, the longest-idle session that counts against it (its address's for an
//! address's cap, anyone's for the totals) is closed for the newcomer; a session is
//! idle while it is kept between operations or waits for its data streams, never while
//! an operation runs. Only when every such session is busy is the newcomer refused.
//! Kept idle sessions are capped too, per address and in all: a session going idle
//! past a cap closes the longest-idle one that counts against it.
//!
//! So a flood of kept sessions costs its owner its oldest sessions and nobody else
//! anything, and a newcomer always gets in unless the server is busy moving data.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hetch_net::{Share, Shares};
use tokio::sync::Notify;

use super::limits::Caps;

/// A cap of [`Caps`] that was full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cap {
    /// Sessions from the newcomer's address.
    AddressSessions,
    /// Connections from the newcomer's address.
    AddressConnections,
    /// Sessions in all.
    Sessions,
    /// Connections in all.
    Connections,
    /// Kept idle sessions from one address.
    AddressIdle,
    /// Kept idle sessions in all.
    Idle,
}

impl Cap {
    /// Every cap, in the order of [`Cap::index`].
    pub(crate) const ALL: [Cap; 6] = [
        Cap::AddressSessions,
        Cap::AddressConnections,
        Cap::Sessions,
        Cap::Connections,
        Cap::AddressIdle,
        Cap::Idle,
    ];

    /// Its label in the metrics.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Cap::AddressSessions => "address_sessions",
            Cap::AddressConnections => "address_connections",
            Cap::Sessions => "sessions",
            Cap::Connections => "connections",
            Cap::AddressIdle => "address_idle",
            Cap::Idle => "idle",
        }
    }

    /// The flag that sets it.
    pub(crate) fn flag(self) -> &'static str {
        match self {
            Cap::AddressSessions => "--max-sessions-per-address",
            Cap::AddressConnections => "--max-connections-per-address",
            Cap::Sessions => "--max-sessions",
            Cap::Connections => "--max-connections",
            Cap::AddressIdle => "--max-idle-sessions-per-address",
            Cap::Idle => "--max-idle-sessions",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// Whether it caps one address's sessions (else everyone's).
    fn per_address(self) -> bool {
        match self {
            Cap::AddressSessions | Cap::AddressConnections | Cap::AddressIdle => true,
            Cap::Sessions | Cap::Connections | Cap::Idle => false,
        }
    }

    /// Whether a session from `address` counts against this cap for a newcomer from
    /// `from`.
    fn covers(self, from: IpAddr, address: IpAddr) -> bool {
        !self.per_address() || from == address
    }
}

/// Why a session was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// It asks for more connections than one address may hold.
    TooMany {
        /// What it asks for.
        wanted: usize,
        /// What one address may hold.
        cap: usize,
    },
    /// `cap` is full of busy sessions: `n` is the cap's value.
    Busy(Cap, usize),
}

impl Refused {
    /// The answer to the client.
    pub(crate) fn message(self) -> String {
        match self {
            Refused::TooMany { wanted, cap } => format!(
                "a session of {} data streams holds {wanted} connections, more than one \
                 address may hold on this server ({cap}, {}); ask for fewer streams",
                wanted - 1,
                Cap::AddressConnections.flag()
            ),
            Refused::Busy(cap, n) => {
                let whose = match cap.per_address() {
                    true => "sessions from your address hold",
                    false => "the server holds",
                };
                let what = match cap {
                    Cap::AddressConnections | Cap::Connections => "connections",
                    _ => "sessions",
                };
                format!(
                    "{whose} {n} {what} ({}), each busy moving data; retry later",
                    cap.flag()
                )
            }
        }
    }
}

/// The sessions a server holds and what each address holds of them.
#[derive(Debug)]
pub(crate) struct Sessions {
    caps: Caps,
    connections_by_address: Arc<Shares<IpAddr>>,
    sessions_by_address: Arc<Shares<IpAddr>>,
    table: Mutex<Table>,
    /// Sessions refused: for too many streams first, then by the [`Cap`] that was full.
    refused: [AtomicU64; 1 + Cap::ALL.len()],
    /// Idle sessions closed to make room, by the [`Cap`] that was full.
    closed: [AtomicU64; Cap::ALL.len()],
}

#[derive(Debug, Default)]
struct Table {
    held: HashMap<u64, Entry>,
    /// Connections the sessions in `held` hold.
    connections: usize,
    /// Sessions kept idle now (not counting those joining their streams).
    idle: usize,
    /// Ids of sessions, and ticks of idleness: later is larger.
    clock: u64,
}

/// One admitted session, as the table keeps it.
#[derive(Debug)]
struct Entry {
    address: IpAddr,
    connections: usize,
    /// The tick it went idle at, while it is idle (joining its streams, or kept).
    idle_since: Option<u64>,
    /// It was kept after an operation: idle now is kept idle, which the idle caps
    /// count (a session joining its streams is idle too, but not kept).
    kept: bool,
    slot: Arc<Slot>,
    /// What it takes of its address's caps, given back when the entry goes.
    _shares: (Share<IpAddr>, Share<IpAddr>),
}

/// What a session's task and the table share.
#[derive(Debug, Default)]
struct Slot {
    /// Set when the table closed the session for a newcomer; its task must end.
    closing: AtomicBool,
    wake: Notify,
}

/// A closed session: which cap made room, and whose session it was.
pub(crate) struct Closed {
    /// The cap that was full.
    pub cap: Cap,
    /// The address of the session closed.
    pub address: IpAddr,
    /// The connections it held.
    pub connections: usize,
}

impl Sessions {
    /// A table enforcing `caps`.
    pub(crate) fn new(caps: Caps) -> Arc<Sessions> {
        Arc::new(Sessions {
            caps,
            connections_by_address: Shares::new(caps.connections_per_address),
            sessions_by_address: Shares::new(caps.sessions_per_address),
            table: Mutex::default(),
            refused: Default::default(),
            closed: Default::default(),
        })
    }

    /// The caps in force.
    pub(crate) fn caps(&self) -> &Caps {
        &self.caps
    }

    /// The value of `cap`.
    pub(crate) fn limit(&self, cap: Cap) -> usize {
        let c = &self.caps;
        match cap {
            Cap::AddressSessions => c.sessions_per_address,
            Cap::AddressConnections => c.connections_per_address,
            Cap::Sessions => c.sessions,
            Cap::Connections => c.connections,
            Cap::AddressIdle => c.idle_sessions_per_address,
            Cap::Idle => c.idle_sessions,
        }
    }

    /// Admits a session from `ip` holding `connections`, closing idle sessions where a
    /// cap is full (each one closed is passed to `closed`); it starts idle (joining
    /// its streams) until [`Held::busy`].
    pub(crate) fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        connections: usize,
        mut closed: impl FnMut(Closed),
    ) -> Result<Held, Refused> {
        let address = hetch_net::address_key(ip);
        let refused = |r: Refused| {
            self.refused[refused_index(r)].fetch_add(1, Ordering::Relaxed);
            r
        };
        let cap = self.caps.connections_per_address.min(self.caps.connections);
        if connections > cap {
            return Err(refused(Refused::TooMany {
                wanted: connections,
                cap,
            }));
        }
        let mut t = self.lock();
        // Each turn closes one session or ends: the sessions held bound the turns.
        let session = loop {
            match self.sessions_by_address.take(address, 1) {
                Ok(s) => break s,
                Err(_) => self
                    .make_room(&mut t, Cap::AddressSessions, address, &mut closed)
                    .map_err(refused)?,
            }
        };
        let conns = loop {
            match self.connections_by_address.take(address, connections) {
                Ok(s) => break s,
                Err(_) => self
                    .make_room(&mut t, Cap::AddressConnections, address, &mut closed)
                    .map_err(refused)?,
            }
        };
        while t.held.len() >= self.caps.sessions {
            self.make_room(&mut t, Cap::Sessions, address, &mut closed)
                .map_err(refused)?;
        }
        while t.connections + connections > self.caps.connections {
            self.make_room(&mut t, Cap::Connections, address, &mut closed)
                .map_err(refused)?;
        }
        t.clock += 1;
        let id = t.clock;
        let slot = Arc::new(Slot::default());
        t.held.insert(
            id,
            Entry {
                address,
                connections,
                idle_since: Some(id),
                kept: false,
                slot: slot.clone(),
                _shares: (session, conns),
            },
        );
        t.connections += connections;
        Ok(Held {
            sessions: self.clone(),
            id,
            slot,
        })
    }

    /// Closes the longest-idle session that counts against `cap` for a newcomer from
    /// `from` (for the idle caps, the longest kept idle); `Err` when every such session
    /// is busy.
    fn make_room(
        &self,
        t: &mut Table,
        cap: Cap,
        from: IpAddr,
        closed: &mut impl FnMut(Closed),
    ) -> Result<(), Refused> {
        let victim = t
            .held
            .iter()
            .filter(|(_, e)| cap.covers(from, e.address))
            .filter(|(_, e)| e.kept || !matches!(cap, Cap::AddressIdle | Cap::Idle))
            .filter_map(|(id, e)| Some((e.idle_since?, *id)))
            .min()
            .map(|(_, id)| id);
        let Some(id) = victim else {
            return Err(Refused::Busy(cap, self.limit(cap)));
        };
        let e = t.remove(id).expect("a held session");
        e.slot.closing.store(true, Ordering::Release);
        e.slot.wake.notify_one();
        self.closed[cap.index()].fetch_add(1, Ordering::Relaxed);
        closed(Closed {
            cap,
            address: e.address,
            connections: e.connections,
        });
        Ok(())
    }

    /// (sessions open, of them kept idle, connections they hold).
    pub(crate) fn held(&self) -> (usize, usize, usize) {
        let t = self.lock();
        (t.held.len(), t.idle, t.connections)
    }

    /// Sessions refused, by label: `streams`, then each [`Cap`]'s (the idle caps never
    /// refuse).
    pub(crate) fn refused(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        let caps = Cap::ALL
            .iter()
            .filter(|c| !matches!(c, Cap::AddressIdle | Cap::Idle));
        let labels = std::iter::once("streams").chain(caps.map(|c| c.label()));
        labels.zip(self.refused.iter().map(|n| n.load(Ordering::Relaxed)))
    }

    /// Idle sessions closed to make room, by the cap that was full.
    pub(crate) fn closed(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        let labels = Cap::ALL.iter().map(|c| c.label());
        labels.zip(self.closed.iter().map(|n| n.load(Ordering::Relaxed)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // Consistent after every statement: usable after a panic.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Table {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let e = self.held.remove(&id)?;
        self.connections -= e.connections;
        self.idle -= usize::from(e.kept_idle());
        Some(e)
    }
}

impl Entry {
    fn kept_idle(&self) -> bool {
        self.kept && self.idle_since.is_some()
    }
}

fn refused_index(r: Refused) -> usize {
    match r {
        Refused::TooMany { .. } => 0,
        Refused::Busy(cap, _) => 1 + cap.index(),
    }
}

/// An admitted session's place; dropping it gives back what it holds.
#[derive(Debug)]
pub(crate) struct Held {
    sessions: Arc<Sessions>,
    id: u64,
    slot: Arc<Slot>,
}

impl Held {
    /// The session starts an operation: it is no longer closed for newcomers. `false`
    /// when it was closed already (its task must end).
    pub(crate) fn busy(&self) -> bool {
        let mut t = self.sessions.lock();
        let Some(e) = t.held.get_mut(&self.id) else {
            return false;
        };
        let was = e.kept_idle();
        e.idle_since = None;
        t.idle -= usize::from(was);
        true
    }

    /// The session is kept idle until its next operation: closed for a newcomer when
    /// it is the longest idle, and past the idle caps, the longest-idle session of its
    /// address or of all is closed (each one closed is passed to `closed`).
    pub(crate) fn idle(&self, mut closed: impl FnMut(Closed)) {
        let s = &self.sessions;
        let mut t = s.lock();
        t.clock += 1;
        let now = t.clock;
        let Some(e) = t.held.get_mut(&self.id) else {
            return;
        };
        let was = e.kept_idle();
        (e.kept, e.idle_since) = (true, Some(now));
        t.idle += usize::from(!was);
        let address = t.held[&self.id].address;
        let idle_here = |t: &Table| {
            t.held
                .values()
                .filter(|e| e.address == address && e.kept_idle())
                .count()
        };
        // This session is the newest idle: it is closed last, only under a cap of 0.
        while idle_here(&t) > s.caps.idle_sessions_per_address {
            if s.make_room(&mut t, Cap::AddressIdle, address, &mut closed)
                .is_err()
            {
                break;
            }
        }
        while t.idle > s.caps.idle_sessions {
            if s.make_room(&mut t, Cap::Idle, address, &mut closed)
                .is_err()
            {
                break;
            }
        }
    }

    /// Resolves once the session was closed to make room: its task must then end.
    /// Never resolves otherwise.
    pub(crate) fn closing(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let slot = self.slot.clone();
        async move {
            if slot.closing.load(Ordering::Acquire) {
                return;
            }
            // The flag is set before the wake-up, and notify_one keeps a wake-up for a
            // waiter that comes later: none is missed.
            slot.wake.notified().await
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // A session closed to make room is gone from the table already.
        let e = self.sessions.lock().remove(self.id);
        drop(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn caps(connections: usize, per_address: usize, sessions: usize, per: usize) -> Caps {
        Caps {
            connections,
            connections_per_address: per_address,
            sessions,
            sessions_per_address: per,
            idle_sessions: sessions,
            idle_sessions_per_address: per,
        }
    }

    /// Admits a session, asserting that nothing was closed for it.
    fn admit(s: &Arc<Sessions>, from: &str, connections: usize) -> Held {
        s.admit(ip(from), connections, |c| {
            panic!("closed {}'s for {from}", c.address)
        })
        .unwrap()
    }

    /// Admits a session, returning what was closed for it.
    fn admit_closing(s: &Arc<Sessions>, from: &str, n: usize) -> (Held, Vec<(Cap, IpAddr)>) {
        let mut closed = Vec::new();
        let held = s
            .admit(ip(from), n, |c| closed.push((c.cap, c.address)))
            .unwrap();
        (held, closed)
    }

    #[test]
    fn a_newcomer_takes_the_place_of_the_longest_idle_session_of_its_cap() {
        let s = Sessions::new(caps(100, 60, 10, 3));
        let a1 = admit(&s, "10.0.0.1", 20);
        let a2 = admit(&s, "10.0.0.1", 20);
        a1.idle(|_| panic!());
        a2.idle(|_| panic!());
        assert_eq!(s.held(), (2, 2, 40));
        assert!(a2.busy());
        // 10.0.0.1 holds 40 of its 60: 30 more close its longest idle (a1), not a2.
        let (a3, closed) = admit_closing(&s, "10.0.0.1", 30);
        assert_eq!(closed, [(Cap::AddressConnections, ip("10.0.0.1"))]);
        assert!(!a1.busy(), "a1 was closed");
        assert!(a2.busy());
        // a3 joins its streams: idle for newcomers, not kept idle.
        assert_eq!(s.held(), (2, 0, 50));
        // a1 closed: its drop gives nothing back twice.
        drop(a1);
        assert_eq!(s.held(), (2, 0, 50));
        // Another address fills the total; the next one closes anyone's longest idle,
        // which is a3 (still joining: idle since its admission).
        let _b = admit(&s, "10.0.0.2", 50);
        let (_c, closed) = admit_closing(&s, "10.0.0.3", 10);
        assert_eq!(closed, [(Cap::Connections, ip("10.0.0.1"))]);
        assert!(!a3.busy());
        assert_eq!(s.held().2, 20 + 50 + 10);
    }

    #[test]
    fn a_full_house_of_busy_sessions_refuses_and_counts() {
        let s = Sessions::new(caps(100, 60, 10, 2));
        let a = admit(&s, "10.0.0.1", 10);
        let b = admit(&s, "10.0.0.1", 10);
        assert!(a.busy() && b.busy());
        let r = s.admit(ip("10.0.0.1"), 5, |_| panic!()).unwrap_err();
        assert_eq!(r, Refused::Busy(Cap::AddressSessions, 2));
        assert!(r.message().contains("your address"), "{}", r.message());
        let r = s.admit(ip("10.0.0.2"), 61, |_| panic!()).unwrap_err();
        assert_eq!(
            r,
            Refused::TooMany {
                wanted: 61,
                cap: 60
            }
        );
        let c = admit(&s, "10.0.0.2", 60);
        assert!(c.busy());
        let r = s.admit(ip("10.0.0.3"), 30, |_| panic!()).unwrap_err();
        assert_eq!(r, Refused::Busy(Cap::Connections, 100));
        assert!(r.message().contains("the server holds"), "{}", r.message());
        let refused: HashMap<_, _> = s.refused().collect();
        assert_eq!(
            (
                refused["address_sessions"],
                refused["streams"],
                refused["connections"]
            ),
            (1, 1, 1)
        );
        // A refused newcomer holds nothing.
        drop((a, b));
        assert_eq!(s.held(), (1, 0, 60));
        assert!(s.admit(ip("10.0.0.3"), 30, |_| panic!()).is_ok());
    }

    #[test]
    fn idle_caps_close_the_longest_idle_of_the_address_then_of_all() {
        let mut c = caps(1000, 1000, 100, 100);
        c.idle_sessions_per_address = 2;
        c.idle_sessions = 2;
        let s = Sessions::new(c);
        // Idle the longest, but joining its streams: no idle cap closes it.
        let joining = admit(&s, "10.0.0.1", 2);
        let a: Vec<Held> = (0..3).map(|_| admit(&s, "10.0.0.1", 2)).collect();
        let b = admit(&s, "10.0.0.2", 2);
        for h in a.iter().chain([&b]) {
            assert!(h.busy());
        }
        let mut closed = Vec::new();
        for h in &a {
            h.idle(|c| closed.push((c.cap, c.address)));
        }
        assert_eq!(closed, [(Cap::AddressIdle, ip("10.0.0.1"))]);
        assert!(!a[0].busy() && a[1].busy() && a[2].busy());
        a[1].idle(|_| panic!());
        a[2].idle(|_| panic!());
        closed.clear();
        b.idle(|c| closed.push((c.cap, c.address)));
        // Three would be idle, two may: the longest idle of all goes (a[1]).
        assert_eq!(closed, [(Cap::Idle, ip("10.0.0.1"))]);
        assert!(!a[1].busy());
        let closed: HashMap<_, _> = s.closed().collect();
        assert_eq!((closed["address_idle"], closed["idle"]), (1, 1));
        assert!(joining.busy());
        assert_eq!(s.held(), (3, 2, 6));
    }

    #[tokio::test]
    async fn a_closed_session_wakes_its_task() {
        let s = Sessions::new(caps(10, 10, 1, 1));
        let first = admit(&s, "10.0.0.1", 2);
        let waiting = first.closing();
        let waiter = tokio::spawn(waiting);
        tokio::task::yield_now().await;
        let (_second, closed) = admit_closing(&s, "10.0.0.1", 2);
        assert_eq!(closed.len(), 1);
        waiter.await.unwrap();
        // Closed before anyone waits: resolves at once.
        first.closing().await;
    }

    #[test]
    fn ipv6_addresses_count_by_slash_64() {
        let s = Sessions::new(caps(100, 100, 10, 1));
        let a = admit(&s, "2001:db8::1", 2);
        assert!(a.busy());
        let r = s.admit(ip("2001:db8::2"), 2, |_| panic!()).unwrap_err();
        assert_eq!(r, Refused::Busy(Cap::AddressSessions, 1));
        assert!(s.admit(ip("2001:db8:0:1::1"), 2, |_| panic!()).is_ok());
    }
}
