//! Each case runs twice: through `openat2` and through the component walk that stands
//! in for it on older kernels.

use super::*;
use std::os::unix::fs::symlink;

/// Runs `case` with `openat2`, then with the walk.
fn both(case: impl Fn()) {
    force_component_walk(false);
    case();
    force_component_walk(true);
    case();
    force_component_walk(false);
}

fn tree() -> (tempfile::TempDir, Dir) {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("root/d/sub")).unwrap();
    std::fs::create_dir_all(t.path().join("outside")).unwrap();
    std::fs::write(t.path().join("outside/secret"), b"secret").unwrap();
    std::fs::write(t.path().join("root/d/file"), b"data").unwrap();
    let root = Dir::open(&t.path().join("root")).unwrap();
    (t, root)
}

fn refused(r: Result<impl std::fmt::Debug, StorageError>) -> bool {
    matches!(r, Err(StorageError::Refused { .. }))
}

#[test]
fn plain_names_resolve_below_the_directory() {
    both(|| {
        let (_t, root) = tree();
        let md = root.stat(Path::new("d/file")).unwrap().unwrap();
        assert_eq!(md.len(), 4);
        assert!(root.stat(Path::new("d/missing")).unwrap().is_none());
        assert!(root.stat(Path::new("missing/deeper")).unwrap().is_none());
        let (dir, name) = root.parent(Path::new("d/sub/new")).unwrap();
        assert_eq!(name, "new");
        dir.mkdir(&name, 0o700).unwrap();
        assert!(root.stat(Path::new("d/sub/new")).unwrap().unwrap().is_dir());
        let f = root.open_file(Path::new("d/file"), OpenHow::READ).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 4);
    });
}

#[test]
fn a_symlink_on_the_path_is_refused_even_when_it_stays_inside() {
    both(|| {
        let (t, root) = tree();
        symlink(t.path().join("outside"), t.path().join("root/out")).unwrap();
        symlink("d", t.path().join("root/in")).unwrap();
        assert!(refused(root.stat(Path::new("out/secret"))));
        assert!(refused(root.stat(Path::new("in/file"))));
        assert!(refused(
            root.open_file(Path::new("out/secret"), OpenHow::READ)
        ));
        assert!(refused(root.parent(Path::new("out/new"))));
        assert!(refused(root.subdir(Path::new("out"), Links::Refuse)));
        // The link itself is seen as a link, and cannot be opened as a file.
        let md = root.stat(Path::new("out")).unwrap().unwrap();
        assert!(md.file_type().is_symlink());
        assert!(refused(root.open_file(Path::new("out"), OpenHow::READ)));
        assert_eq!(root.read_link(OsStr::new("in")).unwrap(), "d");
    });
}

#[test]
fn beneath_follows_links_that_stay_inside_only() {
    both(|| {
        let (t, root) = tree();
        symlink("d/sub", t.path().join("root/in")).unwrap();
        symlink("../outside", t.path().join("root/up")).unwrap();
        symlink(t.path().join("outside"), t.path().join("root/abs")).unwrap();
        let sub = root.subdir(Path::new("in"), Links::Beneath).unwrap();
        sub.mkdir(OsStr::new("made"), 0o700).unwrap();
        assert!(t.path().join("root/d/sub/made").is_dir());
        assert!(root.subdir(Path::new("up"), Links::Beneath).is_err());
        assert!(root.subdir(Path::new("abs"), Links::Beneath).is_err());
        assert!(root.subdir(Path::new("d/../.."), Links::Beneath).is_err());
    });
}

#[test]
fn names_that_are_not_single_components_are_refused() {
    let (_t, root) = tree();
    assert!(refused(root.mkdir(OsStr::new("a/b"), 0o700)));
    assert!(refused(root.mkdir(OsStr::new(".."), 0o700)));
    assert!(refused(root.rename(OsStr::new("d"), OsStr::new("../x"))));
    assert!(root.stat(Path::new("../outside")).is_err());
}

#[test]
fn a_directory_swapped_for_a_symlink_after_lookup_does_not_redirect_writes() {
    both(|| {
        let (t, root) = tree();
        let (dir, name) = root.parent(Path::new("d/sub/payload")).unwrap();
        // A local user moves the directory away and puts a symlink to elsewhere in
        // its place.
        std::fs::rename(t.path().join("root/d/sub"), t.path().join("root/moved")).unwrap();
        symlink(t.path().join("outside"), t.path().join("root/d/sub")).unwrap();
        let how = OpenHow {
            flags: OFlags::WRONLY | OFlags::CREATE,
            mode: 0o600,
        };
        dir.open_file(Path::new(&name), how).unwrap();
        dir.rename(&name, OsStr::new("final")).unwrap();
        assert!(t.path().join("root/moved/final").exists());
        assert!(!t.path().join("outside/final").exists());
        assert!(!t.path().join("outside/payload").exists());
        // A fresh lookup refuses the symlink.
        assert!(refused(root.parent(Path::new("d/sub/payload"))));
    });
}

#[test]
fn files_are_created_and_replaced_without_following() {
    both(|| {
        let (t, root) = tree();
        let (d, _) = root.parent(Path::new("d/x")).unwrap();
        // A planted symlink under the name to be created is not followed.
        symlink(
            t.path().join("outside/secret"),
            t.path().join("root/d/planted"),
        )
        .unwrap();
        let how = OpenHow {
            flags: OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC,
            mode: 0o600,
        };
        assert!(refused(d.open_file(Path::new("planted"), how)));
        assert_eq!(
            std::fs::read(t.path().join("outside/secret")).unwrap(),
            b"secret"
        );
        d.symlink(OsStr::new("file"), OsStr::new("link")).unwrap();
        d.set_times_nofollow(OsStr::new("link"), 1_000_000, 5)
            .unwrap();
        d.remove_file(OsStr::new("link")).unwrap();
        d.remove_file(OsStr::new("link")).unwrap();
        root.sync_fs().unwrap();
    });
}

#[test]
fn create_dir_all_makes_missing_parents_and_stays_inside() {
    both(|| {
        let (t, root) = tree();
        root.create_dir_all(Path::new("d/x/y/z"), Links::Beneath)
            .unwrap();
        assert!(t.path().join("root/d/x/y/z").is_dir());
        root.create_dir_all(Path::new("d/x/y/z"), Links::Beneath)
            .unwrap();
        symlink(t.path().join("outside"), t.path().join("root/out")).unwrap();
        assert!(root
            .create_dir_all(Path::new("out/new"), Links::Beneath)
            .is_err());
        assert!(!t.path().join("outside/new").exists());
        symlink("d", t.path().join("root/in")).unwrap();
        root.create_dir_all(Path::new("in/via"), Links::Beneath)
            .unwrap();
        assert!(t.path().join("root/d/via").is_dir());
        assert!(refused(
            root.create_dir_all(Path::new("in/no"), Links::Refuse)
        ));
    });
}

#[test]
fn open_files_are_checked_where_they_really_are() {
    let (t, _root) = tree();
    let root = t.path().join("root").canonicalize().unwrap();
    let inside = File::open(root.join("d/file")).unwrap();
    check_below(&inside, &root).unwrap();
    // Opened by a path that a swapped directory led outside.
    symlink(t.path().join("outside"), root.join("d/swapped")).unwrap();
    let outside = File::open(root.join("d/swapped/secret")).unwrap();
    assert!(check_below(&outside, &root).is_err());
}

#[test]
fn names_list_one_directory_and_remove_dir_never_follows_a_link() {
    both(|| {
        let (t, root) = tree();
        let d = root.subdir(Path::new("d"), Links::Refuse).unwrap();
        assert_eq!(
            d.names().unwrap(),
            vec![OsString::from("file"), "sub".into()]
        );
        // Listing twice through clones of one handle sees everything both times.
        assert_eq!(d.clone().names().unwrap().len(), 2);
        symlink(t.path().join("outside"), t.path().join("root/d/link")).unwrap();
        assert!(d.remove_dir(OsStr::new("link")).is_err(), "not a directory");
        assert!(t.path().join("outside/secret").exists());
        d.remove_file(OsStr::new("link")).unwrap();
        assert!(
            t.path().join("outside/secret").exists(),
            "the link went, not its target"
        );
        assert!(
            d.remove_dir(OsStr::new("nonempty/..")).is_err(),
            "one name only"
        );
        d.remove_dir(OsStr::new("sub")).unwrap();
        d.remove_dir(OsStr::new("sub")).unwrap(); // already gone: fine
        assert!(root.stat(Path::new("d/sub")).unwrap().is_none());
        assert!(root.remove_dir(OsStr::new("d")).is_err(), "not empty");
    });
}
