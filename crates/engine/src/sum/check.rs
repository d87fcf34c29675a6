//! `hetch sum --check`: the files a manifest names, hashed again and compared with its
//! digests. It reads every manifest [`super::write_manifest`] and a copy's
//! `--manifest` write, whatever bytes the names hold (`b3sum --check` cannot read all
//! of them), and the manifests of b3sum, md5sum and sha256sum.

use std::io::BufRead;
use std::path::Path;
use std::sync::Mutex;

use hetch_integrity::{parse_manifest_line, Algorithm};

use super::sum_file_with;

/// What one line of a manifest came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    /// The file (its name) has the manifest's digest.
    Ok(Vec<u8>),
    /// The file's digest is another; or, with the error, it could not be read.
    Failed(Vec<u8>, Option<String>),
    /// The line (numbered from 1) is not a manifest line with a digest of the
    /// algorithm's length.
    BadLine(u64),
}

/// How many lines of a manifest came to what.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checks {
    /// Files with their digests.
    pub ok: u64,
    /// Files with another digest, or unreadable.
    pub failed: u64,
    /// Lines that are not manifest lines.
    pub bad_lines: u64,
}

/// Checks each line of `manifest` (digests by `algo`; names relative to the current
/// directory, as the tools' checks take them), `threads` files at a time, telling
/// `each` every outcome as it comes (in no particular order; one call at a time, so
/// that lines printed do not mix). Stops at the first
/// error of reading the manifest or of `each` (e.g. writing its line out).
pub fn check_manifest(
    manifest: &mut (dyn BufRead + Send),
    algo: Algorithm,
    block_size: u64,
    threads: usize,
    each: &(dyn Fn(Checked) -> std::io::Result<()> + Sync),
) -> std::io::Result<Checks> {
    let lines = Mutex::new((manifest, 0u64));
    let checks = Mutex::new(Checks::default());
    let stopped = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                let mut buf = Vec::new();
                loop {
                    let mut line = Vec::new();
                    let number = {
                        let mut l = lines.lock().expect("lines lock");
                        match l.0.read_until(b'\n', &mut line) {
                            Ok(0) => break,
                            Ok(_) => l.1 += 1,
                            Err(e) => {
                                stopped.lock().expect("lock").get_or_insert(e);
                                break;
                            }
                        }
                        l.1
                    };
                    if stopped.lock().expect("lock").is_some() {
                        break;
                    }
                    let outcome = check_line(&line, number, algo, block_size, &mut buf);
                    let mut c = checks.lock().expect("checks lock");
                    match outcome {
                        Checked::Ok(_) => c.ok += 1,
                        Checked::Failed(..) => c.failed += 1,
                        Checked::BadLine(_) => c.bad_lines += 1,
                    }
                    if let Err(e) = each(outcome) {
                        stopped.lock().expect("lock").get_or_insert(e);
                        break;
                    }
                }
            });
        }
    });
    match stopped.into_inner().expect("lock") {
        Some(e) => Err(e),
        None => Ok(checks.into_inner().expect("checks lock")),
    }
}

/// The outcome of manifest line `line` (number `number`).
fn check_line(
    line: &[u8],
    number: u64,
    algo: Algorithm,
    block_size: u64,
    buf: &mut Vec<u8>,
) -> Checked {
    use std::os::unix::ffi::OsStrExt;
    let parsed = parse_manifest_line(line).filter(|l| l.digest.len() == algo.digest_len());
    let Some(l) = parsed else {
        return Checked::BadLine(number);
    };
    let path = Path::new(std::ffi::OsStr::from_bytes(&l.name));
    match sum_file_with(algo, path, block_size, buf) {
        Ok(d) if d == l.digest => Checked::Ok(l.name),
        Ok(_) => Checked::Failed(l.name, None),
        Err(e) => Checked::Failed(l.name, Some(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of outcome, counted and told, with names no UTF-8 manifest holds.
    #[test]
    fn every_line_is_checked_and_told() {
        use std::os::unix::ffi::OsStrExt;
        let t = tempfile::tempdir().unwrap();
        let names: [&[u8]; 3] = [b"plain", b"new\nline \\", b"\xff\xfe"];
        let dir = t.path().as_os_str().as_bytes();
        let mut manifest = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let p = Path::new(std::ffi::OsStr::from_bytes(&[dir, b"/", name].concat())).to_owned();
            std::fs::write(&p, vec![i as u8; 5000]).unwrap();
            let d = sum_file_with(Algorithm::Blake3, &p, 4096, &mut Vec::new()).unwrap();
            manifest.extend(hetch_integrity::manifest_line(Algorithm::Blake3, &d, &p));
        }
        std::fs::write(t.path().join("plain"), b"changed").unwrap();
        manifest.extend(b"not a line\n");
        let gone = t.path().join("gone");
        manifest.extend(hetch_integrity::manifest_line(
            Algorithm::Blake3,
            &[0; 32],
            &gone,
        ));
        let told = Mutex::new(Vec::new());
        let checks = check_manifest(&mut &manifest[..], Algorithm::Blake3, 4096, 3, &|c| {
            told.lock().unwrap().push(c);
            Ok(())
        })
        .unwrap();
        let want = Checks {
            ok: 2,
            failed: 2,
            bad_lines: 1,
        };
        assert_eq!(checks, want);
        let told = told.into_inner().unwrap();
        assert!(told.contains(&Checked::BadLine(4)), "{told:?}");
        let name = |n: &[u8]| [dir, b"/", n].concat();
        assert!(told.contains(&Checked::Ok(name(b"\xff\xfe"))), "{told:?}");
        assert!(
            told.contains(&Checked::Failed(name(b"plain"), None)),
            "{told:?}"
        );
        assert!(told
            .iter()
            .any(|c| matches!(c, Checked::Failed(n, Some(_)) if *n == name(b"gone"))));
    }

    #[test]
    fn a_digest_of_another_algorithm_is_a_bad_line() {
        let md5 = b"d41d8cd98f00b204e9800998ecf8427e  empty\n";
        let checks = check_manifest(&mut &md5[..], Algorithm::Blake3, 4096, 1, &|_| Ok(()));
        assert_eq!(checks.unwrap().bad_lines, 1);
    }
}
