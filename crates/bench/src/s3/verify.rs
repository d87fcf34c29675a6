//! Checking a run's result against its source: a download's directory by BLAKE3 of
//! every file, hashed here; an upload's objects by SHA-256 of every object as
//! `hetch sum --checksum sha256` reads them back from the store. (SHA-256 there, not
//! hetch's default BLAKE3, so that the check of hetch's own uploads does not use the
//! algorithm hetch computed while copying.) Both must hold exactly the source's files:
//! none missing, none extra, none different.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use sha2::Digest as _;

/// A digest (hex) of each file, by path relative to the tree's root (`/`-separated).
pub(crate) type Digests = BTreeMap<String, String>;

/// The hash a set of [`Digests`] is made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hash {
    /// BLAKE3 (downloads, checked here).
    Blake3,
    /// SHA-256 (uploads, as `hetch sum --checksum sha256` prints it).
    Sha256,
}

/// The digests of every regular file under `root`.
pub(crate) fn tree_digests(root: &Path, hash: Hash) -> Result<Digests, String> {
    let mut out = Digests::new();
    for entry in walkdir::WalkDir::new(root).follow_links(false) {
        let entry = entry.map_err(|e| e.to_string())?;
        if !entry.file_type().is_file() {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(root)
            .map_err(|e| e.to_string())?
            .to_string_lossy()
            .into_owned();
        out.insert(rel, file_digest(entry.path(), hash)?);
    }
    Ok(out)
}

/// The digest of one file, read in large chunks (the hashes' SIMD paths want long
/// inputs).
fn file_digest(path: &Path, hash: Hash) -> Result<String, String> {
    let mut f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut b3 = blake3::Hasher::new();
    let mut sha = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        match hash {
            Hash::Blake3 => {
                b3.update(&buf[..n]);
            }
            Hash::Sha256 => sha.update(&buf[..n]),
        }
    }
    Ok(match hash {
        Hash::Blake3 => b3.finalize().to_hex().to_string(),
        Hash::Sha256 => hex(&sha.finalize()),
    })
}

/// Lowercase hex, as `sha256sum` prints it.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The digests in `hetch sum` output for the objects under `url` (`s3://B/PREFIX`):
/// lines `DIGEST  s3://B/PREFIX/REL`, keyed by REL.
pub(crate) fn parse_sum(output: &str, url: &str) -> Result<Digests, String> {
    let base = format!("{}/", url.trim_end_matches('/'));
    let mut out = Digests::new();
    for line in output.lines().filter(|l| !l.trim().is_empty()) {
        let (digest, path) = line
            .split_once("  ")
            .ok_or_else(|| format!("hetch sum printed an odd line: {line}"))?;
        let rel = path
            .strip_prefix(&base)
            .ok_or_else(|| format!("hetch sum listed {path}, outside {base}"))?;
        out.insert(rel.to_string(), digest.to_string());
    }
    Ok(out)
}

/// Whether `got` is exactly `want`; otherwise one line: the counts, and the first
/// missing, extra and different paths.
pub(crate) fn compare(want: &Digests, got: &Digests) -> Result<(), String> {
    if want == got {
        return Ok(());
    }
    let missing: Vec<&String> = want.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<&String> = got.keys().filter(|k| !want.contains_key(*k)).collect();
    let differ: Vec<&String> = want
        .iter()
        .filter(|(k, d)| got.get(*k).is_some_and(|g| g != *d))
        .map(|(k, _)| k)
        .collect();
    let mut parts = vec![format!("{} files, expected {}", got.len(), want.len())];
    for (what, list) in [
        ("missing", &missing),
        ("unexpected", &extra),
        ("different content", &differ),
    ] {
        if let Some(first) = list.first() {
            parts.push(format!("{} {what} (first: {first})", list.len()));
        }
    }
    Err(parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_compare_by_content_and_sum_output_parses() {
        let t = tempfile::tempdir().unwrap();
        let a = t.path().join("a");
        std::fs::create_dir_all(a.join("d")).unwrap();
        std::fs::write(a.join("f"), b"one").unwrap();
        std::fs::write(a.join("d/g"), b"two").unwrap();
        let want = tree_digests(&a, Hash::Blake3).unwrap();
        assert_eq!(want.len(), 2);
        assert_eq!(want["f"], blake3::hash(b"one").to_hex().to_string());
        let sha = tree_digests(&a, Hash::Sha256).unwrap();
        // sha256sum of "one".
        assert_eq!(
            sha["f"],
            "7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed"
        );
        compare(&want, &want).unwrap();

        let mut got = want.clone();
        got.insert("d/g".into(), blake3::hash(b"tw0").to_hex().to_string());
        got.insert("x".into(), "00".into());
        got.remove("f");
        let e = compare(&want, &got).unwrap_err();
        assert_eq!(
            e,
            "2 files, expected 2; 1 missing (first: f); 1 unexpected (first: x); \
             1 different content (first: d/g)"
        );

        let text = format!(
            "{}  s3://bench/up/r1/d/g\n{}  s3://bench/up/r1/f\n",
            want["d/g"], want["f"]
        );
        assert_eq!(parse_sum(&text, "s3://bench/up/r1").unwrap(), want);
        assert!(parse_sum(&text, "s3://bench/up/r2").is_err());
        assert!(parse_sum("garbage", "s3://bench/up/r1").is_err());
    }
}
