//! Manifest lines: `HEX  NAME`, one per file, as `b3sum`, `md5sum` and `sha256sum`
//! write and check them, and as `hetch sum --check` reads them back, any byte in a name.
//!
//! A name with a backslash or newline is escaped (`\\`, `\n`) on a line that starts
//! with a backslash, as all three tools do. Names that are not UTF-8 are where they
//! part: coreutils copies their bytes, and so do manifests of other digests here, but
//! `b3sum --check` reads its manifest as UTF-8 and gives up at the first line that is
//! not, checking nothing after it. A BLAKE3 manifest therefore writes each such byte as
//! `\xNN` on an escaped line: valid UTF-8, so `b3sum --check` reads on, reports that
//! one line as failed ("Invalid backslash escape", as it does for names it cannot
//! represent itself) and checks every other line; hetch reads the name back exactly.

use crate::{to_hex, Algorithm};

/// One manifest line for `path` with `digest` (by `algo`; see the module doc for how
/// names are written), newline included.
pub fn manifest_line(algo: Algorithm, digest: &[u8], path: &std::path::Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let name = path.as_os_str().as_bytes();
    let hex_bytes = algo == Algorithm::Blake3 && std::str::from_utf8(name).is_err();
    let escape = hex_bytes || name.iter().any(|b| *b == b'\\' || *b == b'\n');
    let mut line = Vec::with_capacity(name.len() + 68);
    if escape {
        line.push(b'\\');
    }
    line.extend_from_slice(to_hex(digest).as_bytes());
    line.extend_from_slice(b"  ");
    for chunk in name.utf8_chunks() {
        for &b in chunk.valid().as_bytes() {
            match b {
                b'\\' => line.extend_from_slice(b"\\\\"),
                b'\n' => line.extend_from_slice(b"\\n"),
                _ => line.push(b),
            }
        }
        for &b in chunk.invalid() {
            match hex_bytes {
                true => line.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                false => line.push(b),
            }
        }
    }
    line.push(b'\n');
    line
}

/// Whether `b3sum --check` can check a file of this name (relative to where it runs):
/// the name is UTF-8 without U+FFFD (which b3sum refuses, as the mark of a name it
/// could not represent) and without NUL.
pub fn b3sum_checks(name: &[u8]) -> bool {
    std::str::from_utf8(name).is_ok_and(|s| !s.contains(['\u{fffd}', '\0']))
}

/// A manifest line read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestLine {
    /// The digest.
    pub digest: Vec<u8>,
    /// The file's name, unescaped: any bytes.
    pub name: Vec<u8>,
}

/// Reads one line of a manifest (without or with its newline): `HEX  NAME` or
/// `HEX *NAME` (coreutils' binary mode), or an escaped line (`\HEX  NAME` with `\\`,
/// `\n`, `\r` and `\xNN` in NAME). `None` if it is not such a line.
pub fn parse_manifest_line(line: &[u8]) -> Option<ManifestLine> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let (escaped, line) = match line.strip_prefix(b"\\") {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let hex_len = line.iter().position(|b| !b.is_ascii_hexdigit())?;
    let (hex, rest) = line.split_at(hex_len);
    let name = rest
        .strip_prefix(b"  ")
        .or_else(|| rest.strip_prefix(b" *"))?;
    if hex.is_empty() || hex.len() % 2 != 0 || name.is_empty() {
        return None;
    }
    let digest = hex
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    let name = match escaped {
        true => unescape(name)?,
        false => name.to_vec(),
    };
    Some(ManifestLine { digest, name })
}

/// The bytes `\\`, `\n`, `\r` and `\xNN` in `name` stand for; `None` for any other
/// escape.
fn unescape(name: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(name.len());
    let mut rest = name;
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let (&e, tail) = rest.split_first()?;
        rest = tail;
        out.push(match e {
            b'\\' => b'\\',
            b'n' => b'\n',
            b'r' => b'\r',
            b'x' => {
                let hex = rest.get(..2)?;
                rest = &rest[2..];
                u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?
            }
            _ => return None,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    fn line(algo: Algorithm, name: &[u8]) -> Vec<u8> {
        manifest_line(algo, &[0xab; 32], Path::new(OsStr::from_bytes(name)))
    }

    #[test]
    fn names_are_escaped_like_b3sum() {
        assert!(line(Algorithm::Blake3, b"a b").ends_with(b"abab  a b\n"));
        let odd = line(Algorithm::Blake3, b"x\\y\nz");
        assert!(odd.starts_with(b"\\abab"));
        assert!(odd.ends_with(b"  x\\\\y\\nz\n"), "{odd:?}");
    }

    #[test]
    fn blake3_manifests_are_utf8_and_others_keep_the_bytes() {
        let b3 = line(Algorithm::Blake3, b"caf\xe9\\");
        assert!(b3.starts_with(b"\\abab") && b3.ends_with(b"  caf\\xe9\\\\\n"));
        assert!(std::str::from_utf8(&b3).is_ok());
        let md5 = line(Algorithm::Md5, b"caf\xe9");
        assert!(md5.starts_with(b"abab") && md5.ends_with(b"  caf\xe9\n"));
    }

    #[test]
    fn every_name_reads_back_as_written() {
        let names: [&[u8]; 7] = [
            b"plain",
            b"sub/with space",
            b"back\\slash",
            b"new\nline",
            b"\xff\xfe not utf-8 \\ \n",
            "caf\u{e9} \u{fffd}".as_bytes(),
            b"cr\rx",
        ];
        for algo in [Algorithm::Blake3, Algorithm::Sha256] {
            for name in names {
                let l = line(algo, name);
                let back = parse_manifest_line(&l).unwrap_or_else(|| panic!("{l:?}"));
                assert_eq!(back.name, name, "{algo:?} {l:?}");
                assert_eq!(back.digest, [0xab; 32]);
            }
        }
    }

    #[test]
    fn other_tools_lines_read_and_bad_lines_do_not() {
        let md5 = parse_manifest_line(b"00ff *bin\\ary\n").unwrap();
        assert_eq!(
            (md5.digest, md5.name),
            (vec![0, 0xff], b"bin\\ary".to_vec())
        );
        for bad in [
            &b""[..],
            b"abc  odd digits",
            b"abcd",
            b"abcd  ",
            b"abcd name",
            b"\\abcd  bad \\q escape",
            b"\\abcd  short \\x4",
            b"zz  name",
        ] {
            assert_eq!(parse_manifest_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn b3sum_checks_utf8_names_only() {
        assert!(b3sum_checks(b"new\nline \\"));
        assert!(!b3sum_checks(b"\xff"));
        assert!(!b3sum_checks("\u{fffd}".as_bytes()));
    }
}
