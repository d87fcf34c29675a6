//! Fair shares of the service's authenticated connections: no user can take the
//! service away from everyone by holding its connections.
//!
//! A connection counts against the caller of its latest request from that request on:
//! - a user (an OIDC identity) holds at most [`FairLimits::per_user`] connections, and
//!   users from one address (IPv6: one /64) at most [`FairLimits::per_address`];
//! - users together hold at most `max_connections - operator_reserve`: the rest is
//!   the operator's and the workers' (their two tokens), which have no other cap;
//! - a newcomer over one of these caps takes the place of the longest-idle connection
//!   that counts against the same cap (the caller's own, its address's, anyone's),
//!   which is closed; only when every such connection is in the middle of a request is
//!   the newcomer refused (429 for a caller's or an address's cap, 503 for a full
//!   house), and its connection closed after the answer.
//!
//! So an idle flood of keep-alive connections costs its owner its oldest ones and
//! nobody else anything, while the operator always has its reserve.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use hetch_net::{Share, Shares};
use tokio::sync::Notify;

use crate::auth::Caller;

/// Caps on what callers hold once authenticated (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FairLimits {
    /// Connections one user (OIDC identity) holds at once.
    pub per_user: usize,
    /// Connections users from one address (IPv6: one /64) hold at once.
    pub per_address: usize,
    /// Of `max_connections`, how many only the service's token may hold.
    pub operator_reserve: usize,
}

impl Default for FairLimits {
    fn default() -> Self {
        FairLimits {
            per_user: 32,
            per_address: 128,
            operator_reserve: 64,
        }
    }
}

/// Why a connection's request was refused its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The caller holds [`FairLimits::per_user`] connections, each busy.
    User(usize),
    /// Users from the address hold [`FairLimits::per_address`], each busy.
    Address(usize),
    /// The service holds all the connections the caller may share, each busy.
    Full(usize),
}

impl Refused {
    /// The answer: 429 for a cap of the caller's own, 503 for a full house; the
    /// connection is closed after it.
    pub fn response(self) -> Response {
        let (status, why) = match self {
            Refused::User(n) => (
                StatusCode::TOO_MANY_REQUESTS,
                format!("you hold {n} connections busy, the most one user may; retry later"),
            ),
            Refused::Address(n) => (
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "users from your address hold {n} connections busy, the most one \
                     address may; retry later"
                ),
            ),
            Refused::Full(n) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the service holds {n} connections, each busy; retry later"),
            ),
        };
        let mut r = crate::routes::fail(status, why).into_response_closing();
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        r
    }

    /// Its label in `/metrics`.
    pub fn label(self) -> &'static str {
        match self {
            Refused::User(_) => "user",
            Refused::Address(_) => "address",
            Refused::Full(_) => "full",
        }
    }
}

/// The service's authenticated connections and what each caller holds.
#[derive(Debug)]
pub struct Conns {
    limits: FairLimits,
    max: usize,
    users: Arc<Shares<String>>,
    addresses: Arc<Shares<IpAddr>>,
    table: Mutex<Table>,
    /// Counts every start and end of a request: the order of connections' last
    /// activity, exact where a clock's ties would not be.
    ticks: AtomicU64,
    next_id: AtomicU64,
    /// Connections closed for a newcomer, by the cap that was full: user, address,
    /// full house.
    pub displaced: [AtomicU64; 3],
    /// Requests refused a share, by the same caps.
    pub refused: [AtomicU64; 3],
}

#[derive(Debug, Default)]
struct Table {
    /// Connections holding a share, by id.
    held: HashMap<u64, Arc<ConnState>>,
    /// Of those, the ones a user holds.
    users: usize,
}

/// One connection, as its task, its requests and the table share it.
#[derive(Debug)]
pub struct ConnState {
    id: u64,
    peer: IpAddr,
    /// Requests whose answer has not been sent whole.
    in_flight: AtomicUsize,
    /// When a request last started or ended, in the table's ticks.
    last_active: AtomicU64,
    /// Who the connection counts against, and the shares that count it.
    holder: Mutex<Option<Holder>>,
    /// Set when the table took the connection's place for a newcomer.
    closing: AtomicBool,
    close: Notify,
}

#[derive(Debug)]
struct Holder {
    caller: Caller,
    _user: Option<Share<String>>,
    _address: Option<Share<IpAddr>>,
}

impl Conns {
    /// A table for at most `max` authenticated connections.
    pub fn new(max: usize, limits: FairLimits) -> Arc<Conns> {
        Arc::new(Conns {
            limits,
            max: max.max(1),
            users: Shares::new(limits.per_user),
            addresses: Shares::new(limits.per_address),
            table: Mutex::default(),
            ticks: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
            displaced: Default::default(),
            refused: Default::default(),
        })
    }

    /// The state of a new connection from `peer`, holding nothing yet.
    pub fn open(&self, peer: IpAddr) -> Arc<ConnState> {
        Arc::new(ConnState {
            id: self.next_id.fetch_add(1, Relaxed),
            peer: hetch_net::address_key(peer),
            in_flight: AtomicUsize::new(0),
            last_active: AtomicU64::new(self.now()),
            holder: Mutex::new(None),
            closing: AtomicBool::new(false),
            close: Notify::new(),
        })
    }

    /// Connections holding a share now: (all, users').
    pub fn held(&self) -> (usize, usize) {
        let t = self.lock();
        (t.held.len(), t.users)
    }

    /// Lets a request of `conn` by `caller` in: the connection counts against the
    /// caller from now on, displacing idle connections where a cap is full. The
    /// request is in flight until the returned guard is dropped (with its answer's
    /// body: see [`InFlight::hold_until_sent`]).
    pub fn admit(
        self: &Arc<Self>,
        conn: &Arc<ConnState>,
        caller: &Caller,
    ) -> Result<InFlight, Refused> {
        let holds = conn
            .holder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|h| &h.caller == caller);
        if holds != Some(true) && !conn.closing.load(Relaxed) {
            self.hold(conn, caller).inspect_err(|r| {
                self.refused[index(*r)].fetch_add(1, Relaxed);
            })?;
        }
        conn.in_flight.fetch_add(1, Relaxed);
        conn.last_active.store(self.now(), Relaxed);
        Ok(InFlight {
            conns: self.clone(),
            conn: conn.clone(),
        })
    }

    /// Gives `conn` the shares of `caller` (it held another's, or none).
    fn hold(&self, conn: &Arc<ConnState>, caller: &Caller) -> Result<(), Refused> {
        self.release(conn);
        let user = match caller {
            Caller::Operator | Caller::Worker => None,
            Caller::User(name) => Some(self.take(
                conn,
                |s| s.users.take(name.clone(), 1),
                |c| c.caller() == Some(caller.clone()),
                Refused::User(self.limits.per_user),
            )?),
        };
        let address = match caller {
            Caller::Operator | Caller::Worker => None,
            Caller::User(_) => Some(self.take(
                conn,
                |s| s.addresses.take(conn.peer, 1),
                |c| c.peer == conn.peer && matches!(c.caller(), Some(Caller::User(_))),
                Refused::Address(self.limits.per_address),
            )?),
        };
        let is_user = user.is_some();
        // Users share what the operator's reserve leaves; the operator all of it.
        let room = match is_user {
            true => self.max.saturating_sub(self.limits.operator_reserve).max(1),
            false => self.max,
        };
        for _ in 0..=self.max {
            let mut t = self.lock();
            let full = t.held.len() >= self.max || (is_user && t.users >= room);
            if !full {
                t.held.insert(conn.id, conn.clone());
                t.users += usize::from(is_user);
                *conn.holder.lock().unwrap_or_else(|e| e.into_inner()) = Some(Holder {
                    caller: caller.clone(),
                    _user: user,
                    _address: address,
                });
                return Ok(());
            }
            // Over the users' room only a user's connection frees any of it.
            let victim = Self::longest_idle(&t, conn, |c| {
                !is_user || t.users < room || matches!(c.caller(), Some(Caller::User(_)))
            });
            drop(t);
            match victim {
                Some(v) => self.displace(&v, 2),
                None => return Err(Refused::Full(self.max)),
            }
        }
        Err(Refused::Full(self.max))
    }

    /// Takes a share with `take`, displacing the longest-idle connection that `same`
    /// says counts against the same cap while the cap is full.
    fn take<K: Eq + std::hash::Hash + Clone>(
        &self,
        conn: &Arc<ConnState>,
        take: impl Fn(&Self) -> Result<Share<K>, hetch_net::Full>,
        same: impl Fn(&ConnState) -> bool,
        refusal: Refused,
    ) -> Result<Share<K>, Refused> {
        // Each turn frees one place or ends: the cap bounds the turns.
        for _ in 0..=self.max {
            if let Ok(share) = take(self) {
                return Ok(share);
            }
            let victim = Self::longest_idle(&self.lock(), conn, &same);
            match victim {
                Some(v) => self.displace(&v, index(refusal)),
                None => return Err(refusal),
            }
        }
        Err(refusal)
    }

    /// The held connection other than `conn` that `eligible` picks, with no request
    /// in flight, idle the longest.
    fn longest_idle(
        t: &Table,
        conn: &ConnState,
        eligible: impl Fn(&ConnState) -> bool,
    ) -> Option<Arc<ConnState>> {
        t.held
            .values()
            .filter(|c| c.id != conn.id && c.in_flight.load(Relaxed) == 0 && eligible(c))
            .min_by_key(|c| c.last_active.load(Relaxed))
            .cloned()
    }

    /// Frees `victim`'s shares now and tells its task to close it.
    fn displace(&self, victim: &Arc<ConnState>, cap: usize) {
        self.release(victim);
        victim.closing.store(true, Relaxed);
        victim.close.notify_one();
        self.displaced[cap].fetch_add(1, Relaxed);
    }

    /// Frees what `conn` holds, if anything: when it closes, or changes caller.
    pub fn release(&self, conn: &ConnState) {
        let holder = conn.holder.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = holder {
            let mut t = self.lock();
            if t.held.remove(&conn.id).is_some() && matches!(h.caller, Caller::User(_)) {
                t.users -= 1;
            }
            drop(t);
            drop(h); // the shares, outside the table's lock
        }
    }

    fn now(&self) -> u64 {
        self.ticks.fetch_add(1, Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // Consistent after every statement: usable after a panic.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The index of a cap in [`Conns::displaced`] and [`Conns::refused`].
fn index(r: Refused) -> usize {
    match r {
        Refused::User(_) => 0,
        Refused::Address(_) => 1,
        Refused::Full(_) => 2,
    }
}

impl ConnState {
    fn caller(&self) -> Option<Caller> {
        let h = self.holder.lock().unwrap_or_else(|e| e.into_inner());
        h.as_ref().map(|h| h.caller.clone())
    }

    /// Whether the table has given this connection's place to a newcomer.
    pub fn is_displaced(&self) -> bool {
        self.closing.load(Relaxed)
    }

    /// Resolves once the table has given this connection's place to a newcomer.
    pub async fn displaced(&self) {
        if self.closing.load(Relaxed) {
            return;
        }
        // `closing` is set before the wake-up, which notify_one keeps for a late
        // waiter: none is missed.
        self.close.notified().await
    }
}

/// A request in flight on its connection; the connection is idle once none is.
#[derive(Debug)]
pub struct InFlight {
    conns: Arc<Conns>,
    conn: Arc<ConnState>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.conn.last_active.store(self.conns.now(), Relaxed);
        self.conn.in_flight.fetch_sub(1, Relaxed);
    }
}

impl InFlight {
    /// `resp` with this request kept in flight until its body is sent whole (a
    /// stream of events is not idle while it runs).
    pub fn hold_until_sent(self, resp: Response) -> Response {
        resp.map(|body| {
            Body::new(Guarded {
                body,
                _in_flight: self,
            })
        })
    }
}

/// A body holding a guard until it is dropped.
struct Guarded {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Guarded {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn user(n: &str) -> Caller {
        Caller::User(format!("oidc:{n}"))
    }

    fn limits(per_user: usize, per_address: usize, reserve: usize) -> FairLimits {
        FairLimits {
            per_user,
            per_address,
            operator_reserve: reserve,
        }
    }

    /// A connection from `from` that made one request as `who`, now idle.
    fn idle(c: &Arc<Conns>, from: &str, who: &Caller) -> Arc<ConnState> {
        let conn = c.open(ip(from));
        drop(c.admit(&conn, who).unwrap());
        conn
    }

    #[test]
    fn a_user_over_their_cap_loses_their_own_longest_idle_connection() {
        let c = Conns::new(100, limits(2, 100, 10));
        let a1 = idle(&c, "10.0.0.1", &user("a"));
        let a2 = idle(&c, "10.0.0.1", &user("a"));
        let b = idle(&c, "10.0.0.1", &user("b"));
        let a3 = idle(&c, "10.0.0.1", &user("a"));
        assert!(a1.closing.load(Relaxed), "a's oldest gave way");
        assert!(!a2.closing.load(Relaxed) && !a3.closing.load(Relaxed));
        assert!(
            !b.closing.load(Relaxed),
            "another user's connection is untouched"
        );
        assert_eq!(c.held(), (3, 3));
        assert_eq!(c.displaced[0].load(Relaxed), 1);
    }

    #[test]
    fn a_user_whose_connections_are_all_busy_is_refused() {
        let c = Conns::new(100, limits(2, 100, 10));
        let (c1, c2) = (c.open(ip("10.0.0.1")), c.open(ip("10.0.0.1")));
        let _busy = (
            c.admit(&c1, &user("a")).unwrap(),
            c.admit(&c2, &user("a")).unwrap(),
        );
        let c3 = c.open(ip("10.0.0.1"));
        assert_eq!(c.admit(&c3, &user("a")).unwrap_err(), Refused::User(2));
        // The operator is not capped per caller, nor another user.
        assert!(c.admit(&c3, &Caller::Operator).is_ok());
        let c4 = c.open(ip("10.0.0.1"));
        assert!(c.admit(&c4, &user("b")).is_ok());
        assert_eq!(c.refused[0].load(Relaxed), 1);
    }

    #[test]
    fn users_of_one_address_share_its_cap() {
        let c = Conns::new(100, limits(10, 3, 10));
        let first = idle(&c, "10.0.0.1", &user("a"));
        let _others = [
            idle(&c, "10.0.0.1", &user("b")),
            idle(&c, "10.0.0.1", &user("c")),
        ];
        let _d = idle(&c, "10.0.0.1", &user("d"));
        assert!(first.closing.load(Relaxed));
        // Another address, and the operator from the same one, are not counted.
        let _e = idle(&c, "10.0.0.2", &user("e"));
        let op = idle(&c, "10.0.0.1", &Caller::Operator);
        assert!(!op.closing.load(Relaxed));
        assert_eq!(c.held(), (5, 4));
    }

    #[test]
    fn users_never_take_the_operators_reserve() {
        let c = Conns::new(4, limits(10, 10, 2));
        let u: Vec<_> = (0..2).map(|i| c.open(ip(&format!("10.0.0.{i}")))).collect();
        let _busy: Vec<_> = u.iter().map(|k| c.admit(k, &user("a")).unwrap()).collect();
        // Users hold all they may, busy: a third user's connection is refused.
        let third = c.open(ip("10.0.0.9"));
        assert_eq!(c.admit(&third, &user("z")).unwrap_err(), Refused::Full(4));
        // The operator gets the reserve...
        let ops: Vec<_> = (0..2)
            .map(|_| idle(&c, "10.0.0.8", &Caller::Operator))
            .collect();
        assert_eq!(c.held(), (4, 2));
        // ... and past it, the longest-idle connection (its own, the users' are busy).
        let _more = idle(&c, "10.0.0.8", &Caller::Operator);
        assert!(ops[0].closing.load(Relaxed) && !ops[1].closing.load(Relaxed));
    }

    #[test]
    fn a_full_house_closes_the_longest_idle_for_a_newcomer() {
        let c = Conns::new(3, limits(10, 10, 0));
        let old = idle(&c, "10.0.0.1", &user("a"));
        let mid = idle(&c, "10.0.0.2", &user("b"));
        let busy_conn = c.open(ip("10.0.0.3"));
        let _busy = c.admit(&busy_conn, &user("c")).unwrap();
        let _new = idle(&c, "10.0.0.4", &user("d"));
        assert!(old.closing.load(Relaxed) && !mid.closing.load(Relaxed));
        assert_eq!(c.displaced[2].load(Relaxed), 1);
    }

    #[test]
    fn a_connection_counts_against_its_latest_caller_and_nothing_once_closed() {
        let c = Conns::new(10, limits(1, 10, 0));
        let conn = idle(&c, "10.0.0.1", &user("a"));
        drop(c.admit(&conn, &user("b")).unwrap());
        assert_eq!(
            (
                c.users.held(&"oidc:a".into()),
                c.users.held(&"oidc:b".into())
            ),
            (0, 1)
        );
        // a's next connection needs no displacing: the first counts against b now.
        let again = idle(&c, "10.0.0.1", &user("a"));
        assert!(!conn.closing.load(Relaxed));
        c.release(&conn);
        c.release(&again);
        assert_eq!(c.held(), (0, 0));
        assert_eq!((c.users.total(), c.addresses.total()), (0, 0));
    }

    #[tokio::test]
    async fn a_displaced_connection_is_told_and_a_body_keeps_it_busy() {
        let c = Conns::new(10, limits(1, 10, 0));
        let conn = c.open(ip("10.0.0.1"));
        let in_flight = c.admit(&conn, &user("a")).unwrap();
        let resp = in_flight.hold_until_sent(Response::new(Body::from("x")));
        // Busy while its answer is unsent: a's newcomer is refused, not displacing.
        let other = c.open(ip("10.0.0.1"));
        assert!(c.admit(&other, &user("a")).is_err());
        drop(resp);
        drop(c.admit(&other, &user("a")).unwrap());
        conn.displaced().await;
    }
}
