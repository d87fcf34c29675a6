//! What the command line says of itself: one-line summaries in `hetch --help` (the
//! details in `hetch help CMD`), `hetch completions SHELL`, `hetch man DIR` and the
//! long `hetch --version`.

use std::path::Path;
use std::process::Command;

use crate::util::{self, hetch};

/// The subcommands a help text lists (its "Commands:" section), but `help`.
fn commands(help: &str) -> Vec<(String, String)> {
    let section = help
        .split("Commands:\n")
        .nth(1)
        .expect("a Commands: section");
    section
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let (name, summary) = l.trim().split_once(' ')?;
            Some((name.to_string(), summary.trim().to_string()))
        })
        .filter(|(name, _)| name != "help")
        .collect()
}

/// Every command and nested command the binary lists, as man page names give them:
/// `cp`, ..., `job`, `job-submit`, ...
fn every_command() -> Vec<String> {
    let mut all = Vec::new();
    for (name, _) in commands(&hetch(&args!["--help"], &[]).ok().stdout) {
        nested(&[name.as_str()], &mut all);
    }
    all
}

/// The command `path` (`["job", "schedule"]`) and its subcommands, recursively, each
/// as its man page names it (`job-schedule`).
fn nested(path: &[&str], all: &mut Vec<String>) {
    let mut a: Vec<&str> = path.to_vec();
    a.push("--help");
    let help = hetch(&crate::util::service::args(&a), &[])
        .ok()
        .stdout
        .clone();
    if help.contains("Commands:\n") {
        for (n, _) in commands(&help) {
            let mut sub = path.to_vec();
            sub.push(&n);
            nested(&sub, all);
        }
    }
    all.push(path.join("-"));
}

#[test]
fn help_gives_each_subcommand_one_short_line_and_the_details_on_request() {
    let top = hetch(&args!["--help"], &[]).ok().stdout.clone();
    let job = hetch(&args!["job", "--help"], &[]).ok().stdout.clone();
    let listed: Vec<_> = commands(&top).into_iter().chain(commands(&job)).collect();
    assert!(listed.len() > 10, "{top}");
    for (name, summary) in &listed {
        assert!(
            summary.chars().count() <= 72,
            "{name}: the summary is longer than a line: {summary}"
        );
    }
    // What the list leaves out is in the command's own help.
    let sync = hetch(&args!["help", "sync"], &[]).ok().stdout.clone();
    assert!(
        sync.contains("--max-delete entries to delete, deletes nothing"),
        "{sync}"
    );
    let wait = hetch(&args!["job", "help", "wait"], &[])
        .ok()
        .stdout
        .clone();
    assert!(
        wait.contains("4 when\nthe service") || wait.contains("4 when"),
        "{wait}"
    );
    // verify shares cp's -H/-X/-A but only compares: its help says so.
    let verify = hetch(&args!["verify", "--help"], &[]).ok().stdout.clone();
    assert!(verify.contains("Compare hard links too"), "{verify}");
    assert!(!verify.contains("Keep "), "{verify}");
    let cp = hetch(&args!["cp", "--help"], &[]).ok().stdout.clone();
    assert!(cp.contains("Keep names of one file as hard links"), "{cp}");
}

/// `script` run by a bash without startup files; its output.
fn bash(script: &str) -> Option<util::Out> {
    if Command::new("bash").arg("--version").output().is_err() {
        util::skipped("bash is not installed");
        return None;
    }
    let script = script.replace("HETCH", util::BIN);
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &script])
        .output()
        .expect("bash runs");
    Some(util::Out {
        cmd: format!("bash -c {script}"),
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

#[test]
fn bash_completion_loads_and_completes_subcommands() {
    // The function `complete -p` names is called as bash calls it: the command, the
    // word being completed and the one before it, with COMP_WORDS and COMP_CWORD set.
    let script = r#"
        source <(HETCH completions bash) || exit 10
        spec=$(complete -p hetch) || exit 11
        fn=$(sed -E 's/.* -F ([^ ]+) .*/\1/' <<<"$spec")
        complete_words() {
            COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
            COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
            "$fn" hetch "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
            echo "$* => ${COMPREPLY[*]}"
        }
        complete_words hetch sy
        complete_words hetch job su
        complete_words hetch completions z
    "#;
    let Some(out) = bash(script) else { return };
    out.ok();
    let lines: Vec<_> = out.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "hetch sy => sync",
            "hetch job su => submit",
            "hetch completions z => zsh"
        ],
        "{out:?}"
    );
}

#[test]
fn zsh_and_fish_completions_name_every_subcommand() {
    let all = every_command();
    assert!(all.contains(&"job-submit".to_string()), "{all:?}");
    for shell in ["zsh", "fish"] {
        let out = hetch(&args!["completions", shell], &[]);
        out.ok();
        for name in &all {
            // A nested command appears under its own name.
            let word = name.rsplit('-').next().unwrap_or(name);
            let word = if name == "worker-unit" { name } else { word };
            assert!(out.stdout.contains(word), "{shell}: no {name}");
        }
    }
    let out = hetch(&args!["completions", "tcsh"], &[]);
    out.expect_code(2);
}

#[test]
fn man_writes_one_page_per_command_that_renders_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("share/man/man1");
    let out = hetch(&args!["man", dir.as_os_str()], &[]);
    out.ok();
    assert_eq!((out.stdout.as_str(), out.stderr.as_str()), ("", ""));
    let mut expected: Vec<String> = every_command()
        .iter()
        .map(|c| format!("hetch-{c}.1"))
        .collect();
    expected.push("hetch.1".into());
    expected.sort();
    let mut written: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    written.sort();
    assert_eq!(written, expected);
    for page in &written {
        let text = std::fs::read_to_string(dir.join(page)).unwrap();
        let name = page.trim_end_matches(".1");
        assert!(text.contains(&format!(".TH {name} 1")), "{page}:\n{text}");
        assert!(text.contains(".SH NAME"), "{page}:\n{text}");
        assert!(text.contains(".SH SYNOPSIS"), "{page}:\n{text}");
        rendered_without_warnings(&dir.join(page));
    }
}

/// Renders `page` as `man` would on an 80-column terminal (else with groff), and
/// asserts that nothing was warned about; neither installed: the structure checked
/// above has to do.
fn rendered_without_warnings(page: &Path) {
    let man = Command::new("man")
        .args(["--warnings", "-l"])
        .arg(page)
        .env("MANWIDTH", "80")
        .env("MANPAGER", "cat")
        .output();
    let groff = || {
        Command::new("groff")
            .args(["-man", "-ww", "-z"])
            .arg(page)
            .output()
    };
    let Ok(out) = man.or_else(|_| groff()) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "{}: {stderr}",
        page.display()
    );
}

#[test]
fn man_names_the_directory_it_cannot_write() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, "").unwrap();
    let dir = file.join("man1");
    let out = hetch(&args!["man", dir.as_os_str()], &[]);
    out.expect_code(1);
    let line = format!("hetch: error: {}: cannot write man pages: ", dir.display());
    assert!(out.stderr.starts_with(&line), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
}

/// `git` run in the crate's directory, if it is the top of a git checkout.
fn git(args: &[&str]) -> Option<String> {
    let dir = env!("CARGO_MANIFEST_DIR");
    let run = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()?;
        let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
        out.status.success().then_some(s)
    };
    let top = run(&["rev-parse", "--show-toplevel"])?;
    let same = Path::new(&top).canonicalize().ok()? == Path::new(dir).canonicalize().ok()?;
    same.then(|| run(args)).flatten()
}

#[test]
fn version_names_the_commit_and_the_features_built_in() {
    let short = hetch(&args!["-V"], &[]).ok().stdout.clone();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(short, format!("hetch {version}\n"));
    let long = hetch(&args!["--version"], &[]).ok().stdout.clone();
    let inner = long
        .strip_prefix(&format!("hetch {version} (commit "))
        .and_then(|s| s.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("{long}"));
    let (commit, features) = inner.split_once(", features: ").expect("features");
    // The features of the binary are the package's, as the tests are built with them.
    let on: Vec<_> = [
        ("cloud", cfg!(feature = "cloud")),
        ("mcp", cfg!(feature = "mcp")),
        ("service", cfg!(feature = "service")),
    ]
    .into_iter()
    .filter_map(|(f, on)| on.then_some(f))
    .collect();
    let expected = if on.is_empty() {
        "none".into()
    } else {
        on.join(" ")
    };
    assert_eq!(features, expected, "{long}");
    let expected = match (
        option_env!("HETCH_BUILD_COMMIT"),
        git(&["rev-parse", "HEAD"]),
    ) {
        (Some(c), _) if !c.trim().is_empty() => c.trim().to_string(),
        (_, Some(head)) => {
            let date = git(&["log", "-1", "--format=%cs", "HEAD"]).expect("a commit date");
            format!("{} {date}", &head[..12])
        }
        (_, None) => "unknown".into(),
    };
    assert_eq!(commit, expected, "{long}");
}
