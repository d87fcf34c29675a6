//! Recovery inside one run: when a session to a server is lost (reset, TLS record
//! failure, stall, server restart or shutdown), a copy opens a new one, which resumes
//! from what the destination verified (part files and journals), after a pause that
//! doubles each time. What ends a run is an error that another session cannot get
//! past (a refused path, a wrong token, a full disk), or a time without any data getting
//! through (`--retry-for`; and, if asked, a number of failures in a row without it: by
//! default none, so a bad link that lets data through now and then is never given up
//! on by chance).

use std::time::{Duration, Instant};

use crate::CopyError;

/// Longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Pause before the first attempt after one that moved data: a link that damages a
/// TLS record now and then ends sessions that were doing fine, and a second of
/// nothing after each would cost more than the damage.
const AFTER_PROGRESS: Duration = Duration::from_millis(100);
/// First pause of a run of failures without progress (then doubled each time).
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest pause after a session lost to damage on the way (a TLS record that failed
/// its check): the server answered, so there is nothing to wait for, and on a link
/// that damages often many sessions in a row end before the one after shows what
/// they verified.
const AFTER_DAMAGE: Duration = Duration::from_millis(250);

/// How a run recovers from lost sessions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Sessions opened again in a row without any data getting through in between
    /// (a session that moves data resets the count); 0 gives up at the first loss,
    /// [`RetryPolicy::UNCOUNTED`] bounds them by `retry_for` alone.
    pub retries: u32,
    /// Give up once this long has passed without any data getting through.
    pub retry_for: Duration,
}

impl RetryPolicy {
    /// No recovery: the first loss ends the run (a caller that opens new sessions
    /// itself, or that another node should take over from).
    pub const NEVER: RetryPolicy = RetryPolicy {
        retries: 0,
        retry_for: Duration::ZERO,
    };

    /// `retries` that sets no count: only `retry_for` ends the recoveries.
    pub const UNCOUNTED: u32 = u32::MAX;
}

impl Default for RetryPolicy {
    /// Sessions opened again for as long as data gets through at least every 10
    /// minutes, however many (the command line's defaults): a count of failures in a
    /// row can run out by chance on a link that breaks sessions often but lets data
    /// through between the breaks.
    fn default() -> Self {
        RetryPolicy {
            retries: Self::UNCOUNTED,
            retry_for: Duration::from_secs(600),
        }
    }
}

/// The state of one run's recovery.
pub struct Recovery {
    policy: RetryPolicy,
    /// Failures since data last got through.
    in_a_row: u32,
    /// When data last got through (or the run started).
    last_progress: Instant,
    backoff: Duration,
    /// Sessions opened again so far.
    pub reconnects: u64,
}

impl Recovery {
    /// A run that has not failed yet.
    pub fn new(policy: RetryPolicy) -> Self {
        Recovery {
            policy,
            in_a_row: 0,
            last_progress: Instant::now(),
            backoff: FIRST_BACKOFF,
            reconnects: 0,
        }
    }

    /// After a session failed with `e`: how long to wait before the next one, or
    /// `None` to give up (the error is not transient, or the limits are reached).
    /// `moved` says whether the failed session got any data through.
    pub fn next_attempt(&mut self, e: &CopyError, moved: bool) -> Option<Duration> {
        if !e.is_transient() {
            return None;
        }
        if moved {
            self.in_a_row = 0;
            self.last_progress = Instant::now();
            self.backoff = FIRST_BACKOFF;
        }
        self.in_a_row = self.in_a_row.saturating_add(1);
        if self.in_a_row > self.policy.retries
            || self.last_progress.elapsed() > self.policy.retry_for
        {
            return None;
        }
        self.reconnects += 1;
        if moved {
            return Some(AFTER_PROGRESS);
        }
        let wait = match e.is_damage() {
            true => self.backoff.min(AFTER_DAMAGE),
            false => self.backoff,
        };
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        Some(wait)
    }
}

/// Whether the session counted in `attempt` moved the copy on: it finished files, or
/// its plan found more verified at the destination (`verified_before`: bytes in place
/// or checked already, the plan's skipped bytes) than any session's before, so that
/// the sessions before it got blocks through. Bytes only sent do not count: a link
/// that damages every block, or a relay that alters every frame, lets a push send
/// forever and verifies nothing. (Judged a session late: what a session verified
/// shows in the next one's plan.)
pub fn moved(attempt: &hetch_proto::Summary, verified_before: u64, most_before: &mut u64) -> bool {
    let grew = verified_before > *most_before;
    *most_before = (*most_before).max(verified_before);
    attempt.files > 0 || grew
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::tests::lost;

    fn policy(retries: u32) -> RetryPolicy {
        RetryPolicy {
            retries,
            retry_for: Duration::from_secs(600),
        }
    }

    #[test]
    fn failures_in_a_row_without_progress_are_bounded_and_backoff_doubles() {
        let mut r = Recovery::new(policy(3));
        let e = lost();
        assert_eq!(r.next_attempt(&e, false), Some(Duration::from_secs(1)));
        assert_eq!(r.next_attempt(&e, false), Some(Duration::from_secs(2)));
        assert_eq!(r.next_attempt(&e, false), Some(Duration::from_secs(4)));
        assert_eq!(
            r.next_attempt(&e, false),
            None,
            "a fourth in a row is too many"
        );
        assert_eq!(r.reconnects, 3);
    }

    #[test]
    fn a_session_lost_to_damage_is_opened_again_soon_and_uncounted_retries_never_run_out() {
        let mut r = Recovery::new(RetryPolicy::default());
        let damaged = CopyError::Engine(hetch_engine::EngineError::Tampered {
            peer: "h:1".into(),
            what: "a data frame".into(),
        });
        assert!(damaged.is_damage() && !lost().is_damage());
        for _ in 0..100 {
            assert_eq!(r.next_attempt(&damaged, false), Some(AFTER_DAMAGE));
        }
        assert_eq!(
            r.next_attempt(&lost(), false),
            Some(MAX_BACKOFF),
            "other losses still back off"
        );
    }

    #[test]
    fn progress_resets_the_count_and_the_backoff() {
        let mut r = Recovery::new(policy(2));
        let e = lost();
        assert!(r.next_attempt(&e, false).is_some());
        assert!(r.next_attempt(&e, false).is_some());
        // Right after a session that moved data, at once (nearly); then the doubling
        // starts over.
        assert_eq!(r.next_attempt(&e, true), Some(AFTER_PROGRESS));
        assert_eq!(r.next_attempt(&e, false), Some(Duration::from_secs(1)));
        assert!(r.next_attempt(&e, false).is_none());
    }

    #[test]
    fn progress_is_files_finished_or_more_found_verified_not_bytes_sent() {
        let sent = hetch_proto::Summary {
            bytes: 1 << 30,
            ..Default::default()
        };
        let mut most = 0;
        assert!(
            moved(&sent, 4096, &mut most),
            "the first plan found blocks in place"
        );
        assert!(
            !moved(&sent, 4096, &mut most),
            "bytes sent, nothing more verified"
        );
        assert!(!moved(&sent, 0, &mut most), "a session that never planned");
        assert!(
            moved(&sent, 8192, &mut most),
            "the session before got blocks through"
        );
        let finished = hetch_proto::Summary {
            files: 1,
            ..Default::default()
        };
        assert!(moved(&finished, 0, &mut most));
    }

    #[test]
    fn no_retries_and_final_errors_give_up_at_once() {
        assert!(Recovery::new(policy(0))
            .next_attempt(&lost(), false)
            .is_none());
        let final_error = CopyError::Refused("refused".into());
        assert!(Recovery::new(policy(5))
            .next_attempt(&final_error, false)
            .is_none());
        let mut quick = Recovery::new(RetryPolicy {
            retries: 5,
            retry_for: Duration::ZERO,
        });
        std::thread::sleep(Duration::from_millis(2));
        assert!(
            quick.next_attempt(&lost(), false).is_none(),
            "retry-for is over"
        );
    }
}
