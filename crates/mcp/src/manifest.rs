//! Reading a digest manifest (`b3sum`/`sha256sum`/`md5sum` format, as
//! `hetch cp --manifest` writes it): bounded in lines kept and in line length.

use std::io::{BufRead, BufReader, Read};

use serde_json::{json, Value};

use crate::policy::{refuse, Refusal};

/// Longest line read; a longer one is counted as malformed.
const MAX_LINE: u64 = 64 * 1024;
/// Most bytes of a manifest read (about a million entries); the rest is not counted.
const MAX_READ: u64 = 256 << 20;

/// The first `keep` entries of the manifest at `path` (checked by the caller), and
/// how many lines it has and how many of them are not `DIGEST  PATH`.
pub fn read(path: &str, keep: usize) -> Result<Value, Refusal> {
    use std::os::unix::fs::OpenOptionsExt;
    // Non-blocking and not through a final symlink: a FIFO or a device must not hold
    // the server; only a regular file is read, and at most MAX_READ of it.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| refuse!("{path}: {e}"))?;
    if !f.metadata().map(|m| m.is_file()).unwrap_or(false) {
        return Err(refuse!("{path}: not a regular file"));
    }
    let mut r = BufReader::new(f.take(MAX_READ));
    let (mut total, mut malformed) = (0u64, 0u64);
    let mut entries = Vec::new();
    let mut line = Vec::new();
    while let Some(fits) = next_line(&mut r, &mut line).map_err(|e| refuse!("{path}: {e}"))? {
        if !fits {
            total += 1;
            malformed += 1;
            continue;
        }
        total += 1;
        match parse(&String::from_utf8_lossy(&line)) {
            Some((digest, name)) if entries.len() < keep => {
                entries.push(json!({"digest": digest, "path": name}))
            }
            Some(_) => {}
            None => malformed += 1,
        }
    }
    Ok(json!({
        "manifest": path,
        "lines": total,
        "malformed": malformed,
        "entries": entries,
        "truncated": (entries.len() as u64) < total - malformed,
    }))
}

/// Reads the next line into `line`: None at the end, Some(false) for a line longer
/// than [`MAX_LINE`] (read past in chunks, never held whole).
fn next_line(r: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<Option<bool>> {
    line.clear();
    let mut fits = true;
    loop {
        let n = r.by_ref().take(MAX_LINE).read_until(b'\n', line)?;
        if n == 0 {
            return Ok((!line.is_empty() || !fits).then_some(fits));
        }
        if line.last() == Some(&b'\n') {
            return Ok(Some(fits));
        }
        if n as u64 == MAX_LINE {
            fits = false;
            line.clear();
        }
    }
}

/// `DIGEST  PATH` or `DIGEST *PATH` (a leading `\` marks an escaped path, as b3sum
/// writes names holding a newline or backslash).
fn parse(line: &str) -> Option<(String, String)> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let (escaped, line) = match line.strip_prefix('\\') {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let (digest, name) = line.split_once(' ')?;
    let name = name.strip_prefix([' ', '*'])?;
    if digest.is_empty() || !digest.bytes().all(|b| b.is_ascii_hexdigit()) || name.is_empty() {
        return None;
    }
    let name = if escaped {
        unescape(name)?
    } else {
        name.to_string()
    };
    Some((digest.to_ascii_lowercase(), name))
}

/// Undoes b3sum's escaping in one pass: `\\n` is a newline, `\\\\` a backslash, any
/// other escape is malformed.
fn unescape(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            '\\' => out.push('\\'),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_parsed_and_bounded() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("m");
        let mut text = String::new();
        for i in 0..10 {
            text.push_str(&format!("{:064x}  dir/f{i}\n", i));
        }
        text.push_str("not a manifest line\n");
        text.push_str(&format!("\\{:064x}  a\\nb\n", 1));
        text.push_str(&"z".repeat(200_000));
        text.push('\n');
        std::fs::write(&p, text).unwrap();
        let v = read(p.to_str().unwrap(), 3).unwrap();
        assert_eq!(v["lines"], 13);
        assert_eq!(v["malformed"], 2);
        assert_eq!(v["entries"].as_array().unwrap().len(), 3);
        assert_eq!(v["entries"][2]["path"], "dir/f2");
        assert_eq!(v["truncated"], true);
        assert_eq!(parse(&format!("\\{:064x}  a\\nb", 1)).unwrap().1, "a\nb");
        // An escaped backslash followed by "n" is a backslash and an "n".
        assert_eq!(parse(&format!("\\{:064x}  a\\\\nb", 1)).unwrap().1, "a\\nb");
        assert!(parse(&format!("\\{:064x}  a\\x", 1)).is_none());
        // A FIFO is refused at once, not waited on.
        let fifo = t.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(read(fifo.to_str().unwrap(), 3).is_err());
        assert!(parse("abc *x").is_some());
        assert!(parse("xyz  x").is_none());
        assert!(read(t.path().to_str().unwrap(), 3).is_err());
    }
}
