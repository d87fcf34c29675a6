//! Recovery inside one run: when a session to a server is lost (reset, TLS record
//! failure, stall, server restart or shutdown), `cp` and `verify` open a new one, which
//! resumes from what the destination verified (part files and journals), after a pause
//! that doubles each time. What ends a run is an error that another session cannot get
//! past (a refused path, a wrong token, a full disk), or too many failures in a row
//! without any data getting through.

use std::time::{Duration, Instant};

use clap::Args;
use hetch_units::parse_duration;

/// Longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How a run recovers from lost sessions (`cp`, `verify`).
#[derive(Args, Clone, Debug)]
pub struct RetryArgs {
    /// Sessions opened again in a row, after a lost connection, without any data
    /// getting through in between (a session that moves data resets the count);
    /// 0 gives up at the first loss.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub retries: u32,
    /// Give up recovering once this long has passed without any data getting through.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub retry_for: Duration,
}

impl Default for RetryArgs {
    /// The command line's defaults.
    fn default() -> Self {
        RetryArgs {
            retries: 5,
            retry_for: Duration::from_secs(600),
        }
    }
}

pub use hetch_session::is_transient;

/// The state of one run's recovery.
pub struct Recovery {
    args: RetryArgs,
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
    pub fn new(args: RetryArgs) -> Self {
        Recovery {
            args,
            in_a_row: 0,
            last_progress: Instant::now(),
            backoff: Duration::from_secs(1),
            reconnects: 0,
        }
    }

    /// After a session failed with `e`: how long to wait before the next one, or
    /// `None` to give up (the error is not transient, or the limits are reached).
    /// `moved` says whether the failed session got any data through.
    pub fn next_attempt(&mut self, e: &anyhow::Error, moved: bool) -> Option<Duration> {
        if !is_transient(e) {
            return None;
        }
        if moved {
            self.in_a_row = 0;
            self.last_progress = Instant::now();
            self.backoff = Duration::from_secs(1);
        }
        self.in_a_row += 1;
        if self.in_a_row > self.args.retries || self.last_progress.elapsed() > self.args.retry_for {
            return None;
        }
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        self.reconnects += 1;
        Some(wait)
    }
}

/// Whether the session counted in `attempt` got any data through: payload bytes, or
/// files finished or found in place.
pub fn moved(attempt: &hetch_proto::Summary) -> bool {
    attempt.bytes + attempt.files + attempt.skipped > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetch_engine::EngineError;

    fn lost() -> anyhow::Error {
        anyhow::Error::new(EngineError::Connection {
            peer: "h:1".into(),
            cause: std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        })
    }

    fn args(retries: u32) -> RetryArgs {
        RetryArgs {
            retries,
            retry_for: Duration::from_secs(600),
        }
    }

    #[test]
    fn failures_in_a_row_without_progress_are_bounded_and_backoff_doubles() {
        let mut r = Recovery::new(args(3));
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
    fn progress_resets_the_count_and_the_backoff() {
        let mut r = Recovery::new(args(2));
        let e = lost();
        assert!(r.next_attempt(&e, false).is_some());
        assert!(r.next_attempt(&e, false).is_some());
        assert_eq!(r.next_attempt(&e, true), Some(Duration::from_secs(1)));
        assert!(r.next_attempt(&e, false).is_some());
        assert!(r.next_attempt(&e, false).is_none());
    }

    #[test]
    fn no_retries_and_final_errors_give_up_at_once() {
        assert!(Recovery::new(args(0))
            .next_attempt(&lost(), false)
            .is_none());
        let final_error = anyhow::anyhow!("refused");
        assert!(Recovery::new(args(5))
            .next_attempt(&final_error, false)
            .is_none());
        let mut quick = Recovery::new(RetryArgs {
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
