//! The frames that travel on hetch connections, as plain data.
//!
//! Every connection starts with the 8-byte [`crate::PREAMBLE`] from each side, then frames.
//! A frame on the wire is `len: u32 LE | kind: u8 | body (len bytes)`. Integers in bodies
//! are little-endian; a byte string is `u32 LE length | bytes`; a list is `u32 LE count |
//! items`; an `Option` is a `u8` 0/1 tag then the value. Paths and link targets are raw
//! bytes (Unix file names need not be UTF-8), always relative and `/`-separated.

/// Bytes in a session identifier (random; it names a session, the proof in a data
/// stream's hello is what authenticates the stream).
pub const SESSION_ID_LEN: usize = 16;
/// Bytes in a data stream's proof of membership in a session (see [`Hello::Data`]).
pub const STREAM_PROOF_LEN: usize = 32;
/// Bytes in a block digest (BLAKE3 output or chaining value).
pub const DIGEST_LEN: usize = 32;

/// A random identifier naming one transfer session on a server.
pub type SessionId = [u8; SESSION_ID_LEN];
/// A keyed MAC proving that a data stream was opened by the client of the session's
/// control connection (see [`Hello::Data`]).
pub type StreamProof = [u8; STREAM_PROOF_LEN];
/// The digest of one block, computed by the source while it read the block.
pub type BlockDigest = [u8; DIGEST_LEN];

/// One protocol message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Client -> server, first frame on every connection.
    Hello(Hello),
    /// Server -> client answer to a [`Hello::Control`].
    Welcome(Welcome),
    /// Either direction: a fatal error; the sender closes the connection after it.
    Error(ErrorFrame),
    /// Source -> sink on the control connection: a batch of entries to transfer.
    Entries(Vec<Entry>),
    /// Sink -> source on the control connection: what to send for a batch of entries.
    Plan(Vec<PlanItem>),
    /// Source -> sink on a data stream: one block of one file.
    Data(DataHeader, Vec<u8>),
    /// Sink -> source: a block arrived damaged; send it again.
    Resend {
        /// Entry id of the file.
        file: u64,
        /// Block index within the file.
        block: u64,
    },
    /// Sink -> source: a file is finished at the destination (or failed there).
    FileDone {
        /// Entry id of the file.
        file: u64,
        /// `None` when the file is complete and checked; otherwise why it failed.
        error: Option<String>,
        /// The finished file's whole-file digest and manifest path, when the session
        /// asked for them ([`IntegrityRequest::file_digests`]).
        digest: Option<ManifestEntry>,
    },
    /// Source -> sink: a file could not be read at the source; the sink drops it.
    FileError {
        /// Entry id of the file.
        file: u64,
        /// What went wrong, naming the file.
        message: String,
    },
    /// Source -> sink: no more entries will follow.
    EndOfEntries,
    /// Sink -> source: everything is finished and durable; the summary of the sink's side.
    Finished(Summary),
    /// Sink -> source, mirroring sessions only ([`SessionRequest::delete`]): one entry
    /// the deletion phase removed (or, in a dry run, would copy or remove). Sent before
    /// [`Frame::Finished`].
    Change(Change),
    /// On a data stream: the sender will send no more frames on it.
    StreamEnd,
    /// Either way on the control stream: the sender is alive. Sent when nothing else
    /// has been sent for a while, so that a quiet but healthy session is told apart
    /// from a peer that stopped answering (see the stall timeout); readers skip it.
    KeepAlive,
    /// Source -> sink: a growing file is complete at `size` bytes. The sink answers
    /// with a [`Frame::Plan`] item for the file naming the blocks it still needs (the
    /// tail, and any block in `rewritten`).
    Seal(Seal),
    /// Source -> sink: drop this file without reporting a failure (it was truncated
    /// or replaced at the source and is announced again under a new id). The sink
    /// answers with a `FileDone` without error.
    Abandon {
        /// Entry id of the file.
        file: u64,
    },
    /// Sink -> source: bytes `0..offset` of a growing file are written, checked and
    /// durable at the destination.
    Durable {
        /// Entry id of the file.
        file: u64,
        /// End of the durable prefix.
        offset: u64,
    },
    /// Source -> sink on the control connection: bytes of a growing file's block that
    /// is not full yet, sent so that they need not wait for the block to fill.
    Piece(Piece),
    /// Source -> sink: pieces cover block `block` of a growing file completely, and
    /// this is its digest; the sink checks what it holds instead of taking the block
    /// again, and answers `Resend` when that fails.
    Cover {
        /// Entry id of the file.
        file: u64,
        /// Block index.
        block: u64,
        /// The block's digest.
        digest: BlockDigest,
    },
    /// Server -> client of an [`Op::Relay`] session, about once a second while the
    /// onward push runs: how far it has got.
    Progress(RelayProgress),
    /// Sink -> source: block `block` of `file` arrived damaged, and this is the sink's
    /// copy cut into patches of `patch_len` bytes (the last one shorter), each as its
    /// BLAKE3 hash. The source answers with the patches whose bytes differ from its
    /// own (data frames with a [`DataHeader::patch`]), so that a block most of whose
    /// sends are damaged somewhere is still repaired, a patch at a time; or with the
    /// whole block when none differs.
    Repair {
        /// Entry id of the file.
        file: u64,
        /// Block index within the file.
        block: u64,
        /// Which round of the block's repair this is (from 1): the answer's patches
        /// carry it back ([`Patch::round`]), so that a patch of an earlier round (sent
        /// again after a data stream was lost) is told from one of this round.
        round: u32,
        /// Bytes per patch: a power of two, [`MIN_PATCH`] or more.
        patch_len: u32,
        /// BLAKE3 hash of each patch of the sink's copy, in order.
        digests: Vec<BlockDigest>,
    },
    /// Sink -> source: data stream `index` broke (a damaged TLS record, a reset)
    /// after `frames` whole data frames arrived on its `generation`-th connection (0
    /// the first). The source sends the frames after those again, on the stream's
    /// next connection (`generation + 1`, see [`Hello::Data`]), which the client of
    /// the session opens; the session goes on.
    StreamLost {
        /// The stream's index.
        index: u16,
        /// Its connection that broke.
        generation: u32,
        /// Data frames that arrived whole on that connection.
        frames: u64,
        /// The next frame, a block sent as it is, arrived in part and the sink keeps
        /// what came as a damaged copy, whose repair it asks for ([`Frame::Repair`]):
        /// the source does not send that block again whole.
        torn: bool,
    },
}

/// Smallest patch a block is cut into for its repair ([`Frame::Repair`]).
pub const MIN_PATCH: u32 = 4 << 10;
/// Most patches one repair may name: a block of [`crate::MAX_BLOCK`] bytes in patches
/// of [`MIN_PATCH`].
pub const MAX_PATCHES: usize = crate::MAX_BLOCK / MIN_PATCH as usize;

/// Which part of a block a data frame carries when it answers a [`Frame::Repair`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patch {
    /// Offset of the patch's first byte within the block (a multiple of
    /// [`MIN_PATCH`]).
    pub at: u32,
    /// Patches the source sends in answer to this repair, this one among them: the
    /// sink knows the answer is complete when it has seen as many different ones.
    pub count: u32,
    /// The repair round this answers ([`Frame::Repair`]'s `round`).
    pub round: u32,
}

/// The end of a growing file (see [`Frame::Seal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seal {
    /// Entry id of the file.
    pub file: u64,
    /// Final size in bytes.
    pub size: u64,
    /// Final modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Final modification time, nanoseconds part.
    pub mtime_nsec: u32,
    /// Whole-file digest of the final contents as the source read them last.
    pub digest: Vec<u8>,
    /// Blocks sent earlier whose contents changed at the source afterwards: the sink
    /// must take them again.
    pub rewritten: Vec<u64>,
    /// Digests (for the final size) of the blocks never sent whole, from the first one
    /// on: a block that pieces already cover completely at the sink is checked against
    /// its digest there instead of being sent again.
    pub tail: Vec<(u64, BlockDigest)>,
}

/// Bytes of a block that is not full yet (see [`Frame::Piece`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Entry id of the file.
    pub file: u64,
    /// Offset of the first byte in the file; the piece stays within one block.
    pub offset: u64,
    /// Digest of the bytes (the session's algorithm over just these bytes).
    pub digest: BlockDigest,
    /// The bytes.
    pub data: Vec<u8>,
}

/// The first frame of every connection: what the connection is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// The control connection of a new session. Only ever sent inside TLS: the token
    /// is the client's long-term secret.
    Control {
        /// The client's authentication token.
        token: Vec<u8>,
        /// What the session is for.
        request: SessionRequest,
    },
    /// A data stream joining an existing session. It carries no token: `proof` is a
    /// MAC, keyed with a secret both ends derived from the TLS session of the control
    /// connection, over `session` and `index`, so it is worthless for any other
    /// session even when the stream itself is plain TCP.
    Data {
        /// The session announced in the server's [`Welcome`].
        session: SessionId,
        /// Index of this stream, `0..streams`.
        index: u16,
        /// Which connection of the stream this is: 0 when the session starts, one
        /// more each time the stream is joined again after it broke
        /// ([`Frame::StreamLost`]).
        generation: u32,
        /// Proof that the stream belongs to the session.
        proof: StreamProof,
    },
}

/// What a client asks of a server when it opens a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRequest {
    /// Push (client is the source) or pull (server is the source).
    pub op: Op,
    /// Number of data streams the client will open.
    pub streams: u16,
    /// Whether the data streams use TLS (the control connection always does).
    pub encrypt_data: bool,
    /// Block size in bytes (a power of two, at least 1 KiB).
    pub block_size: u32,
    /// Congestion control algorithm for the server's data sockets, if the client chose one.
    pub congestion: Option<String>,
    /// SO_SNDBUF for the server's data sockets (0 = kernel autotuning).
    pub send_buffer: u32,
    /// SO_RCVBUF for the server's data sockets (0 = kernel autotuning).
    pub recv_buffer: u32,
    /// Cap on the session's data rate in bytes per second (0 = none).
    pub rate_limit: u64,
    /// Refuse to replace existing files that differ.
    pub no_clobber: bool,
    /// fdatasync each file before it is renamed into place.
    pub fsync: bool,
    /// How blocks are hashed and checked.
    pub integrity: IntegrityRequest,
    /// Push: keep setuid, setgid and sticky bits on what the server creates (it
    /// strips them unless it was itself started with `--preserve-special-modes`).
    pub preserve_special_modes: bool,
    /// FIFOs and sockets are recreated (`--specials`); otherwise skipped with a notice.
    pub specials: bool,
    /// Devices are recreated (`--devices`; a server only when it was itself started
    /// with `--devices`, and only as root); otherwise skipped with a notice.
    pub devices: bool,
    /// Names of one file are kept as hard links (`--hard-links`): the source sends
    /// the second and later names as [`EntryKind::HardLink`].
    pub hard_links: bool,
    /// User extended attributes (`user.*`) are kept (`--xattrs`): entries carry them
    /// and the sink brings the destination's in step.
    pub xattrs: bool,
    /// POSIX ACLs are kept (`--acls`), through their extended attributes.
    pub acls: bool,
    /// Which entries the source sends (and a mirroring sink protects).
    pub filter: FilterRequest,
    /// Mirror: remove what the source lacks, after everything else succeeded.
    pub delete: Option<DeleteRequest>,
    /// Dry run: the sink reports what it would copy, replace and (mirroring) delete,
    /// and changes nothing.
    pub dry_run: bool,
    /// Compression of data blocks by the source (the client in a push, the server in a
    /// pull).
    pub compression: Compression,
    /// Keep the connections for another operation once this one ends: the session's
    /// streams then carry each operation in chunks that end without closing them, and
    /// the next operation starts with a new hello on the control connection (see
    /// `hetch_session`'s `reuse` module). Only pushes and pulls can be kept.
    pub reuse: bool,
    /// The source sends chosen entries, not whole directories: the sink leaves what
    /// else the directories hold alone (removes no leftovers there).
    pub chosen_entries: bool,
}

/// The integrity settings of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntegrityRequest {
    /// Name of the checksum algorithm for block and file digests (`blake3`, `md5`, ...).
    pub checksum: String,
    /// What the sink checks.
    pub verify: Verify,
    /// When the sink checks.
    pub schedule: Schedule,
    /// Threads that hash on each side (0 = the server's default).
    pub hash_threads: u16,
    /// The sink reports every file's whole-file digest in its `FileDone`.
    pub file_digests: bool,
    /// Entries carry whole-file digests; an existing destination file is skipped only
    /// when its digest matches.
    pub checksum_skip: bool,
    /// Compare the trees only: nothing is written; differences come back as file errors.
    pub compare_only: bool,
    /// A source file that changes while it is read is sent again from a fresh listing
    /// (a few times) instead of failing: for pulls, where the server is the source.
    pub retry_changed: bool,
    /// The sink takes journaled blocks as done without reading them back from the part
    /// file on resume: for pushes, where the server is the sink.
    pub trust_journal: bool,
}

/// What the sink checks before a block counts as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Read the block back from the destination storage after writing it and hash that.
    Written,
    /// Hash the received bytes before writing them.
    Received,
    /// Check nothing (the source's digests are still recorded).
    None,
}

/// When the sink runs its checks (for [`Verify::Written`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// Each block as soon as it is written.
    Block,
    /// Each file once all its blocks are written.
    File,
    /// Every file once all files are written.
    Sequential,
}

impl std::str::FromStr for Verify {
    type Err = String;

    /// `written`, `received` or `none`, as `--verify` takes it.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "written" => Ok(Verify::Written),
            "received" => Ok(Verify::Received),
            "none" => Ok(Verify::None),
            _ => Err(format!("'{s}': choose written, received or none")),
        }
    }
}

impl std::str::FromStr for Schedule {
    type Err = String;

    /// `block`, `file` or `sequential`, as `--verify-schedule` takes it.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "block" => Ok(Schedule::Block),
            "file" => Ok(Schedule::File),
            "sequential" => Ok(Schedule::Sequential),
            _ => Err(format!("'{s}': choose block, file or sequential")),
        }
    }
}

/// One change a mirroring session made (or would make) at the destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// What happened to the entry.
    pub action: ChangeAction,
    /// Path relative to the destination directory, `/`-separated (as in a manifest).
    pub path: Vec<u8>,
    /// Bytes of the file to be copied (a dry run's copies and replacements; 0 for
    /// directories, links and deletions).
    pub size: u64,
}

/// What a [`Change`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeAction {
    /// The entry was removed: the source does not have it.
    Deleted,
    /// Dry run: the entry would be removed.
    WouldDelete,
    /// Dry run: the entry would be copied (the destination has nothing there).
    WouldCopy,
    /// Dry run: the entry would replace a different one (another size or mtime,
    /// another type, another link target).
    WouldReplace,
    /// Dry run: the file's contents are current, its mode or mtime would be set.
    WouldUpdate,
}

/// Most `--include`/`--exclude` patterns a session request may carry, in total.
pub const MAX_FILTER_PATTERNS: usize = 256;
/// Longest pattern a session request may carry, in bytes.
pub const MAX_FILTER_PATTERN_LEN: usize = 1024;

/// Which source entries a session sends (`--include`/`--exclude` globs, applied by the
/// source) and, when it mirrors, which destination entries its deletion phase leaves
/// alone. Empty lists: everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterRequest {
    /// A file is sent only if it matches one of these (when there are any).
    pub include: Vec<String>,
    /// Nothing that matches these is sent (a matching directory is not entered).
    pub exclude: Vec<String>,
}

/// The deletion phase of a mirroring session (`hetch sync`, `cp --delete`): after
/// every file succeeded, the sink removes the entries below the copied trees that the
/// source did not announce.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeleteRequest {
    /// Remove nothing if more than this many entries would be removed.
    pub max_delete: Option<u64>,
    /// Remove excluded entries too (otherwise they are protected).
    pub delete_excluded: bool,
}

/// A finished file's whole-file digest, for a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestEntry {
    /// Digest bytes (length depends on the algorithm).
    pub digest: Vec<u8>,
    /// Path relative to the destination directory, `/`-separated.
    pub path: Vec<u8>,
}

/// Direction of a session, seen from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Client sends; the server writes under `dest` (relative to its root).
    Push {
        /// Destination path, relative to the server's root.
        dest: Vec<u8>,
        /// How many source operands the client has (cp semantics depend on it).
        sources: u32,
    },
    /// Server sends the given paths (relative to its root); the client writes.
    Pull {
        /// Source paths, relative to the server's root.
        sources: Vec<Vec<u8>>,
    },
    /// Third-party copy: the server sends the given paths (relative to its root) to
    /// another server, `to`, as a push from itself; the client only watches. No data
    /// streams join this session: the request's streams and options are those of the
    /// onward push, and the client hears [`Frame::Progress`], then the push's
    /// per-file errors ([`Frame::FileError`]) and its [`Frame::Finished`] summary.
    Relay {
        /// Source paths, relative to this server's root.
        sources: Vec<Vec<u8>>,
        /// Where they go (boxed: rarely sent, and larger than the other ops).
        to: Box<RelayTarget>,
    },
    /// One node's share of a large file that several nodes move in block ranges (a
    /// transfer service's workers, each reading the source where it is): the server
    /// writes into the one shared part file at the destination. No data streams join
    /// this session: for [`RangeStep::Blocks`] the server answers with a
    /// [`Frame::Plan`] naming the blocks it still needs, the client sends them as
    /// [`Frame::Data`] on the control connection, then [`Frame::EndOfEntries`], and the
    /// server answers [`Frame::Finished`] once they are durable and recorded. For
    /// [`RangeStep::Commit`] it answers [`Frame::Finished`] once the file has its
    /// final name. Boxed: rarely sent, and larger than the other ops.
    Range(Box<RangeRequest>),
}

/// The file and the step of an [`Op::Range`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRequest {
    /// The destination directory, relative to the server's root: the file goes *into*
    /// it, where a push to `dest/` would place it.
    pub dest: Vec<u8>,
    /// How many source operands the transfer has.
    pub sources: u32,
    /// The first source operand's name (a single component), which a push would send
    /// first: the destination is resolved from it as for a push.
    pub top: Vec<u8>,
    /// The file's path below the destination, as an entry's path on the wire.
    pub path: Vec<u8>,
    /// The source file's size.
    pub size: u64,
    /// Its permission bits.
    pub mode: u32,
    /// Its modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Its modification time, nanoseconds part.
    pub mtime_nsec: u32,
    /// What this session does with the file.
    pub step: RangeStep,
}

/// What an [`Op::Range`] session does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeStep {
    /// Write blocks `first..end` (of the session's block size).
    Blocks {
        /// First block.
        first: u64,
        /// One past the last block.
        end: u64,
    },
    /// Every range is recorded: check the whole file from their records, give it its
    /// final name, then give its parent directory `parent` (mode, mtime seconds,
    /// nanoseconds) again, which the rename changed (`None` when the file is a source
    /// operand itself, whose parent is not a copy).
    Commit {
        /// The parent directory's mode and mtime at the source.
        parent: Option<(u32, i64, u32)>,
    },
}

/// The destination server of an [`Op::Relay`]: everything the relaying server needs to
/// open a push to it as a client would, with the key it must present pinned.
#[derive(Clone, PartialEq, Eq)]
pub struct RelayTarget {
    /// `host:port` of the destination server (at most [`MAX_RELAY_HOST`] bytes).
    pub host: String,
    /// SHA-256 of the destination server's certificate: the relaying server refuses
    /// any other key (it never learns a key on first use for a client).
    pub fingerprint: [u8; 32],
    /// The destination server's token, for the relaying server to present there. It
    /// travels only inside this TLS connection and is never logged.
    pub token: Vec<u8>,
    /// Destination path, relative to the destination server's root.
    pub dest: Vec<u8>,
}

/// Longest `host:port` a relay may name (a DNS name is at most 253 bytes).
pub const MAX_RELAY_HOST: usize = 300;

// The token stays out of logs and error messages that print the request.
impl std::fmt::Debug for RelayTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayTarget")
            .field("host", &self.host)
            .field("fingerprint", &self.fingerprint)
            .field("token", &"(hidden)")
            .field("dest", &self.dest)
            .finish()
    }
}

/// How far a relayed push has got (see [`Frame::Progress`]): the relaying server's
/// counters as a source, like GridFTP's performance markers in a third-party transfer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayProgress {
    /// Files finished.
    pub files: u64,
    /// Files announced so far.
    pub total_files: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Bytes of all files announced so far.
    pub total_bytes: u64,
    /// Files skipped because they were already at the destination.
    pub skipped: u64,
    /// Bytes in skipped files (or skipped blocks of resumed files).
    pub skipped_bytes: u64,
    /// Files that failed.
    pub failed: u64,
    /// Blocks sent again.
    pub retried_blocks: u64,
}

/// The server's answer to a [`Hello::Control`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The new session; data streams present it in their [`Hello::Data`].
    pub session: SessionId,
    /// Server software name and version, for logs.
    pub server: String,
}

/// A fatal error reported to the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorFrame {
    /// Machine-readable class of the error.
    pub code: ErrorCode,
    /// One line for humans, naming the file or host concerned.
    pub message: String,
}

/// Classes of fatal errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ErrorCode {
    /// The token was wrong or missing.
    Auth = 1,
    /// The peer speaks another protocol version.
    Version = 2,
    /// A path was refused (escapes the root, does not exist, wrong type).
    Path = 3,
    /// The peer broke the protocol.
    Protocol = 4,
    /// An I/O error at the peer.
    Io = 5,
    /// No space left on the destination device.
    NoSpace = 6,
    /// Anything else.
    Other = 7,
    /// The peer is going away (a server shutting down), or what the session asks for
    /// is another's for now (a split file whose range writer still has it open):
    /// nothing is wrong with the session, and a new one later goes through.
    Unavailable = 8,
    /// Bytes of the session were altered on the way (a plain data stream's frame
    /// failed its MAC or did not decode): the link damaged them, and a new session
    /// gets past it.
    Damaged = 9,
}

/// One item of a tree being transferred.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Identifier chosen by the source, unique within the session.
    pub id: u64,
    /// Path relative to the transfer's top, `/`-separated; first component is the
    /// source operand's own name.
    pub path: Vec<u8>,
    /// What it is.
    pub kind: EntryKind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds part.
    pub mtime_nsec: u32,
    /// Extended attributes of a file or directory, sorted by name: its user
    /// attributes when the session keeps them (`xattrs`), its ACLs when it keeps those
    /// (`acls`); empty otherwise, and for other kinds.
    pub xattrs: Vec<crate::Xattr>,
}

/// Kinds of entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file of this many bytes.
    File {
        /// Size in bytes (for a growing file: its size when it was announced).
        size: u64,
        /// Whole-file digest, sent only for checksum-skip and compare-only sessions.
        digest: Option<Vec<u8>>,
        /// The file is still being written: its blocks arrive as they fill, and a
        /// [`Frame::Seal`] gives its final size.
        growing: bool,
    },
    /// A directory (its contents are separate entries).
    Dir,
    /// A symbolic link, kept as a link.
    Symlink {
        /// The link's target, as stored.
        target: Vec<u8>,
    },
    /// A FIFO, socket or device, recreated by a sink asked to (`--specials`,
    /// `--devices`); it carries no data.
    Special(SpecialKind),
    /// Another name of a file announced earlier in the same session (`--hard-links`):
    /// the sink links it to that file once the file is in place; it carries no data.
    HardLink {
        /// The wire path of the earlier entry.
        target: Vec<u8>,
    },
}

/// What a special file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialKind {
    /// A named pipe.
    Fifo,
    /// A Unix domain socket (recreated as a name only: nothing listens on it).
    Socket,
    /// A character device with this device number.
    CharDevice(u64),
    /// A block device with this device number.
    BlockDevice(u64),
}

impl SpecialKind {
    /// A device (made only where asked for with `--devices`, and only by root).
    pub fn is_device(self) -> bool {
        matches!(
            self,
            SpecialKind::CharDevice(_) | SpecialKind::BlockDevice(_)
        )
    }
}

/// The sink's decision for one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanItem {
    /// Entry id.
    pub id: u64,
    /// What the source must send.
    pub action: PlanAction,
}

/// What the source must send for one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanAction {
    /// Nothing: the entry is already there, was created from its metadata, or failed.
    Skip,
    /// These half-open ranges of block indexes (the rest is already verified there).
    Send(Vec<(u64, u64)>),
}

/// Fixed part of a [`Frame::Data`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// Entry id of the file.
    pub file: u64,
    /// Block index within the file.
    pub block: u64,
    /// Digest of the block's bytes as read at the source.
    pub digest: BlockDigest,
    /// When set, the block is all zeros and no payload follows; `raw_len` gives its length.
    pub zero: bool,
    /// When set, the payload is one zstd frame holding the block's `raw_len` bytes (the
    /// digest is over those bytes, not the payload). Never with `zero`.
    pub compressed: bool,
    /// The block's length when the payload does not carry it as-is: of an all-zero block,
    /// or of a compressed block once decompressed (0 otherwise).
    pub raw_len: u32,
    /// When set, the source file has holes inside this block: the sink may leave its
    /// all-zero pages unwritten (holes too) instead of writing them. The bytes, the
    /// digest and the payload are those of the whole block as ever. Never with `zero`
    /// (a block all hole goes as a zero block).
    pub sparse: bool,
    /// When set, the payload is only this patch of the block, sent in answer to a
    /// [`Frame::Repair`], and `digest` is the BLAKE3 hash of the patch's bytes. Never
    /// with `zero`, `compressed` or `sparse`.
    pub patch: Option<Patch>,
}

/// Whether and how the source compresses blocks on the wire (see [`DataHeader`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Blocks go as they are.
    #[default]
    Off,
    /// Every block that shrinks enough is sent compressed with zstd at this level
    /// ([`MIN_ZSTD_LEVEL`]..=[`MAX_ZSTD_LEVEL`]).
    Zstd(u8),
    /// The source compresses (zstd at [`AUTO_ZSTD_LEVEL`]) only while the link, not its
    /// CPU, limits the transfer.
    Auto,
}

impl std::str::FromStr for Compression {
    type Err = String;

    /// `none` (or `off`), `auto`, `zstd` (level 3) or `zstd:LEVEL`, as `--compress`
    /// takes it.
    fn from_str(s: &str) -> Result<Self, String> {
        let level = |l: &str| match l.parse::<u8>() {
            Ok(n) if (MIN_ZSTD_LEVEL..=MAX_ZSTD_LEVEL).contains(&n) => Ok(Compression::Zstd(n)),
            _ => Err(format!(
                "'{s}': the zstd level must be {MIN_ZSTD_LEVEL} to {MAX_ZSTD_LEVEL}"
            )),
        };
        match s {
            "none" | "off" => Ok(Compression::Off),
            "auto" => Ok(Compression::Auto),
            "zstd" => Ok(Compression::Zstd(3)),
            _ => match s.strip_prefix("zstd:") {
                Some(l) => level(l),
                None => Err(format!("'{s}': choose zstd, zstd:LEVEL, auto or none")),
            },
        }
    }
}

/// Lowest zstd level a session may ask for.
pub const MIN_ZSTD_LEVEL: u8 = 1;
/// Highest zstd level a session may ask for: above it zstd's "ultra" levels need
/// hundreds of MiB per context, which a peer must not be able to make a server spend.
pub const MAX_ZSTD_LEVEL: u8 = 19;
/// The level `auto` compresses with: zstd's fastest regular level, several hundred MB/s
/// per core, so that it helps on any link slower than the CPU.
pub const AUTO_ZSTD_LEVEL: u8 = 1;

/// Totals at the end of a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Files written.
    pub files: u64,
    /// Payload bytes written.
    pub bytes: u64,
    /// Files skipped because they were already there.
    pub skipped: u64,
    /// Blocks that had to be sent again.
    pub retried_blocks: u64,
    /// Files that failed.
    pub failed: u64,
    /// Blocks of resumed part files read back and found intact (journaled by an
    /// earlier run; not sent again).
    pub reverified: u64,
    /// Of the blocks sent again, those whose received bytes failed their check on
    /// arrival (`--verify received`: damaged on the way).
    pub damaged_on_arrival: u64,
    /// Of the blocks sent again, those that failed their check when read back after
    /// writing (`--verify written`: damaged on the way or in the store).
    pub failed_read_back: u64,
    /// Blocks made whole from patches ([`Frame::Repair`]) instead of sent whole.
    pub repaired_blocks: u64,
    /// Bytes of the patches received for them.
    pub patch_bytes: u64,
    /// Data stream connections lost and joined again ([`Frame::StreamLost`]).
    pub streams_rejoined: u64,
}
