//! Streaming jobs: a job that moves its sources' files while they are being written,
//! as `hetch cp --follow` (the job ends once every file is complete) or `hetch watch`
//! (it follows for ever, new files included, until it is cancelled). Each source is
//! one `stream` unit, held by one worker under a lease; a worker that takes it over
//! resumes from what the destination verified. Workers report the lag from bytes
//! appended at the source to bytes durable and verified at the destination.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a streaming job follows its files (`hetch cp --follow`'s flags).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamSpec {
    /// Follow for ever, new files included (`hetch watch`), until the job is
    /// cancelled; else the job ends once every file is complete (`--follow`).
    #[serde(default)]
    pub forever: bool,
    /// A file unchanged for this long is complete, milliseconds (`--idle`).
    #[serde(default = "default_idle")]
    #[schemars(range(min = 1, max = 86_400_000))]
    pub idle_ms: u64,
    /// A file NAME is complete once NAME + this suffix appears (`--done-suffix`);
    /// empty: no markers.
    #[serde(default = "default_suffix")]
    #[schemars(length(max = 255))]
    pub done_suffix: String,
    /// How often growing files are checked for new data, milliseconds (`--poll`).
    #[serde(default = "default_poll")]
    #[schemars(range(min = 1, max = 60_000))]
    pub poll_ms: u64,
    /// A block not yet full is sent after this long, milliseconds (`--flush`).
    #[serde(default = "default_flush")]
    #[schemars(range(max = 60_000))]
    pub flush_ms: u64,
    /// How often directories are scanned for new files, milliseconds (`--rescan`).
    #[serde(default = "default_rescan")]
    #[schemars(range(min = 1, max = 3_600_000))]
    pub rescan_ms: u64,
}

fn default_idle() -> u64 {
    5_000
}
fn default_suffix() -> String {
    ".done".into()
}
fn default_poll() -> u64 {
    50
}
fn default_flush() -> u64 {
    100
}
fn default_rescan() -> u64 {
    1_000
}

impl Default for StreamSpec {
    fn default() -> Self {
        StreamSpec {
            forever: false,
            idle_ms: default_idle(),
            done_suffix: default_suffix(),
            poll_ms: default_poll(),
            flush_ms: default_flush(),
            rescan_ms: default_rescan(),
        }
    }
}

impl StreamSpec {
    /// Whether it is within bounds, as one line naming what is not.
    pub fn check(&self) -> Result<(), String> {
        let within = |v: u64, lo: u64, hi: u64, name: &str| match (lo..=hi).contains(&v) {
            true => Ok(()),
            false => Err(format!("stream.{name} {v} is not in {lo}..={hi}")),
        };
        within(self.idle_ms, 1, 86_400_000, "idle_ms")?;
        within(self.poll_ms, 1, 60_000, "poll_ms")?;
        within(self.flush_ms, 0, 60_000, "flush_ms")?;
        within(self.rescan_ms, 1, 3_600_000, "rescan_ms")?;
        let s = &self.done_suffix;
        if s.len() > 255 || s.contains(['/', '\0']) || s.chars().any(char::is_control) {
            return Err("stream.done_suffix must be at most 255 bytes, no '/' or control".into());
        }
        Ok(())
    }
}

/// A stream's lag as its worker last reported it: from bytes appended at the source
/// to the same bytes durable and verified at the destination, over the unit's run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LagView {
    /// The median, milliseconds (a report of more than a day is taken as a day).
    pub p50_ms: u64,
    /// The 99th percentile, milliseconds (as the median: at most a day, and at least
    /// the median).
    pub p99_ms: u64,
}

/// Most lag a worker may report (a day): more is taken as that.
pub const MAX_LAG_MS: u64 = 86_400_000;

impl LagView {
    /// Held to [`MAX_LAG_MS`], with p99 at least p50 (a report is only shown, never
    /// refused).
    pub fn bounded(self) -> LagView {
        let p50_ms = self.p50_ms.min(MAX_LAG_MS);
        LagView {
            p50_ms,
            p99_ms: self.p99_ms.clamp(p50_ms, MAX_LAG_MS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_settings_out_of_bounds_are_named() {
        assert_eq!(StreamSpec::default().check(), Ok(()));
        let bad = [
            StreamSpec {
                idle_ms: 0,
                ..StreamSpec::default()
            },
            StreamSpec {
                poll_ms: 60_001,
                ..StreamSpec::default()
            },
            StreamSpec {
                done_suffix: "../x".into(),
                ..StreamSpec::default()
            },
            StreamSpec {
                done_suffix: "x".repeat(256),
                ..StreamSpec::default()
            },
        ];
        for s in bad {
            let e = s.check().unwrap_err();
            assert!(e.starts_with("stream."), "{e}");
        }
        let parsed: StreamSpec = serde_json::from_str(r#"{"forever": true}"#).unwrap();
        assert_eq!((parsed.forever, parsed.idle_ms), (true, 5_000));
        assert!(serde_json::from_str::<StreamSpec>(r#"{"nope": 1}"#).is_err());
    }

    #[test]
    fn absurd_lags_are_held_to_a_day() {
        let l = LagView {
            p50_ms: u64::MAX,
            p99_ms: 3,
        };
        assert_eq!(
            l.bounded(),
            LagView {
                p50_ms: MAX_LAG_MS,
                p99_ms: MAX_LAG_MS
            }
        );
    }
}
