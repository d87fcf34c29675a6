//! What an acting tool asks for, checked against the policy, and the `hetch`
//! command line that carries it out (or its dry run).

use serde::Serialize;
use serde_json::{json, Value};

use crate::plans::Numbers;
use crate::policy::{refuse, Policy, Refusal};
use crate::runner::Finished;

/// Most sources one action may name.
pub const MAX_SOURCES: usize = 64;

/// An action a confirmation carries out.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// A copy (`hetch cp`) or a mirror (`hetch sync`).
    Transfer(Spec),
    /// Stopping a running transfer.
    Cancel {
        /// The transfer's number.
        transfer: u64,
    },
}

/// A copy or sync as the assistant asked for it (its locations are checked again
/// each time it is planned or carried out).
#[derive(Debug, Clone, Serialize)]
pub struct Spec {
    /// `sync` (deletes what the sources lack) rather than `cp`.
    pub mirror: bool,
    /// Sources, as given.
    pub sources: Vec<String>,
    /// Destination, as given.
    pub destination: String,
    /// Replace destination files that differ (else `--no-clobber`).
    pub overwrite: bool,
    /// Bytes per second (0: no limit), the policy's ceiling applied.
    pub rate_limit: u64,
}

/// A spec's locations as hetch is given them (canonical local paths).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Operands {
    /// Sources.
    pub sources: Vec<String>,
    /// Destination.
    pub destination: String,
    /// The write root a local destination must stay inside.
    pub confine_to: Option<String>,
}

impl Spec {
    /// Checks the spec against the policy: what it may do at all (before anything is
    /// listed), and every location.
    pub fn check(&self, policy: &Policy) -> Result<Operands, Refusal> {
        if self.mirror && !policy.allow_delete {
            return Err(refuse!(
                "sync deletes at the destination, and the operator does not allow deletion: use copy"
            ));
        }
        if self.overwrite && !policy.allow_overwrite {
            return Err(match self.mirror {
                true => refuse!("sync replaces files that differ, and the operator does not allow replacing files"),
                false => refuse!("the operator does not allow replacing files: copy without overwrite"),
            });
        }
        if self.sources.is_empty() || self.sources.len() > MAX_SOURCES {
            return Err(refuse!("name 1 to {MAX_SOURCES} sources"));
        }
        let sources = self
            .sources
            .iter()
            .map(|s| policy.readable(s).map(|c| c.operand))
            .collect::<Result<Vec<_>, _>>()?;
        let dest = policy.writable(&self.destination)?;
        Ok(Operands {
            sources,
            destination: dest.operand,
            confine_to: dest.root.and_then(|r| r.to_str().map(String::from)),
        })
    }

    /// The `hetch` arguments: the dry run's, or the run's (which may delete at most
    /// `max_delete`), with the policy's connection flags `conn`.
    pub fn argv(
        &self,
        ops: &Operands,
        dry_run: bool,
        max_delete: u64,
        conn: &[String],
    ) -> Vec<String> {
        let mut a: Vec<String> = vec![if self.mirror { "sync" } else { "cp" }.into()];
        a.push("--json".into());
        a.extend(conn.iter().cloned());
        if dry_run {
            // Without --no-clobber: the plan shows what differs, replaced or not.
            a.extend(["--dry-run".into(), "--quiet".into()]);
        } else {
            a.push("--progress-json".into());
            if !self.overwrite {
                a.push("--no-clobber".into());
            }
            if self.mirror {
                a.extend(["--max-delete".into(), max_delete.to_string()]);
            }
        }
        if let Some(root) = &ops.confine_to {
            a.extend(["--confine-to".into(), root.clone()]);
        }
        // The dry run predicts at the rate the run will have.
        if self.rate_limit > 0 {
            a.extend(["--rate-limit".into(), self.rate_limit.to_string()]);
        }
        // Locations never read as flags.
        a.push("--".into());
        a.extend(ops.sources.iter().cloned());
        a.push(ops.destination.clone());
        a
    }

    /// Checks a dry run's numbers against the policy's limits.
    pub fn within_limits(&self, policy: &Policy, n: &Numbers) -> Result<(), Refusal> {
        let (files, bytes) = self.moved(n);
        if bytes > policy.max_bytes {
            return Err(refuse!(
                "this would move {} ({bytes} bytes), over the operator's limit of {} per action",
                hetch_units::human_bytes(bytes as f64),
                hetch_units::human_bytes(policy.max_bytes as f64)
            ));
        }
        if files > policy.max_files {
            return Err(refuse!(
                "this would write {files} entries, over the operator's limit of {} per action",
                policy.max_files
            ));
        }
        if n.deleted > policy.max_delete {
            return Err(refuse!(
                "this would delete {} entries, over the operator's limit of {}",
                n.deleted,
                policy.max_delete
            ));
        }
        Ok(())
    }

    /// Entries written and bytes moved (replaced ones only when overwriting).
    pub fn moved(&self, n: &Numbers) -> (u64, u64) {
        if self.overwrite {
            (n.files + n.replaced, n.bytes + n.replaced_bytes)
        } else {
            (n.files, n.bytes)
        }
    }

    /// Whether carrying this out may run without a confirmation: a copy that replaces
    /// and deletes nothing, at most the operator's `auto_confirm_bytes`.
    pub fn needs_no_confirmation(&self, policy: &Policy, n: &Numbers) -> bool {
        !self.mirror
            && (n.replaced == 0 || !self.overwrite)
            && n.deleted == 0
            && policy.auto_confirm_bytes > 0
            && self.moved(n).1 <= policy.auto_confirm_bytes
    }
}

/// A dry run's numbers (`hetch cp --dry-run --json`), each required, and the counts
/// agreeing with the lines hetch printed: a missing or cut-off result is refused, never
/// read as zero (limits must not fail open).
pub fn numbers(run: &Finished) -> Result<Numbers, Refusal> {
    let n = |k: &str| {
        run.json[k]
            .as_u64()
            .ok_or_else(|| refuse!("the dry run gave no {k}: {}", run.first_message()))
    };
    let numbers = Numbers {
        files: n("would_copy")?,
        bytes: n("would_copy_bytes")?,
        replaced: n("would_replace")?,
        replaced_bytes: n("would_replace_bytes")?,
        deleted: run.json["deleted"].as_u64().unwrap_or(0),
    };
    let l = &run.lines;
    let agree = l.would_copy.count == numbers.files
        && l.would_replace.count == numbers.replaced
        && l.would_delete.count == numbers.deleted;
    if !agree {
        return Err(refuse!(
            "the dry run's counts and its listing disagree: plan again"
        ));
    }
    Ok(numbers)
}

/// A dry run as the assistant sees it: what would be copied, replaced and deleted
/// (counts, bytes, the first names), the predicted time, and hetch's messages.
pub fn dry_run_view(spec: &Spec, ops: &Operands, run: &Finished, n: &Numbers) -> Value {
    let l = &run.lines;
    let mut v = json!({
        "action": if spec.mirror { "sync" } else { "copy" },
        "sources": ops.sources,
        "destination": ops.destination,
        "would_copy": {"entries": n.files, "bytes": n.bytes, "first": l.would_copy.first},
        "would_replace": {
            "files": n.replaced,
            "bytes": n.replaced_bytes,
            "first": l.would_replace.first,
            "replaced": spec.overwrite,
        },
        "would_skip": run.json["would_skip"],
        "predicted": run.json["predicted"],
        "messages": l.messages.first,
    });
    if !spec.overwrite && n.replaced > 0 {
        v["would_replace"]["note"] =
            "overwrite is off: these files are kept and reported as failed".into();
    }
    if spec.mirror {
        v["would_delete"] = json!({"entries": n.deleted, "first": l.would_delete.first});
    }
    if spec.rate_limit > 0 {
        v["rate_limit"] = spec.rate_limit.into();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_keeps_locations_out_of_the_flags() {
        let spec = Spec {
            mirror: true,
            sources: vec![],
            destination: String::new(),
            overwrite: false,
            rate_limit: 1000,
        };
        let ops = Operands {
            sources: vec!["/a".into(), "--delete-excluded".into()],
            destination: "/d".into(),
            confine_to: Some("/".into()),
        };
        let run = spec.argv(&ops, false, 7, &[]);
        let dashdash = run.iter().position(|a| a == "--").unwrap();
        assert_eq!(&run[dashdash + 1..], ["/a", "--delete-excluded", "/d"]);
        for flag in ["--no-clobber", "--progress-json", "--json"] {
            assert!(run[..dashdash].contains(&flag.to_string()), "{flag}");
        }
        assert_eq!(run[0], "sync");
        let i = run.iter().position(|a| a == "--max-delete").unwrap();
        assert_eq!(run[i + 1], "7");
        let dry = spec.argv(&ops, true, 0, &[]);
        assert!(dry.contains(&"--dry-run".to_string()));
        assert!(!dry.contains(&"--max-delete".to_string()));
    }
}
