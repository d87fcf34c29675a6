//! The server's side of a session kept for several operations
//! ([`SessionRequest::reuse`]): one operation after another on the same connections,
//! each asked for by a new hello on the control connection, with the token checked
//! again and the request checked as a new session's is.

use std::net::IpAddr;

use hetch_engine::wire::{read_frame_limited, write_frame_exact};
use hetch_engine::{BoxStream, EngineError, Options, Transport};
use hetch_net::SessionKey;
use hetch_proto::{ErrorCode, Frame, Hello, SessionRequest};

use super::fair::Held;
use super::{admission, check_token, prepare, reply_error, run_role, welcome, Role, State};
use crate::metrics::Side;
use crate::reuse::{lend, Conns, SERVER_IDLE, SETTLE};

/// One operation to run on kept connections.
pub(super) struct Operation {
    pub side: Side,
    pub role: Role,
    pub opts: Options,
    /// The MAC key of plain data streams, this operation's own.
    pub data_mac: Option<[u8; 32]>,
}

/// Whether a session of `role` may be kept: pushes and pulls (relays and ranges run on
/// their control connection alone, and end it).
pub(super) fn can_keep(role: &Role) -> bool {
    match role {
        Role::Sink(_) | Role::Source(_) => true,
        #[cfg(feature = "cloud")]
        Role::ObjectSink(_) => true,
        Role::Relay(_) | Role::Range { .. } => false,
    }
}

/// Runs `first`, then each operation the client asks for next on `conns`, until it
/// asks for none within [`SERVER_IDLE`], an operation fails, the server stops, or the
/// session is closed to make room for another (`held` is its share of the server),
/// counting how each operation ended.
pub(super) async fn serve(
    state: &State,
    (peer, ip): (&str, IpAddr),
    key: &SessionKey,
    mut conns: Conns,
    first: Operation,
    held: &Held,
) -> Result<(), EngineError> {
    // The data streams' encryption is the session's: no later operation changes it.
    let encrypt = first.data_mac.is_none();
    let mut next = Some(first);
    loop {
        let (mut control, data, lent) = lend(conns);
        let op = match next.take() {
            Some(op) => op,
            None => {
                let at = (data.len(), encrypt);
                match next_operation(state, (peer, ip), key, &mut control, at, held).await? {
                    Some(op) => op,
                    None => return Ok(()),
                }
            }
        };
        let side = op.side;
        let transport = Transport {
            control,
            data,
            peer: peer.to_string(),
            data_mac: op.data_mac,
            lanes: Vec::new(),
            rejoin: None,
        };
        let ran = run_role(state, peer, side, op.role, op.opts, transport).await;
        state.metrics.session_ended(side, ran.is_ok());
        ran?;
        conns = match lent.reclaim(SETTLE).await {
            Some(c) => c,
            None => return Ok(()),
        };
    }
}

/// Waits for the next operation's hello on `control` and answers it: `None` when the
/// client closed the connections, said nothing for [`SERVER_IDLE`], the server is
/// stopping, or the session was closed to make room (idle meanwhile in `held`).
async fn next_operation(
    state: &State,
    (peer, ip): (&str, IpAddr),
    key: &SessionKey,
    control: &mut BoxStream,
    (streams, encrypt): (usize, bool),
    held: &Held,
) -> Result<Option<Operation>, EngineError> {
    let max_frame = state.gate.limits().max_frame;
    let stop = state.engine.stop.clone();
    let stopped = async move {
        match stop {
            Some(s) => s.raised().await,
            None => std::future::pending().await,
        }
    };
    admission::idle(state, held);
    let closing = held.closing();
    let read = tokio::time::timeout(SERVER_IDLE, read_frame_limited(control, peer, max_frame));
    let frame = tokio::select! {
        r = read => match r {
            Ok(Ok(f)) => f,
            // Idle, gone, or garbled: the session ends quietly.
            _ => return Ok(None),
        },
        _ = stopped => return Ok(None),
        // Its client finds the connections closed and opens a new session.
        () = closing => return Ok(None),
    };
    // Closed for a newcomer just as the hello came: as if it had come a moment later.
    if !held.busy() {
        return Ok(None);
    }
    let Frame::Hello(Hello::Control { token, request }) = frame else {
        let msg = "expected the next operation's hello";
        return reply_error(control, peer, ErrorCode::Protocol, msg)
            .await
            .map(|_| None);
    };
    if let Err((code, msg)) = check_token(state, ip, &token) {
        return reply_error(control, peer, code, &msg).await.map(|_| None);
    }
    if let Err(msg) = same_connections(&request, streams, encrypt) {
        return reply_error(control, peer, ErrorCode::Protocol, msg)
            .await
            .map(|_| None);
    }
    let (role, opts) = match prepare(state, &request).await {
        Ok(r) => r,
        Err((code, msg)) => return reply_error(control, peer, code, &msg).await.map(|_| None),
    };
    if !can_keep(&role) {
        let msg = "only pushes and pulls run on a kept session";
        return reply_error(control, peer, ErrorCode::Protocol, msg)
            .await
            .map(|_| None);
    }
    let (id, welcome) = welcome();
    write_frame_exact(control, peer, false, &welcome).await?;
    state
        .metrics
        .reused
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Some(Operation {
        side: Side::of(&request.op),
        role,
        opts,
        data_mac: (!request.encrypt_data).then(|| key.for_operation(&id).frame_mac_key()),
    }))
}

/// Whether `req` can run on the kept connections of a session with `streams` data
/// streams, TLS ones if `encrypt`: asking to be kept again, on as many streams,
/// encrypted as they are (plain streams carry a MAC on every frame; TLS ones do not).
fn same_connections(
    req: &SessionRequest,
    streams: usize,
    encrypt: bool,
) -> Result<(), &'static str> {
    if !req.reuse {
        return Err("an operation on a kept session must ask to keep it");
    }
    if usize::from(req.streams) != streams {
        return Err("an operation on a kept session runs on its streams, as many as it has");
    }
    if req.encrypt_data != encrypt {
        return Err("an operation on a kept session keeps its data streams' encryption");
    }
    Ok(())
}
