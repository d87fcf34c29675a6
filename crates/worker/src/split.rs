//! A worker's share of a large file moved in block ranges by several workers: a
//! `range` unit moves blocks `first..end` of the file into the shared part file at the
//! destination, a `commit` unit (ready once every range is done) checks the whole file
//! from the ranges' records and renames it (see `hetch_engine::ranges`). The
//! destination is storage every worker shares, written by the workers themselves, or
//! `hetch serve` nodes of one shared storage, which take the ranges over the network
//! (`hetch_session::range`): either way one part file is assembled from every
//! worker's ranges. A file going into an S3 or Azure store is one multipart upload
//! its ranges share instead (`object_split.rs`).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail};
use hetch_engine::ranges::{self, RangeSource};
use hetch_engine::store::posix::PosixStore;
use hetch_engine::store::{Place, Store};
use hetch_engine::{DestSpec, EngineError, Progress, RateLimiter, StopSignal, Verify};
use hetch_jobs::UnitSpec;
use hetch_proto::{ErrorCode, Op, RangeStep};
use hetch_service_api::{ClaimedUnit, FileRow, JobSpec};
use hetch_session::client::ClientConfig;
use hetch_session::range::{self as remote, RangePacing};
use hetch_storage::part::FinalMeta;
use hetch_storage::walk::EntriesBelow;
use hetch_storage::StorageError;

use crate::unit::{unit_options, Done, Pace, Runner, Running, UnitContext};
use hetch_session::location::Location;

/// The split file a unit concerns: where it is read and where it goes.
struct SplitFile {
    below: EntriesBelow,
    wire: String,
    source: RangeSource,
    to: SplitDest,
    block_size: u64,
    verify: Verify,
}

/// Where a split file is assembled.
enum SplitDest {
    /// Storage this worker shares with the others, written directly.
    Shared { store: Arc<dyn Store>, place: Place },
    /// A `hetch serve` node of the destination's storage.
    Node {
        host: String,
        client: ClientConfig,
        /// The destination directory on the node.
        dest: String,
        /// The job's first source operand's name (how a push resolves the
        /// destination).
        top: Vec<u8>,
    },
}

/// Runs the units of a split file: `range` and `commit` ([`UnitSpec::Range`],
/// [`UnitSpec::Commit`]), which share how the file is opened.
pub(crate) struct SplitUnit;

impl Runner for SplitUnit {
    fn run<'a>(&'a self, ctx: &'a UnitContext, u: &'a ClaimedUnit, p: Pace) -> Running<'a> {
        Box::pin(ctx.split_unit(u, p))
    }
}

impl UnitContext {
    /// Runs a `range` or `commit` unit (a range counts its bytes into `progress` as it
    /// goes); returns (files, bytes) done.
    pub(crate) async fn split_unit(&self, u: &ClaimedUnit, p: Pace) -> anyhow::Result<Done> {
        let Pace {
            stop,
            rate,
            progress,
        } = p;
        let file = match u.unit {
            UnitSpec::Range { file, .. } | UnitSpec::Commit { file, .. } => file,
            UnitSpec::Files { .. }
            | UnitSpec::Relay { .. }
            | UnitSpec::Stream { .. }
            | UnitSpec::Delete {} => {
                bail!("not a unit of a split file")
            }
        };
        let row = self.listing_row(&u.job, file, &stop).await?;
        let dest = self.dest_of(u)?;
        if let Location::Object(url) = dest {
            let p = Pace {
                stop,
                rate,
                progress,
            };
            return self.object_split(u, row, url, p).await;
        }
        let ctx = self.clone();
        let spec = u.spec.clone();
        let f = tokio::task::spawn_blocking(move || ctx.open_split(&spec, &row, dest))
            .await
            .map_err(|e| anyhow!("range task: {e}"))??;
        if let UnitSpec::Range { first, end, .. } = u.unit {
            let blocks = hetch_integrity::block_count(f.source.size(), f.block_size);
            if first >= end || end > blocks {
                bail!("the service sent blocks {first}..{end} of a file of {blocks}");
            }
        }
        match &f.to {
            SplitDest::Shared { .. } => {
                Self::split_here(f, u.unit.clone(), stop, rate, progress).await
            }
            SplitDest::Node { .. } => self.split_to_node(u, f, stop, rate, progress).await,
        }
    }

    /// Runs a unit of a file assembled on storage this worker writes itself.
    async fn split_here(
        mut f: SplitFile,
        unit: UnitSpec,
        stop: StopSignal,
        rate: Arc<RateLimiter>,
        progress: Arc<Progress>,
    ) -> anyhow::Result<Done> {
        tokio::task::spawn_blocking(move || {
            let SplitDest::Shared { store, place } = &f.to else {
                bail!("not a shared destination");
            };
            match unit {
                UnitSpec::Range { first, end, .. } => {
                    let out = ranges::copy_range(
                        &**store,
                        place,
                        &f.source,
                        f.block_size,
                        first..end,
                        f.verify,
                        ranges::RangeControl {
                            stop: Some(&stop),
                            rate: Some(&rate),
                            progress: Some(&progress),
                            ..Default::default()
                        },
                    )?;
                    Ok(Done::moved(0, out.bytes))
                }
                _ => {
                    commit_when_free_blocking(&stop, || {
                        ranges::commit_ranges(&**store, place, &f.source, f.block_size)
                            .map(drop)
                            .map_err(anyhow::Error::from)
                    })?;
                    let (store, rel) = (store.clone(), place.rel.clone());
                    if let Some(meta) = f.parent_meta()? {
                        let parent = rel.parent().unwrap_or(Path::new(""));
                        store.finish_dir(parent, meta)?;
                    }
                    Ok(Done::moved(1, 0))
                }
            }
        })
        .await
        .map_err(|e| anyhow!("range task: {e}"))?
    }

    /// Runs a unit of a file assembled by a destination node: sends the range to it,
    /// or asks it to commit the file.
    async fn split_to_node(
        &self,
        u: &ClaimedUnit,
        mut f: SplitFile,
        stop: StopSignal,
        rate: Arc<RateLimiter>,
        progress: Arc<Progress>,
    ) -> anyhow::Result<Done> {
        let SplitDest::Node {
            host,
            client,
            dest,
            top,
        } = &f.to
        else {
            bail!("not a destination node");
        };
        let (host, client, dest, top) = (host.clone(), client.clone(), dest.clone(), top.clone());
        let step = match u.unit {
            UnitSpec::Range { first, end, .. } => RangeStep::Blocks { first, end },
            _ => {
                f.source.check_unchanged()?;
                RangeStep::Commit {
                    parent: f
                        .parent_meta()?
                        .map(|m| (m.mode, m.mtime_sec, m.mtime_nsec)),
                }
            }
        };
        let commit = matches!(step, RangeStep::Commit { .. });
        let range = remote::range_request(
            dest.as_bytes(),
            u.spec.sources.len() as u32,
            &top,
            f.wire.as_bytes(),
            &f.source,
            step,
        );
        let opts = unit_options(&u.spec, stop.clone(), rate.clone())?;
        let req = hetch_session::session_request(
            Op::Range(Box::new(range)),
            &opts,
            1,
            true,
            None,
            Default::default(),
        );
        if commit {
            commit_when_free(&stop, || remote::commit_ranges(&host, &client, req.clone())).await?;
            return Ok(Done::moved(1, 0));
        }
        let pacing = RangePacing {
            stop: Some(stop),
            rate: Some(rate),
            progress: Some(progress),
        };
        let out = remote::push_range(&host, &client, req, Arc::new(f.source), pacing).await?;
        Ok(Done::moved(0, out.bytes))
    }

    /// Row `file` of job `job`'s listing: (operand, wire path, size).
    async fn listing_row(
        &self,
        job: &str,
        file: u64,
        stop: &StopSignal,
    ) -> anyhow::Result<FileRow> {
        let end = file
            .checked_add(1)
            .ok_or_else(|| anyhow!("the service sent file {file}"))?;
        let row = self
            .listing(job, file, end, stop)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("the service has no listing row {file}"))?;
        // Named below the destination as it is: a wire path, checked as one.
        hetch_proto::validate_rel_path(row.path.as_bytes())
            .map_err(|e| anyhow!("the service sent listing row {file} as {:?}: {e}", row.path))?;
        Ok(row)
    }

    /// Opens the source of `row` (below its operand, no symlink followed) and its
    /// destination `dest` (the unit's): the store, with the parent directories the
    /// file needs, or the node.
    fn open_split(
        &self,
        spec: &JobSpec,
        row: &FileRow,
        dest: Location,
    ) -> anyhow::Result<SplitFile> {
        let (below, source) = self.open_source(spec, row)?;
        let top = spec
            .sources
            .first()
            .and_then(|s| Path::new(s).file_name())
            .ok_or_else(|| anyhow!("the job has no source operand"))?;
        let to = match dest {
            Location::Remote { host, path } => SplitDest::Node {
                client: self.client_config(&host, self.dest_token.as_ref())?,
                host,
                dest: path,
                top: top.as_bytes().to_vec(),
            },
            Location::Local(_) => self.shared_dest(spec, top.as_bytes(), &row.path)?,
            _ => bail!("{}: a split file goes to a directory tree", spec.dest),
        };
        let o = &spec.options;
        Ok(SplitFile {
            below,
            wire: row.path.clone(),
            source,
            to,
            block_size: block_size_of(spec),
            verify: match o.verify.as_deref() {
                Some("none") => Verify::None,
                Some("received") => Verify::Received,
                _ => Verify::Written,
            },
        })
    }

    /// The source of `row` (below its operand, no symlink followed), refused if it is
    /// no longer the size it was listed with; with the handle it was opened below.
    pub(crate) fn open_source(
        &self,
        spec: &JobSpec,
        row: &FileRow,
    ) -> anyhow::Result<(EntriesBelow, RangeSource)> {
        let operand = spec
            .sources
            .get(usize::try_from(row.operand).unwrap_or(usize::MAX))
            .ok_or_else(|| anyhow!("listing row names source {}", row.operand))?;
        let (within, operand) = self.source_within(spec, operand)?;
        let mut below = EntriesBelow::within(&within, &operand)?;
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
        Ok((below, source))
    }

    /// The job's destination on the storage this worker shares, with the parent
    /// directories of the file at `wire` made.
    fn shared_dest(&self, spec: &JobSpec, top: &[u8], wire: &str) -> anyhow::Result<SplitDest> {
        let store: Arc<dyn Store> = Arc::new(PosixStore::new(DestSpec {
            path: self.root.join(&spec.dest),
            sources: spec.sources.len() as u32,
            trailing_slash: true,
            confine_to: Some(self.write_confinement(spec)?),
            as_operand: false,
        }));
        store.resolve(top, true)?;
        // Parents first: this unit may run before the one that copies them.
        let wire = wire.as_bytes();
        for (i, _) in wire.iter().enumerate().filter(|(_, b)| **b == b'/') {
            let parent = store.place(&wire[..i])?;
            if store.stat(&parent.rel)?.is_none() {
                store.make_shared_dir(&parent.rel)?;
            }
        }
        let place = store.place(wire)?;
        Ok(SplitDest::Shared { store, place })
    }
}

/// The block size job `spec`'s files are cut in (as the planner cut them).
pub(crate) fn block_size_of(spec: &JobSpec) -> u64 {
    (spec.options.block_size).unwrap_or(hetch_engine::Options::default().block_size)
}

impl SplitFile {
    /// The mode and mtime of the file's parent directory at the source, which the
    /// commit gives the copy again: the rename changed its mtime, after the files unit
    /// that copied the directory may have set it. `None` when the file is an operand
    /// itself, whose parent is not a copy.
    fn parent_meta(&mut self) -> anyhow::Result<Option<FinalMeta>> {
        parent_meta(&mut self.below, &self.wire)
    }
}

/// [`SplitFile::parent_meta`] of the file at `wire` below `below`. Without setuid,
/// setgid and sticky bits: a job has no `--preserve-special-modes`, and its files
/// units copy directories without them (see `unit_options`).
fn parent_meta(below: &mut EntriesBelow, wire: &str) -> anyhow::Result<Option<FinalMeta>> {
    let Some((parent, _)) = wire.rsplit_once('/') else {
        return Ok(None);
    };
    let dir = below.entry(parent.as_bytes())?;
    Ok(Some(FinalMeta {
        mode: ranges::kept_mode(dir.mode, false),
        mtime_sec: dir.mtime_sec,
        mtime_nsec: dir.mtime_nsec,
    }))
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

    /// The mode a commit gives the file's parent directory has no setuid, setgid or
    /// sticky bit (a job copies without them), and a file that is an operand itself
    /// gives its parent nothing.
    #[test]
    fn a_commit_gives_the_parent_no_special_mode_bits() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("top/d");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), b"data").unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1750)).unwrap();
        let mut below = EntriesBelow::new(&t.path().join("top")).unwrap();
        let meta = super::parent_meta(&mut below, "top/d/f").unwrap().unwrap();
        assert_eq!(meta.mode, 0o750);
        assert!(super::parent_meta(&mut below, "top").unwrap().is_none());
    }
}

/// How long a commit waits, in all, for a writer of one of its file's ranges to let go
/// of the file: past a destination node's stall timeout (60 s by default), which drops
/// the session of a range whose worker stopped.
const BUSY_PATIENCE: Duration = Duration::from_secs(90);

/// The waits between a busy commit's tries: 1 s, doubling up to 8 s.
fn busy_wait(tries: u32) -> Duration {
    Duration::from_secs(1 << tries.min(3))
}

/// Whether `e` says the file is another writer's for now ([`StorageError::Busy`],
/// here or at a node, which says [`ErrorCode::Unavailable`]), so that the same
/// commit later may go through.
fn is_busy(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(c.downcast_ref(), Some(StorageError::Busy { .. }))
            || matches!(
                c.downcast_ref(),
                Some(EngineError::Peer {
                    code: ErrorCode::Unavailable,
                    ..
                })
            )
    })
}

/// Runs `commit` until it goes through, fails otherwise than busy, the unit is stopped,
/// or [`BUSY_PATIENCE`] is spent: a range writer that still holds the file (its worker
/// paused past its lease, its session not yet dropped) is a wait within the unit's
/// attempt, its lease kept by the worker's heartbeats, not a spent attempt.
async fn commit_when_free<F, Fut>(stop: &StopSignal, mut commit: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let start = tokio::time::Instant::now();
    let mut tries = 0;
    loop {
        match commit().await {
            Err(e) if is_busy(&e) && start.elapsed() < BUSY_PATIENCE && !stop.is_raised() => {
                tokio::select! {
                    () = tokio::time::sleep(busy_wait(tries)) => {}
                    () = stop.clone().raised() => return Err(e),
                }
                tries += 1;
            }
            r => return r,
        }
    }
}

/// [`commit_when_free`] for a commit on this worker's own storage, from a blocking
/// thread of the runtime (its waits end when the unit is stopped, as there).
fn commit_when_free_blocking(
    stop: &StopSignal,
    mut commit: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Handle::current();
    rt.block_on(commit_when_free(stop, || std::future::ready(commit())))
}

#[cfg(test)]
mod busy_tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_busy_commit_waits_and_goes_through_and_other_errors_do_not_wait() {
        let (_tx, stop) = StopSignal::new();
        let busy = || -> anyhow::Error {
            EngineError::Peer {
                peer: "node".into(),
                code: ErrorCode::Unavailable,
                message: "f: a writer of one of its ranges still has it open".into(),
            }
            .into()
        };
        // Busy twice, then through: three tries, within the unit's attempt.
        let mut tries = 0;
        commit_when_free(&stop, || {
            tries += 1;
            let r = if tries < 3 { Err(busy()) } else { Ok(()) };
            async move { r }
        })
        .await
        .unwrap();
        assert_eq!(tries, 3);
        // Any other error ends it at once.
        let mut tries = 0;
        let r = commit_when_free(&stop, || {
            tries += 1;
            async { Err(anyhow::anyhow!("f: no space left on device")) }
        })
        .await;
        assert!(r.is_err() && tries == 1);
        // Busy for good: given up after the patience, with the busy error.
        let start = tokio::time::Instant::now();
        let r = commit_when_free(&stop, || async { Err(busy()) }).await;
        assert!(is_busy(&r.unwrap_err()));
        assert!(start.elapsed() >= BUSY_PATIENCE);
    }

    #[tokio::test]
    async fn a_busy_commit_on_a_blocking_thread_waits_as_well() {
        let (_tx, stop) = StopSignal::new();
        let tries = tokio::task::spawn_blocking(move || {
            let mut tries = 0;
            commit_when_free_blocking(&stop, || {
                tries += 1;
                match tries {
                    1 => Err(StorageError::Busy {
                        path: "f".into(),
                        reason: "a writer of one of its ranges still has it open",
                    }
                    .into()),
                    _ => Ok(()),
                }
            })
            .map(|()| tries)
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(tries, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_unit_stops_waiting_for_a_busy_commit() {
        let (tx, stop) = StopSignal::new();
        let mut tries = 0;
        let waited = commit_when_free(&stop, || {
            tries += 1;
            if tries == 2 {
                tx.stop();
            }
            let e = anyhow::Error::from(StorageError::Busy {
                path: "f".into(),
                reason: "a writer of one of its ranges still has it open",
            });
            async move { Err(e) }
        });
        assert!(waited.await.is_err());
        assert_eq!(tries, 2);
    }
}
