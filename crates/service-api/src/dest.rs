//! Where a job's destination below the service's root is, as its workers resolve it,
//! and whether a job would copy a source onto or into itself there: the service
//! refuses such a job at submission, instead of its workers nesting copies of a tree
//! inside the tree they read.

use std::path::{Path, PathBuf};

use hetch_location::overlap::{overlap, Overlap};

use crate::JobSpec;

/// The directory a job's local destination `dest` names under `root`, to copy *into*
/// always (every unit of the job must agree on where its entries go, whichever unit
/// creates the directory): `root/dest/`.
pub fn local_dest(root: &Path, dest: &str) -> PathBuf {
    PathBuf::from(format!("{}/", root.join(dest).display()))
}

impl JobSpec {
    /// Why job `self` would copy one of its sources onto or into itself below `root`
    /// (one line naming the destination and that source, as the client wrote them);
    /// `None` when no source meets the destination, or the destination is not a
    /// path below the root.
    pub fn copies_into_itself(&self, root: &Path) -> Option<String> {
        if self.is_relay() || crate::is_url(&self.dest) {
            return None;
        }
        let into = local_dest(root, &self.dest);
        self.sources.iter().find_map(|s| {
            let d = &self.dest;
            Some(match overlap(&root.join(s), &into)? {
                Overlap::Same(_) => {
                    format!("dest {d:?}: source {s:?} would be copied onto itself")
                }
                Overlap::Inside => format!(
                    "dest {d:?} is inside source {s:?}: a directory cannot be copied into itself"
                ),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::JobSpec;

    #[test]
    fn copies_onto_or_into_a_source_are_found_and_neighbours_pass() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join("run1/sub")).unwrap();
        std::fs::create_dir_all(root.join("other")).unwrap();
        let job = |sources: &[&str], dest: &str| JobSpec {
            sources: sources.iter().map(|s| s.to_string()).collect(),
            dest: dest.into(),
            ..JobSpec::default()
        };
        for (sources, dest) in [
            (&["run1"][..], "run1"),
            (&["run1"], "run1/"),
            (&["run1"], "./run1/./sub"),
            (&["run1"], "run1/new/deeper"),
            (&["other", "run1"], "run1/sub"),
            (&["run1/sub"], "run1"),
            (&["run1"], "."),
        ] {
            let e = job(sources, dest).copies_into_itself(root);
            let e = e.unwrap_or_else(|| panic!("{sources:?} -> {dest:?} was not found"));
            assert!(e.starts_with(&format!("dest {dest:?}")), "{e}");
        }
        for (sources, dest) in [
            (&["run1"][..], "other"),
            (&["run1"], "run10"),
            (&["run1/sub"], "other"),
            (&["run1"], "hetch://h/run1"),
        ] {
            let e = job(sources, dest).copies_into_itself(root);
            assert_eq!(e, None, "{sources:?} -> {dest:?}");
        }
    }
}
