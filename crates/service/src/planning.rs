//! Planning a job: listing its sources and writing the listing and its work units to
//! the database in batches, so that a job of millions of files is planned in memory
//! bounded by one batch and each batch is one transaction; all under the job's
//! planning lease ([`hetch_jobdb::planning`]), renewed while the listing goes on, so
//! that another instance takes the job over if this one stops.

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hetch_jobdb::{Db, FileRow, PlannedUnit, PlanningLease};
use hetch_jobs::{Planner, UnitSpec};
use hetch_object::{ObjectUrl, PartLimits, Scheme};
use hetch_service_api::object_ranges::MAX_RANGE_DIGESTS;
use hetch_storage::account::{self, Account};
use hetch_storage::walk::{self, SourceKind};

use crate::api::JobSpec;
use crate::identity::Access;
use crate::now_ms;

/// Listing rows (and their units) written per transaction.
const BATCH: usize = 10_000;

/// Attempts each unit gets before it fails for good, unless configured otherwise
/// (`--unit-attempts`): with the waits between them (see [`hetch_jobdb::Patience`]),
/// the last comes about three minutes after the first failed, so a destination full
/// or a node away for a minute costs no retry by hand.
pub const DEFAULT_ATTEMPTS: u32 = 5;

/// Lists the sources of the job `lease` holds under `root` and writes its listing and
/// units, then queues it; on an error the job fails with it (one line naming the
/// entry). The lease is renewed to `lease_ms` from now, a third of that apart, until
/// planning ends or the lease is lost (the job cancelled or taken over), after which
/// nothing more is written.
pub async fn plan(
    db: Db,
    root: PathBuf,
    lease: PlanningLease,
    spec: JobSpec,
    planner: Planner,
    lease_ms: u64,
    attempts: u32,
) {
    // Aborted when planning ends, however it ends (a panic included): a lease kept
    // alive by nobody planning would leave the job stuck.
    let _renewer = AbortOnDrop(tokio::spawn(renew(db.clone(), lease.clone(), lease_ms)));
    write_plan(&db, root, &lease, spec, planner, attempts).await;
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Keeps `lease` for `lease_ms` more every third of that, until it is lost.
async fn renew(db: Db, lease: PlanningLease, lease_ms: u64) {
    let every = Duration::from_millis((lease_ms / 3).max(50));
    loop {
        tokio::time::sleep(every).await;
        match db.renew_planning(&lease, now_ms() + lease_ms).await {
            Ok(true) => {}
            Ok(false) => return,
            // Said and tried again: if it stays down the lease runs out, another
            // instance takes over, and this one's writes are refused.
            Err(e) => {
                _ = writeln!(
                    std::io::stderr(),
                    "hetch service: job {}: renewing planning: {e}",
                    lease.job
                )
            }
        }
    }
}

async fn write_plan(
    db: &Db,
    root: PathBuf,
    lease: &PlanningLease,
    spec: JobSpec,
    p: Planner,
    attempts: u32,
) {
    if spec.is_relay() {
        let relay = |operand| UnitSpec::Relay { operand };
        return write_whole(db, lease, &spec, relay, attempts).await;
    }
    let planner = job_planner(&spec, p);
    let objects = object_limits(&spec.dest);
    // Checked at submission, and again now: a symlink planted on the way since must
    // not let the job list another's files.
    if let Err(e) = check_paths(&root, &spec) {
        return end_planning(db, lease, Err(e)).await;
    }
    if spec.is_stream() {
        let stream = |operand| UnitSpec::Stream { operand };
        return write_whole(db, lease, &spec, stream, STREAM_ATTEMPTS).await;
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Vec<(FileRow, SourceKind)>, String>>(2);
    let sources = spec.sources.clone();
    let access = spec.access.clone();
    let lister =
        tokio::task::spawn_blocking(move || list_as(&root, access.as_ref(), &sources, &tx));
    let mut planning = planner.start();
    let (mut next_file, mut next_unit) = (0u64, 0u64);
    let mut result = Ok(());
    // Units planned and not written yet: written whenever a batch's worth is made (a
    // split file alone may be up to --max-ranges-per-file of them).
    let mut units = Vec::new();
    while let Some(batch) = rx.recv().await {
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                result = Err(e);
                break;
            }
        };
        let mut specs = Vec::new();
        let rows: Vec<FileRow> = batch.into_iter().map(|(f, _)| f).collect();
        let mut written = db.add_files(lease, next_file, &rows).await;
        for f in &rows {
            let planned = match objects.filter(|_| f.size > planner.split_size) {
                Some(limits) => object_range_blocks(limits, f.size, &planner).and_then(|per| {
                    planning
                        .file_in_ranges(f.size, per, &mut specs)
                        .map_err(|e| e.to_string())
                }),
                None => planning.file(f.size, &mut specs).map_err(|e| e.to_string()),
            };
            if let Err(e) = planned {
                result = Err(format!("{}: {e}", f.path));
                break;
            }
            units.extend(specs.drain(..).map(|s| with_bytes(s, f.size, &planner)));
            if units.len() >= BATCH && written.is_ok() {
                written = db.add_units(lease, next_unit, &units, attempts).await;
                next_unit += units.len() as u64;
                units.clear();
            }
        }
        if let Err(e) = written {
            result = Err(format!("writing the listing: {e}"));
        }
        if result.is_err() {
            break;
        }
        next_file += rows.len() as u64;
    }
    drop(rx); // a lister still going stops at its next send
    let _ = lister.await;
    if result.is_ok() {
        let mut last = Vec::new();
        planning.finish(&mut last);
        units.extend(last.into_iter().map(|s| with_bytes(s, 0, &planner)));
        if spec.options.sync {
            // Last, and claimable only once every unit above is done (see the jobdb's
            // `settle`). Its worker lists the sources again rather than being handed
            // this listing: it may then delete only what the sources lack *now* (a
            // file that appeared since the listing is copied, not lost), it reuses
            // `hetch sync`'s deletion whole (confined to the destination, never
            // following a symlink, `--max-delete` counted before anything goes), and
            // its memory is the mover's, not a second copy of a listing of millions.
            units.push(PlannedUnit {
                spec: UnitSpec::Delete {},
                bytes: 0,
            });
        }
        let written = db.add_units(lease, next_unit, &units, attempts).await;
        result = written.map_err(|e| format!("writing the listing: {e}"));
    }
    end_planning(db, lease, result).await;
}

/// Where a job's paths lead, checked against its access (the worker checks them
/// again with the same function).
pub use hetch_service_api::access::check_paths;

// Runs in a row that move nothing a stream unit may have: it lives as long as its
// files are written (for ever, under `--watch`), so a lease lost now and then over
// hours is not its end; each run resumes from what the destination verified.
use hetch_jobdb::STREAM_ATTEMPTS;

/// A job that is not listed: a copy between two servers (the service cannot list the
/// source server, so a worker has it push each source operand whole) or a streaming
/// job (its files are still growing or still to appear): one unit `unit(operand)`
/// per source operand, each tried at most `attempts` times.
async fn write_whole(
    db: &Db,
    lease: &PlanningLease,
    spec: &JobSpec,
    unit: impl Fn(u64) -> UnitSpec,
    attempts: u32,
) {
    let units: Vec<PlannedUnit> = (0..spec.sources.len() as u64)
        .map(|operand| PlannedUnit {
            spec: unit(operand),
            bytes: 0,
        })
        .collect();
    let written = db.add_units(lease, 0, &units, attempts).await;
    end_planning(
        db,
        lease,
        written.map_err(|e| format!("writing the units: {e}")),
    )
    .await;
}

/// Queues the planned job, or fails it with what went wrong.
async fn end_planning(db: &Db, lease: &PlanningLease, result: Result<(), String>) {
    let done = match result {
        Ok(()) => db.queue(lease, now_ms()).await.map(|_| ()),
        Err(e) => db
            .fail_planning(lease, &format!("planning: {e}"), now_ms())
            .await
            .map(|_| ()),
    };
    if let Err(e) = done {
        _ = writeln!(std::io::stderr(), "hetch service: job {}: {e}", lease.job);
    }
}

/// The service's planner as job `spec` needs it: its block size, and no file split
/// unless the destination takes one file from several writers: a directory tree that
/// takes one part file (a path on the shared storage, which the workers write, or
/// `hetch://` nodes, which do for the workers), or an S3 or Azure store taking one
/// multipart upload ([`object_limits`]). GCS takes each file from one writer.
pub fn job_planner(spec: &JobSpec, planner: Planner) -> Planner {
    let tree = !crate::api::is_url(&spec.dest) || spec.dest.starts_with("hetch://");
    let object = object_limits(&spec.dest).is_some();
    Planner {
        block_size: spec.options.block_size.unwrap_or(planner.block_size),
        split_size: match tree || object {
            true => planner.split_size,
            false => u64::MAX,
        },
        ..planner
    }
}

/// The part limits of destination `dest` when its files may be moved in ranges by
/// several writers into one multipart upload: S3 and Azure. GCS completes an upload
/// without the BLAKE3 a file's commit puts on it, so its files go whole.
pub fn object_limits(dest: &str) -> Option<PartLimits> {
    match ObjectUrl::parse(dest).ok()?.scheme {
        Scheme::S3 => Some(PartLimits::of(Scheme::S3)),
        Scheme::Azure => Some(PartLimits::of(Scheme::Azure)),
        Scheme::Gcs => None,
    }
}

/// Blocks per range of a file of `size` bytes going into a store of `limits`: about
/// the planner's range size, in whole parts ([`PartLimits::cut`]), within what one
/// range report may carry ([`MAX_RANGE_DIGESTS`] block digests); one line naming the
/// limit when the file cannot be cut so.
pub fn object_range_blocks(limits: PartLimits, size: u64, p: &Planner) -> Result<u64, String> {
    let max = MAX_RANGE_DIGESTS as u64;
    let cut = limits.cut(size, p.block_size, p.range_blocks(), max)?;
    Ok(cut.range_blocks)
}

/// A planned unit with its bytes: a range's share of the file of `size` bytes just
/// fed (batches carry their own; commits move none).
fn with_bytes(spec: UnitSpec, size: u64, p: &Planner) -> PlannedUnit {
    let bytes = match spec {
        UnitSpec::Files { bytes, .. } => bytes,
        UnitSpec::Range { first, end, .. } => {
            (end.saturating_mul(p.block_size)).min(size)
                - first.saturating_mul(p.block_size).min(size)
        }
        UnitSpec::Commit { .. }
        | UnitSpec::Relay { .. }
        | UnitSpec::Stream { .. }
        | UnitSpec::Delete {} => 0,
    };
    PlannedUnit { spec, bytes }
}

/// [`list`], with the rights of the local account of `access` where it names one and
/// this service runs as root (as a worker runs the job's units): on a thread made for
/// it, whose file-system ids are the account's, so that what the account may not read
/// is not listed. Elsewhere the access's paths alone decide, as they do for workers.
fn list_as(
    root: &Path,
    access: Option<&Access>,
    sources: &[String],
    tx: &tokio::sync::mpsc::Sender<Result<Vec<(FileRow, SourceKind)>, String>>,
) {
    let account = access.and_then(|a| a.account.as_deref());
    let Some(name) = account.filter(|_| account::running_as_root()) else {
        return list(root, access, sources, tx);
    };
    std::thread::scope(|s| {
        let as_account =
            s.spawn(
                || match Account::lookup(name).and_then(|a| a.act_on_this_thread()) {
                    Ok(()) => list(root, access, sources, tx),
                    Err(e) => drop(tx.blocking_send(Err(e.to_string()))),
                },
            );
        if as_account.join().is_err() {
            let _ = tx.blocking_send(Err("listing as the job's account panicked".into()));
        }
    });
}

/// Lists `sources` under `root` (on a blocking thread), sending batches of rows; stops
/// at the first entry that cannot be listed, or when nobody listens any more. Each
/// source is reached through handles from the root, or from the read path of `access`
/// that covers it, so that no symlink swapped onto its way lists another's files.
fn list(
    root: &Path,
    access: Option<&Access>,
    sources: &[String],
    tx: &tokio::sync::mpsc::Sender<Result<Vec<(FileRow, SourceKind)>, String>>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    for (operand, src) in sources.iter().enumerate() {
        let (within, path) = match access {
            Some(a) => match a.source_within(root, src) {
                Ok(found) => found,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            },
            None => (root.to_path_buf(), root.join(src)),
        };
        let iter = match walk::walk_within(&within, &path) {
            Ok(it) => it,
            Err(e) => {
                let _ = tx.blocking_send(Err(format!("source {src}: {e}")));
                return;
            }
        };
        for item in iter {
            let entry = match item {
                Ok(e) => e,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e.to_string()));
                    return;
                }
            };
            let Ok(path) = String::from_utf8(entry.rel.clone()) else {
                let shown = String::from_utf8_lossy(&entry.rel).into_owned();
                let _ = tx.blocking_send(Err(format!(
                    "{shown}: file names that are not UTF-8 are not supported by the service yet"
                )));
                return;
            };
            let size = match entry.kind {
                SourceKind::File { size } => size,
                _ => 0,
            };
            let row = FileRow {
                operand: operand as u32,
                path,
                size,
            };
            batch.push((row, entry.kind));
            if batch.len() == BATCH && tx.blocking_send(Ok(std::mem::take(&mut batch))).is_err() {
                return;
            }
        }
    }
    if !batch.is_empty() {
        let _ = tx.blocking_send(Ok(batch));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// S3 and Azure destinations may take a file from several writers; GCS and
    /// anything that is not an object URL do not (as object stores).
    #[test]
    fn only_s3_and_azure_take_ranges_into_one_upload() {
        assert_eq!(object_limits("s3://b/k"), Some(PartLimits::of(Scheme::S3)));
        assert_eq!(object_limits("az://c"), Some(PartLimits::of(Scheme::Azure)));
        assert_eq!(object_limits("gs://b/k"), None);
        assert_eq!(object_limits("copy/s3://b"), None);
        assert_eq!(object_limits("hetch://h/d"), None);
    }

    /// Ranges into an object store are whole parts, about the planner's range size,
    /// within what one range report may carry; a file that cannot be cut so is
    /// refused in one line saying what to change.
    #[test]
    fn ranges_into_object_stores_are_whole_parts_within_a_report() {
        let p = |range_size, block_size| Planner {
            range_size,
            block_size,
            ..Planner::default()
        };
        let s3 = PartLimits::of(Scheme::S3);
        // Parts of 8 MiB: ranges of 4 MiB grow to one part, of 20 MiB to three.
        assert_eq!(object_range_blocks(s3, 64 * MIB, &p(4 * MIB, MIB)), Ok(8));
        assert_eq!(object_range_blocks(s3, 64 * MIB, &p(20 * MIB, MIB)), Ok(24));
        // Blocks of 64 KiB: a range of 2 GiB would be 32,768 digests, over a report's.
        let e = object_range_blocks(s3, 100 << 30, &p(2 << 30, 64 << 10)).unwrap_err();
        assert!(e.contains("larger block size") && !e.contains('\n'), "{e}");
        assert_eq!(
            object_range_blocks(s3, 100 << 30, &p(1 << 30, 64 << 10)),
            Ok(16_384)
        );
    }

    /// Files going into S3 and Azure are split (the workers upload their ranges as
    /// parts of one upload), into GCS not; directory trees are.
    #[test]
    fn s3_and_azure_destinations_split_and_gcs_does_not() {
        let spec = |dest: &str| {
            serde_json::from_value::<JobSpec>(serde_json::json!({"sources": ["a"], "dest": dest}))
                .unwrap()
        };
        let split = |dest| job_planner(&spec(dest), Planner::default()).split_size;
        assert_eq!(split("copy"), Planner::default().split_size);
        assert_eq!(split("gs://b"), u64::MAX);
        assert_eq!(split("s3://b"), Planner::default().split_size);
        assert_eq!(split("az://c/k"), Planner::default().split_size);
    }
}
