//! Where a command runs: on this host, or on host `a` or `b` of the WAN testbed.

use std::process::Command;

/// A host a tool's client or server runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The network namespace, or `None` for this host's own network (loopback runs).
    pub netns: Option<String>,
    /// The address other hosts reach it at.
    pub addr: String,
}

impl Place {
    /// This host, reached on 127.0.0.1.
    pub fn loopback() -> Place {
        Place {
            netns: None,
            addr: "127.0.0.1".to_string(),
        }
    }

    /// A command that runs `program` here (through `ip netns exec` on a testbed host).
    pub fn command(&self, program: &str) -> Command {
        match &self.netns {
            None => Command::new(program),
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
        }
    }
}
