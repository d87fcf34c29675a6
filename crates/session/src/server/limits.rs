//! How much of `hetch serve` authenticated sessions may hold, sized at start from the
//! open-file limit (raised to the hard limit first) and memory, so that a full house
//! never leaves the server without a descriptor: not for a new client's connection
//! (accept failing with `EMFILE`), not for the files its sessions read and write.
//!
//! The descriptors are shared out so:
//! - [`FDS_KEPT`] for the server itself (listener, metrics, log, state files);
//! - the unauthenticated places (`--max-unauthenticated`), at most a quarter of the
//!   rest, lowered here if they would take more;
//! - the rest for sessions: each holds its connections (its control connection and
//!   data streams; a relay also its onward ones) and may have up to
//!   [`FILES_PER_SESSION`] files open while it runs.
//!
//! What is not given is sized from that: the connections to a third of the room
//! (an eighth as many sessions take the rest with their files), and no more than half
//! of memory holds at [`CONNECTION_MEMORY`] each; per address a quarter of each total;
//! kept idle sessions at most half of the sessions.

use hetch_net::PreAuthLimits;

/// Descriptors the server keeps for itself beyond its connections and sessions' files.
pub const FDS_KEPT: u64 = 64;

/// Files a running session is allowed to have open in the descriptor budget: an
/// honest session reads or writes a few files at once (its concurrency), each with a
/// part file and a journal.
pub const FILES_PER_SESSION: usize = 16;

/// What one authenticated connection costs in memory: its TLS read buffer once
/// authenticated (256 KiB) and the TLS state.
pub const CONNECTION_MEMORY: u64 = 320 << 10;

/// Caps on what authenticated sessions hold, as an operator asked for them; `None`
/// is sized at start (see the module's documentation). The server has one token, so
/// what its holder may hold is the totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServeLimits {
    /// Connections (control connections and data streams) held by sessions at once,
    /// from everyone.
    pub max_connections: Option<usize>,
    /// Connections held by sessions from one address (IPv6: one /64).
    pub max_connections_per_address: Option<usize>,
    /// Sessions open at once (running, joining their streams, or kept idle).
    pub max_sessions: Option<usize>,
    /// Sessions open at once from one address.
    pub max_sessions_per_address: Option<usize>,
    /// Sessions kept idle between operations, from everyone.
    pub max_idle_sessions: Option<usize>,
    /// Sessions kept idle between operations, from one address.
    pub max_idle_sessions_per_address: Option<usize>,
}

/// The caps in force, each at least one (a session of one stream fits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// See [`ServeLimits::max_connections`].
    pub connections: usize,
    /// See [`ServeLimits::max_connections_per_address`].
    pub connections_per_address: usize,
    /// See [`ServeLimits::max_sessions`].
    pub sessions: usize,
    /// See [`ServeLimits::max_sessions_per_address`].
    pub sessions_per_address: usize,
    /// See [`ServeLimits::max_idle_sessions`].
    pub idle_sessions: usize,
    /// See [`ServeLimits::max_idle_sessions_per_address`].
    pub idle_sessions_per_address: usize,
}

impl std::fmt::Display for Caps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} connections ({} per address), {} sessions ({} per address), {} kept idle \
             ({} per address)",
            self.connections,
            self.connections_per_address,
            self.sessions,
            self.sessions_per_address,
            self.idle_sessions,
            self.idle_sessions_per_address
        )
    }
}

impl ServeLimits {
    /// The caps for a server with `fds` open files (`u64::MAX`: no limit) and `memory`
    /// bytes (if known), lowering `pre_auth` where it would take more than its share;
    /// with one line for each limit that was given and lowered.
    pub fn size(
        &self,
        fds: u64,
        memory: Option<u64>,
        pre_auth: &mut PreAuthLimits,
    ) -> (Caps, Vec<String>) {
        let mut notes = Vec::new();
        let usable = usize::try_from(fds.saturating_sub(FDS_KEPT)).unwrap_or(usize::MAX);
        let pre_cap = (usable / 4).max(1);
        if pre_auth.max_total > pre_cap {
            notes.push(format!(
                "the open-file limit is {fds}: --max-unauthenticated lowered from {} to {pre_cap}",
                pre_auth.max_total
            ));
            pre_auth.max_total = pre_cap;
            pre_auth.max_per_address = pre_auth.max_per_address.min(pre_cap);
        }
        let room = usable.saturating_sub(pre_auth.max_total);
        let by_memory = memory.map_or(usize::MAX, |m| {
            usize::try_from(m / 2 / CONNECTION_MEMORY).unwrap_or(usize::MAX)
        });
        let mut connections = self
            .max_connections
            .unwrap_or_else(|| (room / 3).min(by_memory))
            .max(2);
        let mut sessions = self.max_sessions.unwrap_or(connections / 8).max(1);
        // Given limits the descriptors cannot hold are lowered in proportion.
        let want = connections as u128 + sessions as u128 * FILES_PER_SESSION as u128;
        if want > room as u128 {
            let scaled = |n: usize| (n as u128 * room as u128 / want).max(1) as usize;
            let before = (connections, sessions);
            connections = scaled(connections).max(2);
            sessions = scaled(sessions);
            if self.max_connections.is_some() || self.max_sessions.is_some() {
                notes.push(format!(
                    "the open-file limit is {fds}: --max-connections lowered from {} to \
                     {connections}, --max-sessions from {} to {sessions}",
                    before.0, before.1
                ));
            }
        }
        let within = |given: Option<usize>, default: usize, total: usize| {
            given.unwrap_or(default).clamp(1, total)
        };
        let connections_per_address = within(
            self.max_connections_per_address,
            connections / 4,
            connections,
        )
        .max(2);
        let sessions_per_address = within(self.max_sessions_per_address, sessions / 4, sessions);
        let idle_sessions = within(self.max_idle_sessions, sessions / 2, sessions);
        let idle_sessions_per_address = within(
            self.max_idle_sessions_per_address,
            sessions_per_address / 2,
            sessions_per_address.min(idle_sessions),
        );
        let caps = Caps {
            connections,
            connections_per_address,
            sessions,
            sessions_per_address,
            idle_sessions,
            idle_sessions_per_address,
        };
        (caps, notes)
    }
}

/// The memory this process may use: the machine's (`MemTotal`), or its cgroup's limit
/// (cgroup v2 `memory.max`) if lower; `None` if neither can be read.
pub fn memory_limit() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| mem_total(&s));
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| {
            let path = s.lines().find_map(|l| l.strip_prefix("0::"))?.to_string();
            let file = format!("/sys/fs/cgroup{}/memory.max", path.trim_end_matches('/'));
            std::fs::read_to_string(file).ok()
        })
        .and_then(|s| s.trim().parse::<u64>().ok());
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

/// `MemTotal` of a `/proc/meminfo`, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sized(
        limits: ServeLimits,
        fds: u64,
        memory: Option<u64>,
    ) -> (Caps, PreAuthLimits, Vec<String>) {
        let mut pre = PreAuthLimits::default();
        let (caps, notes) = limits.size(fds, memory, &mut pre);
        (caps, pre, notes)
    }

    /// Whatever is given, the connections, the sessions' files, the unauthenticated
    /// places and the server's own descriptors fit in the limit.
    fn fits(caps: &Caps, pre: &PreAuthLimits, fds: u64) {
        let used = FDS_KEPT as usize
            + pre.max_total
            + caps.connections
            + caps.sessions * FILES_PER_SESSION;
        assert!(used as u64 <= fds, "{caps:?} {pre:?} use {used} of {fds}");
    }

    #[test]
    fn defaults_share_the_descriptors_and_leave_the_reserve() {
        let (caps, pre, notes) = sized(ServeLimits::default(), 20_000, None);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(pre, PreAuthLimits::default());
        fits(&caps, &pre, 20_000);
        // A client with 256 streams fits several times over, and no address can
        // hold more than a quarter.
        assert!(caps.connections_per_address >= 4 * 257, "{caps:?}");
        assert_eq!(caps.connections_per_address, caps.connections / 4);
        assert_eq!(caps.sessions_per_address, caps.sessions / 4);
        assert!(caps.idle_sessions_per_address <= caps.sessions_per_address);

        // A low limit lowers the unauthenticated places too, and still fits.
        let (caps, pre, notes) = sized(ServeLimits::default(), 600, None);
        fits(&caps, &pre, 600);
        assert!(pre.max_total < 256 && notes.len() == 1, "{pre:?} {notes:?}");
        assert!(caps.connections_per_address >= 2 && caps.sessions_per_address >= 1);
    }

    #[test]
    fn memory_bounds_the_connections() {
        let (caps, ..) = sized(ServeLimits::default(), 1 << 20, Some(1 << 30));
        assert_eq!(caps.connections as u64, (1 << 29) / CONNECTION_MEMORY);
        let (caps, pre, _) = sized(ServeLimits::default(), u64::MAX, None);
        assert!(caps.connections > 1 << 40, "no limit at all: {caps:?}");
        assert_eq!(pre, PreAuthLimits::default());
    }

    #[test]
    fn given_limits_are_kept_unless_the_descriptors_cannot_hold_them() {
        let given = ServeLimits {
            max_connections: Some(1000),
            max_connections_per_address: Some(600),
            max_sessions: Some(10),
            max_sessions_per_address: Some(20),
            max_idle_sessions: None,
            max_idle_sessions_per_address: Some(1),
        };
        let (caps, _, notes) = sized(given, 1 << 20, Some(1));
        assert!(notes.is_empty(), "{notes:?}");
        let want = Caps {
            connections: 1000,
            connections_per_address: 600,
            sessions: 10,
            // Never more per address than in all.
            sessions_per_address: 10,
            idle_sessions: 5,
            idle_sessions_per_address: 1,
        };
        assert_eq!(caps, want);
        let (caps, pre, notes) = sized(given, 1000, None);
        fits(&caps, &pre, 1000);
        assert!(
            notes
                .iter()
                .any(|n| n.contains("--max-connections lowered")),
            "{notes:?}"
        );
    }

    #[test]
    fn mem_total_is_read_in_bytes() {
        let info = "MemFree:  10 kB\nMemTotal:       16318536 kB\n";
        assert_eq!(mem_total(info), Some(16318536 << 10));
        assert_eq!(mem_total("nothing"), None);
        assert!(memory_limit().is_some_and(|m| m > 0));
    }
}
