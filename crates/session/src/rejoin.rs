//! Joining a session's lost data stream again (see [`hetch_engine::Rejoin`]): the
//! client opens the stream's next connection with a hello for its next generation and
//! a proof of its own; the server takes it (`server::join`) and hands it to the
//! session's side waiting for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hetch_engine::wire::{read_frame_exact, read_preamble_exact, write_frame_exact};
use hetch_engine::{BoxStream, EngineError, Joining, Rejoin};
use hetch_net::{SessionKey, SocketOptions, TlsClient};
use hetch_proto::{Frame, Hello, SessionId};
use tokio::sync::mpsc;

/// Attempts the client makes to join a lost stream again, each with the generation
/// after the last: its handshake crosses the link that broke the stream. At most
/// [`hetch_engine::MAX_SKIPPED`] + 1.
const ATTEMPTS: u32 = 4;

/// The client's side: dials the server again for a lost stream.
pub(crate) struct ClientRejoin {
    /// The server, host:port.
    pub host: String,
    pub socket: SocketOptions,
    /// The TLS client of the session's control connection, when data streams are
    /// encrypted (`None`: plain TCP).
    pub tls: Option<Arc<TlsClient>>,
    /// The session, from the server's welcome.
    pub session: SessionId,
    /// The control connection's key, which proves the stream belongs to the session.
    pub key: SessionKey,
}

impl ClientRejoin {
    /// One attempt: connection `generation` of stream `index`.
    async fn attempt(&self, index: u16, generation: u32) -> Result<BoxStream, EngineError> {
        let host = &self.host;
        let mut s = hetch_net::connect(host, &self.socket, self.tls.as_deref())
            .await
            .map_err(|e| lost(host, e.to_string()))?;
        let hello = Frame::Hello(Hello::Data {
            session: self.session,
            index,
            generation,
            proof: self.key.stream_proof(&self.session, index, generation),
        });
        join_stream(&mut s, host, (self.session, &hello), self.tls.is_none()).await?;
        Ok(s)
    }
}

impl Rejoin for ClientRejoin {
    fn rejoin(&self, index: u16, after: u32) -> Joining<'_> {
        Box::pin(async move {
            let mut failed = None;
            for generation in (after + 1..).take(ATTEMPTS as usize) {
                match self.attempt(index, generation).await {
                    Ok(s) => return Ok((s, generation)),
                    // Refused (the server ended the session meanwhile, say): another
                    // attempt gets no further, and the session is lost.
                    Err(EngineError::Peer { message, .. }) => {
                        let why = format!("data stream {index} not joined again: {message}");
                        return Err(lost(&self.host, why));
                    }
                    Err(e) => failed = Some(e),
                }
            }
            Err(failed.expect("at least one attempt"))
        })
    }
}

/// Sends a data stream's `hello` on `s` and waits for the server's welcome, which
/// says the stream joined its session `session` (a refusal is an error frame
/// instead). Not only its preamble, which the server sends before it reads the hello:
/// a hello damaged on the way would leave the client writing into a stream that no
/// session reads.
pub(crate) async fn join_stream(
    s: &mut BoxStream,
    host: &str,
    (session, hello): (SessionId, &Frame),
    plain: bool,
) -> Result<(), EngineError> {
    write_frame_exact(s, host, true, hello).await?;
    read_preamble_exact(s, host)
        .await
        .map_err(|e| crate::client::data_preamble_failed(host, e))?;
    // On a plain stream the answer is not authenticated: anything but the welcome or a
    // refusal was altered on the way (over TLS it cannot be).
    let altered = || EngineError::Tampered {
        peer: host.to_string(),
        what: "a data stream's welcome".into(),
    };
    match read_frame_exact(s, host).await {
        Ok(Frame::Welcome(w)) if w.session == session => Ok(()),
        // A proof the server did not recognise, on a plain stream: the hello may have
        // been altered on the way (its bytes are not authenticated).
        Ok(Frame::Error(e)) if plain && e.message.contains("wrong proof") => Err(altered()),
        Ok(Frame::Error(e)) => Err(EngineError::from_peer(host, e)),
        Ok(_) | Err(EngineError::Proto { .. }) => Err(altered()),
        Err(e) => Err(e),
    }
}

/// A connection error naming `host`.
fn lost(host: &str, why: String) -> EngineError {
    EngineError::Connection {
        peer: host.to_string(),
        cause: std::io::Error::other(why),
    }
}

/// What the server's join hands a running session: a stream's index, its
/// generation, and the stream.
pub(crate) type Rejoined = (u16, u32, BoxStream);

/// The server's side: waits for the client to join a lost stream again.
pub(crate) struct ServerRejoin {
    peer: String,
    /// Streams joined again, as the server's join takes them.
    rx: tokio::sync::Mutex<mpsc::Receiver<Rejoined>>,
    /// Streams taken off `rx` by the wait of another stream, by (index, generation).
    parked: Mutex<HashMap<(u16, u32), BoxStream>>,
}

impl ServerRejoin {
    /// For a session of client `peer` whose streams joined again arrive on `rx`.
    pub(crate) fn new(peer: &str, rx: mpsc::Receiver<Rejoined>) -> Self {
        ServerRejoin {
            peer: peer.to_string(),
            rx: tokio::sync::Mutex::new(rx),
            parked: Mutex::default(),
        }
    }

    /// The parked connection of stream `index` of the first generation after
    /// `after`, if there is one; older ones of the stream (attempts the client gave
    /// up on) are dropped.
    fn parked(&self, index: u16, after: u32) -> Option<(BoxStream, u32)> {
        let mut parked = self.parked.lock().expect("parked lock");
        parked.retain(|(i, g), _| *i != index || *g > after);
        let g = parked
            .keys()
            .filter(|(i, _)| *i == index)
            .map(|(_, g)| *g)
            .min()?;
        parked.remove(&(index, g)).map(|s| (s, g))
    }
}

impl Rejoin for ServerRejoin {
    fn rejoin(&self, index: u16, after: u32) -> Joining<'_> {
        Box::pin(async move {
            loop {
                if let Some(joined) = self.parked(index, after) {
                    return Ok(joined);
                }
                // One waiter reads the channel at a time; another's stream is parked
                // for it (it looks there once it has the channel in turn).
                let mut rx = self.rx.lock().await;
                if let Some(joined) = self.parked(index, after) {
                    return Ok(joined);
                }
                match rx.recv().await {
                    Some((i, g, s)) if i == index && g > after => return Ok((s, g)),
                    Some((i, g, s)) => {
                        self.parked.lock().expect("parked lock").insert((i, g), s);
                    }
                    None => return Err(lost(&self.peer, "the session ended".into())),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream() -> BoxStream {
        Box::new(tokio::io::duplex(64).0)
    }

    #[tokio::test]
    async fn each_wait_gets_its_own_stream_whichever_arrives_first() {
        let (tx, rx) = mpsc::channel(8);
        let r = Arc::new(ServerRejoin::new("peer", rx));
        let one = tokio::spawn({
            let r = r.clone();
            async move { r.rejoin(1, 2).await.map(|(_, g)| g) }
        });
        let zero = tokio::spawn({
            let r = r.clone();
            async move { r.rejoin(0, 0).await.map(|(_, g)| g) }
        });
        tx.send((0, 1, stream())).await.unwrap();
        tx.send((1, 3, stream())).await.unwrap();
        assert_eq!(zero.await.unwrap().unwrap(), 1);
        assert_eq!(one.await.unwrap().unwrap(), 3);
        // A generation skipped (the client gave up on an attempt) is taken as the next
        // one; a generation not after the one lost is not (and is dropped).
        tx.send((0, 1, stream())).await.unwrap();
        tx.send((0, 4, stream())).await.unwrap();
        tx.send((0, 6, stream())).await.unwrap();
        assert_eq!(r.rejoin(0, 1).await.unwrap().1, 4);
        assert_eq!(
            r.rejoin(0, 4).await.unwrap().1,
            6,
            "parked by the wait before"
        );
        drop(tx);
        assert!(r.rejoin(0, 6).await.is_err(), "the session ended");
    }
}
