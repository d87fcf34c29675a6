//! A read buffer whose size can change while it is in use (under a TLS stream, where
//! the buffered reader cannot be swapped after the handshake).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Buffers reads from `inner` in a buffer of the size `want` holds at each refill;
/// writes pass straight through.
pub(crate) struct GrowBuf<S> {
    inner: S,
    buf: Vec<u8>,
    pos: usize,
    filled: usize,
    want: Arc<AtomicUsize>,
}

impl<S> GrowBuf<S> {
    pub(crate) fn new(inner: S, want: Arc<AtomicUsize>) -> Self {
        GrowBuf {
            inner,
            buf: Vec::new(),
            pos: 0,
            filled: 0,
            want,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for GrowBuf<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos == this.filled {
            // Empty: the only moment the buffer can be resized without losing bytes.
            let want = this.want.load(Ordering::Relaxed);
            if this.buf.len() != want {
                this.buf = vec![0; want];
            }
            if out.remaining() >= this.buf.len() {
                return Pin::new(&mut this.inner).poll_read(cx, out);
            }
            let mut rb = ReadBuf::new(&mut this.buf);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            this.filled = rb.filled().len();
            this.pos = 0;
        }
        let n = out.remaining().min(this.filled - this.pos);
        out.put_slice(&this.buf[this.pos..this.pos + n]);
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for GrowBuf<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_survive_a_resize_between_reads() {
        let (mut a, b) = tokio::io::duplex(1 << 20);
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        a.write_all(&data).await.unwrap();
        drop(a);
        let want = Arc::new(AtomicUsize::new(16));
        let mut r = GrowBuf::new(b, want.clone());
        let mut got = vec![0u8; 10];
        r.read_exact(&mut got).await.unwrap();
        assert_eq!(r.buf.len(), 16);
        want.store(4096, Ordering::Relaxed);
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        got.extend(rest);
        assert_eq!(got, data);
        assert_eq!(r.buf.len(), 4096, "grown at a refill");
    }
}
