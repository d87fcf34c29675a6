//! Benchmark datasets: uniform files of one size, made once on disk and reused.
//!
//! Two families, both as in the papers:
//! - the *sweep* datasets of the zx paper (seed 000): file sizes in powers of two, each
//!   a "hyperscale dataset" scaled down: as many files as fit a fixed aggregate size,
//!   but no more than a cap on the file count;
//! - the six datasets of paper 003 (Table II): equal total size, from one big file to
//!   100,000 small ones (each file 1/10 of the previous one's size, 10x as many).

use std::io::Write;
use std::path::{Path, PathBuf};

/// Files per directory: large counts are spread over subdirectories, as instruments and
/// users do, so no directory holds more than this.
const FILES_PER_DIR: u64 = 1000;

/// One dataset: `files` files of `file_size` bytes each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dataset {
    /// Its name in results (also the directory it is made in).
    pub name: String,
    /// Bytes per file.
    pub file_size: u64,
    /// Number of files.
    pub files: u64,
}

impl Dataset {
    /// A dataset named after its shape, e.g. `1MiB-x1024`.
    pub fn uniform(file_size: u64, files: u64) -> Dataset {
        Dataset {
            name: format!("{}-x{files}", size_name(file_size)),
            file_size,
            files,
        }
    }

    /// Total bytes.
    pub fn bytes(&self) -> u64 {
        self.file_size * self.files
    }

    /// The relative path of file `i`: `f000000` at the top for small sets, otherwise
    /// `d000/f000000` with [`FILES_PER_DIR`] files per directory.
    pub fn rel_path(&self, i: u64) -> PathBuf {
        if self.files <= FILES_PER_DIR {
            PathBuf::from(format!("f{i:06}"))
        } else {
            PathBuf::from(format!("d{:03}/f{i:06}", i / FILES_PER_DIR))
        }
    }

    /// Makes the dataset under `root/NAME` unless a complete copy is already there, and
    /// returns its directory. A mark next to the directory (`NAME.ready`, written last)
    /// records what was made, so an interrupted run is made again rather than trusted.
    pub fn materialise(&self, root: &Path) -> std::io::Result<PathBuf> {
        let dir = root.join(&self.name);
        let mark = root.join(format!("{}.ready", self.name));
        let want = format!("{} {}\n", self.file_size, self.files);
        if std::fs::read_to_string(&mark).is_ok_and(|m| m == want) {
            return Ok(dir);
        }
        let _ = std::fs::remove_file(&mark);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        let mut buf = vec![0u8; self.file_size.min(8 << 20) as usize];
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ self.file_size);
        for i in 0..self.files {
            let path = dir.join(self.rel_path(i));
            if i % FILES_PER_DIR == 0 {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
            }
            let mut f = std::fs::File::create(&path)?;
            let mut left = self.file_size;
            while left > 0 {
                let n = left.min(buf.len() as u64) as usize;
                rng.fill(&mut buf[..n]);
                f.write_all(&buf[..n])?;
                left -= n as u64;
            }
        }
        std::fs::write(&mark, want)?;
        Ok(dir)
    }

    /// Checks that `dst` holds every file of the dataset with its full size; returns the
    /// first discrepancy as one line. (Content is each tool's own business to verify:
    /// reading it all back would double every run; sizes catch short and missing files.)
    pub fn check_copy(&self, dst: &Path) -> Result<(), String> {
        for i in 0..self.files {
            let rel = self.rel_path(i);
            match std::fs::metadata(dst.join(&rel)) {
                Ok(m) if m.is_file() && m.len() == self.file_size => {}
                Ok(m) => {
                    return Err(format!(
                        "{}: {} bytes, expected {}",
                        rel.display(),
                        m.len(),
                        self.file_size
                    ))
                }
                Err(e) => return Err(format!("{}: {e}", rel.display())),
            }
        }
        Ok(())
    }

    /// Checks that `dst` holds the empty done marker (`REL` + `suffix`) of every file
    /// of the dataset, as a streaming copy must deliver them; returns the first one
    /// missing as one line. Markers count no bytes: [`Dataset::bytes`] is the files'.
    pub fn check_markers(&self, dst: &Path, suffix: &str) -> Result<(), String> {
        for i in 0..self.files {
            let mut rel = self.rel_path(i).into_os_string();
            rel.push(suffix);
            let rel = PathBuf::from(rel);
            match std::fs::metadata(dst.join(&rel)) {
                Ok(m) if m.is_file() && m.len() == 0 => {}
                Ok(m) => return Err(format!("{}: {} bytes, expected 0", rel.display(), m.len())),
                Err(e) => return Err(format!("{}: {e}", rel.display())),
            }
        }
        Ok(())
    }
}

/// The sweep datasets: sizes `min, min*factor, ...` up to `max`, each with
/// `min(max_files, aggregate / size)` files (at least one), smallest first.
pub fn sweep(min: u64, max: u64, factor: u64, aggregate: u64, max_files: u64) -> Vec<Dataset> {
    let mut out = Vec::new();
    let mut size = min.max(1);
    while size <= max {
        let files = (aggregate / size).clamp(1, max_files.max(1));
        out.push(Dataset::uniform(size, files));
        match size.checked_mul(factor.max(2)) {
            Some(s) => size = s,
            None => break,
        }
    }
    out
}

/// The six datasets of paper 003 (Table II) scaled to `total` bytes each: 1 file of
/// `total`, 10 of `total/10`, ... 100,000 of `total/100,000`; named `003-1` .. `003-6`.
/// Smallest files last, as in the paper's table; the runner orders by file size.
pub fn paper003(total: u64) -> Vec<Dataset> {
    (0..6u32)
        .map(|k| {
            let files = 10u64.pow(k);
            Dataset {
                name: format!("003-{}-{}", k + 1, size_name(total / files)),
                file_size: total / files,
                files,
            }
        })
        .collect()
}

/// `1KiB`, `4MiB`, `1GiB`, or plain bytes when not a whole binary unit.
pub fn size_name(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, unit) in UNITS {
        if n >= unit && n % unit == 0 {
            return format!("{}{name}", n / unit);
        }
    }
    if n >= 1000 && n % 1000 == 0 {
        // Decimal datasets (paper 003 sizes): 100kB, 10MB.
        for (name, unit) in [("GB", 1_000_000_000u64), ("MB", 1_000_000), ("kB", 1000)] {
            if n >= unit && n % unit == 0 {
                return format!("{}{name}", n / unit);
            }
        }
    }
    format!("{n}B")
}

/// Incompressible filler: no tool gains from compression or deduplication, and making
/// gigabytes takes well under the time of writing them.
struct XorShift(u64);

impl XorShift {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            let v = self.0.to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_caps_files_and_keeps_the_aggregate() {
        let d = sweep(1 << 10, 1 << 20, 2, 64 << 20, 4096);
        assert_eq!(d.len(), 11);
        assert_eq!((d[0].file_size, d[0].files), (1024, 4096));
        assert_eq!(d[0].name, "1KiB-x4096");
        let last = d.last().unwrap();
        assert_eq!((last.file_size, last.files), (1 << 20, 64));
        assert!(d.windows(2).all(|w| w[0].file_size < w[1].file_size));
        // A size above the aggregate still gets one file.
        assert_eq!(sweep(8, 8, 2, 4, 10)[0].files, 1);
    }

    #[test]
    fn paper003_has_equal_totals_and_tenfold_steps() {
        let d = paper003(1_000_000_000);
        assert_eq!(d.len(), 6);
        assert!(d.iter().all(|x| x.bytes() == 1_000_000_000));
        assert_eq!(d[5].files, 100_000);
        assert_eq!(d[5].file_size, 10_000);
        assert_eq!(d[0].name, "003-1-1GB");
        assert_eq!(d[5].name, "003-6-10kB");
    }

    #[test]
    fn materialise_makes_then_reuses_and_check_copy_finds_short_files() {
        let t = tempfile::tempdir().unwrap();
        let ds = Dataset::uniform(3000, 1001);
        let dir = ds.materialise(t.path()).unwrap();
        assert!(dir.join("d001/f001000").exists());
        ds.check_copy(&dir).unwrap();
        let stamp = std::fs::metadata(dir.join("d000/f000000"))
            .unwrap()
            .modified()
            .unwrap();
        ds.materialise(t.path()).unwrap();
        let again = std::fs::metadata(dir.join("d000/f000000"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(stamp, again, "a complete dataset is reused");
        std::fs::write(dir.join("d000/f000005"), b"short").unwrap();
        let err = ds.check_copy(&dir).unwrap_err();
        assert!(err.contains("d000/f000005"), "{err}");
        std::fs::remove_file(dir.join("d000/f000007")).unwrap();
        std::fs::write(dir.join("d000/f000005"), vec![0; 3000]).unwrap();
        assert!(ds.check_copy(&dir).unwrap_err().contains("f000007"));
    }

    #[test]
    fn check_markers_wants_an_empty_marker_per_file() {
        let t = tempfile::tempdir().unwrap();
        let ds = Dataset::uniform(10, 2);
        let err = ds.check_markers(t.path(), ".done").unwrap_err();
        assert!(err.starts_with("f000000.done: "), "{err}");
        std::fs::write(t.path().join("f000000.done"), b"").unwrap();
        std::fs::write(t.path().join("f000001.done"), b"x").unwrap();
        let err = ds.check_markers(t.path(), ".done").unwrap_err();
        assert_eq!(err, "f000001.done: 1 bytes, expected 0");
        std::fs::write(t.path().join("f000001.done"), b"").unwrap();
        ds.check_markers(t.path(), ".done").unwrap();
        // Nested layouts put each marker beside its file.
        let big = Dataset::uniform(1, 1001);
        let err = big.check_markers(t.path(), ".done").unwrap_err();
        assert!(err.starts_with("d000/f000000.done"), "{err}");
    }

    #[test]
    fn filler_does_not_repeat_within_a_file() {
        let mut r = XorShift(1);
        let mut a = vec![0u8; 1 << 16];
        r.fill(&mut a);
        assert_ne!(a[..32768], a[32768..]);
    }
}
