//! Measurements of what this host moves (feature `measure`): one core's hashing, one
//! TLS stream over loopback, and a directory's write and read rates, each a
//! [`Capacity`] for [`Report::add_capacity`](crate::Report::add_capacity). They take
//! seconds; the storage test writes a temporary file, removed when it ends.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use crate::Capacity;

/// Why a measurement could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// A file of the storage test could not be created, written, synced or read.
    #[error("{what}")]
    File {
        /// The file (or directory) and what was done to it.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Loopback, or the temporary directory of the TLS test's key, failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The TLS test's connection failed.
    #[error(transparent)]
    Net(#[from] hetch_net::NetError),
    /// The TLS test's receiving task failed.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    /// The TLS test's receiver got another count of bytes than was sent.
    #[error("TLS test: {moved} bytes arrived of {sent}")]
    Short {
        /// Bytes received.
        moved: usize,
        /// Bytes sent.
        sent: usize,
    },
}

/// `len` bytes of a fixed pattern that neither compresses nor repeats at block size:
/// the data every measurement moves.
fn test_bytes(len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect()
}

/// BLAKE3 over 64 MiB in one thread: what one core hashes (each block is hashed once
/// by the source and once by the destination).
pub fn hashing() -> Capacity {
    let data = test_bytes(64 << 20);
    let started = Instant::now();
    let digest = hetch_integrity::Algorithm::Blake3.digest(&data);
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    std::hint::black_box(digest);
    Capacity {
        link: "hashing (blake3, one core)".into(),
        rate: (data.len() as f64 / secs) as u64,
        how: "64 MiB in memory".into(),
    }
}

/// One TLS stream over loopback, both ends in this process: what one stream's
/// encryption and decryption (AES-GCM on this CPU, rustls) and the kernel's TCP carry.
/// Fails where loopback is down (a bare network namespace).
pub async fn tls_loopback() -> Result<Capacity, MeasureError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const BLOCK: usize = 1 << 20;
    const BLOCKS: usize = 256;
    let dir = tempfile::tempdir()?;
    let (id, _) = hetch_net::ServerIdentity::load_or_create(dir.path())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let config = id.server_config();
    let receiver = tokio::spawn(async move {
        let (socket, _) = listener.accept().await?;
        let mut acc = hetch_net::accept(socket, &Default::default(), &config).await?;
        acc.read_buffer.grow();
        let (mut buf, mut total) = (vec![0u8; BLOCK], 0usize);
        loop {
            match acc.stream.read(&mut buf).await? {
                0 => return Ok::<_, MeasureError>(total),
                n => total += n,
            }
        }
    });
    let client = hetch_net::TlsClient::new(&addr, hetch_net::Trust::Pinned(id.fingerprint))?;
    let mut s = hetch_net::connect(&addr, &Default::default(), Some(&client)).await?;
    let block = test_bytes(BLOCK);
    let started = Instant::now();
    for _ in 0..BLOCKS {
        s.write_all(&block).await?;
    }
    s.shutdown().await?;
    let moved = receiver.await??;
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    if moved != BLOCK * BLOCKS {
        return Err(MeasureError::Short {
            moved,
            sent: BLOCK * BLOCKS,
        });
    }
    Ok(Capacity {
        link: "TLS, one stream on loopback".into(),
        rate: (moved as f64 / secs) as u64,
        how: "256 MiB encrypted and decrypted in this process".into(),
    })
}

/// The write rate (4 MiB writes, then fdatasync) and read rate (page cache dropped
/// first) of `dir`, with a temporary file of `size` bytes (rounded up to whole 4 MiB
/// blocks, at least one).
pub fn storage(dir: &Path, size: u64) -> Result<Vec<Capacity>, MeasureError> {
    const BLOCK: usize = 4 << 20;
    let failed = |what: String| move |source| MeasureError::File { what, source };
    let mut file = tempfile::Builder::new()
        .prefix(".hetch-doctor-")
        .tempfile_in(dir)
        .map_err(failed(format!(
            "{}: cannot create a test file",
            dir.display()
        )))?;
    let block = test_bytes(BLOCK);
    let blocks = size.div_ceil(BLOCK as u64).max(1);
    let name = file.path().display().to_string();
    let started = Instant::now();
    for _ in 0..blocks {
        file.write_all(&block)
            .map_err(failed(format!("{name}: write")))?;
    }
    file.as_file()
        .sync_data()
        .map_err(failed(format!("{name}: fdatasync")))?;
    let wrote = started.elapsed().as_secs_f64().max(1e-9);
    let bytes = blocks * BLOCK as u64;
    hetch_storage::meta::drop_cached_range(file.as_file(), 0, bytes);
    let mut f = std::fs::File::open(file.path()).map_err(failed(format!("{name}: open")))?;
    let mut buf = vec![0u8; BLOCK];
    let started = Instant::now();
    let mut read = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(failed(format!("{name}: read")))?;
        if n == 0 {
            break;
        }
        read += n as u64;
    }
    let reading = started.elapsed().as_secs_f64().max(1e-9);
    let shown = dir.display();
    let size = hetch_units::human_bytes(bytes as f64);
    Ok(vec![
        Capacity {
            link: format!("storage write {shown}"),
            rate: (bytes as f64 / wrote) as u64,
            how: format!("{size} in 4 MiB writes, then fdatasync"),
        },
        Capacity {
            link: format!("storage read {shown}"),
            rate: (read as f64 / reading) as u64,
            how: format!("{size} in 4 MiB reads, page cache dropped first"),
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_is_measured_in_whole_blocks_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let got = storage(dir.path(), 1).unwrap();
        assert_eq!(got.len(), 2);
        assert!(got[0].link.starts_with("storage write "), "{got:?}");
        assert!(got[1].link.starts_with("storage read "), "{got:?}");
        assert!(
            got.iter()
                .all(|c| c.rate > 0 && c.how.starts_with("4.00 MiB in 4 MiB")),
            "{got:?}"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let e = storage(&dir.path().join("missing"), 1).unwrap_err();
        assert!(e.to_string().ends_with("cannot create a test file"), "{e}");
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn the_test_pattern_does_not_repeat_at_block_size() {
        let b = test_bytes(1 << 20);
        assert_ne!(b[..4096], b[4096..8192]);
    }
}
