//! Several operations over one session's connections ([`SessionRequest::reuse`]): a
//! worker that runs many small units against one server pays for its TLS handshakes
//! and TCP connections once, not once a unit.
//!
//! The engine ends an operation by ending its streams, and reads the peer's ends as
//! its EOFs. On kept connections those ends must not close anything, so every
//! direction of every connection carries an operation's bytes in chunks: a 4-byte
//! big-endian length, then that many bytes; a chunk of length 0 ends the operation's
//! stream. [`lend`] gives the engine streams that write and read that way; once the
//! engine has dropped them all, [`Lent::reclaim`] ends what the engine did not end,
//! skips what the peer sent past where the engine stopped reading, and gives back the
//! connections, positioned for the next operation, which starts with a new hello on
//! the control connection. Anything unusual (a connection lost, a chunk cut short, a
//! peer that does not end its stream in time) means the connections are not kept.
//!
//! [`SessionRequest::reuse`]: hetch_proto::SessionRequest::reuse

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use hetch_engine::BoxStream;
use hetch_net::{SessionKey, SocketOptions};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::oneshot;

/// The largest chunk a writer makes (a reader takes any length a u32 holds).
const MAX_CHUNK: usize = 16 << 20;
/// The most a [`Lent::reclaim`] skips of what the peer sent past where the engine
/// stopped reading (a summary it did not wait for, keep-alives): more, and the
/// connections are not worth keeping.
const MAX_SKIPPED: u64 = 64 << 20;
/// How long a client keeps connections it is not using.
pub(crate) const CLIENT_IDLE: Duration = Duration::from_secs(20);
/// How long a server waits for the next operation on kept connections: longer than
/// [`CLIENT_IDLE`], so that a client never sends a hello into a connection the server
/// is closing.
pub(crate) const SERVER_IDLE: Duration = Duration::from_secs(30);
/// How long the end of an operation may take to settle on kept connections.
pub(crate) const SETTLE: Duration = Duration::from_secs(10);
/// The most idle connections a [`SessionPool`] keeps.
const MAX_IDLE: usize = 8;

/// A session's connections between operations.
pub(crate) struct Conns {
    /// The control connection.
    pub control: BoxStream,
    /// The data streams, in index order.
    pub data: Vec<BoxStream>,
}

/// Where a connection's reading stands in the peer's chunks.
#[derive(Debug, Default, Clone, Copy)]
struct Reading {
    /// Bytes of the current chunk not read yet.
    left: u32,
    /// The next chunk's length, as far as read.
    head: [u8; 4],
    have: u8,
    /// The peer ended this operation's stream.
    ended: bool,
    /// The connection failed or ended without the mark.
    broken: bool,
}

/// Where a connection's writing stands in our chunks.
#[derive(Debug, Default, Clone, Copy)]
struct Writing {
    /// The current chunk's length, and how many of its 4 bytes are still to go.
    head: [u8; 4],
    head_left: u8,
    /// Bytes of the current chunk not written yet.
    left: u32,
    /// The end mark is being written (or was: see `ended`).
    ending: bool,
    /// The end mark is written and flushed.
    ended: bool,
    /// The connection failed, or a chunk was left unfinished.
    broken: bool,
}

/// A connection as the engine left it.
struct Returned {
    stream: BoxStream,
    reading: Reading,
    writing: Writing,
}

/// One operation's stream over a kept connection (see the module's notes).
struct Chunked {
    inner: Option<BoxStream>,
    reading: Reading,
    writing: Writing,
    back: Option<oneshot::Sender<Returned>>,
}

/// Marks `broken` when `r` is an error.
fn noting<T>(r: io::Result<T>, broken: &mut bool) -> io::Result<T> {
    if r.is_err() {
        *broken = true;
    }
    r
}

impl Chunked {
    fn inner(&mut self) -> Pin<&mut BoxStream> {
        Pin::new(self.inner.as_mut().expect("held until dropped"))
    }
}

impl AsyncRead for Chunked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            let r = this.reading;
            if r.ended || r.broken || buf.remaining() == 0 {
                // The operation's EOF; a connection that ended without the mark reads
                // as ended too, as it would without chunks (the engine says why).
                return Poll::Ready(Ok(()));
            }
            if r.left == 0 {
                let mut head = r.head;
                let mut hb = ReadBuf::new(&mut head[usize::from(r.have)..]);
                let got = ready!(this.inner().poll_read(cx, &mut hb));
                noting(got, &mut this.reading.broken)?;
                let n = hb.filled().len() as u8;
                this.reading.head = head;
                if n == 0 {
                    this.reading.broken = true;
                    continue;
                }
                this.reading.have += n;
                if this.reading.have == 4 {
                    this.reading.have = 0;
                    this.reading.left = u32::from_be_bytes(head);
                    this.reading.ended = this.reading.left == 0;
                }
                continue;
            }
            let want = buf.remaining().min(r.left as usize);
            let dst = buf.initialize_unfilled_to(want);
            let mut sub = ReadBuf::new(dst);
            let got = ready!(this.inner().poll_read(cx, &mut sub));
            noting(got, &mut this.reading.broken)?;
            let n = sub.filled().len();
            if n == 0 {
                this.reading.broken = true;
                continue;
            }
            buf.advance(n);
            this.reading.left -= n as u32;
            return Poll::Ready(Ok(()));
        }
    }
}

impl AsyncWrite for Chunked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.writing.ending || this.writing.broken {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "write after the operation's stream ended",
            )));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.writing.left == 0 {
            // A new chunk of as much as the caller has: its length is a promise that
            // the next `len` bytes of the stream follow, whatever calls bring them.
            let len = buf.len().min(MAX_CHUNK) as u32;
            this.writing.head = len.to_be_bytes();
            this.writing.head_left = 4;
            this.writing.left = len;
        }
        loop {
            let w = this.writing;
            let take = buf.len().min(w.left as usize);
            if w.head_left == 0 {
                let wrote = ready!(this.inner().poll_write(cx, &buf[..take]));
                let n = noting(wrote, &mut this.writing.broken)?;
                if n == 0 {
                    this.writing.broken = true;
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                this.writing.left -= n as u32;
                return Poll::Ready(Ok(n));
            }
            // The length and the bytes in one call: one segment, not two, on plain TCP.
            let head = &w.head[4 - usize::from(w.head_left)..];
            let parts = [IoSlice::new(head), IoSlice::new(&buf[..take])];
            let wrote = ready!(this.inner().poll_write_vectored(cx, &parts));
            let n = noting(wrote, &mut this.writing.broken)?;
            if n == 0 {
                this.writing.broken = true;
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            let of_head = n.min(usize::from(w.head_left));
            this.writing.head_left -= of_head as u8;
            let of_buf = n - of_head;
            if of_buf > 0 {
                this.writing.left -= of_buf as u32;
                return Poll::Ready(Ok(of_buf));
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let flushed = ready!(this.inner().poll_flush(cx));
        Poll::Ready(noting(flushed, &mut this.writing.broken))
    }

    /// Ends the operation's stream: the end mark, flushed; the connection stays open.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.writing.ended {
            return Poll::Ready(Ok(()));
        }
        if !this.writing.ending {
            if this.writing.left > 0 || this.writing.broken {
                this.writing.broken = true;
                return Poll::Ready(Err(io::Error::other("a chunk was left unfinished")));
            }
            this.writing = Writing {
                head: [0; 4],
                head_left: 4,
                ending: true,
                ..Writing::default()
            };
        }
        while this.writing.head_left > 0 {
            let head = this.writing.head;
            let at = 4 - usize::from(this.writing.head_left);
            let wrote = ready!(this.inner().poll_write(cx, &head[at..]));
            let n = noting(wrote, &mut this.writing.broken)?;
            if n == 0 {
                this.writing.broken = true;
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            this.writing.head_left -= n as u8;
        }
        let flushed = ready!(this.inner().poll_flush(cx));
        noting(flushed, &mut this.writing.broken)?;
        this.writing.ended = true;
        Poll::Ready(Ok(()))
    }
}

impl Drop for Chunked {
    fn drop(&mut self) {
        if let (Some(stream), Some(back)) = (self.inner.take(), self.back.take()) {
            // Nobody waiting: the connection just closes.
            let _ = back.send(Returned {
                stream,
                reading: self.reading,
                writing: self.writing,
            });
        }
    }
}

/// Connections lent to one operation (see [`lend`]).
pub(crate) struct Lent {
    back: Vec<oneshot::Receiver<Returned>>,
}

/// The streams of one operation over `conns` (control first, then data, as they came),
/// and what takes the connections back when the operation has dropped them.
pub(crate) fn lend(conns: Conns) -> (BoxStream, Vec<BoxStream>, Lent) {
    let mut back = Vec::with_capacity(1 + conns.data.len());
    let mut chunked = |stream: BoxStream| -> BoxStream {
        let (tx, rx) = oneshot::channel();
        back.push(rx);
        Box::new(Chunked {
            inner: Some(stream),
            reading: Reading::default(),
            writing: Writing::default(),
            back: Some(tx),
        })
    };
    let control = chunked(conns.control);
    let data = conns.data.into_iter().map(&mut chunked).collect();
    (control, data, Lent { back })
}

impl Lent {
    /// The connections back, once the operation has dropped every stream and both
    /// ends have ended theirs within `within`; `None`: they are not worth keeping (and
    /// are closed).
    pub(crate) async fn reclaim(self, within: Duration) -> Option<Conns> {
        let settle = async {
            let returned = futures_util::future::try_join_all(self.back).await.ok()?;
            let settled = futures_util::future::join_all(returned.into_iter().map(settle));
            let mut streams = settled.await.into_iter().collect::<Option<Vec<_>>>()?;
            let control = streams.remove(0);
            Some(Conns {
                control,
                data: streams,
            })
        };
        tokio::time::timeout(within, settle).await.ok().flatten()
    }
}

/// Ends our side of an operation on one connection and skips the peer's to its end
/// mark, both at once (either end may be waiting for the other's mark).
async fn settle(r: Returned) -> Option<BoxStream> {
    let Returned {
        stream,
        reading,
        writing,
    } = r;
    if reading.broken || writing.broken || writing.left > 0 {
        return None;
    }
    let (mut rh, mut wh) = tokio::io::split(stream);
    let end = async {
        if !writing.ended {
            let at = if writing.ending {
                4 - usize::from(writing.head_left)
            } else {
                0
            };
            wh.write_all(&[0u8; 4][at..]).await.ok()?;
            wh.flush().await.ok()?;
        }
        Some(())
    };
    let skip = skip_to_end(&mut rh, reading);
    let (ended, skipped) = tokio::join!(end, skip);
    ended.and(skipped)?;
    Some(rh.unsplit(wh))
}

/// Reads past the rest of the peer's chunks for this operation, to its end mark.
async fn skip_to_end<R: AsyncRead + Unpin>(r: &mut R, mut at: Reading) -> Option<()> {
    let mut skipped = 0u64;
    let mut scratch = vec![0u8; 64 << 10];
    while !at.ended {
        if at.left == 0 {
            let mut head = at.head;
            r.read_exact(&mut head[usize::from(at.have)..]).await.ok()?;
            at.have = 0;
            at.left = u32::from_be_bytes(head);
            at.ended = at.left == 0;
            continue;
        }
        let n = scratch.len().min(at.left as usize);
        let got = r.read(&mut scratch[..n]).await.ok()?;
        skipped += got as u64;
        if got == 0 || skipped > MAX_SKIPPED {
            return None;
        }
        at.left -= got as u32;
    }
    Some(())
}

/// What a kept session was opened with: only an operation asking for the same may
/// use it.
struct Opened {
    host: String,
    token: Vec<u8>,
    fingerprint: Option<hetch_net::Fingerprint>,
    socket: SocketOptions,
    encrypt: bool,
}

impl Opened {
    fn of(want: &Wanted<'_>) -> Opened {
        Opened {
            host: want.host.to_string(),
            token: want.cfg.token.clone(),
            fingerprint: want.cfg.fingerprint,
            socket: want.cfg.socket.clone(),
            encrypt: want.encrypt,
        }
    }
}

/// An idle kept session.
struct Idle {
    opened: Opened,
    key: SessionKey,
    conns: Conns,
    since: Instant,
}

/// A client's sessions kept between operations, for
/// [`ClientConfig::reuse`](crate::client::ClientConfig::reuse): a worker's units of
/// files to one server run one after another over the same TLS connections.
#[derive(Default)]
pub struct SessionPool {
    idle: Mutex<Vec<Idle>>,
    /// Sessions whose operation ended and whose connections are being taken back.
    settling: std::sync::atomic::AtomicUsize,
    settled: tokio::sync::Notify,
    /// Operations run on kept connections (not counting each session's first).
    reused: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for SessionPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idle = self.idle.lock().expect("pool lock").len();
        f.debug_struct("SessionPool").field("idle", &idle).finish()
    }
}

/// Who asks for a kept session: the server, how it is trusted and reached.
pub(crate) struct Wanted<'a> {
    pub host: &'a str,
    pub cfg: &'a crate::client::ClientConfig,
    pub encrypt: bool,
    /// The fewest data streams it needs.
    pub streams: u16,
}

impl Wanted<'_> {
    fn matches(&self, i: &Idle) -> bool {
        let o = &i.opened;
        o.host == self.host
            && o.encrypt == self.encrypt
            && i.conns.data.len() >= usize::from(self.streams)
            && o.fingerprint == self.cfg.fingerprint
            && o.socket == self.cfg.socket
            && hetch_net::tokens_equal(&o.token, &self.cfg.token)
    }
}

impl SessionPool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// Operations that ran on kept connections so far.
    pub fn reused(&self) -> u64 {
        self.reused.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// An idle session for `want`, waiting a moment for one still settling.
    pub(crate) async fn take(&self, want: &Wanted<'_>) -> Option<(SessionKey, Conns)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            {
                let mut idle = self.idle.lock().expect("pool lock");
                idle.retain(|i| i.since.elapsed() < CLIENT_IDLE);
                if let Some(at) = idle.iter().position(|i| want.matches(i)) {
                    let i = idle.swap_remove(at);
                    return Some((i.key, i.conns));
                }
            }
            if self.settling.load(std::sync::atomic::Ordering::Acquire) == 0 {
                return None;
            }
            tokio::time::timeout_at(deadline, settled).await.ok()?;
        }
    }

    /// Takes back `lent` in the background once its operation ends, to keep for
    /// another operation of `want`'s.
    pub(crate) fn keep(
        self: &std::sync::Arc<Self>,
        want: &Wanted<'_>,
        key: SessionKey,
        lent: Lent,
    ) {
        let pool = self.clone();
        let opened = Opened::of(want);
        self.settling
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        tokio::spawn(async move {
            if let Some(conns) = lent.reclaim(SETTLE).await {
                pool.put_opened(opened, key, conns);
            }
            pool.settling
                .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            pool.settled.notify_waiters();
        });
    }

    /// Keeps `conns`, of a session with `key`, for another operation of `want`'s (the
    /// tests' way to put a session in the pool).
    #[cfg(test)]
    pub(crate) fn put(&self, want: &Wanted<'_>, key: SessionKey, conns: Conns) {
        self.put_opened(Opened::of(want), key, conns);
    }

    fn put_opened(&self, opened: Opened, key: SessionKey, conns: Conns) {
        let mut idle = self.idle.lock().expect("pool lock");
        if idle.len() >= MAX_IDLE {
            idle.remove(0);
        }
        idle.push(Idle {
            opened,
            key,
            conns,
            since: Instant::now(),
        });
    }

    /// Counts an operation run on kept connections.
    pub(crate) fn count_reused(&self) {
        self.reused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (BoxStream, BoxStream) {
        let (a, b) = tokio::io::duplex(1 << 10);
        (Box::new(a), Box::new(b))
    }

    fn conns(s: BoxStream) -> Conns {
        Conns {
            control: s,
            data: Vec::new(),
        }
    }

    /// A kept session serves only an operation of the same server and token that
    /// needs no more streams than it has.
    #[tokio::test]
    async fn a_kept_session_serves_only_its_kind_of_operation() {
        let cfg = crate::client::ClientConfig {
            token: b"0123456789abcdef0123".to_vec(),
            fingerprint: None,
            known_hosts: None,
            socket: Default::default(),
            timeout: Duration::from_secs(1),
            opened: Default::default(),
            autotune: None,
            reuse: None,
        };
        let want = |host, cfg, streams| Wanted {
            host,
            cfg,
            encrypt: true,
            streams,
        };
        let pool = SessionPool::new();
        let one_stream = Conns {
            control: pair().0,
            data: vec![pair().0],
        };
        pool.put(
            &want("h:1", &cfg, 1),
            SessionKey::from_bytes([1; 32]),
            one_stream,
        );
        assert!(
            pool.take(&want("h:1", &cfg, 2)).await.is_none(),
            "too few streams"
        );
        assert!(
            pool.take(&want("h:2", &cfg, 1)).await.is_none(),
            "another server"
        );
        let mut other = cfg.clone();
        other.token[0] ^= 1;
        assert!(
            pool.take(&want("h:1", &other, 1)).await.is_none(),
            "another token"
        );
        assert!(pool.take(&want("h:1", &cfg, 1)).await.is_some());
        assert!(
            pool.take(&want("h:1", &cfg, 1)).await.is_none(),
            "taken once"
        );
    }

    /// Two operations over one connection: each side reads the other's bytes up to
    /// its end and no further, and the connection comes back for the next.
    #[tokio::test]
    async fn operations_end_without_closing_and_the_connection_serves_the_next() {
        let (a, b) = pair();
        let (mut a, mut b) = (conns(a), conns(b));
        for round in 0..3u8 {
            let (mut ac, _, alent) = lend(a);
            let (mut bc, _, blent) = lend(b);
            let big: Vec<u8> = (0..100_000u32).map(|i| (i as u8) ^ round).collect();
            let sent = big.clone();
            let writer = tokio::spawn(async move {
                ac.write_all(&sent).await.unwrap();
                ac.shutdown().await.unwrap();
                // The peer's answer, read to its end.
                let mut back = Vec::new();
                ac.read_to_end(&mut back).await.unwrap();
                assert_eq!(back, b"ok");
                drop(ac);
                alent.reclaim(SETTLE).await
            });
            let mut got = Vec::new();
            bc.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, big);
            bc.write_all(b"ok").await.unwrap();
            bc.shutdown().await.unwrap();
            drop(bc);
            b = blent.reclaim(SETTLE).await.expect("b kept");
            a = writer.await.unwrap().expect("a kept");
        }
    }

    /// What one side sent past where the other stopped reading is skipped, and a side
    /// that never ended its stream has it ended when the connection is taken back.
    #[tokio::test]
    async fn unread_bytes_are_skipped_and_unended_streams_ended_on_reclaim() {
        let (a, b) = pair();
        let (mut ac, _, alent) = lend(conns(a));
        let (mut bc, _, blent) = lend(conns(b));
        let sender = tokio::spawn(async move {
            ac.write_all(&[7u8; 5000]).await.unwrap();
            ac.shutdown().await.unwrap();
            drop(ac);
            alent.reclaim(SETTLE).await
        });
        let mut first = [0u8; 10];
        bc.read_exact(&mut first).await.unwrap();
        drop(bc);
        let (b, a) = tokio::join!(blent.reclaim(SETTLE), sender);
        let (b, a) = (b.expect("b kept"), a.unwrap().expect("a kept"));
        // The next operation starts clean on both sides.
        let (mut ac, _, _al) = lend(a);
        let (mut bc, _, _bl) = lend(b);
        ac.write_all(b"next").await.unwrap();
        ac.shutdown().await.unwrap();
        let mut got = Vec::new();
        bc.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"next");
    }

    /// A peer that closes the connection mid-operation: the reader sees EOF, as
    /// without chunks, and the connection is not kept.
    #[tokio::test]
    async fn a_connection_lost_mid_operation_is_not_kept() {
        let (a, mut b) = pair();
        let (mut ac, _, alent) = lend(conns(a));
        // Half a chunk, then the connection closes.
        b.write_all(&[0, 0, 0, 9, 1, 2, 3]).await.unwrap();
        drop(b);
        let mut got = Vec::new();
        ac.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, [1, 2, 3]);
        drop(ac);
        assert!(alent.reclaim(SETTLE).await.is_none());
    }

    /// A crafted peer that never ends its stream cannot hold a connection forever:
    /// the reclaim gives up after its time.
    #[tokio::test(start_paused = true)]
    async fn a_peer_that_never_ends_its_stream_is_not_waited_for() {
        let (a, mut b) = pair();
        let (ac, _, alent) = lend(conns(a));
        b.write_all(&[0, 0, 0, 2, 1, 2]).await.unwrap();
        drop(ac);
        assert!(alent.reclaim(SETTLE).await.is_none());
        drop(b);
    }
}
