//! Running a user's unit as their local account: where the identity map gives a
//! user's entry an `account` and the worker runs as root, each of that user's units
//! runs in a child process of its own (`hetch worker-unit`, hidden: [`child_main`]) that becomes the
//! account (its uid, gid and supplementary groups) before it opens anything, so that
//! the file system's own permissions and ACLs decide what the unit reads and writes,
//! as they do for `scp` as that user.
//!
//! The child is given the unit and what it needs on its standard input, as one JSON
//! line: what only root may read (the servers' tokens, the pinned keys of the servers
//! the unit names) is read by the child before it changes its identity, and the
//! service's token is handed over in that line, never in its arguments or
//! environment. After the change the process is no longer dumpable, so the account
//! cannot read its memory. The child then reports progress (`{"progress":{"bytes":N,...}}`) and
//! finally the unit's report (`{"report":{...}}`) on its standard output, one JSON
//! line each; the worker sends it the unit's new rate (`{"rate":N}`) and stops it by
//! closing its input, then killing it.

use std::convert::Infallible;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use crate::servers::Preloaded;
use crate::unit::{Pace, UnitContext};
use anyhow::{anyhow, bail};
use hetch_engine::{Progress, RateLimiter};
use hetch_service_api::client::Client;
use hetch_service_api::{ClaimedUnit, FinishRequest};
use hetch_storage::account::Account;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Longest line the worker reads from a child (a report is one line of a few KiB).
const MAX_LINE: usize = 64 << 10;

/// What the worker hands a child: the unit and how to reach what it needs.
#[derive(Serialize, Deserialize)]
struct Handover {
    unit: ClaimedUnit,
    account: String,
    root: PathBuf,
    service: String,
    fingerprint: String,
    service_token: String,
    dest_token: Option<PathBuf>,
    source_token: Option<PathBuf>,
    known_hosts: Option<PathBuf>,
    rate: u64,
    /// The worker's name, which a unit's calls about itself give.
    #[serde(default)]
    worker: String,
}

/// What a child says on its standard output, one JSON line each.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum FromChild {
    /// What the unit moved so far (`{"progress":{...}}`).
    Progress(Moved),
    /// The unit's report, its last line (`{"report":{...}}`).
    Report(FinishRequest),
}

/// A unit's progress, as a child reports it.
#[derive(Serialize, Deserialize)]
struct Moved {
    bytes: u64,
    wire_bytes: u64,
    compressed_blocks: u64,
}

/// What the worker says to a child on its standard input after the handover: the
/// unit's new share of its job's rate (`{"rate":N}`).
#[derive(Serialize, Deserialize)]
struct ToChild {
    rate: u64,
}

/// The local account unit `u` must run as: its user's (the identity map's
/// `account`), when this worker runs as root; `None` otherwise (then the map's paths
/// alone decide, as they do for every unit).
pub(crate) fn account_of(u: &ClaimedUnit) -> Option<&str> {
    let account = u.spec.access.as_ref()?.account.as_deref()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    (unsafe { libc::geteuid() } == 0).then_some(account)
}

impl UnitContext {
    /// Runs unit `u` in a child process as `account` (see the module's comment) and
    /// returns its report; a child that fails to start or to report is the unit's
    /// error.
    pub(crate) async fn run_as(&self, u: ClaimedUnit, account: &str, p: Pace) -> FinishRequest {
        let (job, seq) = (u.job.clone(), u.seq);
        match self.child(u, account, p).await {
            Ok(report) => report,
            Err(e) => {
                let why = format!("as account {account}: {}", hetch_copy::one_line(e.as_ref()));
                FinishRequest::failed(&job, seq, why)
            }
        }
    }

    /// [`UnitContext::run_as`]'s child process, from its start to its report.
    async fn child(&self, u: ClaimedUnit, account: &str, p: Pace) -> anyhow::Result<FinishRequest> {
        let Pace {
            stop,
            rate,
            progress,
        } = p;
        let handover = Handover {
            unit: u,
            account: account.to_string(),
            root: self.root.clone(),
            service: self.api.service().to_string(),
            fingerprint: self
                .api
                .pinned()
                .ok_or_else(|| anyhow!("the service's key is not pinned"))?
                .to_string(),
            service_token: self.api.token().to_string(),
            dest_token: self.dest_token.clone(),
            source_token: self.source_token.clone(),
            known_hosts: self.known_hosts.clone(),
            rate: rate.rate(),
            worker: self.worker.clone(),
        };
        let exe = std::env::current_exe()?;
        let mut child = tokio::process::Command::new(exe)
            .args(self.account_child.iter())
            // It runs as the account: nothing of the worker's environment beyond what
            // a unit needs (its tokens come in the handover), never a token of ours.
            .env_clear()
            .envs(child_env(std::env::vars_os()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let mut input = child.stdin.take().expect("piped");
        let mut line = serde_json::to_vec(&handover)?;
        line.push(b'\n');
        input.write_all(&line).await?;
        let mut output = bounded_lines(child.stdout.take().expect("piped"));
        let mut sent_rate = handover.rate;
        let mut report = None;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                got = output.recv() => match got {
                    Some(l) => match serde_json::from_slice(&l?)? {
                        FromChild::Report(r) => {
                            report = Some(r);
                            break;
                        }
                        FromChild::Progress(m) => counted(&progress, &m),
                    },
                    None => break,
                },
                _ = stop.clone().raised() => {
                    // Closing its input stops it; a child that does not stop soon is
                    // killed (kill_on_drop) as this returns.
                    drop(input);
                    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
                    bail!("stopped");
                }
                _ = tick.tick() => {
                    let now = rate.rate();
                    if now != sent_rate {
                        sent_rate = now;
                        let line = line_of(&ToChild { rate: now });
                        input.write_all(line.as_bytes()).await?;
                    }
                }
            }
        }
        drop(input);
        let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        report.ok_or_else(|| anyhow!("its process ended ({status:?}) without a report"))
    }
}

/// The lines the unit's process writes to `out`, each read at most [`MAX_LINE`] bytes
/// at a time (the process runs as the user's account, so what it writes is that
/// user's to shape): a longer line is an error and the end. Read by a task of its own,
/// so that the caller's `select!` may drop a `recv` without losing half a line.
fn bounded_lines(
    out: tokio::process::ChildStdout,
) -> tokio::sync::mpsc::Receiver<anyhow::Result<Vec<u8>>> {
    use tokio::io::AsyncReadExt;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        let mut out = BufReader::new(out);
        loop {
            let mut line = Vec::new();
            let read = (&mut out)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut line)
                .await;
            let item = match read {
                Ok(0) => return,
                Ok(_) if line.last() == Some(&b'\n') => {
                    line.pop();
                    Ok(line)
                }
                Ok(n) if n > MAX_LINE => Err(anyhow!(
                    "the unit's process wrote a line over {MAX_LINE} bytes"
                )),
                // The last line, cut off by the process's end.
                Ok(_) => Ok(line),
                Err(e) => Err(e.into()),
            };
            let last = item.is_err();
            if tx.send(item).await.is_err() || last {
                return;
            }
        }
    });
    rx
}

/// Progress a child reports, into the worker's own counters.
fn counted(progress: &Progress, m: &Moved) {
    progress.bytes.store(m.bytes, Relaxed);
    progress.wire_bytes.store(m.wire_bytes, Relaxed);
    progress
        .compressed_blocks
        .store(m.compressed_blocks, Relaxed);
}

/// `v` as one JSON line.
fn line_of(v: &impl Serialize) -> String {
    format!("{}\n", serde_json::to_string(v).expect("a plain struct"))
}

/// Why a unit's process could not run it (its handover unreadable, the service
/// unreachable, the account not to be become): the process's error. Opaque: it
/// carries the errors of the crates it drives.
#[derive(Debug)]
pub struct ChildError(anyhow::Error);

impl std::fmt::Display for ChildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ChildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// `hetch worker-unit`: the child's side. Reads its handover, reads what only root
/// may (tokens, pinned keys), becomes the account, runs the unit, reports, and ends
/// the process (exit code 0: the report says how the unit went).
pub async fn child_main() -> Result<Infallible, ChildError> {
    unit_process().await.map_err(ChildError)
}

/// [`child_main`].
async fn unit_process() -> anyhow::Result<Infallible> {
    let mut input = BufReader::new(tokio::io::stdin()).lines();
    let first = input
        .next_line()
        .await?
        .ok_or_else(|| anyhow!("no unit on standard input"))?;
    let h: Handover = serde_json::from_str(&first)?;
    let fingerprint: hetch_net::Fingerprint =
        h.fingerprint.parse().map_err(|e| anyhow!("{e:?}"))?;
    let api = Client::new(
        &h.service,
        Some(fingerprint),
        h.known_hosts.clone(),
        h.service_token.into_bytes(),
    )
    .await?;
    let mut ctx = UnitContext::new(
        Arc::new(api),
        h.root,
        h.dest_token,
        h.source_token,
        h.known_hosts,
    );
    ctx.worker = h.worker.clone();
    ctx.preloaded = Some(Arc::new(Preloaded::for_unit(&ctx, &h.unit)));
    become_account(&h.account)?;
    let (tx, stop) = hetch_engine::StopSignal::new();
    let rate = Arc::new(RateLimiter::adjustable(h.rate));
    let progress = Arc::new(Progress::default());
    // The worker's word: a new rate, or the end of its input (stop).
    let heard = rate.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = input.next_line().await {
            if let Ok(ToChild { rate }) = serde_json::from_str(&line) {
                heard.set_rate(rate);
            }
        }
        tx.stop();
    });
    let shown = progress.clone();
    let reporter = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            // A worker that stopped reading is told nothing more; the report decides.
            let _ = tell_worker(&line_of(&FromChild::Progress(Moved {
                bytes: shown.bytes.load(Relaxed),
                wire_bytes: shown.wire_bytes.load(Relaxed),
                compressed_blocks: shown.compressed_blocks.load(Relaxed),
            })));
        }
    });
    let report = ctx
        .run_here(
            h.unit,
            Pace {
                stop,
                rate,
                progress,
            },
        )
        .await;
    reporter.abort();
    let told = tell_worker(&line_of(&FromChild::Report(report)));
    // Now, not at the runtime's end: that would wait for the read of standard input,
    // which lasts as long as the worker keeps it open. A report that could not be
    // written (the worker gone) is a failure of this process.
    std::process::exit(if told.is_ok() { 0 } else { 1 })
}

/// Writes `line` to the worker (standard output) at once. Not `print!`, which panics
/// when the worker has gone (a closed pipe).
fn tell_worker(line: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(line.as_bytes())?;
    out.flush()
}

/// Becomes local account `name` for good: its supplementary groups, then its group,
/// then its user (real, effective and saved), and no way back to more privilege.
fn become_account(name: &str) -> anyhow::Result<()> {
    let Account {
        uid, gid, groups, ..
    } = Account::lookup(name)?;
    // SAFETY: plain system calls on values owned here; glibc applies each to every
    // thread of the process.
    unsafe {
        if libc::setgroups(groups.len(), groups.as_ptr()) != 0 {
            bail!(
                "account {name}: setgroups: {}",
                std::io::Error::last_os_error()
            );
        }
        if libc::setresgid(gid, gid, gid) != 0 {
            bail!(
                "account {name}: setresgid: {}",
                std::io::Error::last_os_error()
            );
        }
        if libc::setresuid(uid, uid, uid) != 0 {
            bail!(
                "account {name}: setresuid: {}",
                std::io::Error::last_os_error()
            );
        }
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        // Checked, not assumed: root must be out of reach now.
        if libc::geteuid() != uid || libc::setuid(0) == 0 {
            bail!("account {name}: still able to become root");
        }
    }
    Ok(())
}

/// Of the worker's environment `vars`, what a unit's child process run as a local
/// account gets: the search path, locale, time zone, temporary directory, TLS trust,
/// Rust's diagnostics, and the object stores' credentials (a unit may write there);
/// nothing else, so no token of the service's or a server's (`HETCH_SERVICE_TOKEN`,
/// `HETCH_TOKEN`, ...) and nothing an operator set for the worker alone.
fn child_env(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    const NAMES: &[&str] = &[
        "PATH",
        "LANG",
        "TZ",
        "TMPDIR",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "RUST_BACKTRACE",
    ];
    const PREFIXES: &[&str] = &["LC_", "AWS_", "AZURE_", "GOOGLE_"];
    vars.filter(|(k, _)| {
        let k = k.to_string_lossy();
        NAMES.contains(&&*k) || PREFIXES.iter().any(|p| k.starts_with(p))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_units_child_gets_no_token_of_the_workers_environment() {
        let vars = [
            ("HETCH_SERVICE_TOKEN", "secret"),
            ("HETCH_TOKEN", "secret"),
            ("HETCH_DEST_TOKEN", "secret"),
            ("HOME", "/root"),
            ("PATH", "/usr/bin"),
            ("LC_ALL", "C.UTF-8"),
            ("AWS_ACCESS_KEY_ID", "key"),
            ("AZURE_STORAGE_ACCOUNT_NAME", "acct"),
        ]
        .map(|(k, v)| (k.into(), v.into()));
        let kept: Vec<String> = child_env(vars.into_iter())
            .into_iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            kept,
            [
                "PATH",
                "LC_ALL",
                "AWS_ACCESS_KEY_ID",
                "AZURE_STORAGE_ACCOUNT_NAME"
            ]
        );
    }

    /// The lines a process writes, as `bounded_lines` gives them.
    async fn lines_of(script: &str) -> Vec<Result<Vec<u8>, String>> {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut rx = bounded_lines(child.stdout.take().unwrap());
        let mut got = Vec::new();
        while let Some(l) = rx.recv().await {
            got.push(l.map_err(|e| e.to_string()));
        }
        let _ = child.wait().await;
        got
    }

    /// Lines up to the bound come whole (the last one even without its newline); a
    /// longer one is an error after at most the bound was read, and the end.
    #[tokio::test]
    async fn a_units_process_writes_lines_of_at_most_the_bound() {
        let got = lines_of("printf 'a\\n{\"x\":1}\\nlast'").await;
        let want: Vec<Result<Vec<u8>, String>> = vec![
            Ok(b"a".to_vec()),
            Ok(b"{\"x\":1}".to_vec()),
            Ok(b"last".to_vec()),
        ];
        assert_eq!(got, want);
        let exact = format!("head -c {MAX_LINE} /dev/zero | tr '\\0' x; echo; echo after");
        let got = lines_of(&exact).await;
        assert_eq!(got.len(), 2, "a line of exactly the bound passes");
        assert_eq!(got[0].as_ref().unwrap().len(), MAX_LINE);
        let over = format!(
            "head -c {} /dev/zero | tr '\\0' x; echo; echo after",
            MAX_LINE + 1
        );
        let got = lines_of(&over).await;
        assert_eq!(got.len(), 1, "nothing after the long line: {got:?}");
        assert!(
            got[0].as_ref().unwrap_err().contains("over 65536 bytes"),
            "{got:?}"
        );
    }
}
