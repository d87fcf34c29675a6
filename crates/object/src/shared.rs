//! One object uploaded in parts by several writers at once (the ranges of a large
//! file moved by several workers), completed once by whoever checks them all.
//!
//! Each range of the file is whole parts ([`RangeCut`]), numbered by their place in
//! the file, so a range run again uploads its parts again under the same numbers (S3
//! overwrites a part; Azure takes the block ids the report names). The writers report
//! each range's part ids and its blocks' BLAKE3 digests; [`check_ranges`] merges the digests into the
//! whole-file BLAKE3 (the file is not read again) after checking that every block of
//! the file is in exactly one reported range and every part has the range's size;
//! [`Bucket::complete_with_blake3`] then completes the upload and stores that BLAKE3
//! on the object:
//! - Azure: as metadata of the Put Block List that makes the blob (one request).
//! - S3: CompleteMultipartUpload carries no metadata, and CopyObject (the usual way to
//!   change it) stops at 5 GiB, so the digest is an object tag (`hetch-blake3`), put
//!   right after the completion; an object whose tag cannot be put is deleted, so
//!   that no object is left without its digest.
//! - GCS: completed without it (see the guide: GCS stays on the whole-file path).

use std::ops::Range;

use bytes::Bytes;
use hetch_integrity::{Digest, FileDigest};

use crate::bucket::{BLAKE3_META, MTIME_META};
use crate::direct::Answer;
use crate::{Bucket, ObjectError, PutMeta, RangeCut, Scheme};

/// Longest part id a writer may report: S3 ETags are 34 bytes, Azure's block ids
/// (as object_store makes them) 32; more is not an id.
pub const MAX_PART_ID: usize = 256;

/// One range's parts as its writer reported them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangePart {
    /// Its first block.
    pub first: u64,
    /// One past its last block.
    pub end: u64,
    /// What completing the upload needs of each of its parts, in order (ETags or
    /// block ids).
    pub parts: Vec<String>,
    /// Its parts' bytes.
    pub size: u64,
    /// Its blocks' BLAKE3 digests, in order.
    pub digests: Vec<Digest>,
}

/// The index (from 0) of the part holding block `block`.
pub fn part_index(block: u64, cut: RangeCut) -> u64 {
    block / cut.part_blocks.max(1)
}

/// The parts of blocks `first..end` (a range of `cut`): their indexes and blocks.
pub fn parts_of(first: u64, end: u64, cut: RangeCut) -> impl Iterator<Item = (u64, Range<u64>)> {
    let per = cut.part_blocks.max(1);
    (first..end)
        .step_by(per as usize)
        .map(move |b| (b / per, b..(b + per).min(end)))
}

/// Checks that `ranges` (in file order) cover the `size`-byte file cut into
/// `block_size` blocks as `cut` says, each block once, each range with its bytes and
/// one id within bounds per part, and merges their digests: the whole-file BLAKE3 and
/// the part ids in order, or one line saying what is wrong. Memory: the part ids, and
/// the merge's O(log blocks) (ranges come in order).
pub fn check_ranges(
    size: u64,
    block_size: u64,
    cut: RangeCut,
    ranges: impl IntoIterator<Item = RangePart>,
) -> Result<(Digest, Vec<String>), String> {
    let bs = block_size.max(1);
    let blocks = hetch_integrity::block_count(size, bs);
    let per = cut.range_blocks.max(1);
    let mut merge = FileDigest::new(size, bs);
    let mut ids = Vec::new();
    let mut next = 0;
    for r in ranges {
        let want_end = (next + per).min(blocks);
        if r.first != next || r.end != want_end {
            return Err(format!(
                "range {}..{} reported where blocks {next}..{want_end} were due",
                r.first, r.end
            ));
        }
        let bytes = (r.end * bs).min(size) - (r.first * bs).min(size);
        if r.size != bytes {
            return Err(format!(
                "the part of blocks {}..{} has {} bytes, not the range's {bytes}",
                r.first, r.end, r.size
            ));
        }
        if r.digests.len() as u64 != r.end - r.first {
            return Err(format!(
                "blocks {}..{}: {} digests reported",
                r.first,
                r.end,
                r.digests.len()
            ));
        }
        let want = parts_of(r.first, r.end, cut).count();
        if r.parts.len() != want {
            return Err(format!(
                "blocks {}..{}: {} part ids reported for its {want} parts",
                r.first,
                r.end,
                r.parts.len()
            ));
        }
        if r.parts
            .iter()
            .any(|p| p.is_empty() || p.len() > MAX_PART_ID)
        {
            return Err(format!(
                "blocks {}..{}: a part id empty or over {MAX_PART_ID} bytes",
                r.first, r.end
            ));
        }
        for (i, d) in (r.first..r.end).zip(r.digests) {
            merge.add(i, d).map_err(|e| e.to_string())?;
        }
        ids.extend(r.parts);
        next = r.end;
    }
    if next != blocks {
        return Err(format!(
            "blocks {next}..{blocks} of {blocks} have no range reported"
        ));
    }
    let whole = merge.finish().map_err(|e| e.to_string())?;
    Ok((whole, ids))
}

impl Bucket {
    /// Completes upload `upload` of `key` from `parts` (in order), the object carrying
    /// `meta`'s BLAKE3 (see the module documentation for where each store keeps it).
    /// On S3, an object whose digest cannot be stored is deleted again.
    pub async fn complete_with_blake3(
        &self,
        key: &str,
        upload: &str,
        parts: Vec<String>,
        meta: &PutMeta,
    ) -> Result<(), ObjectError> {
        match (self.scheme(), &self.direct) {
            (Scheme::Azure, Some(direct)) => {
                let mut headers = vec![("content-type".to_string(), "application/xml".into())];
                let name = |n: &str| format!("x-ms-meta-{}", n.replace('-', "_"));
                if let Some((s, ns)) = meta.mtime {
                    headers.push((name(MTIME_META), format!("{s}.{ns:09}")));
                }
                if let Some(d) = meta.blake3 {
                    headers.push((name(BLAKE3_META), hex::encode(d)));
                }
                let body = block_list(&parts);
                let url = direct.url(key, "comp=blocklist");
                let failed = |a: Option<Answer>, what: String| self.answer_err(key, a, what);
                direct
                    .send(http::Method::PUT, &url, &headers, body, failed)
                    .await?;
                Ok(())
            }
            (Scheme::S3, Some(_)) => {
                self.complete_multipart(key, upload, parts).await?;
                let Some(d) = meta.blake3 else { return Ok(()) };
                if let Err(e) = self.tag_blake3(key, &d).await {
                    let _ = self.delete(key).await;
                    return Err(e);
                }
                Ok(())
            }
            _ => self.complete_multipart(key, upload, parts).await,
        }
    }

    /// Puts `digest` as the `hetch-blake3` tag of S3 object `key` (also how a commit
    /// run again after a crash between completion and tagging finishes the object).
    pub async fn tag_blake3(&self, key: &str, digest: &Digest) -> Result<(), ObjectError> {
        use base64::Engine as _;
        use sha2::Digest as _;
        let Some(direct) = &self.direct else {
            return Ok(());
        };
        let body = format!(
            "<Tagging><TagSet><Tag><Key>{BLAKE3_META}</Key><Value>{}</Value></Tag></TagSet></Tagging>",
            hex::encode(digest)
        );
        let sha = sha2::Sha256::digest(body.as_bytes());
        let b64 = base64::engine::general_purpose::STANDARD;
        let headers = [("x-amz-checksum-sha256".to_string(), b64.encode(sha))];
        let url = direct.url(key, "tagging");
        let failed = |a: Option<Answer>, what: String| self.answer_err(key, a, what);
        direct
            .send(http::Method::PUT, &url, &headers, Bytes::from(body), failed)
            .await?;
        Ok(())
    }

    /// The BLAKE3 stored on object `key`: its metadata, or on S3 its `hetch-blake3`
    /// tag (where a multipart object keeps it). `None` when it has neither.
    pub async fn stored_blake3(&self, key: &str) -> Result<Option<Digest>, ObjectError> {
        let head = self.head(key).await?;
        if let Some(d) = head.as_ref().and_then(|h| h.blake3) {
            return Ok(Some(d));
        }
        let (Some(direct), Scheme::S3, Some(_)) = (&self.direct, self.scheme(), head) else {
            return Ok(None);
        };
        let url = direct.url(key, "tagging");
        let failed = |a: Option<Answer>, what: String| self.answer_err(key, a, what);
        let a = direct
            .send(http::Method::GET, &url, &[], Bytes::new(), failed)
            .await?;
        Ok(tag_value(&a.body, BLAKE3_META)
            .and_then(|v| hex::decode(v).ok())
            .and_then(|d| d.try_into().ok()))
    }
}

/// Azure's Put Block List body: each part's block, as object_store names it (the
/// base64 of the id its `put_part` returned).
fn block_list(parts: &[String]) -> Bytes {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut s = String::from(r#"<?xml version="1.0" encoding="utf-8"?><BlockList>"#);
    for p in parts {
        s.push_str(&format!("<Latest>{}</Latest>", b64.encode(p)));
    }
    s.push_str("</BlockList>");
    Bytes::from(s)
}

/// The value of tag `key` in a GetObjectTagging answer.
fn tag_value<'a>(body: &'a str, key: &str) -> Option<&'a str> {
    let at = body.find(&format!("<Key>{key}</Key>"))?;
    let rest = &body[at..];
    let start = rest.find("<Value>")? + "<Value>".len();
    let len = rest[start..].find("</Value>")?;
    Some(&rest[start..start + len])
}

#[cfg(test)]
mod tests {
    use super::*;

    const BS: u64 = 1024;

    fn cut(part_blocks: u64, range_blocks: u64) -> RangeCut {
        RangeCut {
            part_blocks,
            range_blocks,
        }
    }

    /// A file of `size` bytes, its ranges' reports (ranges of `c`) and its BLAKE3.
    fn reports(size: u64, c: RangeCut) -> (Vec<RangePart>, Digest) {
        let per = c.range_blocks;
        let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        let blocks = hetch_integrity::block_count(size, BS);
        let mut out = Vec::new();
        let mut first = 0;
        while first < blocks {
            let end = (first + per).min(blocks);
            let digests = (first..end)
                .map(|i| {
                    let a = (i * BS) as usize;
                    let b = ((i + 1) * BS).min(size) as usize;
                    hetch_integrity::block_digest(size, BS, i, &data[a..b])
                })
                .collect();
            let bytes = (end * BS).min(size) - first * BS;
            out.push(RangePart {
                first,
                end,
                parts: parts_of(first, end, c)
                    .map(|(n, _)| format!("etag-{n}"))
                    .collect(),
                size: bytes,
                digests,
            });
            first = end;
        }
        (out, *blake3::hash(&data).as_bytes())
    }

    #[test]
    fn ranges_merge_into_the_whole_files_blake3() {
        for (size, c, parts) in [
            (10 * BS + 17, cut(1, 3), 11),
            (10 * BS + 17, cut(2, 4), 6),
            (4 * BS, cut(4, 4), 1),
            (BS, cut(1, 1), 1),
            (9 * BS, cut(2, 2), 5),
        ] {
            let (r, whole) = reports(size, c);
            let (got, ids) = check_ranges(size, BS, c, r).unwrap();
            assert_eq!(got, whole, "{size} in {c:?}");
            let want: Vec<String> = (0..parts).map(|n| format!("etag-{n}")).collect();
            assert_eq!(ids, want, "{size} in {c:?}");
        }
    }

    /// A change making good reports bad.
    type Change = Box<dyn Fn(&mut Vec<RangePart>)>;

    #[test]
    fn a_wrong_report_fails_the_check_in_one_line() {
        let (size, c) = (10 * BS + 17, cut(1, 3));
        let (good, whole) = reports(size, c);
        let bad: Vec<(&str, Change)> = vec![
            ("missing", Box::new(|r| drop(r.pop()))),
            ("due", Box::new(|r| drop(r.remove(1)))),
            ("due", Box::new(|r| r.swap(0, 1))),
            ("bytes", Box::new(|r| r[0].size += 1)),
            ("digests", Box::new(|r| r[2].digests.truncate(1))),
            (
                "part id",
                Box::new(|r| r[1].parts[0] = "x".repeat(MAX_PART_ID + 1)),
            ),
            ("part id", Box::new(|r| r[1].parts[2].clear())),
            ("part ids", Box::new(|r| drop(r[1].parts.pop()))),
            ("due", Box::new(|r| r[0].end += 1)),
        ];
        for (what, f) in bad {
            let mut r = good.clone();
            f(&mut r);
            let e = check_ranges(size, BS, c, r).unwrap_err();
            assert!(e.contains(what) || e.contains("no range"), "{what}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        // A block whose digest is not its data's: the merge is not the file's.
        let mut r = good;
        r[1].digests[0][0] ^= 1;
        assert_ne!(check_ranges(size, BS, c, r).unwrap().0, whole);
    }

    #[test]
    fn tags_and_block_lists_are_read_and_written() {
        let body = "<Tagging><TagSet><Tag><Key>a</Key><Value>1</Value></Tag>\
                    <Tag><Key>hetch-blake3</Key><Value>ab</Value></Tag></TagSet></Tagging>";
        assert_eq!(tag_value(body, "hetch-blake3"), Some("ab"));
        assert_eq!(tag_value(body, "b"), None);
        let l = block_list(&["00".into()]);
        assert!(std::str::from_utf8(&l)
            .unwrap()
            .contains("<Latest>MDA=</Latest>"));
    }
}
