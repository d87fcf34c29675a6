//! A local user racing the server (issue 13, M7): while a push runs, directories the
//! server has just created under its root are swapped for symlinks to a directory
//! outside it. The server reaches every entry through directory handles with no symlink
//! followed, so nothing may land outside, whatever the timing.

use crate::util;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use util::*;

const DIRS: usize = 40;

/// Swaps each `up/dNN` that exists as a directory for a symlink to `outside`, again
/// and again, until told to stop; counts the swaps. Each round holds `gate`, so that
/// the test can hold the racer off while it sets a tree up.
fn racer(up: &Path, outside: &Path, stop: &AtomicBool, swaps: &AtomicU64, gate: &Mutex<()>) {
    let mut round = 0u64;
    while !stop.load(SeqCst) {
        let _round = gate.lock().unwrap();
        round += 1;
        for i in 0..DIRS {
            let d = up.join(format!("d{i:02}"));
            let Ok(md) = std::fs::symlink_metadata(&d) else {
                continue;
            };
            if md.is_dir()
                && std::fs::rename(&d, up.join(format!(".moved-{i:02}-{round}"))).is_ok()
                && std::os::unix::fs::symlink(outside, &d).is_ok()
            {
                swaps.fetch_add(1, SeqCst);
            }
        }
        std::thread::yield_now();
    }
}

#[test]
fn directories_swapped_for_symlinks_during_a_push_do_not_redirect_writes() {
    let t = tempdir();
    let src = t.path().join("src/up");
    for i in 0..DIRS {
        let d = src.join(format!("d{i:02}"));
        std::fs::create_dir_all(&d).unwrap();
        // A few blocks each, so that a file's part is opened, written and renamed
        // over some time.
        write_random(&d.join("f"), 5 * 4096 + 7, i as u64);
        write_random(&d.join("g"), 100, 1000 + i as u64);
    }
    let root = t.path().join("root");
    let outside = t.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let srv = Server::start(&root, &t.path().join("state"));
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let race = {
        let (up, outside) = (root.join("up"), outside.clone());
        let (stop, swaps) = (stop.clone(), swaps.clone());
        std::thread::spawn(move || racer(&up, &outside, &stop, &swaps, &Mutex::new(())))
    };
    for _ in 0..3 {
        let _ = std::fs::remove_dir_all(root.join("up"));
        // Files may fail (their directory went away): exit 0 or 3, never anything
        // written outside.
        let out = srv.cp(&args![
            "--block-size",
            "4K",
            "--streams",
            "2",
            &src,
            srv.url("")
        ]);
        assert!(
            matches!(out.status.code(), Some(0) | Some(3)),
            "unexpected outcome: {out:?}"
        );
    }
    stop.store(true, SeqCst);
    race.join().unwrap();
    assert!(
        swaps.load(SeqCst) > 0,
        "the racer never swapped a directory"
    );
    let leaked: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(leaked.is_empty(), "written outside the root: {leaked:?}");
}

/// The same race on a pull: while the server lists and reads, directories under its
/// root are swapped for symlinks to a directory of secrets. No secret may reach the
/// client (files are read only where they really lie below the root).
#[test]
fn directories_swapped_for_symlinks_during_a_pull_do_not_leak_files() {
    let t = tempdir();
    let root = t.path().join("root");
    let outside = t.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let secret = b"SECRET-OUTSIDE-THE-ROOT".repeat(10);
    std::fs::write(outside.join("f"), &secret).unwrap();
    std::fs::write(outside.join("g"), &secret).unwrap();
    let srv = Server::start(&root, &t.path().join("state"));
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let up = root.join("up");
    let fill = |up: &Path| {
        let _ = std::fs::remove_dir_all(up);
        for i in 0..DIRS {
            let d = up.join(format!("d{i:02}"));
            std::fs::create_dir_all(&d).unwrap();
            write_random(&d.join("f"), 5 * 4096 + 7, i as u64);
            write_random(&d.join("g"), 100, 1000 + i as u64);
        }
    };
    let gate = Arc::new(Mutex::new(()));
    let setting_up = gate.lock().unwrap();
    let race = {
        let (up, outside, gate) = (up.clone(), outside.clone(), gate.clone());
        let (stop, swaps) = (stop.clone(), swaps.clone());
        std::thread::spawn(move || racer(&up, &outside, &stop, &swaps, &gate))
    };
    fill(&up);
    drop(setting_up);
    let mut pulled = Vec::new();
    for round in 0..6 {
        if round > 0 {
            let _setting_up = gate.lock().unwrap();
            fill(&up);
        }
        let dst = t.path().join(format!("pulled-{round}"));
        std::fs::create_dir_all(&dst).unwrap();
        let out = srv.cp(&args![
            "--block-size",
            "4K",
            "--streams",
            "2",
            srv.url("up"),
            &dst
        ]);
        // Files may fail or be pulled from where they moved; the client must not die.
        assert!(
            out.status.code().is_some(),
            "the client was killed: {out:?}"
        );
        pulled.push(dst);
    }
    stop.store(true, SeqCst);
    race.join().unwrap();
    assert!(
        swaps.load(SeqCst) > 0,
        "the racer never swapped a directory"
    );
    for dst in pulled {
        for (f, _) in paths_under(&dst).into_iter().filter(|(_, t)| t.is_file()) {
            let data = std::fs::read(&f).unwrap_or_default();
            assert!(
                !data.windows(23).any(|w| w == b"SECRET-OUTSIDE-THE-ROOT"),
                "{} holds a file from outside the server's root",
                f.display()
            );
        }
    }
}
