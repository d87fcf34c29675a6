//! A worker's share of a large file moved in block ranges by several workers: a
//! `range` unit moves blocks `first..end` of the file into the shared part file at the
//! destination, a `commit` unit (ready once every range is done) checks the whole file
//! from the ranges' records and renames it (see `hetch_engine::ranges`). Both need the
//! destination on storage every worker shares: the service splits no file whose
//! destination is `hetch://` or an object store.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail};
use hetch_engine::ranges::{self, RangeSource};
use hetch_engine::store::posix::PosixStore;
use hetch_engine::store::{Place, Store};
use hetch_engine::{DestSpec, Progress, RateLimiter, StopSignal, Verify};
use hetch_jobs::UnitSpec;
use hetch_service::api::{ClaimedUnit, JobSpec};
use hetch_storage::walk::EntriesBelow;

use crate::service_client::path_segment;
use crate::worker::UnitContext;

/// The split file a unit concerns: where it is read and where it goes.
struct SplitFile {
    below: EntriesBelow,
    wire: String,
    source: RangeSource,
    store: Arc<dyn Store>,
    place: Place,
    block_size: u64,
    verify: Verify,
}

impl UnitContext {
    /// Runs a `range` or `commit` unit (a range counts its bytes into `progress` as it
    /// goes); returns (files, bytes) done.
    pub(crate) async fn split_unit(
        &self,
        u: &ClaimedUnit,
        stop: StopSignal,
        rate: Arc<RateLimiter>,
        progress: Arc<Progress>,
    ) -> anyhow::Result<(u64, u64)> {
        let file = match u.unit {
            UnitSpec::Range { file, .. } | UnitSpec::Commit { file, .. } => file,
            UnitSpec::Files { .. } | UnitSpec::Relay { .. } => {
                bail!("not a unit of a split file")
            }
        };
        let row = self.listing_row(&u.job, file).await?;
        let ctx = self.clone();
        let spec = u.spec.clone();
        let unit = u.unit.clone();
        tokio::task::spawn_blocking(move || {
            let mut f = ctx.open_split(&spec, &row)?;
            match unit {
                UnitSpec::Range { first, end, .. } => {
                    let blocks = hetch_integrity::block_count(f.source.size(), f.block_size);
                    if first >= end || end > blocks {
                        bail!("the service sent blocks {first}..{end} of a file of {blocks}");
                    }
                    let out = ranges::copy_range(
                        &*f.store,
                        &f.place,
                        &f.source,
                        f.block_size,
                        first..end,
                        f.verify,
                        ranges::RangeControl {
                            stop: Some(&stop),
                            rate: Some(&rate),
                            progress: Some(&progress),
                        },
                    )?;
                    Ok((0, out.bytes))
                }
                _ => {
                    ranges::commit_ranges(&*f.store, &f.place, &f.source, f.block_size)?;
                    f.restore_parent()?;
                    Ok((1, 0))
                }
            }
        })
        .await
        .map_err(|e| anyhow!("range task: {e}"))?
    }

    /// Row `file` of job `job`'s listing: (operand, wire path, size).
    async fn listing_row(&self, job: &str, file: u64) -> anyhow::Result<ListingRow> {
        let job = path_segment(job)?;
        let end = file
            .checked_add(1)
            .ok_or_else(|| anyhow!("the service sent file {file}"))?;
        let rows = self
            .api
            .call(
                false,
                &format!("/api/jobs/{job}/files?from={file}&to={end}"),
                None,
            )
            .await?;
        let row = rows
            .as_array()
            .and_then(|r| r.first())
            .ok_or_else(|| anyhow!("the service has no listing row {file}"))?;
        let path = row["path"].as_str().unwrap_or_default().to_string();
        // Named below the destination as it is: a wire path, checked as one.
        hetch_proto::validate_rel_path(path.as_bytes())
            .map_err(|e| anyhow!("the service sent listing row {file} as {path:?}: {e}"))?;
        Ok(ListingRow {
            operand: row["operand"].as_u64().unwrap_or(u64::MAX),
            path,
            size: row["size"].as_u64().unwrap_or(u64::MAX),
        })
    }

    /// Opens the source of `row` (below its operand, no symlink followed) and the
    /// destination store, with the parent directories the file needs.
    fn open_split(&self, spec: &JobSpec, row: &ListingRow) -> anyhow::Result<SplitFile> {
        let operand = spec
            .sources
            .get(row.operand as usize)
            .ok_or_else(|| anyhow!("listing row names source {}", row.operand))?;
        let operand = self.source_path(operand)?;
        let mut below = EntriesBelow::new(&operand)?;
        let file = below.open(row.path.as_bytes())?;
        let source = RangeSource::new(file, &operand.join(&row.path))?;
        if source.size() != row.size {
            bail!(
                "{}: {} bytes, listed with {}: changed since the job was planned",
                row.path,
                source.size(),
                row.size
            );
        }
        let dest = match hetch_service::api::is_url(&spec.dest) {
            true => bail!(
                "{}: a split file needs a destination on the shared storage",
                spec.dest
            ),
            false => self.root.join(&spec.dest),
        };
        let store: Arc<dyn Store> = Arc::new(PosixStore::new(DestSpec {
            path: dest,
            sources: spec.sources.len() as u32,
            trailing_slash: true,
            confine_to: Some(self.root.clone()),
            as_operand: false,
        }));
        let top = spec
            .sources
            .first()
            .and_then(|s| Path::new(s).file_name())
            .ok_or_else(|| anyhow!("the job has no source operand"))?;
        store.resolve(top.as_bytes())?;
        // Parents first: this unit may run before the one that copies them.
        let wire = row.path.as_bytes();
        for (i, _) in wire.iter().enumerate().filter(|(_, b)| **b == b'/') {
            let parent = store.place(&wire[..i])?;
            if store.stat(&parent.rel)?.is_none() {
                store.make_shared_dir(&parent.rel)?;
            }
        }
        let place = store.place(wire)?;
        let o = &spec.options;
        Ok(SplitFile {
            below,
            wire: row.path.clone(),
            source,
            store,
            place,
            block_size: o
                .block_size
                .unwrap_or(hetch_engine::Options::default().block_size),
            verify: match o.verify.as_deref() {
                Some("none") => Verify::None,
                Some("received") => Verify::Received,
                _ => Verify::Written,
            },
        })
    }
}

impl SplitFile {
    /// Gives the file's parent directory the source's mode and mtime again: the
    /// rename changed its mtime, after the files unit that copied the directory may
    /// have set it.
    fn restore_parent(&mut self) -> anyhow::Result<()> {
        let Some((parent, _)) = self.wire.rsplit_once('/') else {
            return Ok(()); // the file is an operand: its parent is not a copy
        };
        let dir = self.below.entry(parent.as_bytes())?;
        let meta = hetch_storage::part::FinalMeta {
            mode: dir.mode,
            mtime_sec: dir.mtime_sec,
            mtime_nsec: dir.mtime_nsec,
        };
        let rel = self.store.place(parent.as_bytes())?.rel;
        Ok(self.store.finish_dir(&rel, meta)?)
    }
}

/// A row of a job's listing.
struct ListingRow {
    operand: u64,
    path: String,
    size: u64,
}

#[cfg(test)]
mod tests {
    use hetch_storage::walk::EntriesBelow;

    fn open_below(top: &std::path::Path, rel: &str) -> Result<std::fs::File, String> {
        let mut below = EntriesBelow::new(top).map_err(|e| e.to_string())?;
        below.open(rel.as_bytes()).map_err(|e| e.to_string())
    }

    /// A listing row is opened below its operand only: not through a symlink inside
    /// it, not above it, not below another operand of the same prefix.
    #[test]
    fn rows_open_only_below_their_operand() {
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        std::fs::create_dir_all(top.join("a")).unwrap();
        std::fs::write(top.join("a/f"), b"data").unwrap();
        std::fs::write(t.path().join("secret"), b"secret").unwrap();
        std::os::unix::fs::symlink(t.path(), top.join("hop")).unwrap();
        assert!(open_below(&top, "top/a/f").is_ok());
        for bad in [
            "top/hop/secret",
            "top/../secret",
            "topx/a/f",
            "other/a/f",
            "top/a/missing",
        ] {
            assert!(open_below(&top, bad).is_err(), "{bad} was opened");
        }
    }
}
