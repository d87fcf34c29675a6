//! Special files (FIFOs, sockets, devices) between the file system's description
//! (`hetch_storage::walk::Special`) and the wire's (`hetch_proto::SpecialKind`), and
//! whether a session recreates them (`--specials`, `--devices`; rsync's `-D`).

use hetch_proto::SpecialKind;
use hetch_storage::walk::Special;

use crate::Options;

/// The wire form of `s`.
pub(crate) fn to_wire(s: Special) -> SpecialKind {
    match s {
        Special::Fifo => SpecialKind::Fifo,
        Special::Socket => SpecialKind::Socket,
        Special::CharDevice(rdev) => SpecialKind::CharDevice(rdev),
        Special::BlockDevice(rdev) => SpecialKind::BlockDevice(rdev),
    }
}

/// The file system form of `k`.
pub(crate) fn from_wire(k: SpecialKind) -> Special {
    match k {
        SpecialKind::Fifo => Special::Fifo,
        SpecialKind::Socket => Special::Socket,
        SpecialKind::CharDevice(rdev) => Special::CharDevice(rdev),
        SpecialKind::BlockDevice(rdev) => Special::BlockDevice(rdev),
    }
}

/// Whether the session recreates `s`; otherwise it is skipped with a warning.
pub(crate) fn wanted(opts: &Options, s: Special) -> bool {
    match s.is_device() {
        true => opts.devices,
        false => opts.specials,
    }
}

/// The warning for special file `shown` that is not recreated.
pub(crate) fn skipped(shown: &str, s: Special) -> String {
    let flag = match s.is_device() {
        true => "--devices",
        false => "--specials",
    };
    format!(
        "{shown}: is {}; skipped ({flag} or -D recreates it)",
        s.name()
    )
}
