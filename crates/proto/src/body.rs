//! Bodies of control (non-data) frames.
//!
//! Each encoder has a matching decoder below it. Decoders accept exactly what the
//! encoders produce and nothing else (strict booleans and tags, no trailing bytes), so
//! a frame has exactly one encoding and `encode(decode(bytes)) == bytes` whenever
//! decoding succeeds.

use crate::codec::{FrameKind, ProtoError, MAX_BLOCK};
use crate::frame::*;
use crate::path::{link_target_problem, operand_path_problem, rel_path_problem};
use crate::wire::{Put, Reader};

// Enum tags on the wire. They are part of the protocol: never renumber.
const ROLE_CONTROL: u8 = 0;
const ROLE_DATA: u8 = 1;
const OP_PUSH: u8 = 0;
const OP_PULL: u8 = 1;
const OP_RELAY: u8 = 2;
const OP_RANGE: u8 = 3;
const ENTRY_FILE: u8 = 0;
const ENTRY_DIR: u8 = 1;
const ENTRY_SYMLINK: u8 = 2;
const ENTRY_SPECIAL: u8 = 3;
const ENTRY_HARDLINK: u8 = 4;
const SPECIAL_FIFO: u8 = 0;
const SPECIAL_SOCKET: u8 = 1;
const SPECIAL_CHAR: u8 = 2;
const SPECIAL_BLOCK: u8 = 3;
const PLAN_SKIP: u8 = 0;
const PLAN_SEND: u8 = 1;
const VERIFY_WRITTEN: u8 = 0;
const VERIFY_RECEIVED: u8 = 1;
const VERIFY_NONE: u8 = 2;
const SCHEDULE_BLOCK: u8 = 0;
const SCHEDULE_FILE: u8 = 1;
const SCHEDULE_SEQUENTIAL: u8 = 2;
const CHANGE_DELETED: u8 = 0;
const CHANGE_WOULD_DELETE: u8 = 1;
const CHANGE_WOULD_COPY: u8 = 2;
const CHANGE_WOULD_REPLACE: u8 = 3;
const CHANGE_WOULD_UPDATE: u8 = 4;

/// Longest whole-file digest on the wire (SHA-512 would fit).
pub(crate) const MAX_FILE_DIGEST: usize = 64;
/// Longest checksum algorithm name.
const MAX_ALGORITHM_NAME: usize = 32;

/// Smallest encoding of an [`Entry`]: a directory with an empty path (which is then
/// refused, but the list count check must not depend on validation order).
const ENTRY_MIN_LEN: usize = 8 + 4 + 1 + 4 + 8 + 4 + 4;
/// Largest payload of a [`Piece`]: pieces travel on the control stream.
pub const MAX_PIECE: usize = crate::MAX_CONTROL_BODY / 2;
/// Most rewritten blocks one [`Seal`] may name.
pub const MAX_REWRITTEN: usize = 64 * 1024;
/// Most tail blocks one [`Seal`] may carry digests of.
pub const MAX_TAIL_BLOCKS: usize = 64;

/// Most blocks in one range session (a range of 1 MiB blocks is then at most 1 TiB;
/// the service's ranges are 256 MiB).
pub const MAX_RANGE_BLOCKS: u64 = 1 << 20;
/// Smallest encoding of a [`PlanItem`] (a skip).
const PLAN_ITEM_MIN_LEN: usize = 8 + 1;
/// Encoding of one block range.
const RANGE_LEN: usize = 16;
/// Smallest encoding of a byte string (an empty one).
const BYTES_MIN_LEN: usize = 4;

/// Nanoseconds in a second: `mtime_nsec` must stay below it.
const NANOS_PER_SEC: u32 = 1_000_000_000;
/// Bits allowed in [`Entry::mode`].
const MODE_MASK: u32 = 0o7777;
/// Smallest block size a session may ask for.
const MIN_BLOCK_SIZE: u32 = 1024;

impl Entry {
    /// Bytes this entry takes inside an [`Frame::Entries`] body. The body of an
    /// `Entries` frame is 4 bytes (the count) plus the sum of its entries' `wire_len`,
    /// and must stay within [`crate::MAX_CONTROL_BODY`]: the engine batches with this.
    pub fn wire_len(&self) -> usize {
        let kind = match &self.kind {
            EntryKind::File { digest, .. } => {
                8 + 1 + digest.as_ref().map_or(0, |d| 4 + d.len()) + 1
            }
            EntryKind::Dir => 0,
            EntryKind::Symlink { target } => 4 + target.len(),
            EntryKind::Special(_) => 1 + 8,
            EntryKind::HardLink { target } => 4 + target.len(),
        };
        ENTRY_MIN_LEN + self.path.len() + kind + crate::xattr::wire_len(&self.xattrs) - 4
    }
}

impl PlanItem {
    /// Bytes this item takes inside a [`Frame::Plan`] body. The body of a `Plan` frame
    /// is 4 bytes (the count) plus the sum of its items' `wire_len`, and must stay
    /// within [`crate::MAX_CONTROL_BODY`].
    pub fn wire_len(&self) -> usize {
        match &self.action {
            PlanAction::Skip => PLAN_ITEM_MIN_LEN,
            PlanAction::Send(ranges) => PLAN_ITEM_MIN_LEN + 4 + RANGE_LEN * ranges.len(),
        }
    }
}

/// Appends the body of a control frame. Data frames are handled by the caller.
pub(crate) fn encode_body(frame: &Frame, out: &mut Vec<u8>) {
    match frame {
        Frame::Hello(hello) => encode_hello(hello, out),
        Frame::Welcome(w) => {
            out.extend_from_slice(&w.session);
            out.put_bytes(w.server.as_bytes());
        }
        Frame::Error(e) => {
            out.put_u16(e.code as u16);
            out.put_bytes(e.message.as_bytes());
        }
        Frame::Entries(entries) => {
            out.put_len(entries.len());
            for entry in entries {
                encode_entry(entry, out);
            }
        }
        Frame::Plan(items) => {
            out.put_len(items.len());
            for item in items {
                encode_plan_item(item, out);
            }
        }
        Frame::Data(..) => unreachable!("data frames are encoded by codec::encode"),
        Frame::Resend { file, block } => {
            out.put_u64(*file);
            out.put_u64(*block);
        }
        Frame::Repair {
            file,
            block,
            round,
            patch_len,
            digests,
        } => {
            out.put_u64(*file);
            out.put_u64(*block);
            out.put_u32(*round);
            out.put_u32(*patch_len);
            out.put_len(digests.len());
            for d in digests {
                out.extend_from_slice(d);
            }
        }
        Frame::FileDone {
            file,
            error,
            digest,
        } => {
            out.put_u64(*file);
            match error {
                None => out.put_u8(0),
                Some(e) => {
                    out.put_u8(1);
                    out.put_bytes(e.as_bytes());
                }
            }
            match digest {
                None => out.put_u8(0),
                Some(m) => {
                    out.put_u8(1);
                    out.put_bytes(&m.digest);
                    out.put_bytes(&m.path);
                }
            }
        }
        Frame::FileError { file, message } => {
            out.put_u64(*file);
            out.put_bytes(message.as_bytes());
        }
        Frame::EndOfEntries | Frame::StreamEnd | Frame::KeepAlive => {}
        Frame::StreamLost {
            index,
            generation,
            frames,
            torn,
        } => {
            out.put_u16(*index);
            out.put_u32(*generation);
            out.put_u64(*frames);
            out.put_bool(*torn);
        }
        Frame::Seal(seal) => {
            out.put_u64(seal.file);
            out.put_u64(seal.size);
            out.put_i64(seal.mtime_sec);
            out.put_u32(seal.mtime_nsec);
            out.put_bytes(&seal.digest);
            out.put_len(seal.rewritten.len());
            for b in &seal.rewritten {
                out.put_u64(*b);
            }
            out.put_len(seal.tail.len());
            for (b, d) in &seal.tail {
                out.put_u64(*b);
                out.extend_from_slice(d);
            }
        }
        Frame::Abandon { file } => out.put_u64(*file),
        Frame::Durable { file, offset } => {
            out.put_u64(*file);
            out.put_u64(*offset);
        }
        Frame::Cover {
            file,
            block,
            digest,
        } => {
            out.put_u64(*file);
            out.put_u64(*block);
            out.extend_from_slice(digest);
        }
        Frame::Piece(p) => {
            out.put_u64(p.file);
            out.put_u64(p.offset);
            out.extend_from_slice(&p.digest);
            out.put_bytes(&p.data);
        }
        Frame::Finished(s) => {
            for v in [
                s.files,
                s.bytes,
                s.skipped,
                s.retried_blocks,
                s.failed,
                s.reverified,
                s.damaged_on_arrival,
                s.failed_read_back,
                s.repaired_blocks,
                s.patch_bytes,
                s.streams_rejoined,
            ] {
                out.put_u64(v);
            }
        }
        Frame::Progress(p) => {
            for v in [
                p.files,
                p.total_files,
                p.bytes,
                p.total_bytes,
                p.skipped,
                p.skipped_bytes,
                p.failed,
                p.retried_blocks,
            ] {
                out.put_u64(v);
            }
        }
        Frame::Change(c) => {
            out.put_u8(match c.action {
                ChangeAction::Deleted => CHANGE_DELETED,
                ChangeAction::WouldDelete => CHANGE_WOULD_DELETE,
                ChangeAction::WouldCopy => CHANGE_WOULD_COPY,
                ChangeAction::WouldReplace => CHANGE_WOULD_REPLACE,
                ChangeAction::WouldUpdate => CHANGE_WOULD_UPDATE,
            });
            out.put_bytes(&c.path);
            out.put_u64(c.size);
        }
    }
}

/// Decodes the body of a control frame of kind `kind`.
pub(crate) fn decode_body(kind: FrameKind, body: &[u8]) -> Result<Frame, ProtoError> {
    let mut r = Reader::new(kind.name(), body);
    let frame = match kind {
        FrameKind::Hello => Frame::Hello(decode_hello(&mut r)?),
        FrameKind::Welcome => Frame::Welcome(Welcome {
            session: r.array()?,
            server: r.string()?,
        }),
        FrameKind::Error => Frame::Error(ErrorFrame {
            code: decode_error_code(&mut r)?,
            message: r.string()?,
        }),
        FrameKind::Entries => Frame::Entries(r.list(ENTRY_MIN_LEN, decode_entry)?),
        FrameKind::Plan => Frame::Plan(r.list(PLAN_ITEM_MIN_LEN, decode_plan_item)?),
        FrameKind::Data => {
            return Err(r.err("data frames are decoded with decode_data_fixed"));
        }
        FrameKind::Resend => Frame::Resend {
            file: r.u64()?,
            block: r.u64()?,
        },
        FrameKind::Repair => decode_repair(&mut r)?,
        FrameKind::FileDone => Frame::FileDone {
            file: r.u64()?,
            error: r.option(Reader::string)?,
            digest: r.option(decode_manifest_entry)?,
        },
        FrameKind::FileError => Frame::FileError {
            file: r.u64()?,
            message: r.string()?,
        },
        FrameKind::EndOfEntries => Frame::EndOfEntries,
        FrameKind::Finished => Frame::Finished(Summary {
            files: r.u64()?,
            bytes: r.u64()?,
            skipped: r.u64()?,
            retried_blocks: r.u64()?,
            failed: r.u64()?,
            reverified: r.u64()?,
            damaged_on_arrival: r.u64()?,
            failed_read_back: r.u64()?,
            repaired_blocks: r.u64()?,
            patch_bytes: r.u64()?,
            streams_rejoined: r.u64()?,
        }),
        FrameKind::StreamEnd => Frame::StreamEnd,
        FrameKind::StreamLost => Frame::StreamLost {
            index: r.u16()?,
            generation: r.u32()?,
            frames: r.u64()?,
            torn: r.bool()?,
        },
        FrameKind::KeepAlive => Frame::KeepAlive,
        FrameKind::Seal => Frame::Seal(decode_seal(&mut r)?),
        FrameKind::Abandon => Frame::Abandon { file: r.u64()? },
        FrameKind::Durable => Frame::Durable {
            file: r.u64()?,
            offset: r.u64()?,
        },
        FrameKind::Piece => Frame::Piece(decode_piece(&mut r)?),
        FrameKind::Cover => Frame::Cover {
            file: r.u64()?,
            block: r.u64()?,
            digest: r.array()?,
        },
        FrameKind::Change => Frame::Change(decode_change(&mut r)?),
        FrameKind::Progress => Frame::Progress(RelayProgress {
            files: r.u64()?,
            total_files: r.u64()?,
            bytes: r.u64()?,
            total_bytes: r.u64()?,
            skipped: r.u64()?,
            skipped_bytes: r.u64()?,
            failed: r.u64()?,
            retried_blocks: r.u64()?,
        }),
    };
    r.finish()?;
    Ok(frame)
}

fn decode_seal(r: &mut Reader<'_>) -> Result<Seal, ProtoError> {
    let file = r.u64()?;
    let size = r.u64()?;
    let mtime_sec = r.i64()?;
    let mtime_nsec = r.u32()?;
    if mtime_nsec >= NANOS_PER_SEC {
        return Err(r.err("mtime nanoseconds not below one second"));
    }
    let digest = r.bytes()?;
    if digest.len() > MAX_FILE_DIGEST {
        return Err(r.err("file digest too long"));
    }
    let rewritten = r.list(8, Reader::u64)?;
    if rewritten.len() > MAX_REWRITTEN {
        return Err(r.err("too many rewritten blocks"));
    }
    let tail = r.list(8 + DIGEST_LEN, |r| Ok((r.u64()?, r.array()?)))?;
    if tail.len() > MAX_TAIL_BLOCKS {
        return Err(r.err("too many tail blocks"));
    }
    Ok(Seal {
        file,
        size,
        mtime_sec,
        mtime_nsec,
        digest,
        rewritten,
        tail,
    })
}

fn decode_piece(r: &mut Reader<'_>) -> Result<Piece, ProtoError> {
    let piece = Piece {
        file: r.u64()?,
        offset: r.u64()?,
        digest: r.array()?,
        data: r.bytes()?,
    };
    if piece.data.is_empty() || piece.data.len() > MAX_PIECE {
        return Err(r.err("piece empty or longer than allowed"));
    }
    if piece.offset.checked_add(piece.data.len() as u64).is_none() {
        return Err(r.err("piece ends past the largest offset"));
    }
    Ok(piece)
}

fn encode_hello(hello: &Hello, out: &mut Vec<u8>) {
    match hello {
        Hello::Control {
            token,
            request: req,
        } => {
            out.put_u8(ROLE_CONTROL);
            out.put_bytes(token);
            match &req.op {
                Op::Push { dest, sources } => {
                    out.put_u8(OP_PUSH);
                    out.put_bytes(dest);
                    out.put_u32(*sources);
                }
                Op::Pull { sources } => {
                    out.put_u8(OP_PULL);
                    encode_operands(sources, out);
                }
                Op::Relay { sources, to } => {
                    out.put_u8(OP_RELAY);
                    encode_operands(sources, out);
                    out.put_bytes(to.host.as_bytes());
                    out.extend_from_slice(&to.fingerprint);
                    out.put_bytes(&to.token);
                    out.put_bytes(&to.dest);
                }
                Op::Range(r) => {
                    out.put_u8(OP_RANGE);
                    encode_range(r, out);
                }
            }
            out.put_u16(req.streams);
            out.put_bool(req.encrypt_data);
            out.put_u32(req.block_size);
            match &req.congestion {
                None => out.put_u8(0),
                Some(c) => {
                    out.put_u8(1);
                    out.put_bytes(c.as_bytes());
                }
            }
            out.put_u32(req.send_buffer);
            out.put_u32(req.recv_buffer);
            out.put_u64(req.rate_limit);
            out.put_bool(req.no_clobber);
            out.put_bool(req.fsync);
            encode_integrity(&req.integrity, out);
            out.put_bool(req.preserve_special_modes);
            out.put_bool(req.specials);
            out.put_bool(req.devices);
            out.put_bool(req.hard_links);
            out.put_bool(req.xattrs);
            out.put_bool(req.acls);
            encode_filter(&req.filter, out);
            match &req.delete {
                None => out.put_u8(0),
                Some(d) => {
                    out.put_u8(1);
                    match d.max_delete {
                        None => out.put_u8(0),
                        Some(n) => {
                            out.put_u8(1);
                            out.put_u64(n);
                        }
                    }
                    out.put_bool(d.delete_excluded);
                }
            }
            encode_compression(req.compression, out);
            out.put_bool(req.dry_run);
            out.put_bool(req.reuse);
            out.put_bool(req.chosen_entries);
        }
        Hello::Data {
            session,
            index,
            generation,
            proof,
        } => {
            out.put_u8(ROLE_DATA);
            out.extend_from_slice(session);
            out.put_u16(*index);
            out.put_u32(*generation);
            out.extend_from_slice(proof);
        }
    }
}

fn decode_hello(r: &mut Reader<'_>) -> Result<Hello, ProtoError> {
    Ok(match r.u8()? {
        ROLE_CONTROL => Hello::Control {
            token: r.bytes()?,
            request: decode_session_request(r)?,
        },
        ROLE_DATA => Hello::Data {
            session: r.array()?,
            index: r.u16()?,
            generation: r.u32()?,
            proof: r.array()?,
        },
        _ => return Err(r.err("unknown hello role")),
    })
}

fn decode_session_request(r: &mut Reader<'_>) -> Result<SessionRequest, ProtoError> {
    let op = match r.u8()? {
        // The push destination may legitimately be empty or "." (the server's root), so
        // it is not held to `validate_rel_path`: the server resolves it against its root.
        OP_PUSH => Op::Push {
            dest: r.bytes()?,
            sources: r.u32()?,
        },
        OP_PULL => Op::Pull {
            sources: decode_operands(r)?,
        },
        OP_RELAY => {
            let sources = decode_operands(r)?;
            let host = r.string()?;
            if host.is_empty() || host.len() > MAX_RELAY_HOST {
                return Err(r.err("relay host empty or too long"));
            }
            let fingerprint = r.array()?;
            let token = r.bytes()?;
            if token.len() > MAX_RELAY_TOKEN {
                return Err(r.err("relay token too long"));
            }
            Op::Relay {
                sources,
                to: Box::new(RelayTarget {
                    host,
                    fingerprint,
                    token,
                    // Like a push's destination: resolved by the destination server.
                    dest: r.bytes()?,
                }),
            }
        }
        OP_RANGE => Op::Range(Box::new(decode_range(r)?)),
        _ => return Err(r.err("unknown session op")),
    };
    let req = SessionRequest {
        op,
        streams: r.u16()?,
        encrypt_data: r.bool()?,
        block_size: r.u32()?,
        congestion: r.option(Reader::string)?,
        send_buffer: r.u32()?,
        recv_buffer: r.u32()?,
        rate_limit: r.u64()?,
        no_clobber: r.bool()?,
        fsync: r.bool()?,
        integrity: decode_integrity(r)?,
        preserve_special_modes: r.bool()?,
        specials: r.bool()?,
        devices: r.bool()?,
        hard_links: r.bool()?,
        xattrs: r.bool()?,
        acls: r.bool()?,
        filter: decode_filter(r)?,
        delete: r.option(|r| {
            Ok(DeleteRequest {
                max_delete: r.option(Reader::u64)?,
                delete_excluded: r.bool()?,
            })
        })?,
        compression: decode_compression(r)?,
        dry_run: r.bool()?,
        reuse: r.bool()?,
        chosen_entries: r.bool()?,
    };
    // The engine sizes buffers from the block size, so a hostile one must not get in.
    let bs = req.block_size;
    if !bs.is_power_of_two() || bs < MIN_BLOCK_SIZE || bs as usize > MAX_BLOCK {
        return Err(r.err("block size is not a power of two between 1 KiB and MAX_BLOCK"));
    }
    Ok(req)
}

const COMPRESS_OFF: u8 = 0;
const COMPRESS_AUTO: u8 = 255;

/// One byte: 0 off, 255 auto, otherwise the zstd level.
fn encode_compression(c: Compression, out: &mut Vec<u8>) {
    out.put_u8(match c {
        Compression::Off => COMPRESS_OFF,
        Compression::Auto => COMPRESS_AUTO,
        Compression::Zstd(level) => level,
    });
}

fn decode_compression(r: &mut Reader<'_>) -> Result<Compression, ProtoError> {
    Ok(match r.u8()? {
        COMPRESS_OFF => Compression::Off,
        COMPRESS_AUTO => Compression::Auto,
        l if (MIN_ZSTD_LEVEL..=MAX_ZSTD_LEVEL).contains(&l) => Compression::Zstd(l),
        _ => return Err(r.err("zstd level outside 1..=19")),
    })
}

const STEP_BLOCKS: u8 = 0;
const STEP_COMMIT: u8 = 1;

fn encode_range(req: &RangeRequest, out: &mut Vec<u8>) {
    out.put_bytes(&req.dest);
    out.put_u32(req.sources);
    out.put_bytes(&req.top);
    out.put_bytes(&req.path);
    out.put_u64(req.size);
    out.put_u32(req.mode);
    out.put_i64(req.mtime_sec);
    out.put_u32(req.mtime_nsec);
    match req.step {
        RangeStep::Blocks { first, end } => {
            out.put_u8(STEP_BLOCKS);
            out.put_u64(first);
            out.put_u64(end);
        }
        RangeStep::Commit { parent } => {
            out.put_u8(STEP_COMMIT);
            match parent {
                None => out.put_u8(0),
                Some((mode, sec, nsec)) => {
                    out.put_u8(1);
                    out.put_u32(mode);
                    out.put_i64(sec);
                    out.put_u32(nsec);
                }
            }
        }
    }
}

fn decode_range(r: &mut Reader<'_>) -> Result<RangeRequest, ProtoError> {
    // Like a push's destination: resolved by the server against its root.
    let dest = r.bytes()?;
    let sources = r.u32()?;
    let top = r.bytes()?;
    if top.contains(&b'/') {
        return Err(r.err("range source name has a slash"));
    }
    let path = r.bytes()?;
    if let Some(why) = rel_path_problem(&top).or_else(|| rel_path_problem(&path)) {
        return Err(r.err(why));
    }
    let (size, mode, mtime_sec, mtime_nsec) = (r.u64()?, r.u32()?, r.i64()?, r.u32()?);
    let step = match r.u8()? {
        STEP_BLOCKS => {
            let (first, end) = (r.u64()?, r.u64()?);
            if first >= end {
                return Err(r.err("range of no blocks"));
            }
            // The server holds a set of the range's blocks and looks at each: bound it.
            if end - first > MAX_RANGE_BLOCKS {
                return Err(r.err("range of too many blocks"));
            }
            RangeStep::Blocks { first, end }
        }
        STEP_COMMIT => RangeStep::Commit {
            parent: r.option(|r| Ok((r.u32()?, r.i64()?, r.u32()?)))?,
        },
        _ => return Err(r.err("unknown range step")),
    };
    Ok(RangeRequest {
        dest,
        sources,
        top,
        path,
        size,
        mode,
        mtime_sec,
        mtime_nsec,
        step,
    })
}

/// Longest destination token a relay may carry (tokens are short secrets; this only
/// bounds what a hostile client can make the server hold).
const MAX_RELAY_TOKEN: usize = 4096;

fn encode_operands(sources: &[Vec<u8>], out: &mut Vec<u8>) {
    out.put_len(sources.len());
    for source in sources {
        out.put_bytes(source);
    }
}

/// Source operands of a pull or relay: operands, not entry paths, so `dir/` and ``
/// (the root) are legitimate here; `..`, a leading `/` and NUL are not.
fn decode_operands(r: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, ProtoError> {
    let sources = r.list(BYTES_MIN_LEN, Reader::bytes)?;
    if let Some(why) = sources.iter().find_map(|s| operand_path_problem(s)) {
        return Err(r.err(why));
    }
    Ok(sources)
}

fn encode_filter(f: &FilterRequest, out: &mut Vec<u8>) {
    for list in [&f.include, &f.exclude] {
        out.put_len(list.len());
        for p in list {
            out.put_bytes(p.as_bytes());
        }
    }
}

/// The patterns of a session request, bounded in number and length (the peer's globs
/// are compiled by the receiver: their size must not be the peer's choice).
fn decode_filter(r: &mut Reader<'_>) -> Result<FilterRequest, ProtoError> {
    let include = r.list(BYTES_MIN_LEN, Reader::string)?;
    let exclude = r.list(BYTES_MIN_LEN, Reader::string)?;
    if include.len() + exclude.len() > MAX_FILTER_PATTERNS {
        return Err(r.err("too many include/exclude patterns"));
    }
    if include
        .iter()
        .chain(&exclude)
        .any(|p| p.is_empty() || p.len() > MAX_FILTER_PATTERN_LEN || p.contains('\0'))
    {
        return Err(r.err("include/exclude pattern empty, too long or holding NUL"));
    }
    Ok(FilterRequest { include, exclude })
}

fn decode_change(r: &mut Reader<'_>) -> Result<Change, ProtoError> {
    let action = match r.u8()? {
        CHANGE_DELETED => ChangeAction::Deleted,
        CHANGE_WOULD_DELETE => ChangeAction::WouldDelete,
        CHANGE_WOULD_COPY => ChangeAction::WouldCopy,
        CHANGE_WOULD_REPLACE => ChangeAction::WouldReplace,
        CHANGE_WOULD_UPDATE => ChangeAction::WouldUpdate,
        _ => return Err(r.err("unknown change action")),
    };
    let path = r.bytes()?;
    if let Some(why) = rel_path_problem(&path) {
        return Err(r.err(why));
    }
    let size = r.u64()?;
    Ok(Change { action, path, size })
}

fn encode_integrity(i: &IntegrityRequest, out: &mut Vec<u8>) {
    out.put_bytes(i.checksum.as_bytes());
    out.put_u8(match i.verify {
        Verify::Written => VERIFY_WRITTEN,
        Verify::Received => VERIFY_RECEIVED,
        Verify::None => VERIFY_NONE,
    });
    out.put_u8(match i.schedule {
        Schedule::Block => SCHEDULE_BLOCK,
        Schedule::File => SCHEDULE_FILE,
        Schedule::Sequential => SCHEDULE_SEQUENTIAL,
    });
    out.put_u16(i.hash_threads);
    out.put_bool(i.file_digests);
    out.put_bool(i.checksum_skip);
    out.put_bool(i.compare_only);
    out.put_bool(i.retry_changed);
    out.put_bool(i.trust_journal);
}

fn decode_integrity(r: &mut Reader<'_>) -> Result<IntegrityRequest, ProtoError> {
    let checksum = r.string()?;
    if checksum.is_empty() || checksum.len() > MAX_ALGORITHM_NAME {
        return Err(r.err("checksum name empty or too long"));
    }
    let verify = match r.u8()? {
        VERIFY_WRITTEN => Verify::Written,
        VERIFY_RECEIVED => Verify::Received,
        VERIFY_NONE => Verify::None,
        _ => return Err(r.err("unknown verify mode")),
    };
    let schedule = match r.u8()? {
        SCHEDULE_BLOCK => Schedule::Block,
        SCHEDULE_FILE => Schedule::File,
        SCHEDULE_SEQUENTIAL => Schedule::Sequential,
        _ => return Err(r.err("unknown verify schedule")),
    };
    Ok(IntegrityRequest {
        checksum,
        verify,
        schedule,
        hash_threads: r.u16()?,
        file_digests: r.bool()?,
        checksum_skip: r.bool()?,
        compare_only: r.bool()?,
        retry_changed: r.bool()?,
        trust_journal: r.bool()?,
    })
}

fn file_digest(r: &mut Reader<'_>) -> Result<Vec<u8>, ProtoError> {
    let d = r.bytes()?;
    if d.is_empty() || d.len() > MAX_FILE_DIGEST {
        return Err(r.err("file digest empty or too long"));
    }
    Ok(d)
}

fn decode_manifest_entry(r: &mut Reader<'_>) -> Result<ManifestEntry, ProtoError> {
    let digest = file_digest(r)?;
    let path = r.bytes()?;
    if let Some(why) = rel_path_problem(&path) {
        return Err(r.err(why));
    }
    Ok(ManifestEntry { digest, path })
}

/// A [`Frame::Repair`]: a patch length that is a power of two from [`MIN_PATCH`] to
/// [`crate::MAX_BLOCK`], and 1 to [`MAX_PATCHES`] digests.
fn decode_repair(r: &mut Reader<'_>) -> Result<Frame, ProtoError> {
    let file = r.u64()?;
    let block = r.u64()?;
    let round = r.u32()?;
    if round == 0 {
        return Err(r.err("repair round 0 (rounds count from 1)"));
    }
    let patch_len = r.u32()?;
    if !patch_len.is_power_of_two()
        || patch_len < MIN_PATCH
        || patch_len as usize > crate::MAX_BLOCK
    {
        return Err(r.err("patch length not a power of two within MIN_PATCH..=MAX_BLOCK"));
    }
    let digests = r.list(DIGEST_LEN, |r| r.array())?;
    if digests.is_empty() || digests.len() > MAX_PATCHES {
        return Err(r.err("repair of no patches or more than MAX_PATCHES"));
    }
    Ok(Frame::Repair {
        file,
        block,
        round,
        patch_len,
        digests,
    })
}

fn decode_error_code(r: &mut Reader<'_>) -> Result<ErrorCode, ProtoError> {
    Ok(match r.u16()? {
        1 => ErrorCode::Auth,
        2 => ErrorCode::Version,
        3 => ErrorCode::Path,
        4 => ErrorCode::Protocol,
        5 => ErrorCode::Io,
        6 => ErrorCode::NoSpace,
        7 => ErrorCode::Other,
        8 => ErrorCode::Unavailable,
        9 => ErrorCode::Damaged,
        _ => return Err(r.err("unknown error code")),
    })
}

fn encode_entry(entry: &Entry, out: &mut Vec<u8>) {
    out.put_u64(entry.id);
    out.put_bytes(&entry.path);
    match &entry.kind {
        EntryKind::File {
            size,
            digest,
            growing,
        } => {
            out.put_u8(ENTRY_FILE);
            out.put_u64(*size);
            match digest {
                None => out.put_u8(0),
                Some(d) => {
                    out.put_u8(1);
                    out.put_bytes(d);
                }
            }
            out.put_bool(*growing);
        }
        EntryKind::Dir => out.put_u8(ENTRY_DIR),
        EntryKind::Symlink { target } => {
            out.put_u8(ENTRY_SYMLINK);
            out.put_bytes(target);
        }
        EntryKind::Special(kind) => {
            out.put_u8(ENTRY_SPECIAL);
            let (tag, rdev) = match *kind {
                SpecialKind::Fifo => (SPECIAL_FIFO, 0),
                SpecialKind::Socket => (SPECIAL_SOCKET, 0),
                SpecialKind::CharDevice(rdev) => (SPECIAL_CHAR, rdev),
                SpecialKind::BlockDevice(rdev) => (SPECIAL_BLOCK, rdev),
            };
            out.put_u8(tag);
            out.put_u64(rdev);
        }
        EntryKind::HardLink { target } => {
            out.put_u8(ENTRY_HARDLINK);
            out.put_bytes(target);
        }
    }
    out.put_u32(entry.mode);
    out.put_i64(entry.mtime_sec);
    out.put_u32(entry.mtime_nsec);
    crate::xattr::encode(&entry.xattrs, out);
}

fn decode_entry(r: &mut Reader<'_>) -> Result<Entry, ProtoError> {
    let id = r.u64()?;
    let path = r.bytes()?;
    if let Some(why) = rel_path_problem(&path) {
        return Err(r.err(why));
    }
    let kind = match r.u8()? {
        ENTRY_FILE => EntryKind::File {
            size: r.u64()?,
            digest: r.option(file_digest)?,
            growing: r.bool()?,
        },
        ENTRY_DIR => EntryKind::Dir,
        ENTRY_SYMLINK => {
            let target = r.bytes()?;
            if let Some(why) = link_target_problem(&target) {
                return Err(r.err(why));
            }
            EntryKind::Symlink { target }
        }
        ENTRY_SPECIAL => EntryKind::Special(decode_special(r)?),
        ENTRY_HARDLINK => {
            let target = r.bytes()?;
            if let Some(why) = rel_path_problem(&target) {
                return Err(r.err(why));
            }
            EntryKind::HardLink { target }
        }
        _ => return Err(r.err("unknown entry kind")),
    };
    let entry = Entry {
        id,
        path,
        kind,
        mode: r.u32()?,
        mtime_sec: r.i64()?,
        mtime_nsec: r.u32()?,
        xattrs: crate::xattr::decode(r)?,
    };
    // Both would only fail later, at chmod/utimensat time, far from the cause.
    if entry.mode & !MODE_MASK != 0 {
        return Err(r.err("mode has bits outside 0o7777"));
    }
    if entry.mtime_nsec >= NANOS_PER_SEC {
        return Err(r.err("mtime nanoseconds not below one second"));
    }
    Ok(entry)
}

fn decode_special(r: &mut Reader<'_>) -> Result<SpecialKind, ProtoError> {
    let tag = r.u8()?;
    let rdev = r.u64()?;
    Ok(match tag {
        SPECIAL_FIFO | SPECIAL_SOCKET if rdev != 0 => {
            return Err(r.err("device number on a fifo or socket"))
        }
        SPECIAL_FIFO => SpecialKind::Fifo,
        SPECIAL_SOCKET => SpecialKind::Socket,
        SPECIAL_CHAR => SpecialKind::CharDevice(rdev),
        SPECIAL_BLOCK => SpecialKind::BlockDevice(rdev),
        _ => return Err(r.err("unknown special file kind")),
    })
}

fn encode_plan_item(item: &PlanItem, out: &mut Vec<u8>) {
    out.put_u64(item.id);
    match &item.action {
        PlanAction::Skip => out.put_u8(PLAN_SKIP),
        PlanAction::Send(ranges) => {
            out.put_u8(PLAN_SEND);
            out.put_len(ranges.len());
            for (start, end) in ranges {
                out.put_u64(*start);
                out.put_u64(*end);
            }
        }
    }
}

fn decode_plan_item(r: &mut Reader<'_>) -> Result<PlanItem, ProtoError> {
    let id = r.u64()?;
    let action = match r.u8()? {
        PLAN_SKIP => PlanAction::Skip,
        PLAN_SEND => PlanAction::Send(r.list(RANGE_LEN, |r| {
            let (start, end) = (r.u64()?, r.u64()?);
            if start > end {
                return Err(r.err("block range ends before it starts"));
            }
            Ok((start, end))
        })?),
        _ => return Err(r.err("unknown plan action")),
    };
    Ok(PlanItem { id, action })
}
