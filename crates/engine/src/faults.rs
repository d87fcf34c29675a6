//! Test-only fault injection: damage a few blocks on their way (after the source
//! hashed them) or in the destination (after they were written), so that tests can
//! show every check catches them.
//!
//! The hooks exist only with the `faults` feature, which the test builds enable
//! (dev-dependencies) and release builds leave out: a shipped binary has no switch,
//! in its options or its environment, that damages data. Without the feature the
//! counters below never fire and [`from_env`] reads nothing.

#[cfg(feature = "faults")]
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::Options;

/// How many more times a fault hook fires.
#[derive(Debug, Default)]
pub(crate) struct Countdown {
    #[cfg(feature = "faults")]
    left: AtomicU64,
}

impl Countdown {
    /// Fires `n` times.
    #[cfg(feature = "faults")]
    pub fn new(n: u64) -> Countdown {
        Countdown {
            left: AtomicU64::new(n),
        }
    }

    /// Whether the hook fires this time.
    pub fn fire(&self) -> bool {
        #[cfg(feature = "faults")]
        return self
            .left
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok();
        #[cfg(not(feature = "faults"))]
        false
    }
}

/// The session's two hooks: blocks the source damages after hashing them
/// (`Options::corrupt_blocks`), and blocks the sink damages after writing them
/// (`Options::corrupt_written`).
pub(crate) fn hooks(opts: &Options) -> (Countdown, Countdown) {
    #[cfg(feature = "faults")]
    return (
        Countdown::new(opts.corrupt_blocks),
        Countdown::new(opts.corrupt_written),
    );
    #[cfg(not(feature = "faults"))]
    {
        let _ = opts;
        Default::default()
    }
}

/// Sets the fault hooks from `HETCH_FAULT_CORRUPT_BLOCKS` and
/// `HETCH_FAULT_CORRUPT_WRITTEN` (the binary's tests run it with them); reads nothing
/// without the `faults` feature.
pub fn from_env(opts: &mut Options) {
    #[cfg(feature = "faults")]
    {
        let n = |var| std::env::var(var).ok().and_then(|n| n.parse().ok());
        if let Some(n) = n("HETCH_FAULT_CORRUPT_BLOCKS") {
            opts.corrupt_blocks = n;
        }
        if let Some(n) = n("HETCH_FAULT_CORRUPT_WRITTEN") {
            opts.corrupt_written = n;
        }
    }
    #[cfg(not(feature = "faults"))]
    let _ = opts;
}
