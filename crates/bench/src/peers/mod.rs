//! The peers hetch is compared with: rsync and scp over OpenSSH, rclone over SFTP,
//! GridFTP (globus-gridftp-server and globus-url-copy) and XRootD (xrootd and xrdcp).
//!
//! Each peer runs a real server of its own on the server [`crate::Place`], on a free
//! port, with its keys, configuration and log under the run's scratch directory, so
//! that peers never share a server and stopping one leaves the others running.
//! `bench/install-peers.sh` installs them from Debian.

mod gridftp;
mod rclone;
mod rsync;
mod scp;
mod sshd;
mod xrootd;

use crate::tool::Tool;

/// The peers' names, in the order reports list them.
pub const NAMES: [&str; 5] = ["rsync", "scp", "rclone", "gridftp", "xrootd"];

/// The peer called `name`, not yet started; `None` for a name that is no peer.
pub fn make(name: &str) -> Option<Box<dyn Tool>> {
    let tool: Box<dyn Tool> = match name {
        "rsync" => Box::<rsync::Rsync>::default(),
        "scp" => Box::<scp::Scp>::default(),
        "rclone" => Box::<rclone::Rclone>::default(),
        "gridftp" => Box::<gridftp::Gridftp>::default(),
        "xrootd" => Box::<xrootd::Xrootd>::default(),
        _ => return None,
    };
    Some(tool)
}

/// The programs peer `name` runs (client and server side); empty for a name that is no
/// peer.
pub fn programs(name: &str) -> &'static [&'static str] {
    match name {
        "rsync" => &["rsync", "ssh", "ssh-keygen", "sshd"],
        "scp" => &["scp", "ssh-keygen", "sshd"],
        "rclone" => &["rclone", "ssh-keygen", "sshd"],
        "gridftp" => &["globus-gridftp-server", "globus-url-copy", "setpriv"],
        "xrootd" => &["xrootd", "xrdcp", "setpriv"],
        _ => &[],
    }
}

/// The programs peer `name` needs that are not installed here, so that a benchmark (or
/// a test) can skip it with a reason instead of failing; `bench/install-peers.sh`
/// installs them.
pub fn missing(name: &str) -> Vec<&'static str> {
    programs(name)
        .iter()
        .copied()
        .filter(|p| crate::server::find_program(p).is_none())
        .collect()
}
