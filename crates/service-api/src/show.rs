//! Jobs as a terminal shows them (feature `client`): what `hetch job show`, `ls` and
//! `wait` print. Whatever a job's submitter wrote (operands, errors) is escaped, so
//! that it cannot drive the terminal.

use hetch_proto::escape_text;
use hetch_units::{human_bytes, human_seconds};

use crate::JobView;

/// The states in which a job has ended.
pub const FINAL_STATES: [&str; 3] = ["done", "failed", "cancelled"];

impl JobView {
    /// Whether the job has ended: done, failed or cancelled.
    pub fn is_finished(&self) -> bool {
        FINAL_STATES.contains(&self.state.as_str())
    }

    /// Bytes moved so far, counting its running units' progress (a service that does
    /// not say it gives 0 there: then what finished units moved).
    pub fn moved(&self) -> u64 {
        self.bytes_live.max(self.bytes_done)
    }

    /// Its rate and what is left at it (`4.00 MiB/s, 12 s left`), while it moves.
    pub fn pace(&self) -> Option<String> {
        if self.rate == 0 || self.is_finished() {
            return None;
        }
        let left = self.eta_s.map(|s| format!(", {} left", human_seconds(s)));
        Some(format!(
            "{}/s{}",
            human_bytes(self.rate as f64),
            left.unwrap_or_default()
        ))
    }

    /// Where it is, in one line: `STATE F/N files, B of T[, RATE/s, ETA left]`.
    pub fn progress(&self) -> String {
        let pace = self.pace().map(|p| format!(", {p}"));
        format!(
            "{} {}/{} files, {} of {}{}",
            self.state,
            self.files_done,
            self.files,
            human_bytes(self.moved() as f64),
            human_bytes(self.bytes as f64),
            pace.unwrap_or_default()
        )
    }

    /// The job as `hetch job show` prints it: a `name: value` line for each of its
    /// facts.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let mut line = |name: &str, value: &dyn std::fmt::Display| {
            out.push_str(&format!("{:<14}{value}\n", format!("{name}:")));
        };
        line("id", &self.id);
        line("state", &self.state);
        line("submitted by", &escape_text(&self.submitted_by));
        line("sources", &escape_text(&self.spec.sources.join(" ")));
        line("destination", &escape_text(&self.spec.dest));
        if !self.spec.dest_nodes.is_empty() {
            line("dest nodes", &escape_text(&self.spec.dest_nodes.join(" ")));
        }
        line("priority", &self.spec.priority);
        line("files", &format!("{} of {}", self.files_done, self.files));
        let running = match self.is_finished() {
            true => 0,
            false => self.moved() - self.bytes_done,
        };
        let in_units = (running > 0).then(|| {
            format!(
                " ({} of it in units still running)",
                human_bytes(running as f64)
            )
        });
        line(
            "bytes",
            &format!(
                "{} of {}{}",
                human_bytes(self.moved() as f64),
                human_bytes(self.bytes as f64),
                in_units.unwrap_or_default()
            ),
        );
        line("written", &human_bytes(self.bytes_written as f64));
        if let Some(pace) = self.pace() {
            line("rate", &pace);
        }
        if let Some(l) = self.lag {
            line("lag", &format!("p50 {} ms, p99 {} ms", l.p50_ms, l.p99_ms));
        }
        let u = &self.units;
        line(
            "units",
            &format!(
                "{} ready, {} running, {} done, {} failed, {} waiting, {} cancelled ({} tried again)",
                u.ready, u.leased, u.done, u.failed, u.waiting, u.cancelled, u.retried
            ),
        );
        if u.max_attempts > 0 {
            let next = u.next_try_in_ms.map(|ms| {
                let s = ms.div_ceil(1000);
                format!("; a unit tries again in {}", human_seconds(s))
            });
            line(
                "attempts",
                &format!(
                    "up to {} per unit{}",
                    u.max_attempts,
                    next.unwrap_or_default()
                ),
            );
        }
        if let Some(e) = &self.error {
            line("error", &escape_text(e));
        }
        if let Some(w) = &self.webhook {
            line("webhook", &format!("{} (secret set)", escape_text(&w.url)));
            if let Some(d) = &w.delivery {
                line("delivery", &escape_text(&delivery_text(d)));
            }
        }
        out
    }
}

/// A webhook delivery in one line: `STATE after N attempts (id ID): last error`.
fn delivery_text(d: &crate::DeliveryView) -> String {
    let mut s = format!("{} after {} attempts (id {})", d.state, d.attempts, d.id);
    if let Some(e) = &d.last_error {
        s.push_str(&format!(": {e}"));
    }
    s
}

/// Jobs as `hetch job ls` prints them: a header, then one row each.
pub fn table(jobs: &[JobView]) -> String {
    let mut out = format!(
        "{:<16}  {:<9}  {:>13}  {:>21}  WHAT\n",
        "ID", "STATE", "FILES", "BYTES"
    );
    for j in jobs {
        out.push_str(&format!(
            "{:<16}  {:<9}  {:>13}  {:>21}  {} -> {}\n",
            j.id,
            j.state,
            format!("{}/{}", j.files_done, j.files),
            format!(
                "{}/{}",
                human_bytes(j.moved() as f64),
                human_bytes(j.bytes as f64)
            ),
            escape_text(&j.spec.sources.join(" ")),
            escape_text(&j.spec.dest),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JobSpec, UnitsView};

    fn job() -> JobView {
        JobView {
            id: "00ab".into(),
            state: "running".into(),
            submitted_by: "oidc:alice".into(),
            spec: JobSpec {
                sources: vec!["run1".into(), "run\x1b[2J".into()],
                dest: "hetch://dtn1:7878/in".into(),
                ..JobSpec::default()
            },
            created: 1,
            started: Some(2),
            finished: None,
            error: None,
            files: 10,
            bytes: 4 << 20,
            files_done: 3,
            bytes_done: 1 << 20,
            bytes_written: 1 << 19,
            bytes_live: 0,
            rate: 0,
            eta_s: None,
            lag: None,
            units: UnitsView {
                ready: 1,
                leased: 2,
                ..UnitsView::default()
            },
            webhook: None,
        }
    }

    #[test]
    fn a_job_is_shown_line_by_line_escaped() {
        let mut j = job();
        assert!(!j.is_finished());
        assert_eq!(j.progress(), "running 3/10 files, 1.00 MiB of 4.00 MiB");
        let text = j.to_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "id:           00ab");
        assert_eq!(lines[2], "submitted by: oidc:alice");
        assert!(!text.contains('\x1b'), "{text}");
        assert!(!text.contains("dest nodes:") && !text.contains("error:"));
        assert_eq!(
            lines.last().unwrap(),
            &"units:        1 ready, 2 running, 0 done, 0 failed, 0 waiting, 0 cancelled (0 tried again)"
        );
        assert!(!text.contains("rate:") && !text.contains("still running"));
        assert!(text.contains("\nwritten:      512.00 KiB\n"), "{text}");
        // A large unit running: its bytes so far count, with the rate and what is left.
        (j.bytes_live, j.rate, j.eta_s) = (3 << 19, 1 << 20, Some(150));
        assert_eq!(
            j.progress(),
            "running 3/10 files, 1.50 MiB of 4.00 MiB, 1.00 MiB/s, 2 min 30 s left"
        );
        let text = j.to_text();
        assert!(
            text.contains(
                "\nbytes:        1.50 MiB of 4.00 MiB (512.00 KiB of it in units still running)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("\nrate:         1.00 MiB/s, 2 min 30 s left\n"),
            "{text}"
        );
        assert!(table(&[j.clone()]).contains(" 1.50 MiB/4.00 MiB "));
        j.lag = Some(crate::LagView {
            p50_ms: 120,
            p99_ms: 480,
        });
        assert!(j
            .to_text()
            .contains("\nlag:          p50 120 ms, p99 480 ms\n"));
        j.state = "failed".into();
        j.error = Some("it broke".into());
        j.spec.dest_nodes = vec!["dtn2".into()];
        assert!(j.is_finished());
        let text = j.to_text();
        assert!(text.contains("\ndest nodes:   dtn2\n"), "{text}");
        assert!(text.ends_with("\nerror:        it broke\n"), "{text}");
    }

    #[test]
    fn the_table_has_a_header_and_a_row_per_job() {
        let t = table(&[job()]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("ID                STATE"), "{t}");
        assert!(lines[1].starts_with("00ab              running  "), "{t}");
        assert!(lines[1].ends_with(" -> hetch://dtn1:7878/in"), "{t}");
        assert!(!t.contains('\x1b'), "{t}");
    }
}
