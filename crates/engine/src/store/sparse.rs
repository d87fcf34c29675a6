//! Writing a block whose source file has holes in it (`DataHeader::sparse`): only the
//! pages that hold data, so that the destination keeps holes where the source had
//! them, at the file system's granularity. Used by a fresh part file only: a resumed
//! one may hold an earlier run's bytes where the zeros go, which must be overwritten.

use std::ops::Range;

use hetch_storage::part::PartFile;
use hetch_storage::StorageError;

/// Pages of this size, aligned on the file's offsets, are left out when all zeros:
/// the block size of the file systems hetch writes to (ext4, xfs, btrfs, tmpfs), and
/// the alignment direct I/O needs (`hetch_storage::direct::ALIGN`), so that every run
/// written directly stays aligned. A file system with larger units only keeps fewer
/// holes (a unit with data in any of its pages is allocated whole).
pub(crate) const PAGE: u64 = hetch_storage::direct::ALIGN as u64;

/// The runs of `data`, a block at `offset` of its file, that hold data: `data`
/// cut at the file's page boundaries, its all-zero pages left out and neighbouring
/// data pages merged. A page cut short by the start or end of `data` counts as a page.
/// At most one run per two pages of the block: bounded by the block size.
pub(crate) fn data_runs(offset: u64, data: &[u8]) -> Vec<Range<usize>> {
    let mut runs: Vec<Range<usize>> = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let page_end = (offset + at as u64) / PAGE * PAGE + PAGE;
        let end = ((page_end - offset) as usize).min(data.len());
        if !crate::session::is_zero(&data[at..end]) {
            match runs.last_mut() {
                Some(last) if last.end == at => last.end = end,
                _ => runs.push(at..end),
            }
        }
        at = end;
    }
    runs
}

/// What a part file holds where a block is to be put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// Created by this run: holes and space reserved ahead of the writes (up to
    /// `reserved`, see `PosixFile::reserve`), both of which read as zeros.
    Fresh {
        /// End of the space reserved so far.
        reserved: u64,
    },
    /// Taken up from an earlier run: any bytes at all.
    Resumed,
}

/// Writes block `data` at `offset` of a part file so that its zero pages are holes
/// where the file is fresh: only its data runs are written, and its zero pages in
/// reserved space (which a reservation fills) are punched out. A resumed file gets
/// the whole block: its stale bytes must not show through. Calls `written` with each
/// run written (offset, length).
pub(crate) fn put_runs(
    part: &PartFile,
    offset: u64,
    data: &[u8],
    state: Part,
    mut written: impl FnMut(u64, u64),
) -> Result<(), StorageError> {
    let reserved = match state {
        Part::Fresh { reserved } => reserved,
        Part::Resumed => {
            part.write_at(offset, data)?;
            written(offset, data.len() as u64);
            return Ok(());
        }
    };
    let mut gap_from = 0;
    let punch = |from: usize, to: usize| {
        let (start, end) = (offset + from as u64, (offset + to as u64).min(reserved));
        if start < end {
            part.punch_hole(start, end - start);
        }
    };
    for run in data_runs(offset, data) {
        punch(gap_from, run.start);
        gap_from = run.end;
        part.write_at(offset + run.start as u64, &data[run.clone()])?;
        written(offset + run.start as u64, run.len() as u64);
    }
    punch(gap_from, data.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetch_storage::confined::Dir;
    use std::os::unix::fs::{FileExt, MetadataExt};

    const P: usize = PAGE as usize;

    /// A block of `pages` pages with data (`x`) in the pages `full`, and one byte in
    /// page `speck` (if any) at its middle.
    fn block(pages: usize, full: &[usize], speck: Option<usize>) -> Vec<u8> {
        let mut b = vec![0; pages * P];
        for &p in full {
            b[p * P..(p + 1) * P].fill(b'x');
        }
        if let Some(p) = speck {
            b[p * P + P / 2] = 1;
        }
        b
    }

    #[test]
    fn runs_leave_out_zero_pages_and_merge_data_pages() {
        assert!(data_runs(0, &block(8, &[], None)).is_empty());
        assert_eq!(data_runs(0, &block(4, &[0, 1, 2, 3], None)), vec![0..4 * P]);
        let b = block(8, &[1, 2, 5], Some(7));
        assert_eq!(data_runs(0, &b), vec![P..3 * P, 5 * P..6 * P, 7 * P..8 * P]);
        // One byte makes its page data; the pages count from the file's start.
        assert_eq!(data_runs(16 * PAGE, &b), data_runs(0, &b));
        // A block that ends inside a page (a file's last): its tail is a page.
        let mut tail = block(2, &[], None);
        tail.push(3);
        assert_eq!(data_runs(0, &tail), vec![2 * P..2 * P + 1]);
        tail.pop();
        tail.push(0);
        assert!(data_runs(0, &tail).is_empty());
    }

    #[test]
    fn runs_of_a_block_off_the_page_grid_follow_the_file_pages() {
        // A 1 KiB block at 3 KiB: its first KiB ends a page, the rest starts the next.
        let mut b = vec![0; 2048];
        b[1500] = 1;
        assert_eq!(data_runs(3 << 10, &b), vec![1024..2048]);
        b[10] = 1;
        assert_eq!(data_runs(3 << 10, &b), vec![0..2048]);
        b[1500] = 0;
        assert_eq!(data_runs(3 << 10, &b), vec![0..1024]);
    }

    fn part_file(dir: &tempfile::TempDir, keep: bool) -> PartFile {
        let d = Dir::open(dir.path()).unwrap();
        PartFile::open(&d, std::ffi::OsStr::new("f"), keep).unwrap()
    }

    fn allocated(p: &PartFile) -> u64 {
        p.file().metadata().unwrap().blocks() * 512
    }

    #[test]
    fn a_fresh_part_file_gets_only_the_data_pages() {
        // On a disk: /tmp may be a tmpfs.
        let target = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target");
        std::fs::create_dir_all(target).unwrap();
        let dir = tempfile::tempdir_in(target).unwrap();
        let part = part_file(&dir, false);
        let bs = 64 * P;
        let b = block(64, &[3, 4], Some(40));
        let mut writes = Vec::new();
        let fresh = Part::Fresh { reserved: 0 };
        put_runs(&part, bs as u64, &b, fresh, |o, l| writes.push((o, l))).unwrap();
        let at = |p: usize| (bs + p * P) as u64;
        assert_eq!(
            writes,
            vec![(at(3), 2 * PAGE), (at(40), PAGE)],
            "only the data pages are written"
        );
        part.set_len(3 * bs as u64).unwrap();
        let mut back = vec![9; bs];
        part.file().read_exact_at(&mut back, bs as u64).unwrap();
        assert!(back == b, "the block reads back as sent");
        let held = allocated(&part);
        assert!(held <= 64 << 10, "{held} bytes allocated for 3 data pages");
    }

    #[test]
    fn reserved_space_under_zero_pages_is_given_back() {
        let target = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target");
        let dir = tempfile::tempdir_in(target).unwrap();
        let part = part_file(&dir, false);
        let bs = 256 * P;
        part.preallocate(0, 2 * bs as u64).unwrap();
        if allocated(&part) < 2 * bs as u64 {
            eprintln!("SKIPPED: no preallocation on this file system");
            return;
        }
        // Reserved up to the end of block 0 as far as the writer knows; the rest of
        // the file's reservation is not this test's (it stays).
        let b = block(256, &[0], None);
        let fresh = Part::Fresh {
            reserved: bs as u64,
        };
        put_runs(&part, 0, &b, fresh, |_, _| {}).unwrap();
        let held = allocated(&part);
        assert!(
            held <= bs as u64 + (64 << 10),
            "{held} bytes allocated: block 0's zero pages are still reserved"
        );
        let mut back = vec![9; bs];
        part.file().read_exact_at(&mut back, 0).unwrap();
        assert!(back == b);
    }

    #[test]
    fn a_resumed_part_file_gets_the_whole_block() {
        let dir = tempfile::tempdir().unwrap();
        // An earlier run's bytes of another version of the file.
        part_file(&dir, false).write_at(0, &[0xee; 8 * P]).unwrap();
        let part = part_file(&dir, true);
        let b = block(8, &[2], None);
        let mut writes = Vec::new();
        put_runs(&part, 0, &b, Part::Resumed, |o, l| writes.push((o, l))).unwrap();
        assert_eq!(writes, vec![(0, 8 * PAGE)]);
        let mut back = vec![9; 8 * P];
        part.file().read_exact_at(&mut back, 0).unwrap();
        assert!(back == b, "stale bytes show through the zero pages");
    }
}
