use super::*;
use crate::journal::{Journal, JournalHeader};
use crate::part::PartFile;

fn collect(dir: &Path, how: Clean) -> Vec<Leftover> {
    let mut got = Vec::new();
    clean_tree(dir, how, &mut |r| got.push(r.expect("no error")));
    got.sort_by(|a, b| a.path.cmp(&b.path));
    got
}

const H: JournalHeader = JournalHeader {
    block_size: 1 << 20,
    file_size: 3 << 20,
    mtime_sec: 1,
    mtime_nsec: 2,
    checksum: 1,
};

#[test]
fn stale_files_go_held_ones_stay() {
    let t = tempfile::tempdir().unwrap();
    let sub = t.path().join("a/b");
    std::fs::create_dir_all(&sub).unwrap();
    // Stale: nobody holds them.
    std::fs::write(sub.join(".old.hetch-part"), vec![7u8; 1000]).unwrap();
    std::fs::write(sub.join(".old.hetch-journal"), b"j").unwrap();
    std::fs::write(t.path().join(".top.hetch-part"), b"x").unwrap();
    // Not hetch's: left alone.
    std::fs::write(sub.join("old"), b"data").unwrap();
    std::fs::write(sub.join(".hetch-part"), b"no stem").unwrap();
    // Held by a running transfer (its part file and its journal).
    let d = Dir::open(&sub).unwrap();
    let live = PartFile::open(&d, OsStr::new("live"), false).unwrap();
    let journal = live.create_journal(&H).unwrap();
    // A symlink under a part name: only an explicit clean takes it.
    std::os::unix::fs::symlink("/etc/passwd", sub.join(".link.hetch-part")).unwrap();
    // A directory reached through a symlink is not cleaned.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join(".far.hetch-part"), b"x").unwrap();
    std::os::unix::fs::symlink(outside.path(), t.path().join("via")).unwrap();

    let dry = collect(
        t.path(),
        Clean {
            dry_run: true,
            symlinks: false,
            split: false,
        },
    );
    assert_eq!(dry.len(), 5, "{dry:?}");
    assert!(sub.join(".old.hetch-part").exists());
    let removed = collect(t.path(), Clean::default());
    let names: Vec<_> = removed
        .iter()
        .map(|l| (l.path.file_name().unwrap().to_owned(), l.outcome))
        .collect();
    assert!(names.contains(&(".old.hetch-part".into(), Outcome::Removed)));
    assert!(names.contains(&(".old.hetch-journal".into(), Outcome::Removed)));
    assert!(names.contains(&(".top.hetch-part".into(), Outcome::Removed)));
    assert!(names.contains(&(".live.hetch-part".into(), Outcome::InUse)));
    assert!(names.contains(&(".live.hetch-journal".into(), Outcome::InUse)));
    let old = removed.iter().find(|l| l.path.ends_with(".old.hetch-part"));
    assert_eq!(old.map(|l| l.bytes), Some(1000));
    assert!(!sub.join(".old.hetch-part").exists());
    assert!(!sub.join(".old.hetch-journal").exists());
    assert!(sub.join(".live.hetch-part").exists());
    assert!(sub.join(".live.hetch-journal").exists());
    assert!(sub.join("old").exists() && sub.join(".hetch-part").exists());
    assert!(outside.path().join(".far.hetch-part").exists());
    assert!(std::fs::symlink_metadata(sub.join(".link.hetch-part")).is_ok());

    // Once the transfer lets go, they are stale too; the symlink on request.
    drop(journal);
    drop(live);
    let all = Clean {
        dry_run: false,
        symlinks: true,
        split: false,
    };
    assert_eq!(collect(t.path(), all).len(), 3);
    assert!(!sub.join(".live.hetch-part").exists());
    assert!(std::fs::symlink_metadata(sub.join(".link.hetch-part")).is_err());
    assert!(std::fs::metadata("/etc/passwd").is_ok());
}

#[test]
fn a_part_file_removed_while_opened_is_made_again() {
    let t = tempfile::tempdir().unwrap();
    let d = Dir::open(t.path()).unwrap();
    let first = PartFile::open(&d, OsStr::new("f"), false).unwrap();
    first.write_at(0, b"one").unwrap();
    // As a cleaner that won the race would: the name is gone, the old handle lives on.
    std::fs::remove_file(t.path().join(".f.hetch-part")).unwrap();
    let again = PartFile::open(&d, OsStr::new("f"), true).unwrap();
    again.write_at(0, b"two").unwrap();
    assert_eq!(
        std::fs::read(t.path().join(".f.hetch-part")).unwrap(),
        b"two"
    );
    // A resume finds no journal once it was removed.
    let j = Journal::create(&d, OsStr::new(".f.hetch-journal"), &H).unwrap();
    drop(j);
    std::fs::remove_file(t.path().join(".f.hetch-journal")).unwrap();
    let r = Journal::resume(&d, OsStr::new(".f.hetch-journal"), &H, |_, _| {}).unwrap();
    assert!(r.is_none());
}

/// A split file's part file and range journals go only on request, all of them
/// together, and not while a writer holds one of them.
#[test]
fn split_files_go_only_when_asked_and_not_while_held() {
    let t = tempfile::tempdir().unwrap();
    let names = [
        ".big.hetch-split",
        ".big.hetch-split.0",
        ".big.hetch-split.64",
    ];
    for n in names {
        std::fs::write(t.path().join(n), b"x").unwrap();
    }
    // Not split names: left alone either way.
    std::fs::write(t.path().join(".big.hetch-split.x"), b"x").unwrap();
    std::fs::write(t.path().join("big.hetch-split"), b"x").unwrap();
    assert!(collect(t.path(), Clean::default()).is_empty());
    let split = Clean {
        split: true,
        ..Clean::default()
    };
    // A range being written holds the part file (shared lock): the group stays.
    let writer = std::fs::File::open(t.path().join(".big.hetch-split")).unwrap();
    rustix::fs::flock(&writer, FlockOperation::LockShared).unwrap();
    let held = collect(t.path(), split);
    assert_eq!(held.len(), 3, "{held:?}");
    assert!(held.iter().all(|l| l.outcome == Outcome::InUse), "{held:?}");
    drop(writer);
    let removed = collect(t.path(), split);
    assert_eq!(removed.len(), 3, "{removed:?}");
    assert!(removed.iter().all(|l| l.outcome == Outcome::Removed));
    for n in names {
        assert!(!t.path().join(n).exists(), "{n}");
    }
    assert!(t.path().join(".big.hetch-split.x").exists());
    assert!(t.path().join("big.hetch-split").exists());
}
