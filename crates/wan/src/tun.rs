//! TUN devices: a network interface whose packets a process reads and writes.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;

/// `ioctl(TUNSETIFF)`: not in the libc crate for every target.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// An open TUN device (layer 3, no packet information header).
#[derive(Debug)]
pub struct Tun {
    file: File,
    name: String,
}

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

impl Tun {
    /// Creates (or attaches to) the TUN device `name` in the calling thread's network
    /// namespace.
    pub fn open(name: &str) -> std::io::Result<Tun> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("bad interface name {name:?}"),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")?;
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
            _pad: [0; 22],
        };
        for (d, s) in req.name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        // SAFETY: a valid fd and a properly sized, initialised `ifreq`.
        let r = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Tun {
            file,
            name: name.to_string(),
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads one packet into `buf`; returns its length.
    pub fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        (&self.file).read(buf)
    }

    /// Writes one packet.
    pub fn send(&self, packet: &[u8]) -> std::io::Result<()> {
        (&self.file).write_all(packet)
    }
}
