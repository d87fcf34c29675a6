//! A `hetch service` under test (the real binary, on SQLite, over HTTPS on
//! 127.0.0.1), with its workers and its `hetch job` client.

use std::ffi::OsString;
use std::path::Path;

use super::{hetch, spawn, wait_for, Running};

pub fn args(a: &[&str]) -> Vec<OsString> {
    a.iter().map(OsString::from).collect()
}

pub struct Service {
    pub proc: Running,
    pub addr: String,
    pub token: String,
    /// The workers' token (`state/worker-token`).
    pub worker_token: String,
    /// The clients' config directory (where they pin the service's key on first
    /// use): one per test, shared by the services of one test (which have one key).
    /// Another test of this process may meet a reused port with a different key.
    pub config: String,
}

pub fn start(dir: &Path) -> Service {
    start_with(dir, &[])
}

/// A service's flags for tests of faults mid-range: leases of 2 s, files above 1 MiB
/// in ranges of 512 KiB.
pub const SHORT_LEASES_SMALL_RANGES: [&str; 6] = [
    "--lease-secs",
    "2",
    "--split-size",
    "1M",
    "--range-size",
    "512K",
];

/// A service on `dir/root` (with a small tree `run1` in it), its state in
/// `dir/state`, listening on a port of its choosing.
pub fn start_with(dir: &Path, extra: &[&str]) -> Service {
    launch(dir, "127.0.0.1:0", extra)
}

/// A service on `dir/root` (with a small tree `run1` in it), its state in `dir/state`
/// (shared with any other service launched on `dir`), listening on `listen`.
pub fn launch(dir: &Path, listen: &str, extra: &[&str]) -> Service {
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("run1/sub")).unwrap();
    for i in 0..30 {
        std::fs::write(root.join(format!("run1/sub/f{i}")), vec![b'x'; i]).unwrap();
    }
    let state = dir.join("state");
    let mut a = args(&["service", "--listen", listen]);
    a.extend([
        OsString::from("--root"),
        root.into(),
        "--state-dir".into(),
        state.clone().into(),
    ]);
    // Failed attempts wait (tested by their own tests), briefly: tests whose units
    // fail to the end do not wait minutes for it.
    if !extra.iter().any(|e| e.starts_with("--retry-wait")) {
        a.extend(args(&["--retry-wait", "200ms", "--retry-wait-max", "1s"]));
    }
    a.extend(args(extra));
    let proc = spawn(&a, &[]);
    let addr = printed_after(&proc, "listening on https://");
    let read = |name: &str| {
        let t = std::fs::read_to_string(state.join(name)).unwrap();
        t.trim().to_string()
    };
    let config = dir.join("config").to_string_lossy().into_owned();
    Service {
        proc,
        addr,
        token: read("token"),
        worker_token: read("worker-token"),
        config,
    }
}

impl Service {
    /// The environment of a client of this service: its token and config directory.
    pub fn env(&self) -> [(&str, &str); 2] {
        [
            ("HETCH_TOKEN", &self.token),
            ("HETCH_CONFIG_DIR", &self.config),
        ]
    }

    /// The environment of a worker of this service: the workers' token (never the
    /// operator's) and the config directory.
    pub fn worker_env(&self) -> [(&str, &str); 2] {
        [
            ("HETCH_SERVICE_TOKEN", &self.worker_token),
            ("HETCH_CONFIG_DIR", &self.config),
        ]
    }

    /// A `hetch worker` for this service, named `name`.
    pub fn worker(&self, dir: &Path, name: &str) -> Running {
        self.worker_with(dir, name, &[])
    }

    /// A `hetch worker` for this service, named `name`, with `extra` flags.
    pub fn worker_with(&self, dir: &Path, name: &str, extra: &[&str]) -> Running {
        let mut a = args(&[
            "worker",
            "--service",
            &self.addr,
            "--name",
            name,
            "--units",
            "2",
        ]);
        a.extend([OsString::from("--root"), dir.join("root").into()]);
        a.extend(args(extra));
        spawn(&a, &self.worker_env())
    }

    /// A `hetch worker` for this service, named `name`, that sends units to the
    /// `hetch serve` node `node`: the node's key pinned (in a known-hosts file of the
    /// worker's own in `dir`), its token read from the node's token file.
    pub fn node_worker(&self, dir: &Path, name: &str, node: &super::Server) -> Running {
        let known = dir.join(format!("known_hosts-{name}"));
        std::fs::write(&known, format!("{} {}\n", node.addr, node.fingerprint)).unwrap();
        let (known, token) = (known.to_string_lossy(), node.token_path.to_string_lossy());
        self.worker_with(
            dir,
            name,
            &["--known-hosts", &known, "--token-file", &token],
        )
    }

    pub fn job(&self, a: &[&str]) -> super::Out {
        let mut all = args(&["job", "--service", &self.addr]);
        all.extend(args(a));
        hetch(&all, &self.env())
    }
}

/// The rest of the first line `p` prints on stderr after `marker`, once that line
/// is whole (stderr may be read between a line's first bytes and its end).
pub fn printed_after(p: &Running, marker: &str) -> String {
    let rest = || {
        let err = p.stderr_so_far();
        let line = err
            .split(marker)
            .nth(1)?
            .split_once('\n')?
            .0
            .trim()
            .to_string();
        Some(line)
    };
    wait_for(marker, || rest().is_some());
    rest().unwrap()
}

/// A port of 127.0.0.1 free now (for a service started again on the same address).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Job `id` as `hetch job --json show` gives it.
pub fn show(svc: &Service, id: &str) -> serde_json::Value {
    let out = svc.job(&["--json", "show", id]);
    out.ok();
    serde_json::from_str(&out.stdout).unwrap()
}

/// Submits a job (`hetch job submit ARGS`) and returns its id.
pub fn submit(svc: &Service, a: &[&str]) -> String {
    let mut all = vec!["submit"];
    all.extend(a);
    let out = svc.job(&all);
    out.ok();
    out.stdout.lines().next().unwrap().trim().to_string()
}
