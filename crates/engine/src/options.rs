//! Settings of a transfer that both sides must agree on or that tune one side.

use std::sync::Arc;

pub use hetch_integrity::Algorithm;
pub use hetch_proto::{Compression, DeleteRequest, Schedule, Verify};

use crate::manifest::Manifest;

/// Transfer settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Block size in bytes (power of two, at least 1 KiB).
    pub block_size: u64,
    /// Files read (source) concurrently; also the number of block readers.
    pub concurrency: usize,
    /// Blocks written concurrently on the sink.
    pub writers: usize,
    /// Bytes of block buffers each side may hold at once.
    pub buffer_memory: usize,
    /// Cap on the data rate in bytes per second (0 = none).
    pub rate_limit: u64,
    /// A limiter to pass the data through instead of one of `rate_limit`: shared with
    /// whoever else adjusts or uses it (a transfer service worker sets it to the
    /// unit's share of its job's rate).
    pub shared_rate: Option<std::sync::Arc<crate::RateLimiter>>,
    /// Refuse to replace existing files that differ.
    pub no_clobber: bool,
    /// fdatasync every file before it is renamed into place.
    pub fsync: bool,
    /// The sink keeps setuid, setgid and sticky bits (`0o7000`) of what it creates.
    /// Off by default, so that a peer cannot have a receiver running as root create
    /// setuid files. Ownership is never copied: files belong to the receiving user.
    pub preserve_special_modes: bool,
    /// FIFOs and sockets are recreated (`--specials`), otherwise skipped with a warning.
    pub specials: bool,
    /// Devices are recreated (`--devices`) where the receiver may make them (root),
    /// otherwise skipped with a warning. A server recreates them only when it was
    /// started with `--devices` itself: a device node a token holder chose, in the
    /// served tree, would let later pulls read the raw device.
    pub devices: bool,
    /// Names of one file are kept as hard links (`--hard-links`).
    pub hard_links: bool,
    /// User extended attributes (`user.*`) of files and directories are kept
    /// (`--xattrs`); the destination's are brought in step, hetch's own left alone.
    pub xattrs: bool,
    /// POSIX ACLs (access and default) are kept (`--acls`), as their extended
    /// attributes, with numeric user and group ids.
    pub acls: bool,
    /// A server's root (canonical), for server sessions: messages to the peer name
    /// paths below it relative to it, so that a client never learns the server's
    /// absolute paths, and every file a pull reads must really lie below it (checked on
    /// the opened file, so a directory a local user swapped for a symlink is caught).
    pub served_root: Option<std::path::PathBuf>,
    /// Directories (canonical) that local source operands lie within, for a worker
    /// running a service user's unit: each operand is listed from the one it lies
    /// below, with no symlink on the way leading out of it, and every file opened
    /// must lie below one of them (checked on the opened file). Empty: a server's
    /// sources are confined to `served_root`, a local user's lead where paths lead.
    pub read_within: Vec<std::path::PathBuf>,
    /// A session that hears nothing from its peer for this long ends as stalled (see
    /// `liveness`); `None` never gives up on a quiet peer.
    pub stall_timeout: Option<std::time::Duration>,
    /// Raised to end the session at once, telling the peer (a server shutting down).
    pub stop: Option<crate::StopSignal>,
    /// How often one block may be re-sent after failing its check.
    pub max_retries: u32,
    /// Algorithm of block and whole-file digests.
    pub checksum: Algorithm,
    /// What the sink checks before a block counts as done.
    pub verify: Verify,
    /// When the sink checks (for [`Verify::Written`]).
    pub schedule: Schedule,
    /// Threads that hash at once on this side.
    pub hash_threads: usize,
    /// The sink reports each finished (or skipped) file's whole-file digest.
    pub file_digests: bool,
    /// Skip an existing destination file only when its whole-file digest matches.
    pub checksum_skip: bool,
    /// Compare source and destination only; write nothing.
    pub compare_only: bool,
    /// Where this side writes manifest lines (the client side of a session).
    pub manifest: Option<Arc<Manifest>>,
    /// Follow growing files (and, for directory operands, new entries) until they are
    /// complete; `None` copies what is there when it is listed.
    pub follow: Option<Follow>,
    /// Which source entries to send (all when `None`).
    pub filter: Option<EntryFilter>,
    /// Mirror (`hetch sync`, `cp --delete`): once every file succeeded, the sink removes
    /// the entries below the copied trees that the source did not announce (excluded
    /// ones only with `delete_excluded`). `None`: a plain copy.
    pub delete: Option<DeleteRequest>,
    /// Dry run: the sink reports what it would copy, replace and (mirroring) delete,
    /// and changes nothing.
    pub dry_run: bool,
    /// The source sends chosen entries of its directories (a transfer service's unit
    /// of files, with their parent directories), not all they hold: the sink leaves
    /// the directories' other names alone. It removes no leftovers of interrupted
    /// transfers in them, which would take reading every name of a directory for
    /// each unit (a million times over in a flat directory of a million files).
    pub chosen_entries: bool,
    /// Delete each source file once the sink reports its copy verified and in place
    /// (needs `file_digests`, so that skipped files are confirmed by digest too).
    pub remove_source: bool,
    /// The operands this side asked a server for, as wire paths, when it receives a
    /// pull: every entry must lie under one of them (see [`crate::tops`]), so a hostile
    /// server cannot write next to the destination. `None` for pushes and local copies.
    pub pulled: Option<Vec<Vec<u8>>>,
    /// A source file that changes while it is read is dropped at the sink and sent
    /// again from a fresh listing (up to 3 times) instead of failing at once.
    pub retry_changed: bool,
    /// On resume, take the blocks a journal lists as done without reading them back
    /// from the part file. Faster on a slow disk, but a part file damaged (or a block
    /// lost in a host crash) between the runs then ends up in the final file.
    pub trust_journal: bool,
    /// Test-only fault hook: flip one bit in this many of the first data blocks the
    /// source sends, after hashing them (simulates corruption in flight). Only in
    /// builds with the `faults` feature (see [`crate::faults`]).
    #[cfg(feature = "faults")]
    pub corrupt_blocks: u64,
    /// Test-only fault hook: flip one bit in the destination file after writing each
    /// of this many of the first blocks (simulates storage damage, which only
    /// `--verify written` can see). Only with the `faults` feature.
    #[cfg(feature = "faults")]
    pub corrupt_written: u64,
    /// Compression of blocks on the wire when this side is the source (see
    /// `compress.rs`); a sink takes compressed blocks whatever this says.
    pub compression: Compression,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            block_size: 4 << 20,
            concurrency: 4,
            writers: 4,
            buffer_memory: 64 << 20,
            rate_limit: 0,
            shared_rate: None,
            no_clobber: false,
            fsync: false,
            preserve_special_modes: false,
            specials: false,
            devices: false,
            hard_links: false,
            xattrs: false,
            acls: false,
            served_root: None,
            read_within: Vec::new(),
            stall_timeout: None,
            stop: None,
            max_retries: 3,
            checksum: Algorithm::Blake3,
            verify: Verify::Written,
            schedule: Schedule::Block,
            hash_threads: default_hash_threads(),
            file_digests: false,
            checksum_skip: false,
            compare_only: false,
            manifest: None,
            follow: None,
            filter: None,
            remove_source: false,
            delete: None,
            dry_run: false,
            chosen_entries: false,
            retry_changed: false,
            trust_journal: false,
            #[cfg(feature = "faults")]
            corrupt_blocks: 0,
            #[cfg(feature = "faults")]
            corrupt_written: 0,
            pulled: None,
            compression: Compression::Off,
        }
    }
}

/// Decides which source entries are sent: called with the entry's path below its
/// operand (`/`-separated) and whether it is a directory. A directory refused is not
/// entered.
#[derive(Clone)]
pub struct EntryFilter(pub Arc<FilterFn>);

/// The test of an [`EntryFilter`]: (path below the operand, is a directory) -> send it.
pub type FilterFn = dyn Fn(&[u8], bool) -> bool + Send + Sync;

impl std::fmt::Debug for EntryFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EntryFilter")
    }
}

impl EntryFilter {
    /// Whether the entry at wire path `rel` (operand name first) is sent. The operand
    /// itself always is.
    pub fn accepts(&self, rel: &[u8], is_dir: bool) -> bool {
        match rel.iter().position(|b| *b == b'/') {
            None => true,
            Some(i) => (self.0)(&rel[i + 1..], is_dir),
        }
    }
}

/// How growing files are followed (`hetch cp --follow`, `hetch watch`).
#[derive(Debug, Clone)]
pub struct Follow {
    /// A file that has not changed for this long is complete (whether or not its
    /// writer still has it open: a warning says so when it does).
    pub idle: std::time::Duration,
    /// How often followed files are checked for growth.
    pub poll: std::time::Duration,
    /// How often directory operands are scanned for new entries.
    pub rescan: std::time::Duration,
    /// Bytes of a block that is not full yet are sent as a piece once they have waited
    /// this long, so a slow writer's data need not wait for the block to fill.
    pub flush: std::time::Duration,
    /// `NAME` + this suffix appearing next to `NAME` marks `NAME` complete at once; the
    /// marker itself is sent after `NAME` is finished at the destination.
    pub done_suffix: Option<String>,
    /// Never end (watch); otherwise the session ends once every file is complete and
    /// nothing new has appeared for `idle`.
    pub forever: bool,
}

impl Default for Follow {
    fn default() -> Self {
        Follow {
            idle: std::time::Duration::from_secs(5),
            poll: std::time::Duration::from_millis(50),
            rescan: std::time::Duration::from_secs(1),
            flush: std::time::Duration::from_millis(100),
            done_suffix: Some(".done".into()),
            forever: false,
        }
    }
}

impl Options {
    /// The directories local sources must lie within (see `read_within`); none when
    /// they may lie anywhere.
    pub(crate) fn read_confinement(&self) -> &[std::path::PathBuf] {
        match (&self.read_within[..], &self.served_root) {
            ([], Some(root)) => std::slice::from_ref(root),
            (within, _) => within,
        }
    }

    /// The directory of [`Options::read_confinement`] that `operand` is reached from
    /// (the deepest one its path lies below); `None` when sources are not confined.
    /// An operand below none of them gets the first, which refuses it.
    pub(crate) fn within_of(&self, operand: &std::path::Path) -> Option<&std::path::Path> {
        let dirs = self.read_confinement();
        dirs.iter()
            .filter(|d| operand.starts_with(d))
            .max_by_key(|d| d.components().count())
            .or(dirs.first())
            .map(|d| d.as_path())
    }

    /// Buffer memory actually used: at least enough for a few blocks in each direction.
    pub fn effective_buffer_memory(&self) -> usize {
        self.buffer_memory.max(4 * self.block_size as usize)
    }
}

/// One hashing thread per CPU.
pub fn default_hash_threads() -> usize {
    // Asked once: the standard library reads the process's cgroup files on every call,
    // and every session's options start from the default.
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}
