//! Inputs that must be refused, and the error each one gets.

use super::{decode_one, encoded, raw_frame};
use crate::wire::Put;
use crate::*;

/// Asserts that `body` is refused as a malformed frame of `kind`, both by
/// [`decode_body`] and by a [`Decoder`] given the whole frame; returns the reason.
#[track_caller]
fn refused(kind: FrameKind, body: &[u8]) -> &'static str {
    let direct = decode_body(kind, body);
    let Err(ProtoError::Malformed { what, why }) = direct else {
        panic!("{kind:?} body {body:?} not refused as malformed: {direct:?}");
    };
    assert_eq!(what, kind.name());
    assert_eq!(decode_one(&raw_frame(kind as u8, body)), direct);
    why
}

/// A control hello whose every part can be spoilt; `Default` is valid.
struct RawHello {
    token: Vec<u8>,
    role: u8,
    op: Vec<u8>,
    streams: u16,
    encrypt: u8,
    block_size: u32,
    congestion: Vec<u8>,
    send: u32,
    recv: u32,
    rate: u64,
    no_clobber: u8,
    fsync: u8,
    integrity: Vec<u8>,
    preserve_special_modes: u8,
    /// `specials`, `devices`, `hard_links`, `xattrs` and `acls`.
    specials_devices: [u8; 5],
    /// Filter lists and delete request.
    tail: Vec<u8>,
    /// Compression: 0 off, 255 auto, else the zstd level.
    compression: u8,
}

/// A valid integrity request: blake3, written, block, default threads, no flags.
fn raw_integrity(checksum: &[u8], verify: u8, schedule: u8) -> Vec<u8> {
    let mut b = Vec::new();
    b.put_bytes(checksum);
    b.put_u8(verify);
    b.put_u8(schedule);
    b.put_u16(0);
    // file_digests, checksum_skip, compare_only, retry_changed, trust_journal
    b.extend_from_slice(&[0, 0, 0, 0, 0]);
    b
}

impl Default for RawHello {
    fn default() -> Self {
        let mut op = vec![0]; // push
        op.put_bytes(b"dest");
        op.put_u32(1);
        RawHello {
            token: b"secret".to_vec(),
            role: 0,
            op,
            streams: 4,
            encrypt: 1,
            block_size: 1 << 20,
            congestion: vec![1, 3, 0, 0, 0, b'b', b'b', b'r'],
            send: 0,
            recv: 0,
            rate: 0,
            no_clobber: 0,
            fsync: 1,
            integrity: raw_integrity(b"blake3", 0, 0),
            preserve_special_modes: 0,
            specials_devices: [0, 0, 0, 0, 0],
            // No include, no exclude, no deletion phase.
            tail: vec![0, 0, 0, 0, 0, 0, 0, 0, 0],
            compression: 0,
        }
    }
}

impl RawHello {
    fn body(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_u8(self.role);
        b.put_bytes(&self.token);
        b.extend_from_slice(&self.op);
        b.put_u16(self.streams);
        b.put_u8(self.encrypt);
        b.put_u32(self.block_size);
        b.extend_from_slice(&self.congestion);
        b.put_u32(self.send);
        b.put_u32(self.recv);
        b.put_u64(self.rate);
        b.put_u8(self.no_clobber);
        b.put_u8(self.fsync);
        b.extend_from_slice(&self.integrity);
        b.put_u8(self.preserve_special_modes);
        b.extend_from_slice(&self.specials_devices);
        b.extend_from_slice(&self.tail);
        b.put_u8(self.compression);
        b.put_u8(0); // not a dry run
        b.put_u8(0); // not kept for another operation
        b.put_u8(0); // whole directories, not chosen entries
        b
    }

    /// A relay of `sources` to `host` with a token of `token_len` bytes.
    fn relay(sources: &[&[u8]], host: &[u8], token_len: usize) -> Self {
        let mut op = vec![2];
        op.put_u32(sources.len() as u32);
        for s in sources {
            op.put_bytes(s);
        }
        op.put_bytes(host);
        op.extend_from_slice(&[7; 32]);
        op.put_bytes(&vec![b't'; token_len]);
        op.put_bytes(b"incoming");
        RawHello {
            op,
            ..RawHello::default()
        }
    }

    fn pull(sources: &[&[u8]]) -> Self {
        let mut op = vec![1];
        op.put_u32(sources.len() as u32);
        for s in sources {
            op.put_bytes(s);
        }
        RawHello {
            op,
            ..RawHello::default()
        }
    }
}

/// An entry whose every part can be spoilt; `Default` is a valid file.
struct RawEntry {
    path: Vec<u8>,
    kind: Vec<u8>,
    mode: u32,
    nsec: u32,
    /// Extended attributes, as `u32 count | (bytes name, bytes value)*`.
    xattrs: Vec<u8>,
}

impl Default for RawEntry {
    fn default() -> Self {
        RawEntry {
            path: b"top/file".to_vec(),
            // A file of 1 byte, no digest, not growing.
            kind: vec![0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            mode: 0o644,
            nsec: 0,
            xattrs: vec![0, 0, 0, 0],
        }
    }
}

impl RawEntry {
    fn symlink(target: &[u8]) -> Self {
        let mut kind = vec![2];
        kind.put_bytes(target);
        RawEntry {
            kind,
            ..RawEntry::default()
        }
    }

    /// An `Entries` body holding just this entry.
    fn body(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_u32(1);
        b.put_u64(7);
        b.put_bytes(&self.path);
        b.extend_from_slice(&self.kind);
        b.put_u32(self.mode);
        b.put_i64(1_700_000_000);
        b.put_u32(self.nsec);
        b.extend_from_slice(&self.xattrs);
        b
    }
}

fn entry_with_path(path: &[u8]) -> Vec<u8> {
    RawEntry {
        path: path.to_vec(),
        ..RawEntry::default()
    }
    .body()
}

/// `u32 len | bytes` of invalid UTF-8.
fn bad_utf8() -> Vec<u8> {
    let mut b = Vec::new();
    b.put_bytes(&[b'o', b'k', 0xc3, 0x28]);
    b
}

// The default raw builders really are valid, so each test below spoils one thing only.
#[test]
fn raw_builders_are_valid() {
    assert!(decode_body(FrameKind::Hello, &RawHello::default().body()).is_ok());
    assert!(decode_body(FrameKind::Hello, &RawHello::pull(&[b"a", b"b/c"]).body()).is_ok());
    let relay = RawHello::relay(&[b"a"], b"b.example:7878", 32);
    assert!(decode_body(FrameKind::Hello, &relay.body()).is_ok());
    assert!(decode_body(FrameKind::Entries, &RawEntry::default().body()).is_ok());
    assert!(decode_body(FrameKind::Entries, &RawEntry::symlink(b"/x/../y").body()).is_ok());
}

/// A relay names its destination within bounds, and its sources as a pull's: a
/// hostile client cannot make the server hold a huge host or token, nor read above its
/// root.
#[test]
fn relay_targets_and_sources_are_bounded() {
    let hello = |h: RawHello| refused(FrameKind::Hello, &h.body());
    assert_eq!(
        hello(RawHello::relay(&[b"a"], b"", 32)),
        "relay host empty or too long"
    );
    let long = vec![b'h'; MAX_RELAY_HOST + 1];
    assert_eq!(
        hello(RawHello::relay(&[b"a"], &long, 32)),
        "relay host empty or too long"
    );
    assert_eq!(
        hello(RawHello::relay(&[b"a"], b"b:1", 4097)),
        "relay token too long"
    );
    assert!(hello(RawHello::relay(&[b"../etc"], b"b:1", 32)).contains(".."));
    let body = RawHello::relay(&[b"a"], b"b:1", 32).body();
    for cut in [20, 40, 60] {
        assert!(decode_body(FrameKind::Hello, &body[..cut]).is_err());
    }
}

const CONTROL_KINDS: [FrameKind; 15] = [
    FrameKind::Hello,
    FrameKind::Welcome,
    FrameKind::Error,
    FrameKind::Entries,
    FrameKind::Plan,
    FrameKind::Resend,
    FrameKind::FileDone,
    FrameKind::FileError,
    FrameKind::EndOfEntries,
    FrameKind::Finished,
    FrameKind::StreamEnd,
    FrameKind::Change,
    FrameKind::Progress,
    FrameKind::Repair,
    FrameKind::StreamLost,
];

/// One valid, non-trivial frame of each control kind.
fn samples() -> Vec<Frame> {
    vec![
        decode_body(FrameKind::Hello, &RawHello::pull(&[b"src"]).body()).unwrap(),
        Frame::Welcome(Welcome {
            session: [3; SESSION_ID_LEN],
            server: "hetch 0.1".into(),
        }),
        Frame::Error(ErrorFrame {
            code: ErrorCode::Path,
            message: "no such file: a/b".into(),
        }),
        decode_body(FrameKind::Entries, &RawEntry::symlink(b"t").body()).unwrap(),
        Frame::Plan(vec![PlanItem {
            id: 1,
            action: PlanAction::Send(vec![(0, 4)]),
        }]),
        Frame::Resend { file: 1, block: 2 },
        Frame::FileDone {
            file: 1,
            error: Some("disk full".into()),
            digest: None,
        },
        Frame::FileError {
            file: 1,
            message: "unreadable".into(),
        },
        Frame::EndOfEntries,
        Frame::Finished(Summary::default()),
        Frame::StreamEnd,
        Frame::Change(Change {
            action: ChangeAction::Deleted,
            path: b"a/old".to_vec(),
            size: 0,
        }),
        Frame::Progress(RelayProgress::default()),
        Frame::Repair {
            file: 1,
            block: 2,
            round: 1,
            patch_len: MIN_PATCH,
            digests: vec![[7; DIGEST_LEN]; 3],
        },
        Frame::StreamLost {
            index: 1,
            generation: 2,
            frames: 3,
            torn: true,
        },
    ]
}

#[test]
fn trailing_bytes_are_refused() {
    for frame in samples() {
        let kind = frame.kind();
        let mut body = encoded(&frame)[HEADER_LEN..].to_vec();
        body.push(0);
        if body.len() > kind.max_len() {
            // EndOfEntries / StreamEnd: the header already refuses any body.
            assert!(matches!(
                decode_header(raw_frame(kind as u8, &body).first_chunk().unwrap()),
                Err(ProtoError::TooLong { max: 0, .. })
            ));
            assert!(decode_body(kind, &body).is_err());
        } else {
            assert_eq!(refused(kind, &body), "trailing bytes after the body");
        }
    }
}

#[test]
fn truncated_bodies_are_refused() {
    for frame in samples() {
        let body = &encoded(&frame)[HEADER_LEN..];
        for cut in 0..body.len() {
            refused(frame.kind(), &body[..cut]);
        }
    }
}

#[test]
fn samples_cover_every_control_kind() {
    let kinds: Vec<_> = samples().iter().map(Frame::kind).collect();
    assert_eq!(kinds, CONTROL_KINDS);
}

#[test]
fn data_kind_is_refused_by_decode_body() {
    let frame = Frame::Data(
        DataHeader {
            file: 1,
            block: 0,
            digest: [0; DIGEST_LEN],
            zero: false,
            compressed: false,
            raw_len: 0,
            sparse: false,
            patch: None,
        },
        vec![1, 2, 3],
    );
    let bytes = encoded(&frame);
    assert!(matches!(
        decode_body(FrameKind::Data, &bytes[HEADER_LEN..]),
        Err(ProtoError::Malformed { what: "data", .. })
    ));
    assert!(decode_body(FrameKind::Data, &[]).is_err());
}

#[test]
fn invalid_utf8_is_refused_in_every_string() {
    let mut welcome = vec![0; SESSION_ID_LEN];
    welcome.extend(bad_utf8());
    let mut error = vec![1, 0];
    error.extend(bad_utf8());
    let mut file_done = vec![0; 8];
    file_done.push(1);
    file_done.extend(bad_utf8());
    let mut file_error = vec![0; 8];
    file_error.extend(bad_utf8());
    let mut congestion = vec![1];
    congestion.extend(bad_utf8());
    let hello = RawHello {
        congestion,
        ..RawHello::default()
    }
    .body();
    for (kind, body) in [
        (FrameKind::Welcome, welcome),
        (FrameKind::Error, error),
        (FrameKind::FileDone, file_done),
        (FrameKind::FileError, file_error),
        (FrameKind::Hello, hello),
    ] {
        assert_eq!(refused(kind, &body), "string is not valid UTF-8");
    }
}

#[test]
fn unknown_tags_are_refused() {
    let hello = |h: RawHello| refused(FrameKind::Hello, &h.body());
    assert_eq!(
        hello(RawHello {
            role: 2,
            ..RawHello::default()
        }),
        "unknown hello role"
    );
    // 0..=3 are push, pull, relay and range.
    for op in [4, u8::MAX] {
        assert_eq!(
            hello(RawHello {
                op: vec![op],
                ..RawHello::default()
            }),
            "unknown session op"
        );
    }
    let mut congestion = RawHello::default().congestion;
    congestion[0] = 2;
    assert_eq!(
        hello(RawHello {
            congestion,
            ..RawHello::default()
        }),
        "option tag is neither 0 nor 1"
    );
    for spoil in [
        |h: &mut RawHello| h.encrypt = 2,
        |h: &mut RawHello| h.no_clobber = 2,
        |h: &mut RawHello| h.fsync = 0xff,
        |h: &mut RawHello| h.preserve_special_modes = 3,
        |h: &mut RawHello| h.specials_devices = [0, 2, 0, 0, 0],
        |h: &mut RawHello| h.specials_devices = [0, 0, 7, 0, 0],
        |h: &mut RawHello| h.specials_devices = [0, 0, 0, 2, 0],
        |h: &mut RawHello| h.specials_devices = [0, 0, 0, 0, 9],
    ] {
        let mut h = RawHello::default();
        spoil(&mut h);
        assert_eq!(hello(h), "boolean is neither 0 nor 1");
    }

    for code in [0u16, 10, 0xffff] {
        let mut body = code.to_le_bytes().to_vec();
        body.put_bytes(b"msg");
        assert_eq!(refused(FrameKind::Error, &body), "unknown error code");
    }

    let entry = RawEntry {
        kind: vec![5],
        ..RawEntry::default()
    };
    assert_eq!(
        refused(FrameKind::Entries, &entry.body()),
        "unknown entry kind"
    );
    // A special file: a known kind, and a device number only on a device.
    let special = |tag: u8, rdev: u64| {
        let mut kind = vec![3, tag];
        kind.put_u64(rdev);
        RawEntry {
            kind,
            ..RawEntry::default()
        }
        .body()
    };
    assert_eq!(
        refused(FrameKind::Entries, &special(0, 7)),
        "device number on a fifo or socket"
    );
    assert_eq!(
        refused(FrameKind::Entries, &special(4, 0)),
        "unknown special file kind"
    );
    // A hard link names its target as a relative path inside the session.
    let mut kind = vec![4];
    kind.put_bytes(b"../outside");
    let link = RawEntry {
        kind,
        ..RawEntry::default()
    };
    assert!(decode_body(FrameKind::Entries, &link.body()).is_err());
    // Extended attributes: only user attributes and ACLs, each name once, in order.
    let with_xattrs = |names: &[&[u8]]| {
        let mut xattrs = Vec::new();
        xattrs.put_len(names.len());
        for n in names {
            xattrs.put_bytes(n);
            xattrs.put_bytes(b"v");
        }
        RawEntry {
            xattrs,
            ..RawEntry::default()
        }
        .body()
    };
    assert!(decode_body(FrameKind::Entries, &with_xattrs(&[b"user.a", b"user.b"])).is_ok());
    assert_eq!(
        refused(FrameKind::Entries, &with_xattrs(&[b"security.capability"])),
        "extended attribute outside user.* and the POSIX ACLs"
    );
    assert_eq!(
        refused(FrameKind::Entries, &with_xattrs(&[b"user.b", b"user.a"])),
        "extended attributes not in ascending order of name"
    );

    let plan = [1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 2];
    assert_eq!(refused(FrameKind::Plan, &plan), "unknown plan action");

    let file_done = [1, 0, 0, 0, 0, 0, 0, 0, 2];
    assert_eq!(
        refused(FrameKind::FileDone, &file_done),
        "option tag is neither 0 nor 1"
    );
}

#[test]
fn bad_paths_are_refused() {
    let bad: [(&[u8], &str); 10] = [
        (b"", "path is empty"),
        (b"/etc/passwd", "path is absolute"),
        (b"/", "path is absolute"),
        (b"a/", "path has an empty component"),
        (b"a//b", "path has an empty component"),
        (b".", "path has a '.' component"),
        (b"a/./b", "path has a '.' component"),
        (b"..", "path has a '..' component"),
        (b"a/../../b", "path has a '..' component"),
        (b"a\0b", "path contains a NUL byte"),
    ];
    for (path, why) in bad {
        assert_eq!(
            validate_rel_path(path),
            Err(ProtoError::Malformed { what: "path", why }),
            "{path:?}"
        );
        assert_eq!(refused(FrameKind::Entries, &entry_with_path(path)), why);
        let pull = RawHello::pull(&[b"fine", path]).body();
        if validate_operand_path(path).is_ok() {
            assert!(decode_body(FrameKind::Hello, &pull).is_ok(), "{path:?}");
        } else {
            assert_eq!(refused(FrameKind::Hello, &pull), why);
        }
    }
}

#[test]
fn operand_paths() {
    // What a user may type after `hetch://host/`: the root, trailing slashes, dots.
    for path in [&b""[..], b".", b"d/", b"a//b", b"./a", b"a/./b/"] {
        assert_eq!(validate_operand_path(path), Ok(()), "{path:?}");
        assert!(decode_body(FrameKind::Hello, &RawHello::pull(&[path]).body()).is_ok());
    }
    let bad: [(&[u8], &str); 5] = [
        (b"/abs", "path is absolute"),
        (b"/", "path is absolute"),
        (b"..", "path has a '..' component"),
        (b"a/../b", "path has a '..' component"),
        (b"a\0", "path contains a NUL byte"),
    ];
    for (path, why) in bad {
        assert_eq!(
            validate_operand_path(path),
            Err(ProtoError::Malformed { what: "path", why }),
            "{path:?}"
        );
        assert_eq!(
            refused(FrameKind::Hello, &RawHello::pull(&[path]).body()),
            why
        );
    }
}

#[test]
fn odd_but_safe_paths_are_accepted() {
    for path in [
        &b"a"[..],
        b"a/b/c",
        b".hidden",
        b"..dots",
        b"a/...",
        b"a/b..",
        b"\xff\xfe/not utf-8",
        b"with space/and\\backslash",
    ] {
        assert_eq!(validate_rel_path(path), Ok(()), "{path:?}");
        assert!(decode_body(FrameKind::Entries, &entry_with_path(path)).is_ok());
    }
}

#[test]
fn bad_symlink_targets_are_refused() {
    assert_eq!(
        refused(FrameKind::Entries, &RawEntry::symlink(b"").body()),
        "symlink target is empty"
    );
    assert_eq!(
        refused(FrameKind::Entries, &RawEntry::symlink(b"a\0b").body()),
        "symlink target contains a NUL byte"
    );
    // Absolute and climbing targets are stored as-is.
    for target in [&b"/abs"[..], b"../../up", b"."] {
        assert!(decode_body(FrameKind::Entries, &RawEntry::symlink(target).body()).is_ok());
    }
}

#[test]
fn bad_integrity_requests_are_refused() {
    let hello = |integrity: Vec<u8>| {
        refused(
            FrameKind::Hello,
            &RawHello {
                integrity,
                ..RawHello::default()
            }
            .body(),
        )
    };
    assert_eq!(hello(raw_integrity(b"blake3", 3, 0)), "unknown verify mode");
    assert_eq!(
        hello(raw_integrity(b"blake3", 0, 3)),
        "unknown verify schedule"
    );
    assert_eq!(
        hello(raw_integrity(b"", 0, 0)),
        "checksum name empty or too long"
    );
    assert_eq!(
        hello(raw_integrity(&[b'x'; 33], 0, 0)),
        "checksum name empty or too long"
    );
    // A file entry whose digest is empty or longer than any algorithm's.
    for len in [0usize, 65] {
        let mut kind = vec![0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
        kind.put_bytes(&vec![7; len]);
        let entry = RawEntry {
            kind,
            ..RawEntry::default()
        };
        assert_eq!(
            refused(FrameKind::Entries, &entry.body()),
            "file digest empty or too long"
        );
    }
}

#[test]
fn out_of_range_fields_are_refused() {
    let entry = RawEntry {
        mode: 0o10000,
        ..RawEntry::default()
    };
    assert_eq!(
        refused(FrameKind::Entries, &entry.body()),
        "mode has bits outside 0o7777"
    );
    let entry = RawEntry {
        nsec: 1_000_000_000,
        ..RawEntry::default()
    };
    assert_eq!(
        refused(FrameKind::Entries, &entry.body()),
        "mtime nanoseconds not below one second"
    );

    for block_size in [0, 512, 1000, 3 << 10, (MAX_BLOCK as u32) << 1, u32::MAX] {
        let hello = RawHello {
            block_size,
            ..RawHello::default()
        };
        assert_eq!(
            refused(FrameKind::Hello, &hello.body()),
            "block size is not a power of two between 1 KiB and MAX_BLOCK"
        );
    }
    for block_size in [1024, MAX_BLOCK as u32] {
        let hello = RawHello {
            block_size,
            ..RawHello::default()
        };
        assert!(decode_body(FrameKind::Hello, &hello.body()).is_ok());
    }

    let mut plan = vec![1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0];
    plan.put_u64(5);
    plan.put_u64(4);
    assert_eq!(
        refused(FrameKind::Plan, &plan),
        "block range ends before it starts"
    );
}

#[test]
fn huge_list_counts_are_refused_before_allocating() {
    let count = |n: u32| n.to_le_bytes().to_vec();
    for n in [u32::MAX, 1 << 28, 2] {
        assert_eq!(
            refused(FrameKind::Entries, &count(n)),
            "list count exceeds the body"
        );
        assert_eq!(
            refused(FrameKind::Plan, &count(n)),
            "list count exceeds the body"
        );
        // (A small count of pull sources could fit in the fields after the list.)
        if n > 2 {
            let mut op = vec![1];
            op.extend(count(n));
            let hello = RawHello {
                op,
                ..RawHello::default()
            };
            assert_eq!(
                refused(FrameKind::Hello, &hello.body()),
                "list count exceeds the body"
            );
        }
        let mut plan = vec![1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1];
        plan.extend(count(n));
        assert_eq!(
            refused(FrameKind::Plan, &plan),
            "list count exceeds the body"
        );
    }
    // A byte string longer than the body.
    let mut welcome = vec![0; SESSION_ID_LEN];
    welcome.extend(count(u32::MAX));
    assert_eq!(refused(FrameKind::Welcome, &welcome), "body ends early");
}

fn data_fixed(flags: u8, raw_len: u32) -> [u8; DATA_FIXED_LEN] {
    let mut b = [0; DATA_FIXED_LEN];
    b[48] = flags;
    b[49..53].copy_from_slice(&raw_len.to_le_bytes());
    b
}

#[test]
fn bad_data_frames_are_refused() {
    fn malformed<T>(why: &'static str) -> Result<T, ProtoError> {
        Err(ProtoError::Malformed { what: "data", why })
    }

    assert_eq!(
        decode_data_fixed(&data_fixed(16, 0)),
        malformed("unknown data flags")
    );
    assert_eq!(
        decode_data_fixed(&data_fixed(0x84, 0)),
        malformed("unknown data flags")
    );
    // Holes in a block that is all hole: a zero block says that already.
    assert_eq!(
        decode_data_fixed(&data_fixed(5, 4096)),
        malformed("block both all zeros and with holes")
    );
    assert_eq!(
        decode_one(&raw_frame(FrameKind::Data as u8, &data_fixed(5, 4096))),
        malformed("block both all zeros and with holes")
    );
    // With holes, sent as it is or compressed: fine.
    let header = decode_data_fixed(&data_fixed(4, 0)).unwrap();
    assert!(header.sparse && !header.zero && !header.compressed);
    let header = decode_data_fixed(&data_fixed(6, 100)).unwrap();
    assert!(header.sparse && header.compressed);
    assert_eq!(
        decode_data_fixed(&data_fixed(4, 1)),
        malformed("raw_len set on a block sent as it is")
    );
    assert_eq!(
        decode_data_fixed(&data_fixed(0x81, 0)),
        malformed("unknown data flags")
    );
    assert_eq!(
        decode_data_fixed(&data_fixed(0, 1)),
        malformed("raw_len set on a block sent as it is")
    );
    assert_eq!(
        decode_data_fixed(&data_fixed(1, MAX_BLOCK as u32 + 1)),
        malformed("raw_len above MAX_BLOCK")
    );

    // A zero block carrying a payload.
    let header = decode_data_fixed(&data_fixed(1, 4096)).unwrap();
    assert!(header.zero);
    assert_eq!(
        check_data_payload(&header, 1),
        malformed("zero block with a payload")
    );
    assert_eq!(check_data_payload(&header, 0), Ok(()));
    let mut body = data_fixed(1, 4096).to_vec();
    body.push(0);
    assert_eq!(
        decode_one(&raw_frame(FrameKind::Data as u8, &body)),
        malformed("zero block with a payload")
    );

    // Through the decoder, the fixed-part checks apply too.
    let body = data_fixed(0, 3);
    assert_eq!(
        decode_one(&raw_frame(FrameKind::Data as u8, &body)),
        malformed("raw_len set on a block sent as it is")
    );
}

#[test]
fn bad_compressed_data_frames_are_refused() {
    fn malformed<T>(why: &'static str) -> Result<T, ProtoError> {
        Err(ProtoError::Malformed { what: "data", why })
    }
    assert_eq!(
        decode_data_fixed(&data_fixed(3, 100)),
        malformed("block both all zeros and compressed")
    );
    assert_eq!(
        decode_data_fixed(&data_fixed(2, 0)),
        malformed("compressed block of no bytes")
    );
    // A block claiming to inflate past the largest block: refused before any buffer.
    assert_eq!(
        decode_data_fixed(&data_fixed(2, MAX_BLOCK as u32 + 1)),
        malformed("raw_len above MAX_BLOCK")
    );
    let header = decode_data_fixed(&data_fixed(2, 100)).unwrap();
    assert!(header.compressed && !header.zero);
    assert_eq!(check_data_payload(&header, 99), Ok(()));
    for len in [0, 100, 101] {
        assert_eq!(
            check_data_payload(&header, len),
            malformed("compressed payload empty or not shorter than its block")
        );
    }
    let mut body = data_fixed(2, 4).to_vec();
    body.extend([1, 2, 3, 4]);
    assert_eq!(
        decode_one(&raw_frame(FrameKind::Data as u8, &body)),
        malformed("compressed payload empty or not shorter than its block")
    );
}

#[test]
fn zstd_levels_outside_the_allowed_range_are_refused() {
    use super::strategies::session_request;
    use proptest::strategy::{Strategy, ValueTree};
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut req = session_request().new_tree(&mut runner).unwrap().current();
    for (level, ok) in [
        (1, true),
        (19, true),
        (20, false),
        (254, false),
        (255, true),
    ] {
        req.compression = match level {
            255 => Compression::Auto,
            l => Compression::Zstd(l),
        };
        let mut bytes = Vec::new();
        encode(
            &Frame::Hello(Hello::Control {
                token: b"t".to_vec(),
                request: req.clone(),
            }),
            &mut bytes,
        );
        let got = decode_one(&bytes);
        assert_eq!(got.is_ok(), ok, "level {level}: {got:?}");
    }
}

/// The header of an all-zero block of 3 bytes, flagged `sparse` or not.
fn zero_block(sparse: bool) -> DataHeader {
    DataHeader {
        file: 0,
        block: 0,
        digest: [0; DIGEST_LEN],
        zero: true,
        compressed: false,
        raw_len: 3,
        sparse,
        patch: None,
    }
}

#[test]
#[should_panic(expected = "zero block with a payload")]
fn encoding_a_zero_block_with_payload_panics() {
    encoded(&Frame::Data(zero_block(false), vec![1]));
}

#[test]
#[should_panic(expected = "block both all zeros and with holes")]
fn encoding_a_zero_block_with_holes_panics() {
    encoded(&Frame::Data(zero_block(true), Vec::new()));
}

#[test]
#[should_panic(expected = "exceeds the")]
fn encoding_an_oversized_control_frame_panics() {
    encoded(&Frame::FileError {
        file: 0,
        message: "x".repeat(MAX_CONTROL_BODY),
    });
}

/// A piece body: file 1 at `offset`, a zero digest, `data`.
fn raw_piece(offset: u64, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.put_u64(1);
    b.put_u64(offset);
    b.extend_from_slice(&[0; DIGEST_LEN]);
    b.put_bytes(data);
    b
}

#[test]
fn bad_pieces_are_refused() {
    assert!(decode_body(FrameKind::Piece, &raw_piece(0, b"x")).is_ok());
    assert_eq!(
        refused(FrameKind::Piece, &raw_piece(0, b"")),
        "piece empty or longer than allowed"
    );
    assert_eq!(
        refused(FrameKind::Piece, &raw_piece(u64::MAX, b"x")),
        "piece ends past the largest offset"
    );
}

#[test]
fn bad_seals_are_refused() {
    let seal = |digest: &[u8], rewritten: usize| {
        let mut b = Vec::new();
        b.put_u64(1);
        b.put_u64(10);
        b.put_i64(1_700_000_000);
        b.put_u32(0);
        b.put_bytes(digest);
        b.put_u32(rewritten as u32);
        for i in 0..rewritten {
            b.put_u64(i as u64);
        }
        b.put_u32(0); // no tail digests
        b
    };
    assert!(decode_body(FrameKind::Seal, &seal(&[1; 32], 2)).is_ok());
    assert_eq!(
        refused(FrameKind::Seal, &seal(&[1; 65], 0)),
        "file digest too long"
    );
    assert_eq!(
        refused(FrameKind::Seal, &seal(&[1; 32], MAX_REWRITTEN + 1)),
        "too many rewritten blocks"
    );
}

/// A data stream's hello is exactly role, session, index and proof: no token, and
/// nothing missing or trailing.
#[test]
fn data_hellos_are_exact() {
    let mut body = vec![1u8];
    body.extend_from_slice(&[7; SESSION_ID_LEN]);
    body.put_u16(3);
    body.put_u32(5);
    body.extend_from_slice(&[9; STREAM_PROOF_LEN]);
    assert_eq!(
        decode_body(FrameKind::Hello, &body).unwrap(),
        Frame::Hello(Hello::Data {
            session: [7; SESSION_ID_LEN],
            index: 3,
            generation: 5,
            proof: [9; STREAM_PROOF_LEN],
        })
    );
    assert_eq!(
        refused(FrameKind::Hello, &body[..body.len() - 1]),
        "body ends early"
    );
    let mut long = body.clone();
    long.push(0);
    assert!(matches!(
        decode_body(FrameKind::Hello, &long),
        Err(ProtoError::Malformed { .. })
    ));
}

#[test]
fn hostile_filters_and_changes_are_refused() {
    let filter = |include: &[&[u8]], exclude: &[&[u8]]| {
        let mut tail = Vec::new();
        for list in [include, exclude] {
            tail.put_u32(list.len() as u32);
            for p in list {
                tail.put_bytes(p);
            }
        }
        tail.push(0); // no deletion phase
        RawHello {
            tail,
            ..RawHello::default()
        }
        .body()
    };
    assert!(decode_body(FrameKind::Hello, &filter(&[b"*.h5"], &[b"tmp*"])).is_ok());
    let long = vec![b'a'; MAX_FILTER_PATTERN_LEN + 1];
    let many: Vec<&[u8]> = vec![b"x"; MAX_FILTER_PATTERNS + 1];
    for bad in [
        filter(&[&long], &[]),
        filter(&[], &many),
        filter(&[b""], &[]),
        filter(&[b"a\0b"], &[]),
    ] {
        assert!(decode_body(FrameKind::Hello, &bad).is_err());
    }
    let change = |action: u8, path: &[u8]| {
        let mut b = vec![action];
        b.put_bytes(path);
        b.put_u64(1 << 20);
        decode_body(FrameKind::Change, &b)
    };
    assert!(change(0, b"d/old").is_ok());
    assert!(change(3, b"d/replaced").is_ok());
    assert!(change(4, b"d/chmodded").is_ok());
    for (action, path) in [
        (5u8, &b"d/x"[..]),
        (0, b"/etc/passwd"),
        (0, b"d/../x"),
        (0, b""),
    ] {
        assert!(change(action, path).is_err(), "{action} {path:?}");
    }
}

proptest::proptest! {
    /// A range session asking for more blocks than a server will track is refused
    /// before anything is sized from it.
    #[test]
    fn ranges_of_too_many_blocks_are_refused(mut req in super::strategies::session_request(), first in 0u64..1 << 40) {
        let Op::Range(range) = &mut req.op else { return Ok(()) };
        range.step = RangeStep::Blocks { first, end: first + MAX_RANGE_BLOCKS + 1 };
        let hello = Frame::Hello(Hello::Control { token: Vec::new(), request: req });
        let bytes = encoded(&hello);
        let refused = format!("{:?}", decode_one(&bytes));
        proptest::prop_assert!(refused.contains("range of too many blocks"), "{}", refused);
    }
}

/// A repair names 1 to MAX_PATCHES patches of a power-of-two length from MIN_PATCH:
/// a hostile sink cannot make the source hash a block in absurd pieces or hold an
/// unbounded list.
#[test]
fn repairs_are_bounded() {
    let repair = |patch_len: u32, n: usize| {
        let mut b = Vec::new();
        b.extend(1u64.to_le_bytes());
        b.extend(2u64.to_le_bytes());
        b.extend(1u32.to_le_bytes());
        b.extend(patch_len.to_le_bytes());
        b.extend((n as u32).to_le_bytes());
        b.extend(std::iter::repeat_n(7u8, n * DIGEST_LEN));
        b
    };
    assert!(decode_body(FrameKind::Repair, &repair(MIN_PATCH, 1)).is_ok());
    let mut first = repair(MIN_PATCH, 1);
    first[16..20].copy_from_slice(&0u32.to_le_bytes());
    assert_eq!(
        refused(FrameKind::Repair, &first),
        "repair round 0 (rounds count from 1)"
    );
    let limit = "patch length not a power of two within MIN_PATCH..=MAX_BLOCK";
    for bad in [0, MIN_PATCH / 2, MIN_PATCH + 1, (MAX_BLOCK as u32) * 2] {
        assert_eq!(refused(FrameKind::Repair, &repair(bad, 1)), limit, "{bad}");
    }
    assert_eq!(
        refused(FrameKind::Repair, &repair(MIN_PATCH, 0)),
        "repair of no patches or more than MAX_PATCHES"
    );
    assert_eq!(
        refused(FrameKind::Repair, &repair(MIN_PATCH, MAX_PATCHES + 1)),
        "repair of no patches or more than MAX_PATCHES"
    );
    // A count the body does not hold is refused before anything is allocated for it.
    let mut short = repair(MIN_PATCH, 1);
    short[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        refused(FrameKind::Repair, &short),
        "list count exceeds the body"
    );
}

/// A patch is a plain run of the block's bytes at a MIN_PATCH boundary, one of 1 to
/// MAX_PATCHES; its fields are zero on any other data frame.
#[test]
fn patches_are_checked_like_the_rest_of_the_data_header() {
    let patch = |at: u32, count: u32| DataHeader {
        file: 1,
        block: 0,
        digest: [0; DIGEST_LEN],
        zero: false,
        compressed: false,
        raw_len: 0,
        sparse: false,
        patch: Some(Patch {
            at,
            count,
            round: 1,
        }),
    };
    let fixed = |h: &DataHeader| {
        let mut b = [0u8; DATA_FIXED_LEN];
        b.copy_from_slice(&encode_data_prefix(h, 1)[HEADER_LEN..]);
        b
    };
    let ok = patch(MIN_PATCH, 2);
    assert_eq!(decode_data_fixed(&fixed(&ok)), Ok(ok));
    let spoil = |at: usize, byte: u8| {
        let mut b = fixed(&ok);
        b[at] = byte;
        match decode_data_fixed(&b) {
            Err(ProtoError::Malformed { why, .. }) => why,
            other => panic!("{other:?}"),
        }
    };
    // flags at 48, raw_len at 49..53, the patch's offset at 53..57, its count at
    // 57..61, its round at 61..65.
    assert_eq!(
        spoil(48, 8 | 1),
        "a patch that is zero, compressed or sparse"
    );
    assert_eq!(
        spoil(48, 8 | 4),
        "a patch that is zero, compressed or sparse"
    );
    assert_eq!(
        spoil(53, 1),
        "patch offset not a multiple of MIN_PATCH within MAX_BLOCK"
    );
    assert_eq!(spoil(57, 0), "patch count not within 1..=MAX_PATCHES");
    assert_eq!(spoil(61, 0), "patch of repair round 0");
    assert_eq!(spoil(48, 0), "patch fields without a patch");
    let empty = check_data_payload(&ok, 0).unwrap_err();
    assert!(empty.to_string().contains("patch empty"), "{empty}");
}
