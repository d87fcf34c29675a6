//! Copies between two servers (`hetch cp hetch://A/x hetch://B/y`): server A pushes to
//! server B directly at the client's request, so the data never passes through the
//! client. Real `hetch serve` processes; the client's own network namespace (root
//! only) proves that it never reaches B at all.

use crate::util;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use util::*;

/// Server A, allowed to relay to `b_addr` (or not, with `None`), serving `root`.
fn server_a(t: &Path, relay_to: Option<&str>) -> Server {
    let extra: Vec<&str> = match relay_to {
        Some(to) => vec!["--relay-to", to],
        None => vec![],
    };
    Server::start_with(&t.join("a-root"), &t.join("a-state"), &extra, &[])
}

/// A mixed tree copied from A to B, then again (everything skipped): identical, and
/// nothing temporary left at B.
#[test]
fn a_tree_goes_from_one_server_to_another_and_a_rerun_skips_it() {
    let t = tempdir();
    let b = Server::start(&t.path().join("b-root"), &t.path().join("b-state"));
    let a = server_a(t.path(), Some(&b.addr));
    let src = a.root.join("run1");
    mixed_tree(&src);
    let args = relay_args(&a, &b, "run1", "copy/", &["--block-size", BLOCK]);
    let out = hetch(&os_args(&args), &[("HETCH_TOKEN", &a.token)]);
    out.ok();
    let s = out.json();
    let n = count_files(&src);
    assert_eq!((s.files, s.bytes), (n, total_bytes(&src)), "{out:?}");
    assert_eq!((s.skipped, s.failed), (0, 0), "{out:?}");
    assert_same_tree(&src, &b.root.join("copy/run1"));
    assert_no_temp_files(&b.root);
    assert!(a.log().contains("relay done"), "{}", a.log());

    let again = hetch(&os_args(&args), &[("HETCH_TOKEN", &a.token)]);
    again.ok();
    let s = again.json();
    assert_eq!((s.files, s.skipped, s.failed), (0, n, 0), "{again:?}");
    assert_same_tree(&src, &b.root.join("copy/run1"));
}

/// Without `--dest-fingerprint`, the client learns B's key on first use like any
/// server's (recorded in its known-hosts file) and has A pin it.
#[test]
fn the_destination_key_is_learned_on_first_use_and_pinned_by_the_source() {
    let t = tempdir();
    let b = Server::start(&t.path().join("b-root"), &t.path().join("b-state"));
    let a = server_a(t.path(), Some(&b.addr));
    std::fs::create_dir_all(&a.root).unwrap();
    write_random(&a.root.join("one.bin"), 3 << 20, 7);
    let config = t.path().join("config");
    let args = args![
        "cp",
        "-q",
        "--fingerprint",
        &a.fingerprint,
        "--dest-token-file",
        &b.token_path,
        a.url("one.bin"),
        b.url("one.bin")
    ];
    let config_env = config.to_str().unwrap();
    let out = hetch(
        &args,
        &[("HETCH_TOKEN", &a.token), ("HETCH_CONFIG_DIR", config_env)],
    );
    out.ok();
    assert!(out.stderr.contains("trusting its key"), "{out:?}");
    let known = std::fs::read_to_string(config.join("known_hosts")).unwrap();
    assert!(known.contains(&b.fingerprint), "{known}");
    assert_eq!(
        hash_file(&a.root.join("one.bin")),
        hash_file(&b.root.join("one.bin"))
    );
}

/// A server relays only where its operator allowed: with no `--relay-to`, or another
/// host in it, the client gets one line naming the flag, and B is never contacted.
#[test]
fn a_server_relays_only_where_its_operator_allows() {
    let t = tempdir();
    let b = Server::start(&t.path().join("b-root"), &t.path().join("b-state"));
    for (i, relay_to) in [None, Some("127.0.0.2:9")].into_iter().enumerate() {
        let dir = t.path().join(format!("case{i}"));
        let a = server_a(&dir, relay_to);
        write_random(&a.root.join("x"), 1000, 1);
        let args = relay_args(&a, &b, "x", "x", &[]);
        let out = hetch(&os_args(&args), &[("HETCH_TOKEN", &a.token)]);
        out.failed();
        let line = out.one_line_naming(&[&a.addr, "not allowed", "--relay-to"]);
        assert!(!line.contains(&b.token), "{line}");
    }
    assert!(
        paths_under(&b.root).is_empty(),
        "{:?}",
        paths_under(&b.root)
    );
    // B logged its start only: no session, no connection refused before its token.
    let startup = [
        "created",
        "sessions may hold",
        "listening on",
        "fingerprint",
        "token in",
    ];
    let log = b.log();
    let other = log.lines().find(|l| !startup.iter().any(|s| l.contains(s)));
    assert!(other.is_none(), "B was contacted:\n{log}");
}

/// A wrong key for B or a wrong token at B ends the copy with one line naming B;
/// nothing arrives under a final name, and B's token never shows in A's log.
#[test]
fn a_wrong_destination_key_or_token_fails_with_one_line_naming_it() {
    let t = tempdir();
    let b = Server::start(&t.path().join("b-root"), &t.path().join("b-state"));
    let a = server_a(t.path(), Some(&b.addr));
    write_random(&a.root.join("x"), 100_000, 1);

    let mut wrong_key = relay_args(&a, &b, "x", "x", &["--retries", "0"]);
    let i = wrong_key.iter().position(|s| *s == b.fingerprint).unwrap();
    wrong_key[i] = a.fingerprint.clone();
    let out = hetch(&os_args(&wrong_key), &[("HETCH_TOKEN", &a.token)]);
    out.failed();
    out.one_line_naming(&[&b.addr, "presented key", "--dest-fingerprint"]);

    let bad_token = t.path().join("bad-token");
    std::fs::write(&bad_token, "not-the-token-of-b-at-all-0123456789").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bad_token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut wrong_token = relay_args(&a, &b, "x", "x", &["--retries", "0"]);
    let i = wrong_token
        .iter()
        .position(|s| *s == b.token_path.display().to_string())
        .unwrap();
    wrong_token[i] = bad_token.display().to_string();
    let out = hetch(&os_args(&wrong_token), &[("HETCH_TOKEN", &a.token)]);
    out.failed();
    out.one_line_naming(&[&b.addr, "authentication failed"]);

    assert!(!b.root.join("x").exists());
    assert!(!a.log().contains(&b.token), "{}", a.log());
}

/// B killed with `kill -9` in the middle of a relayed file and started again on its
/// address: the client's retry opens a new relay, which resumes from what B verified,
/// and the file arrives whole.
#[test]
fn a_relay_cut_by_the_destination_restarting_resumes() {
    let t = tempdir();
    let (b_root, b_state) = (t.path().join("b-root"), t.path().join("b-state"));
    let mut b = Server::start(&b_root, &b_state);
    let a = server_a(t.path(), Some(&b.addr));
    std::fs::create_dir_all(&a.root).unwrap();
    write_random(&a.root.join("big.bin"), 48 << 20, 3);
    let args = relay_args(
        &a,
        &b,
        "big.bin",
        "big.bin",
        &["--rate-limit", "12M", "--block-size", "1M"],
    );
    let cp = spawn(&os_args(&args), &[("HETCH_TOKEN", &a.token)]);
    // Blocks B has verified, which the next relay must not send again.
    wait_for("verified blocks at B", || {
        journal_records(&b_root.join("big.bin")) >= 4
    });
    b.kill9();
    let listen = b.addr.clone();
    let b2 = Server::start_with(&b_root, &b_state, &["--listen", &listen], &[]);
    let out = cp.wait_at_most(Duration::from_secs(120));
    out.ok();
    assert_eq!(
        hash_file(&a.root.join("big.bin")),
        hash_file(&b2.root.join("big.bin"))
    );
    assert_no_temp_files(&b2.root);
    assert!(out.stderr.contains("opening a new session"), "{out:?}");
}

/// The data goes from A to B directly: the client runs in a network namespace of its
/// own, from which A is reachable and B is not (B listens on the host's loopback), and
/// the copy still arrives whole. Root only (network namespaces); skipped otherwise.
#[test]
fn the_data_never_passes_through_the_client() {
    if !is_root() || Command::new("ip").arg("-V").output().is_err() {
        util::skipped("needs root and `ip` for a network namespace");
        return;
    }
    let t = tempdir();
    let ns = Netns::new("hetch-relay-c", "10.78.0");
    let b = Server::start(&t.path().join("b-root"), &t.path().join("b-state"));
    let a = Server::start_with(
        &t.path().join("a-root"),
        &t.path().join("a-state"),
        &["--listen", "10.78.0.1:0", "--relay-to", &b.addr],
        &[],
    );
    let src = a.root.join("run1");
    mixed_tree(&src);
    // From the client's namespace B's address is its own, empty loopback.
    let mut args = vec!["netns".into(), "exec".into(), ns.name.clone()];
    args.push(env!("CARGO_BIN_EXE_hetch").into());
    args.extend(relay_args(&a, &b, "run1", "copy/", &["--retries", "0"]));
    let out = Command::new("ip")
        .args(&args)
        .env("HETCH_TOKEN", &a.token)
        .env("HETCH_CONFIG_DIR", t.path().join("config"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_same_tree(&src, &b.root.join("copy/run1"));

    // The namespace really cannot reach B: a push from it to B fails to connect.
    let direct = Command::new("ip")
        .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_hetch"), "cp"])
        .args(["-q", "--retries", "0", "--fingerprint", &b.fingerprint])
        .arg(src.join("sub/file.txt"))
        .arg(b.url("direct"))
        .env("HETCH_TOKEN", &b.token)
        .env("HETCH_CONFIG_DIR", t.path().join("config"))
        .output()
        .unwrap();
    assert!(!direct.status.success());
    assert!(!b.root.join("direct").exists());
}

/// A network namespace joined to the host by a veth pair: the host is PREFIX.1, the
/// namespace PREFIX.2; its loopback stays down. Removed on drop.
struct Netns {
    name: String,
    host_if: String,
}

impl Netns {
    fn new(name: &str, prefix: &str) -> Netns {
        let host_if = format!("{}0", &name[..name.len().min(12)]);
        let ns_if = format!("{}1", &name[..name.len().min(12)]);
        let _ = ip(&["netns", "del", name]);
        let _ = ip(&["link", "del", &host_if]);
        let ns = Netns {
            name: name.into(),
            host_if: host_if.clone(),
        };
        let steps: [Vec<String>; 6] = [
            vec!["netns".into(), "add".into(), name.into()],
            vec![
                "link".into(),
                "add".into(),
                host_if.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                ns_if.clone(),
                "netns".into(),
                name.into(),
            ],
            vec![
                "addr".into(),
                "add".into(),
                format!("{prefix}.1/30"),
                "dev".into(),
                host_if.clone(),
            ],
            vec!["link".into(), "set".into(), host_if.clone(), "up".into()],
            vec![
                "-n".into(),
                name.into(),
                "addr".into(),
                "add".into(),
                format!("{prefix}.2/30"),
                "dev".into(),
                ns_if.clone(),
            ],
            vec![
                "-n".into(),
                name.into(),
                "link".into(),
                "set".into(),
                ns_if,
                "up".into(),
            ],
        ];
        for step in steps {
            let step: Vec<&str> = step.iter().map(String::as_str).collect();
            assert!(ip(&step), "ip {step:?} failed");
        }
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}
