//! Growing files for streaming tests and the streaming sweep (`hetch-lab bench write`): like
//! a detector writing several streams, it appends fixed-size writes round-robin across
//! its files at a steady aggregate rate until each file reaches its final size, and can
//! keep the files open afterwards and leave a "done" marker beside each one.
//!
//! What a follower sees is what it would see of a real instrument: every file exists
//! (empty) before the first write, each write is one `write(2)` to a file opened for
//! append, there is no fsync, and a marker appears only once its file is complete and
//! closed.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Smallest pool of random bytes the writes are cut from; see [`Filler`].
const POOL: usize = 1 << 20;

/// What to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterSpec {
    /// The files, written round-robin in this order; each is created or truncated, and
    /// its parent directories are created.
    pub files: Vec<PathBuf>,
    /// Final size of each file in bytes.
    pub size: u64,
    /// Bytes per write; the last write to a file is shorter when `size` is not a
    /// multiple of it.
    pub write_size: usize,
    /// Aggregate bytes per second over all files; 0 writes as fast as possible.
    pub rate: u64,
    /// Keep every file open this long after the last write of the run before closing
    /// it, so a follower sees an open, idle writer; `None` closes each file as soon as
    /// it is complete.
    pub hold: Option<Duration>,
    /// After closing `FILE`, create the empty file `FILE` + this suffix.
    pub done_suffix: Option<String>,
    /// Seed of the data: the same seed writes the same bytes.
    pub seed: u64,
}

/// What a run wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterStats {
    /// Bytes written over all files.
    pub bytes: u64,
    /// Number of writes.
    pub writes: u64,
    /// How long the writes took: from the first write to the end of the last one, or,
    /// with a rate, to the end of the last write's slot in the schedule if that is
    /// later (N paced writes start over N - 1 intervals but make up N intervals' worth
    /// of data). So `bytes / elapsed` is the rate achieved, at most the one asked for.
    /// Creating the files, the hold and the markers are not counted.
    pub elapsed: Duration,
}

impl WriterStats {
    /// Achieved bytes per second (0 when nothing took measurable time).
    pub fn rate(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.bytes as f64 / s
        } else {
            0.0
        }
    }
}

/// Writes the files of `spec` (see the module documentation) and returns what it
/// wrote. Every error names the file it concerns.
pub fn write(spec: &WriterSpec) -> io::Result<WriterStats> {
    if spec.write_size == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the write size must be at least 1 byte",
        ));
    }
    let mut seen = HashSet::new();
    if let Some(dup) = spec.files.iter().find(|f| !seen.insert(*f)) {
        // Two writers appending to one file would double its size and interleave data.
        return Err(named(
            dup,
            io::Error::new(io::ErrorKind::InvalidInput, "given more than once"),
        ));
    }

    let mut open: Vec<Option<File>> = spec
        .files
        .iter()
        .map(|p| {
            // A marker left by an earlier run must go before its file is truncated, or
            // a follower would take the file being rewritten for a complete one.
            if let Some(m) = marker(p, spec.done_suffix.as_deref()) {
                match std::fs::remove_file(&m) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(named(&m, e)),
                    _ => {}
                }
            }
            create(p).map(Some)
        })
        .collect::<io::Result<_>>()?;
    let filler = Filler::new(spec.seed, spec.write_size);
    let mut written = 0u64; // per file: every file grows in step
    let mut stats = WriterStats {
        bytes: 0,
        writes: 0,
        elapsed: Duration::ZERO,
    };
    let start = Instant::now();

    while written < spec.size {
        let n = (spec.size - written).min(spec.write_size as u64) as usize;
        for (i, path) in spec.files.iter().enumerate() {
            wait_until_due(start, stats.bytes, spec.rate);
            let data = filler.slice(i as u64, stats.writes, n);
            let file = open[i].as_mut().expect("open until complete");
            file.write_all(data).map_err(|e| named(path, e))?;
            stats.bytes += n as u64;
            stats.writes += 1;
            if written + n as u64 == spec.size && spec.hold.is_none() {
                // Close before the marker, so a marker always means "complete and closed".
                open[i] = None;
                mark_done(path, spec.done_suffix.as_deref())?;
            }
        }
        written += n as u64;
    }
    stats.elapsed = start.elapsed().max(due_after(stats.bytes, spec.rate));

    if let Some(hold) = spec.hold {
        std::thread::sleep(hold);
    }
    for (i, path) in spec.files.iter().enumerate() {
        // Still open with `hold`, or when `size` is 0 and nothing was written.
        if open[i].take().is_some() {
            mark_done(path, spec.done_suffix.as_deref())?;
        }
    }
    Ok(stats)
}

/// Sleeps until the write that starts after `bytes_before` bytes is due. The schedule is
/// absolute (measured from `start`, not from the previous write), so sleep overshoot
/// does not accumulate into a lower rate; a writer that fell behind writes at once until
/// it is back on schedule, never faster than that.
fn wait_until_due(start: Instant, bytes_before: u64, rate: u64) {
    if rate == 0 {
        return;
    }
    let due = start + due_after(bytes_before, rate);
    let now = Instant::now();
    if due > now {
        std::thread::sleep(due - now);
    }
}

/// When the write after `bytes` bytes is due, from the start (zero without a rate).
fn due_after(bytes: u64, rate: u64) -> Duration {
    if rate == 0 {
        return Duration::ZERO;
    }
    let ns = u128::from(bytes) * 1_000_000_000 / u128::from(rate);
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// Creates (or truncates) `path` and its parent directories, opened for append.
fn create(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            named(
                path,
                io::Error::new(
                    e.kind(),
                    format!("cannot create its directory {}: {e}", dir.display()),
                ),
            )
        })?;
    }
    // std refuses append together with truncate, so truncate after opening.
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| named(path, e))?;
    file.set_len(0).map_err(|e| named(path, e))?;
    Ok(file)
}

/// The marker of `path`: `path` + `suffix`, if a suffix is given.
fn marker(path: &Path, suffix: Option<&str>) -> Option<PathBuf> {
    let mut m = OsString::from(path.as_os_str());
    m.push(suffix?);
    Some(PathBuf::from(m))
}

/// Creates the empty marker of `path`, if a suffix is given.
fn mark_done(path: &Path, suffix: Option<&str>) -> io::Result<()> {
    if let Some(m) = marker(path, suffix) {
        File::create(&m).map_err(|e| named(&m, e))?;
    }
    Ok(())
}

/// `e`, with the path in front so that the one-line message says which file failed.
fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The data: a pool of pseudo-random bytes made once from the seed, from which each
/// write takes a slice at its own offset. Generating fresh bytes for every write would
/// cost CPU the streaming benchmark needs for the transfer; slicing costs nothing, and
/// the bytes stay incompressible to any compressor whose window is shorter than the
/// pool (at least 1 MiB). Offsets depend on the file and the write, so files differ.
struct Filler {
    pool: Vec<u8>,
}

impl Filler {
    fn new(seed: u64, write_size: usize) -> Filler {
        // Room for `POOL` different offsets even when a write is larger than the pool.
        let mut pool = vec![0u8; write_size.max(POOL) + POOL];
        let mut state = seed;
        for chunk in pool.chunks_mut(8) {
            let v = splitmix64(&mut state).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        Filler { pool }
    }

    /// `n` bytes for write number `write` (over the whole run) of file number `file`.
    fn slice(&self, file: u64, write: u64, n: usize) -> &[u8] {
        let mut key = file.wrapping_mul(0xA076_1D64_78BD_642F) ^ write;
        let span = (self.pool.len() - n + 1) as u64;
        let at = (splitmix64(&mut key) % span) as usize;
        &self.pool[at..at + n]
    }
}

/// splitmix64: fast, and unlike xorshift it has no bad seed (0 included).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn spec(files: Vec<PathBuf>, size: u64, write_size: usize) -> WriterSpec {
        WriterSpec {
            files,
            size,
            write_size,
            rate: 0,
            hold: None,
            done_suffix: None,
            seed: 1,
        }
    }

    fn len(p: &Path) -> u64 {
        std::fs::metadata(p).unwrap().len()
    }

    #[test]
    fn sizes_are_exact_when_size_is_not_a_multiple_of_the_write_size() {
        let t = tempfile::tempdir().unwrap();
        let files: Vec<PathBuf> = (0..3)
            .map(|i| t.path().join(format!("sub/dir/f{i}")))
            .collect();
        let stats = write(&spec(files.clone(), 10_000, 4096)).unwrap();
        for f in &files {
            assert_eq!(len(f), 10_000, "{}", f.display());
        }
        // 4096 + 4096 + 1808 per file.
        assert_eq!((stats.bytes, stats.writes), (30_000, 9));
    }

    #[test]
    fn existing_files_are_truncated_and_size_zero_leaves_them_empty() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("old");
        std::fs::write(&f, vec![7u8; 50_000]).unwrap();
        write(&spec(vec![f.clone()], 1000, 300)).unwrap();
        assert_eq!(len(&f), 1000);
        let mut s = spec(vec![f.clone()], 0, 300);
        s.done_suffix = Some(".done".into());
        let stats = write(&s).unwrap();
        assert_eq!((len(&f), stats.writes), (0, 0));
        assert!(t.path().join("old.done").exists());
    }

    #[test]
    fn files_differ_and_a_seed_repeats_its_data() {
        let t = tempfile::tempdir().unwrap();
        let files: Vec<PathBuf> = (0..3).map(|i| t.path().join(format!("f{i}"))).collect();
        write(&spec(files.clone(), 100_000, 8192)).unwrap();
        let data: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
        assert_ne!(data[0], data[1]);
        assert_ne!(data[1], data[2]);
        assert_ne!(data[0], data[2]);
        // Not a constant or short pattern: many distinct byte values in each write.
        let distinct: HashSet<u8> = data[0][..8192].iter().copied().collect();
        assert!(distinct.len() > 200, "{} distinct bytes", distinct.len());

        write(&spec(files.clone(), 100_000, 8192)).unwrap();
        assert_eq!(std::fs::read(&files[0]).unwrap(), data[0]);
        let mut other = spec(files.clone(), 100_000, 8192);
        other.seed = 2;
        write(&other).unwrap();
        assert_ne!(std::fs::read(&files[0]).unwrap(), data[0]);
    }

    #[test]
    fn writes_larger_than_the_pool_still_differ() {
        let t = tempfile::tempdir().unwrap();
        let files = vec![t.path().join("a"), t.path().join("b")];
        write(&spec(files.clone(), 3 << 20, 3 << 20)).unwrap();
        assert_ne!(
            std::fs::read(&files[0]).unwrap(),
            std::fs::read(&files[1]).unwrap()
        );
    }

    /// Runs `s` on a thread while polling: whenever a marker exists, its file must
    /// already be complete. Sound whatever the timing: a marker seen may be a stale one
    /// of an earlier run, which the writer removes before it truncates the file; so a
    /// short file counts only if a marker is still there after the short read (then it
    /// is a new one) and the file is still short after that (a file only grows once
    /// complete).
    fn markers_only_after_completion(s: WriterSpec) {
        let suffix = s.done_suffix.clone().unwrap();
        let files = s.files.clone();
        let size = s.size;
        let finished = Arc::new(AtomicBool::new(false));
        let writer = {
            let finished = finished.clone();
            std::thread::spawn(move || {
                let r = write(&s);
                finished.store(true, Ordering::SeqCst);
                r
            })
        };
        let marker = |f: &Path| marker(f, Some(&suffix)).unwrap();
        let mut polls = 0u64;
        while !finished.load(Ordering::SeqCst) {
            for f in &files {
                if marker(f).exists() && len(f) < size && marker(f).exists() {
                    assert_eq!(len(f), size, "{} marked before complete", f.display());
                }
            }
            polls += 1;
            std::thread::yield_now();
        }
        writer.join().unwrap().unwrap();
        for f in &files {
            assert!(marker(f).exists(), "no marker for {}", f.display());
            assert_eq!(len(f), size);
        }
        assert!(polls > 0);
    }

    #[test]
    fn done_markers_appear_only_after_the_file_is_complete() {
        let t = tempfile::tempdir().unwrap();
        let files: Vec<PathBuf> = (0..2).map(|i| t.path().join(format!("f{i}"))).collect();
        let mut s = spec(files, 50_000, 1000);
        s.rate = 2_000_000; // 50 ms of writes: the poller sees the files grow
        s.done_suffix = Some(".done".into());
        markers_only_after_completion(s.clone());
        // Again over the first run's files and markers: stale markers must not count.
        s.hold = Some(Duration::from_millis(50));
        markers_only_after_completion(s);
    }

    #[test]
    fn hold_keeps_the_run_going_at_least_that_long_after_the_last_write() {
        let t = tempfile::tempdir().unwrap();
        let mut s = spec(vec![t.path().join("f")], 10, 10);
        s.hold = Some(Duration::from_millis(100));
        let began = Instant::now();
        write(&s).unwrap();
        assert!(began.elapsed() >= Duration::from_millis(100));
    }

    #[test]
    fn pacing_never_runs_ahead_of_the_rate() {
        // 2 files x 10 writes of 4 KiB at 400 KiB/s: write k is due at k x 10 ms, so
        // the 20th write cannot start before 190 ms. A lower bound only: pacing must
        // hold the writer back; how fast the machine is does not enter.
        let t = tempfile::tempdir().unwrap();
        let files = vec![t.path().join("a"), t.path().join("b")];
        let mut s = spec(files, 40 << 10, 4 << 10);
        s.rate = 400 << 10;
        let began = Instant::now();
        let stats = write(&s).unwrap();
        let outside = began.elapsed();
        assert_eq!(stats.writes, 20);
        assert!(outside >= Duration::from_millis(190), "{outside:?}");
        // The reported time covers the last write's slot too, so the achieved rate
        // never exceeds the one asked for.
        assert!(stats.elapsed >= Duration::from_millis(200), "{stats:?}");
        assert!(stats.rate() <= s.rate as f64, "{stats:?}");
    }

    #[test]
    fn errors_name_the_file() {
        let t = tempfile::tempdir().unwrap();
        let plain = t.path().join("plain");
        std::fs::write(&plain, b"x").unwrap();
        let bad = plain.join("f");
        let e = write(&spec(vec![t.path().join("ok"), bad.clone()], 10, 10)).unwrap_err();
        assert!(e.to_string().contains(&bad.display().to_string()), "{e}");

        let dup = t.path().join("d");
        let e = write(&spec(vec![dup.clone(), dup.clone()], 10, 10)).unwrap_err();
        assert!(e.to_string().contains(&dup.display().to_string()), "{e}");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);

        let e = write(&spec(vec![dup], 10, 0)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
