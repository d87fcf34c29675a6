//! Direct reads of many small files at once, submitted together through io_uring.
//!
//! `--verify written` reads every file it wrote back from the device. For a small file
//! that one read is most of what the check costs: a direct `pread` waits for the
//! device, so a thread checking 20,000 files sleeps and wakes 20,000 times, one file
//! after the other. Submitted together, the reads of a batch reach the device at once
//! and the thread wakes once per batch (the C model in `bench/readback/` measured the
//! machine's CPU for 20,000 files of 16 KiB at 2.1 s this way against 3.7 s one read at a
//! time, and half the wall time).
//!
//! Only the reads go through the ring. Creating, naming and closing files would too in
//! principle, but io_uring runs those in its own worker threads (they may block), a
//! thread hand-off per call: what this module exists to avoid.
//!
//! Where io_uring is not there (an old kernel, a container whose seccomp profile refuses
//! it, `kernel.io_uring_disabled`), or a file system refuses direct reads, every read
//! says so and the caller reads the usual way.

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use io_uring::{opcode, types, IoUring};

use crate::direct::{aligned, ALIGN};

/// Reads in flight at once: a verifier's batch (at most 64 files).
const RING_ENTRIES: u32 = 64;

thread_local! {
    /// This thread's ring, made on first use: a ring belongs to the thread that
    /// submits to it, and the threads that check blocks are few and long-lived.
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// Set once making a ring failed: not tried again (every batch would pay for it).
static UNAVAILABLE: AtomicBool = AtomicBool::new(false);

/// Reads submitted through a ring in this process, for tests and counters.
static SUBMITTED: AtomicU64 = AtomicU64::new(0);

/// How many reads this process has submitted through io_uring so far.
pub fn reads_submitted() -> u64 {
    SUBMITTED.load(Ordering::Relaxed)
}

/// One read of a batch: `buf.len()` bytes at `offset` of `file`.
pub struct Read<'a> {
    /// The file, open for reading.
    pub file: &'a File,
    /// Where the read starts (for [`read_direct`]: a multiple of [`ALIGN`], or the
    /// read is not made).
    pub offset: u64,
    /// Where the bytes go; bytes past the end of the file read as zeros.
    pub buf: &'a mut [u8],
}

/// Whether this thread can submit reads through io_uring (making its ring if needed).
pub fn available() -> bool {
    with_ring(|_| ()).is_some()
}

/// Makes each of `reads` as its descriptor reads (through the page cache, or directly
/// where it was opened with `O_DIRECT` and the read is aligned), all submitted
/// together: per read, the bytes read, fewer than asked only where the file ends.
/// `None` where there is no io_uring: nothing was read.
pub fn read(reads: &mut [Read<'_>]) -> Option<Vec<io::Result<usize>>> {
    let targets: Vec<(usize, *mut u8, usize)> = reads
        .iter_mut()
        .enumerate()
        .filter(|(_, r)| !r.buf.is_empty())
        .map(|(i, r)| (i, r.buf.as_mut_ptr(), r.buf.len()))
        .collect();
    let results = with_ring(|ring| submit_all(ring, reads, &targets))?;
    let mut out: Vec<io::Result<usize>> = reads.iter().map(|_| Ok(0)).collect();
    for (&(i, _, len), result) in targets.iter().zip(results) {
        let r = &mut reads[i];
        out[i] = match result {
            // The kernel may end a buffered read early (a signal, part of it cached):
            // the rest the usual way, up to the end of the file. (A direct read stops
            // early only there.)
            Ok(n) if n > 0 && n < len && !reads_directly(r.file) => {
                read_on(r.file, r.offset, &mut r.buf[..], n).map(|more| n + more)
            }
            other => other,
        };
    }
    Some(out)
}

/// Whether `file`'s descriptor reads past the page cache (`O_DIRECT`).
fn reads_directly(file: &File) -> bool {
    // SAFETY: F_GETFL on a descriptor `file` keeps open; no pointers involved.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_DIRECT != 0
}

/// Reads `buf[from..]` at `offset + from` of `file` until it is full or the file ends:
/// the bytes read.
fn read_on(file: &File, offset: u64, buf: &mut [u8], from: usize) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut done = from;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done - from)
}

/// Makes each of `reads` straight from the device (`O_DIRECT`, which first writes out
/// what the page cache holds of the range), all submitted together. Per read:
/// `Ok(true)` read; `Ok(false)` not possible here (no io_uring, a file system without
/// direct reads, an unaligned offset): nothing was read and the caller reads the usual
/// way; `Err` the read failed. The descriptors read directly only during the call.
pub fn read_direct(reads: &mut [Read<'_>]) -> Vec<io::Result<bool>> {
    let mut outcome: Vec<io::Result<bool>> = reads.iter().map(|_| Ok(false)).collect();
    if with_ring(|_| ()).is_none() {
        return outcome;
    }
    // Buffers or lengths that are not whole pages read into one aligned area, then are
    // copied out (a file's tail: small next to the read).
    let bounced: Vec<bool> = reads
        .iter()
        .map(|r| !aligned(r.offset, r.buf.len(), r.buf.as_ptr()))
        .collect();
    let rounded = |r: &Read<'_>| r.buf.len().div_ceil(ALIGN) * ALIGN;
    let bounce_len: usize = reads
        .iter()
        .zip(&bounced)
        .filter(|(_, b)| **b)
        .map(|(r, _)| rounded(r))
        .sum();
    let mut bounce = crate::direct::AlignedBuf::zeroed(bounce_len);
    let mut targets: Vec<(usize, *mut u8, usize)> = Vec::new();
    let mut flags_set = Vec::new();
    let mut at = 0;
    for (i, r) in reads.iter_mut().enumerate() {
        if r.offset % ALIGN as u64 != 0 || r.buf.is_empty() {
            if r.buf.is_empty() {
                outcome[i] = Ok(true);
            }
            continue;
        }
        let fd = r.file.as_raw_fd();
        let len = rounded(r);
        // A direct read of a range still being written out would be handed to one of
        // io_uring's worker threads to wait for it: wait here instead (the writeback
        // of the whole batch was started before, so this waits once, for the first).
        if let Err(e) = wait_written(fd, r.offset, len) {
            outcome[i] = Err(e);
            continue;
        }
        match set_direct(fd) {
            Ok(Some(saved)) => flags_set.push((fd, saved)),
            Ok(None) => continue, // no direct I/O on this file system
            Err(e) => {
                outcome[i] = Err(e);
                continue;
            }
        }
        let ptr = match bounced[i] {
            true => {
                let p = bounce[at..].as_mut_ptr();
                at += len;
                p
            }
            false => r.buf.as_mut_ptr(),
        };
        targets.push((i, ptr, len));
    }
    let results = with_ring(|ring| submit_all(ring, reads, &targets)).expect("ring made above");
    // The descriptors read through the cache again (in reverse: a file read twice
    // gets back the flags it had before the first).
    for &(fd, saved) in flags_set.iter().rev() {
        // SAFETY: fcntl on a descriptor the caller keeps open; restores its flags.
        unsafe { libc::fcntl(fd, libc::F_SETFL, saved) };
    }
    let mut at = 0;
    for (&(i, _, len), result) in targets.iter().zip(results) {
        let buf = &mut reads[i].buf;
        outcome[i] = match result {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(false),
            Err(e) => Err(e),
            Ok(got) => {
                let got = got.min(buf.len());
                if bounced[i] {
                    buf[..got].copy_from_slice(&bounce[at..at + got]);
                }
                buf[got..].fill(0); // the file ends here
                Ok(true)
            }
        };
        if bounced[i] {
            at += len;
        }
    }
    outcome
}

/// Runs `f` on this thread's ring; `None` where there is none.
fn with_ring<R>(f: impl FnOnce(&mut IoUring) -> R) -> Option<R> {
    if UNAVAILABLE.load(Ordering::Relaxed) {
        return None;
    }
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            match IoUring::new(RING_ENTRIES) {
                Ok(ring) => *slot = Some(ring),
                Err(_) => {
                    UNAVAILABLE.store(true, Ordering::Relaxed);
                    return None;
                }
            }
        }
        slot.as_mut().map(f)
    })
}

/// Submits a read of `len` bytes into `ptr` for each target (index into `reads`),
/// [`RING_ENTRIES`] at a time, and waits for all of them: per target, the bytes read.
fn submit_all(
    ring: &mut IoUring,
    reads: &[Read<'_>],
    targets: &[(usize, *mut u8, usize)],
) -> Vec<io::Result<usize>> {
    let mut results: Vec<io::Result<usize>> = targets.iter().map(|_| Ok(0)).collect();
    for (c, chunk) in targets.chunks(RING_ENTRIES as usize).enumerate() {
        let base = c * RING_ENTRIES as usize;
        for (k, &(i, ptr, len)) in chunk.iter().enumerate() {
            let r = &reads[i];
            let sqe = opcode::Read::new(types::Fd(r.file.as_raw_fd()), ptr, len as u32)
                .offset(r.offset)
                .build()
                .user_data((base + k) as u64);
            // SAFETY: the descriptor and the `len` bytes at `ptr` (a caller's buffer or
            // the bounce area, both alive until this function returns) stay valid until
            // the read's completion is taken below, which happens before returning.
            unsafe { ring.submission().push(&sqe) }.expect("a chunk fits the ring");
        }
        SUBMITTED.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        let mut done = 0;
        while done < chunk.len() {
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if retry(&e) => continue,
                // The ring was made and filled correctly, so the kernel does not refuse
                // it; if it ever did, reads may be in flight into buffers the caller
                // would free on unwinding.
                Err(e) => {
                    _ = writeln!(
                        std::io::stderr(),
                        "hetch: io_uring failed with reads in flight: {e}"
                    );
                    std::process::abort();
                }
            }
            for cqe in ring.completion() {
                let k = cqe.user_data() as usize;
                results[k] = match cqe.result() {
                    n if n >= 0 => Ok(n as usize),
                    n => Err(io::Error::from_raw_os_error(-n)),
                };
                done += 1;
            }
        }
    }
    results
}

/// Errors of `io_uring_enter` after which waiting again is right.
fn retry(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
    )
}

/// Waits until `len` bytes at `offset` of `fd` are written out (starting what is not).
fn wait_written(fd: i32, offset: u64, len: usize) -> io::Result<()> {
    let how = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: no pointers; a descriptor the caller keeps open.
    match unsafe { libc::sync_file_range(fd, offset as i64, len as i64, how) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Sets `O_DIRECT` on `fd`: the flags before, or `None` where the file system has no
/// direct I/O.
fn set_direct(fd: i32) -> io::Result<Option<i32>> {
    // SAFETY: fcntl on a descriptor the caller keeps open; no pointers involved.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    match unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_DIRECT) } {
        0 => Ok(Some(flags)),
        _ => Ok(None), // EINVAL: this file system has no direct I/O
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::direct::tests::disk_tempdir;
    use std::io::Write;

    fn written(dir: &std::path::Path, name: &str, len: usize) -> (File, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        let path = dir.join(name);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        (File::open(&path).unwrap(), data)
    }

    fn flags(f: &File) -> i32 {
        // SAFETY: F_GETFL on an open descriptor.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) }
    }

    #[test]
    fn a_batch_reads_whole_pages_tails_and_past_the_end_and_leaves_the_flags() {
        let dir = disk_tempdir();
        if !available() {
            eprintln!("skipped: no io_uring here");
            return;
        }
        let sizes = [16384, 4096, 1000, 5000, 12288];
        let files: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| written(dir.path(), &format!("f{i}"), n))
            .collect();
        let before: Vec<i32> = files.iter().map(|(f, _)| flags(f)).collect();
        // Whole pages into aligned buffers; tails (and one unaligned buffer) bounced;
        // one read longer than its file; one at an unaligned offset, refused.
        let mut bufs: Vec<crate::direct::AlignedBuf> = sizes
            .iter()
            .map(|&n| crate::direct::AlignedBuf::zeroed(n.div_ceil(ALIGN) * ALIGN + ALIGN))
            .collect();
        let mut odd = vec![0xffu8; 8193];
        let mut reads: Vec<Read<'_>> = Vec::new();
        let mut lens = Vec::new();
        for ((f, data), b) in files.iter().zip(bufs.iter_mut()) {
            let len = if data.len() == 12288 {
                16384
            } else {
                data.len()
            };
            lens.push(len);
            b[..len].fill(0xff);
            reads.push(Read {
                file: f,
                offset: 0,
                buf: &mut b[..len],
            });
        }
        reads.push(Read {
            file: &files[0].0,
            offset: 4096,
            buf: &mut odd[1..],
        });
        let mut refused = [0u8; 10];
        reads.push(Read {
            file: &files[0].0,
            offset: 100,
            buf: &mut refused,
        });
        let outcome = read_direct(&mut reads);
        let ok: Vec<bool> = outcome.iter().map(|r| *r.as_ref().unwrap()).collect();
        assert_eq!(ok, [true, true, true, true, true, true, false]);
        drop(reads);
        for ((b, (_, data)), len) in bufs.iter().zip(&files).zip(&lens) {
            assert_eq!(&b[..data.len()], &data[..]);
            assert!(b[data.len()..*len].iter().all(|&x| x == 0), "past the end");
        }
        assert_eq!(&odd[1..], &files[0].1[4096..4096 + 8192]);
        assert_eq!(refused, [0; 10], "an unaligned offset reads nothing");
        let after: Vec<i32> = files.iter().map(|(f, _)| flags(f)).collect();
        assert_eq!(before, after);
    }

    #[test]
    fn a_file_system_without_direct_io_reads_nothing_and_says_so() {
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            return;
        };
        let (f, data) = written(dir.path(), "f", 4096);
        let mut buf = crate::direct::AlignedBuf::zeroed(4096);
        buf.fill(0xff);
        let mut reads = [Read {
            file: &f,
            offset: 0,
            buf: &mut buf[..],
        }];
        let outcome = read_direct(&mut reads);
        // tmpfs takes O_DIRECT since Linux 6.6: either the bytes are right, or nothing
        // was read and the caller is told.
        match outcome[0].as_ref().unwrap() {
            true => assert_eq!(&buf[..], &data[..]),
            false => assert!(buf.iter().all(|&b| b == 0xff)),
        }
    }
}
