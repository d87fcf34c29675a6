//! The databases of every test: an embedded SQLite file, and with `HETCH_DB` naming
//! it (`sqlite,postgres`, as `bash test.sh` does) a database of the test's own on the
//! run's one PostgreSQL server, an integration test.

use std::path::Path;

use hetch_jobdb::{Db, FileRow, NewJob, PlannedUnit, PlanningLease};
use hetch_jobs::{Planner, UnitSpec};
use hetch_testkit::emulators::Emulator;
use hetch_testkit::shared::unique_name;

/// One database under test, with what keeps it alive.
pub struct Backend {
    /// `sqlite` or `postgres`.
    pub name: &'static str,
    /// Its URL (another [`Db::open`] of it is a second service instance).
    pub url: String,
}

/// The backends to run on, each set up in `dir`.
pub fn backends(dir: &Path) -> Vec<Backend> {
    // PostgreSQL is a server: an integration test, where `bash test.sh` names it.
    let want = std::env::var("HETCH_DB").unwrap_or_else(|_| "sqlite".into());
    let mut out = Vec::new();
    if want.contains("sqlite") {
        out.push(Backend {
            name: "sqlite",
            url: format!("sqlite://{}", dir.join("jobs.db").display()),
        });
    }
    if want.contains("postgres") {
        let pg = Emulator::shared_postgres();
        let url = pg
            .create_database(&unique_name("jobs-"))
            .expect("create database");
        out.push(Backend {
            name: "postgres",
            url,
        });
    }
    out
}

/// No wait between a unit's attempts.
pub const NO_WAIT: hetch_jobdb::Patience = hetch_jobdb::Patience {
    first_ms: 0,
    most_ms: 0,
};

/// Runs `f` on every backend, naming the backend when it fails.
pub fn on_each<F, Fut>(f: F)
where
    F: Fn(Db, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    for b in backends(dir.path()) {
        eprintln!("--- on {}", b.name);
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            // A failed attempt's unit goes again at once, as in the lease model; the
            // waits between attempts have tests of their own.
            let db = Db::open(&b.url)
                .await
                .expect("open database")
                .with_patience(NO_WAIT);
            f(db.clone(), b.url.clone()).await;
            db.close().await;
        });
    }
}

/// Creates job `id` with its listing, files of `sizes` (named f0, f1, ...), and
/// returns its planning lease (for its units).
pub async fn listed_job(
    db: &Db,
    id: &str,
    priority: i64,
    sizes: &[u64],
    now: u64,
) -> PlanningLease {
    let job = NewJob {
        id: id.into(),
        submitted_by: "tester".into(),
        spec: "{}".into(),
        priority,
        rate_limit: 0,
    };
    let lease = db
        .create_job(&job, "planner", now + 1_000_000, now)
        .await
        .unwrap();
    let files: Vec<FileRow> = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| FileRow {
            operand: 0,
            path: format!("f{i}"),
            size,
        })
        .collect();
    db.add_files(&lease, 0, &files).await.unwrap();
    lease
}

/// Creates and queues job `id` over files of `sizes` (named f0, f1, ...), planned by
/// `planner`, each unit allowed `attempts` attempts.
pub async fn job_of(
    db: &Db,
    id: &str,
    priority: i64,
    sizes: &[u64],
    planner: Planner,
    attempts: u32,
    now: u64,
) {
    let lease = listed_job(db, id, priority, sizes, now).await;
    let units: Vec<PlannedUnit> = planner
        .plan(sizes.iter().copied())
        .expect("within the planner's bounds")
        .into_iter()
        .map(|spec| {
            let bytes = match spec {
                UnitSpec::Files { bytes, .. } => bytes,
                UnitSpec::Range { file, first, end } => {
                    let bs = planner.block_size;
                    (end * bs).min(sizes[file as usize]) - first * bs
                }
                UnitSpec::Commit { .. }
                | UnitSpec::Relay { .. }
                | UnitSpec::Stream { .. }
                | UnitSpec::Delete {} => 0,
            };
            PlannedUnit { spec, bytes }
        })
        .collect();
    db.add_units(&lease, 0, &units, attempts).await.unwrap();
    assert!(db.queue(&lease, now).await.unwrap());
}

/// A planner that puts `per` files in a batch and splits files above `split` into
/// ranges of `range` bytes of blocks of `block`.
pub fn planner(per: u64, split: u64, range: u64, block: u64) -> Planner {
    Planner {
        batch_files: per,
        batch_bytes: u64::MAX,
        split_size: split,
        range_size: range,
        block_size: block,
        ..Planner::default()
    }
}

/// Job `job`'s unit counts as its row keeps them, checked against a count of its
/// units.
pub async fn unit_counts(db: &Db, job: &str) -> hetch_jobdb::UnitCounts {
    let kept = db.job(job).await.unwrap().expect("no such job").units;
    let counted = db.count_units(job).await.unwrap();
    assert_eq!(
        kept, counted,
        "job {job}: the counts on its row are not its units'"
    );
    kept
}
