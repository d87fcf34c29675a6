//! proptest strategies producing arbitrary *valid* frames.

use crate::*;
use proptest::collection::vec;
use proptest::prelude::*;

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..max)
}

fn string() -> impl Strategy<Value = String> {
    // Any Unicode, including multi-byte characters and controls.
    any::<String>()
}

/// One path component: no NUL, no '/', not "." or "..".
fn component() -> impl Strategy<Value = Vec<u8>> {
    vec(
        any::<u8>().prop_filter("no NUL or '/'", |b| *b != 0 && *b != b'/'),
        1..8,
    )
    .prop_filter("not . or ..", |c| c != b"." && c != b"..")
}

/// A path accepted by `validate_rel_path`.
pub(super) fn rel_path() -> impl Strategy<Value = Vec<u8>> {
    vec(component(), 1..5).prop_map(|cs| cs.join(&b'/'))
}

/// A pull source as a user may type it: a path, maybe with a trailing slash, or the root.
fn operand() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => rel_path(),
        1 => rel_path().prop_map(|mut p| {
            p.push(b'/');
            p
        }),
        1 => Just(Vec::new()),
        1 => Just(b".".to_vec()),
    ]
}

fn link_target() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>().prop_filter("no NUL", |b| *b != 0), 1..24)
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    prop_oneof![
        Just(ErrorCode::Auth),
        Just(ErrorCode::Unavailable),
        Just(ErrorCode::Damaged),
        Just(ErrorCode::Version),
        Just(ErrorCode::Path),
        Just(ErrorCode::Protocol),
        Just(ErrorCode::Io),
        Just(ErrorCode::NoSpace),
        Just(ErrorCode::Other),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (bytes(16), any::<u32>()).prop_map(|(dest, sources)| Op::Push { dest, sources }),
        vec(operand(), 0..4).prop_map(|sources| Op::Pull { sources }),
        (vec(operand(), 0..4), relay_target()).prop_map(|(sources, to)| Op::Relay {
            sources,
            to: Box::new(to)
        }),
        range_request().prop_map(|r| Op::Range(Box::new(r))),
    ]
}

fn range_request() -> impl Strategy<Value = RangeRequest> {
    let step = prop_oneof![
        (0u64..1 << 40, 1u64..1 << 20).prop_map(|(first, n)| RangeStep::Blocks {
            first,
            end: first + n
        }),
        proptest::option::of(any::<(u32, i64, u32)>())
            .prop_map(|parent| RangeStep::Commit { parent }),
    ];
    (
        bytes(16),
        any::<u32>(),
        "[a-z0-9]{1,12}",
        rel_path(),
        any::<(u64, u32, i64, u32)>(),
        step,
    )
        .prop_map(|(dest, sources, top, path, m, step)| RangeRequest {
            dest,
            sources,
            top: top.into_bytes(),
            path,
            size: m.0,
            mode: m.1,
            mtime_sec: m.2,
            mtime_nsec: m.3,
            step,
        })
}

fn relay_target() -> impl Strategy<Value = RelayTarget> {
    (
        "[a-z0-9.-]{1,40}:[0-9]{1,5}",
        any::<[u8; 32]>(),
        bytes(64),
        bytes(16),
    )
        .prop_map(|(host, fingerprint, token, dest)| RelayTarget {
            host,
            fingerprint,
            token,
            dest,
        })
}

pub(super) fn relay_progress() -> impl Strategy<Value = RelayProgress> {
    any::<[u64; 8]>().prop_map(|v| RelayProgress {
        files: v[0],
        total_files: v[1],
        bytes: v[2],
        total_bytes: v[3],
        skipped: v[4],
        skipped_bytes: v[5],
        failed: v[6],
        retried_blocks: v[7],
    })
}

pub(super) fn session_request() -> impl Strategy<Value = SessionRequest> {
    (
        op(),
        any::<u16>(),
        any::<bool>(),
        (10u32..=28).prop_map(|shift| 1 << shift),
        proptest::option::of(string()),
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        any::<bool>(),
        any::<bool>(),
        integrity(),
        (
            any::<bool>(),
            filter(),
            proptest::option::of(delete()),
            compression(),
            any::<(bool, bool, bool)>(),
            any::<(bool, bool, bool, bool, bool)>(),
        ),
    )
        .prop_map(
            |(
                op,
                streams,
                encrypt_data,
                block_size,
                congestion,
                send_buffer,
                recv_buffer,
                rate_limit,
                no_clobber,
                fsync,
                integrity,
                (
                    preserve_special_modes,
                    filter,
                    delete,
                    compression,
                    (dry_run, reuse, chosen_entries),
                    (specials, devices, hard_links, xattrs, acls),
                ),
            )| SessionRequest {
                op,
                streams,
                encrypt_data,
                block_size,
                congestion,
                send_buffer,
                recv_buffer,
                rate_limit,
                no_clobber,
                fsync,
                integrity,
                preserve_special_modes,
                specials,
                devices,
                hard_links,
                xattrs,
                acls,
                filter,
                delete,
                compression,
                dry_run,
                reuse,
                chosen_entries,
            },
        )
}

fn compression() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::Off),
        Just(Compression::Auto),
        (MIN_ZSTD_LEVEL..=MAX_ZSTD_LEVEL).prop_map(Compression::Zstd),
    ]
}

fn filter() -> impl Strategy<Value = FilterRequest> {
    let pattern = "[a-z*?/]{1,12}";
    (vec(pattern, 0..3), vec(pattern, 0..3))
        .prop_map(|(include, exclude)| FilterRequest { include, exclude })
}

fn delete() -> impl Strategy<Value = DeleteRequest> {
    (proptest::option::of(any::<u64>()), any::<bool>()).prop_map(|(max_delete, delete_excluded)| {
        DeleteRequest {
            max_delete,
            delete_excluded,
        }
    })
}

pub(super) fn change() -> impl Strategy<Value = Change> {
    let action = prop_oneof![
        Just(ChangeAction::Deleted),
        Just(ChangeAction::WouldDelete),
        Just(ChangeAction::WouldCopy),
        Just(ChangeAction::WouldReplace),
        Just(ChangeAction::WouldUpdate),
    ];
    let path = "[a-z]{1,8}(/[a-z]{1,8}){0,3}";
    (action, path, any::<u64>()).prop_map(|(action, path, size)| Change {
        action,
        path: path.into_bytes(),
        size,
    })
}

fn integrity() -> impl Strategy<Value = IntegrityRequest> {
    let verify = prop_oneof![
        Just(Verify::Written),
        Just(Verify::Received),
        Just(Verify::None)
    ];
    let schedule = prop_oneof![
        Just(Schedule::Block),
        Just(Schedule::File),
        Just(Schedule::Sequential)
    ];
    (
        "[a-z0-9]{1,32}",
        verify,
        schedule,
        any::<u16>(),
        any::<(bool, bool, bool)>(),
        any::<(bool, bool)>(),
    )
        .prop_map(
            |(
                checksum,
                verify,
                schedule,
                hash_threads,
                (file_digests, checksum_skip, compare_only),
                (retry_changed, trust_journal),
            )| {
                IntegrityRequest {
                    checksum,
                    verify,
                    schedule,
                    hash_threads,
                    file_digests,
                    checksum_skip,
                    compare_only,
                    retry_changed,
                    trust_journal,
                }
            },
        )
}

fn file_digest() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 1..=64)
}

fn manifest_entry() -> impl Strategy<Value = ManifestEntry> {
    (file_digest(), rel_path()).prop_map(|(digest, path)| ManifestEntry { digest, path })
}

pub(super) fn hello() -> impl Strategy<Value = Hello> {
    prop_oneof![
        (bytes(40), session_request())
            .prop_map(|(token, request)| Hello::Control { token, request }),
        (
            any::<SessionId>(),
            any::<u16>(),
            any::<u32>(),
            any::<StreamProof>()
        )
            .prop_map(|(session, index, generation, proof)| Hello::Data {
                session,
                index,
                generation,
                proof
            }),
    ]
}

pub(super) fn welcome() -> impl Strategy<Value = Welcome> {
    (any::<SessionId>(), string()).prop_map(|(session, server)| Welcome { session, server })
}

pub(super) fn error_frame() -> impl Strategy<Value = ErrorFrame> {
    (error_code(), string()).prop_map(|(code, message)| ErrorFrame { code, message })
}

fn entry() -> impl Strategy<Value = Entry> {
    let kind = prop_oneof![
        (
            any::<u64>(),
            proptest::option::of(file_digest()),
            any::<bool>()
        )
            .prop_map(|(size, digest, growing)| EntryKind::File {
                size,
                digest,
                growing
            }),
        Just(EntryKind::Dir),
        link_target().prop_map(|target| EntryKind::Symlink { target }),
        prop_oneof![
            Just(SpecialKind::Fifo),
            Just(SpecialKind::Socket),
            any::<u64>().prop_map(SpecialKind::CharDevice),
            any::<u64>().prop_map(SpecialKind::BlockDevice),
        ]
        .prop_map(EntryKind::Special),
        rel_path().prop_map(|target| EntryKind::HardLink { target }),
    ];
    (
        any::<u64>(),
        rel_path(),
        kind,
        0u32..=0o7777,
        any::<i64>(),
        0u32..1_000_000_000,
        xattrs(),
    )
        .prop_map(
            |(id, path, kind, mode, mtime_sec, mtime_nsec, xattrs)| Entry {
                id,
                path,
                kind,
                mode,
                mtime_sec,
                mtime_nsec,
                xattrs,
            },
        )
}

/// A set of attributes as the source sends it: of the classes that travel, sorted by
/// name, each name once.
fn xattrs() -> impl Strategy<Value = Vec<Xattr>> {
    let name = prop_oneof![
        "user\\.[a-z0-9._-]{1,40}".prop_map(String::into_bytes),
        Just(ACL_ACCESS.to_vec()),
        Just(ACL_DEFAULT.to_vec()),
    ]
    .prop_filter("hetch's own", |n| !n.starts_with(b"user.hetch."));
    let value = proptest::collection::vec(any::<u8>(), 0..64);
    proptest::collection::btree_map(name, value, 0..4).prop_map(|m| {
        m.into_iter()
            .map(|(name, value)| Xattr { name, value })
            .collect()
    })
}

pub(super) fn entries() -> impl Strategy<Value = Vec<Entry>> {
    vec(entry(), 0..6)
}

fn range() -> impl Strategy<Value = (u64, u64)> {
    (any::<u64>(), any::<u64>()).prop_map(|(a, b)| (a.min(b), a.max(b)))
}

pub(super) fn plan() -> impl Strategy<Value = Vec<PlanItem>> {
    let action = prop_oneof![
        Just(PlanAction::Skip),
        vec(range(), 0..5).prop_map(PlanAction::Send),
    ];
    vec(
        (any::<u64>(), action).prop_map(|(id, action)| PlanItem { id, action }),
        0..6,
    )
}

/// A data frame: a zero block (no payload), a block with a payload, or a compressed
/// block (a payload shorter than its `raw_len`); the latter two with or without holes
/// at the source (`sparse`); or a patch of a block under repair.
pub(super) fn data() -> impl Strategy<Value = (DataHeader, Vec<u8>)> {
    let zero_block = (0..=MAX_BLOCK as u32).prop_map(|len| (true, false, len, Vec::new()));
    let payload_block = bytes(300).prop_map(|payload| (false, false, 0, payload));
    let patch = (0..MAX_PATCHES as u32, 1..=MAX_PATCHES as u32, bytes(300));
    let compressed_block = (bytes(300), 1..=MAX_BLOCK as u32).prop_map(|(mut payload, len)| {
        payload.truncate(len as usize - 1);
        if payload.is_empty() {
            payload.push(0);
        }
        let len = len.max(payload.len() as u32 + 1);
        (false, true, len, payload)
    });
    let whole = (
        prop_oneof![zero_block, payload_block, compressed_block],
        any::<bool>(),
    )
        .prop_map(|((zero, compressed, raw_len, payload), holes)| {
            let header = DataHeader {
                file: 0,
                block: 0,
                digest: [0; 32],
                zero,
                compressed,
                raw_len,
                sparse: holes && !zero,
                patch: None,
            };
            (header, payload)
        });
    let patched = patch.prop_map(|(index, count, mut payload)| {
        if payload.is_empty() {
            payload.push(0);
        }
        let header = DataHeader {
            file: 0,
            block: 0,
            digest: [0; 32],
            zero: false,
            compressed: false,
            raw_len: 0,
            sparse: false,
            patch: Some(Patch {
                at: index * MIN_PATCH,
                count,
                round: count,
            }),
        };
        (header, payload)
    });
    (
        any::<u64>(),
        any::<u64>(),
        any::<BlockDigest>(),
        prop_oneof![4 => whole, 1 => patched],
    )
        .prop_map(|(file, block, digest, (header, payload))| {
            let header = DataHeader {
                file,
                block,
                digest,
                ..header
            };
            (header, payload)
        })
}

pub(super) fn summary() -> impl Strategy<Value = Summary> {
    any::<[u64; 11]>().prop_map(|v| Summary {
        files: v[0],
        bytes: v[1],
        skipped: v[2],
        retried_blocks: v[3],
        failed: v[4],
        reverified: v[5],
        damaged_on_arrival: v[6],
        failed_read_back: v[7],
        repaired_blocks: v[8],
        patch_bytes: v[9],
        streams_rejoined: v[10],
    })
}

/// Any valid frame.
pub(super) fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        hello().prop_map(Frame::Hello),
        welcome().prop_map(Frame::Welcome),
        error_frame().prop_map(Frame::Error),
        entries().prop_map(Frame::Entries),
        plan().prop_map(Frame::Plan),
        data().prop_map(|(h, p)| Frame::Data(h, p)),
        (any::<u64>(), any::<u64>()).prop_map(|(file, block)| Frame::Resend { file, block }),
        (
            any::<u64>(),
            any::<u64>(),
            0u32..17,
            proptest::collection::vec(any::<BlockDigest>(), 1..8)
        )
            .prop_map(|(file, block, shift, digests)| Frame::Repair {
                file,
                block,
                round: shift + 1,
                patch_len: MIN_PATCH << shift,
                digests
            }),
        (
            any::<u64>(),
            proptest::option::of(string()),
            proptest::option::of(manifest_entry())
        )
            .prop_map(|(file, error, digest)| Frame::FileDone {
                file,
                error,
                digest
            }),
        (any::<u64>(), string()).prop_map(|(file, message)| Frame::FileError { file, message }),
        Just(Frame::EndOfEntries),
        summary().prop_map(Frame::Finished),
        relay_progress().prop_map(Frame::Progress),
        change().prop_map(Frame::Change),
        Just(Frame::StreamEnd),
        Just(Frame::KeepAlive),
        (
            any::<[u64; 2]>(),
            (any::<i64>(), 0..1_000_000_000u32),
            proptest::collection::vec(any::<u8>(), 0..=64),
            proptest::collection::vec(any::<u64>(), 0..8),
            proptest::collection::vec(any::<(u64, [u8; 32])>(), 0..3)
        )
            .prop_map(
                |([file, size], (mtime_sec, mtime_nsec), digest, rewritten, tail)| {
                    Frame::Seal(Seal {
                        file,
                        size,
                        mtime_sec,
                        mtime_nsec,
                        digest,
                        rewritten,
                        tail,
                    })
                }
            ),
        any::<u64>().prop_map(|file| Frame::Abandon { file }),
        (any::<[u64; 2]>(), any::<[u8; 32]>()).prop_map(|([file, block], digest)| Frame::Cover {
            file,
            block,
            digest
        }),
        any::<[u64; 2]>().prop_map(|[file, offset]| Frame::Durable { file, offset }),
        (
            any::<u64>(),
            0..u64::MAX / 2,
            any::<[u8; 32]>(),
            proptest::collection::vec(any::<u8>(), 1..300)
        )
            .prop_map(|(file, offset, digest, data)| Frame::Piece(Piece {
                file,
                offset,
                digest,
                data
            })),
    ]
}
