//! A session's share of the server ([`super::fair`]) as the server takes and keeps it:
//! what a session holds, its refusal answered to the client, the sessions closed to
//! make room logged (at most a line per interval) and counted in the metrics.

use std::net::IpAddr;

use hetch_engine::BoxStream;
use hetch_proto::{ErrorCode, SessionRequest};

use super::fair::{Closed, Held};
use super::{reply_error, Role, State};
use crate::metrics::Holding;

/// The connections a session of `req` holds on this server: its control connection
/// and its data streams; a relay's onward control connection and streams instead of
/// data streams of its own; a range its control connection alone.
fn connections(req: &SessionRequest, role: &Role) -> usize {
    let streams = usize::from(req.streams);
    match role {
        Role::Relay(_) => 2 + streams,
        Role::Range { .. } => 1,
        _ => 1 + streams,
    }
}

/// Admits the session of `req` from `peer`, closing idle sessions where a cap is full;
/// `None` when it was refused, which its client was told on `control`.
pub(super) async fn admit(
    state: &State,
    control: &mut BoxStream,
    (peer, ip): (&str, IpAddr),
    req: &SessionRequest,
    role: &Role,
) -> Option<Held> {
    let mut closed = Vec::new();
    let admitted = state
        .held
        .admit(ip, connections(req, role), |c| closed.push(c));
    log_closed(state, &closed, Some(peer));
    match admitted {
        Ok(held) => Some(held),
        Err(refused) => {
            let msg = refused.message();
            state.log_fair(format_args!("refused a session of {peer}: {msg}"));
            let _ = reply_error(control, peer, ErrorCode::Unavailable, &msg).await;
            None
        }
    }
}

/// Marks `held` kept idle between operations, closing the longest-idle sessions past
/// the idle caps.
pub(super) fn idle(state: &State, held: &Held) {
    let mut closed = Vec::new();
    held.idle(|c| closed.push(c));
    log_closed(state, &closed, None);
}

/// One line per interval for sessions closed to make room (for a newcomer `for_peer`,
/// or past the idle caps).
fn log_closed(state: &State, closed: &[Closed], for_peer: Option<&str>) {
    for c in closed {
        let why = match for_peer {
            Some(peer) => format!("for {peer}"),
            None => "kept idle".to_string(),
        };
        state.log_fair(format_args!(
            "closed the longest-idle session of {} ({} connections) {why}: {} ({}) reached",
            c.address,
            c.connections,
            c.cap.flag(),
            state.held.limit(c.cap)
        ));
    }
}

/// What sessions hold now, for the metrics.
pub(super) fn holding(state: &State) -> Holding {
    let (open, idle, connections) = state.held.held();
    Holding {
        open,
        idle,
        connections,
        max_connections: state.held.caps().connections,
        refused: state.held.refused().collect(),
        closed: state.held.closed().collect(),
    }
}
