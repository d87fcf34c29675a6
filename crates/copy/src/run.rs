//! A whole copy: sessions run until one completes, each lost one followed by a new one
//! that resumes from what the destination verified, and the manifest written once; or,
//! for a copy that follows its sources forever, sessions until it is stopped.

use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hetch_engine::{Manifest, Progress, Report};
use hetch_proto::Summary;

use crate::retry::{moved, Recovery};
use crate::{dispatch, one_line, CopyError, CopyJob};

/// What the sessions of a run that were lost had done, and how many there were.
#[derive(Default)]
pub struct Recovered {
    /// Counters of the lost sessions, summed.
    lost: Summary,
    /// Sessions opened again.
    pub reconnects: u64,
}

impl Recovered {
    /// Adds the lost sessions' work to the last session's summary: the files they
    /// finished count as copied, not as found in place by the last session.
    pub fn merge_into(&self, s: &mut Summary) {
        s.files += self.lost.files;
        s.skipped = s.skipped.saturating_sub(self.lost.files);
        s.bytes += self.lost.bytes;
        s.retried_blocks += self.lost.retried_blocks;
        s.reverified += self.lost.reverified;
        s.damaged_on_arrival += self.lost.damaged_on_arrival;
        s.failed_read_back += self.lost.failed_read_back;
        s.repaired_blocks += self.lost.repaired_blocks;
        s.patch_bytes += self.lost.patch_bytes;
        s.streams_rejoined += self.lost.streams_rejoined;
    }
}

/// Runs sessions of `job` until one completes, opening a new one (which resumes from
/// what the destination verified) after each transient failure, as `job.retry` allows;
/// each loss is a warning in `progress`. Copies that involve no server run once.
/// Returns the last session's report, unmerged with what the lost ones did.
pub async fn recover(
    job: &CopyJob,
    progress: &Arc<Progress>,
    manifest: Option<&Manifest>,
) -> (Result<Report, CopyError>, Recovered) {
    let mut recovery = Recovery::new(job.retry.clone());
    let mut recovered = Recovered::default();
    let mut most_verified = 0;
    loop {
        let e = match dispatch(job, progress.clone()).await {
            Ok(r) => return (Ok(r), recovered),
            Err(e) => e,
        };
        // A server never reached is a mistake to report at once (a wrong address, a
        // server not started), not a loss to recover from; unless what stopped the
        // first handshake was damage on the way (a TLS record that failed its check):
        // something answered with TLS, and a bad link breaks first handshakes too.
        let reached = job.client.as_ref().map_or(0, |c| c.opened.load(Relaxed));
        if reached == 0 && !e.is_damage() {
            return (Err(e), recovered);
        }
        let verified_before = progress.skipped_bytes.load(Relaxed);
        let attempt = progress.begin_attempt();
        let moved = moved(&attempt, verified_before, &mut most_verified);
        let Some(wait) = recovery.next_attempt(&e, moved) else {
            return (Err(e), recovered);
        };
        if let Some(m) = manifest {
            if let Err(me) = m.restart() {
                return (Err(me.into()), recovered);
            }
        }
        let lost = Recovered {
            lost: attempt,
            reconnects: 0,
        };
        lost.merge_into(&mut recovered.lost);
        recovered.reconnects = recovery.reconnects;
        progress.warn(&format!(
            "{}; opening a new session in {} (it resumes what is verified)",
            one_line(&e),
            match wait.as_secs() {
                0 => format!("{} ms", wait.as_millis()),
                s => format!("{s} s"),
            }
        ));
        tokio::time::sleep(wait).await;
    }
}

/// Longest pause between two sessions of [`forever`] after a failure.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Runs sessions of `job`, which follows its sources forever (a session only ends on
/// an error), until `stop` resolves (`hetch watch`): after each session a note in
/// `progress` says why it ended and when the next starts, after a pause that doubles
/// up to [`MAX_BACKOFF`] (back to 1 s after a session that lasted longer). Each
/// resumes from what the destination verified. Returns the sessions started.
pub async fn forever(
    job: &CopyJob,
    progress: &Arc<Progress>,
    stop: impl Future<Output = ()>,
) -> u64 {
    let mut sessions = 0u64;
    let mut backoff = Duration::from_secs(1);
    tokio::pin!(stop);
    loop {
        sessions += 1;
        let began = Instant::now();
        let outcome = tokio::select! {
            r = dispatch(job, progress.clone()) => r,
            _ = &mut stop => return sessions,
        };
        let why = match outcome {
            Ok(_) => "the session ended".to_string(),
            Err(e) => format!("{:#}", anyhow::Error::new(e)),
        };
        if began.elapsed() > MAX_BACKOFF {
            backoff = Duration::from_secs(1);
        }
        progress.note(&format!("{why}; starting again in {} s", backoff.as_secs()));
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = &mut stop => return sessions,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// A copy ready to run: its job, with the manifest it writes already created.
pub struct Copy {
    job: CopyJob,
    manifest: Option<Arc<Manifest>>,
}

/// What a finished copy did.
pub struct Copied {
    /// The report: of the last session, with the lost sessions' work added (a
    /// comparison's last session compared everything again: its report alone).
    pub report: Report,
    /// Sessions opened again after a loss.
    pub reconnects: u64,
}

impl Copied {
    /// Whether every file was copied (or, comparing, is identical).
    pub fn is_complete(&self) -> bool {
        self.report.summary.failed == 0 && self.report.errors.is_empty()
    }
}

impl Copy {
    /// Prepares `job`: creates its manifest (file digests are then computed).
    pub fn new(mut job: CopyJob) -> Result<Self, CopyError> {
        let manifest = match &job.manifest {
            Some(p) => Some(Arc::new(Manifest::create(p, job.opts.checksum)?)),
            None => None,
        };
        if let Some(m) = &manifest {
            job.opts.file_digests = true;
            job.opts.manifest = Some(m.clone());
        }
        Ok(Copy { job, manifest })
    }

    /// The job, as it runs.
    pub fn job(&self) -> &CopyJob {
        &self.job
    }

    /// Runs the copy (recovering lost sessions), counting into `progress`; the
    /// manifest is committed if it succeeds, abandoned if not.
    pub async fn run(&self, progress: &Arc<Progress>) -> Result<Copied, CopyError> {
        let (result, recovered) = recover(&self.job, progress, self.manifest.as_deref()).await;
        let mut report = match (result, &self.manifest) {
            (Ok(r), Some(m)) => {
                m.commit()?;
                if let (n @ 1.., Some(first)) = m.not_for_b3sum() {
                    progress.warn(&format!(
                        "the manifest names {n} file(s) b3sum --check cannot check (not \
                         UTF-8), first {first}: b3sum reports their lines as failed and \
                         checks the others; hetch sum --check checks them all"
                    ));
                }
                r
            }
            (Ok(r), None) => r,
            (Err(e), m) => {
                if let Some(m) = m {
                    m.abandon();
                }
                return Err(e);
            }
        };
        // Every comparing session compares everything again: the last has the answer.
        if !self.job.opts.compare_only {
            recovered.merge_into(&mut report.summary);
        }
        Ok(Copied {
            report,
            reconnects: recovered.reconnects,
        })
    }
}
