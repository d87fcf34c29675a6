//! Reads that bypass the page cache (`O_DIRECT`), for checking what a device holds
//! rather than what the cache remembers of it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// Offsets, lengths and buffers of direct reads are multiples of this (the largest
/// logical block size of common devices).
pub const ALIGN: usize = 4096;

/// Fills `buf` from `offset` of `file` with direct reads; bytes past the end of the
/// file read as zeros. `Ok(false)` when direct reads are not possible here (file
/// system, or an unaligned `offset`): nothing was read. The descriptor reads (and
/// writes) directly only during the call.
pub fn read_exact_at(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
    if offset % ALIGN as u64 != 0 {
        return Ok(false);
    }
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor that `file` keeps open; no pointers involved.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_DIRECT) } < 0 {
        return Ok(false); // EINVAL: this file system has no direct I/O
    }
    let result = read_aligned(file, offset, buf);
    // SAFETY: as above; restores the flags read before.
    unsafe { libc::fcntl(fd, libc::F_SETFL, flags) };
    result
}

fn read_aligned(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
    let rounded = buf.len().div_ceil(ALIGN) * ALIGN;
    let mut space = vec![0u8; rounded + ALIGN];
    let start = space.as_ptr().align_offset(ALIGN);
    let aligned = &mut space[start..start + rounded];
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut aligned[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                if done % ALIGN != 0 {
                    break; // a short read that is not whole blocks: the end of the file
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && done == 0 => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    let got = done.min(buf.len());
    buf[..got].copy_from_slice(&aligned[..got]);
    buf[got..].fill(0);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn direct_reads_give_the_bytes_and_zeros_past_the_end() {
        // Under the build directory: /tmp may be a tmpfs without direct I/O.
        let target = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target");
        std::fs::create_dir_all(target).unwrap();
        let dir = tempfile::tempdir_in(target).unwrap();
        let mut f = File::create_new(dir.path().join("f")).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        f.write_all(&data).unwrap();
        let f = File::options()
            .read(true)
            .write(true)
            .open(dir.path().join("f"))
            .unwrap();
        let mut buf = vec![1u8; 12_000];
        match read_exact_at(&f, 0, &mut buf).unwrap() {
            true => {
                assert_eq!(&buf[..10_000], &data[..]);
                assert!(buf[10_000..].iter().all(|&b| b == 0));
            }
            false => eprintln!("no direct I/O on this file system; skipped"),
        }
        // Unaligned offsets are not read directly; the flags are as before.
        assert!(!read_exact_at(&f, 100, &mut buf).unwrap());
        // SAFETY: fcntl on an open descriptor.
        let flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_DIRECT, 0);
    }
}
