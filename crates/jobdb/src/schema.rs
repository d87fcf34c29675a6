//! The schema's migrations, embedded in the binary and applied at start.
//!
//! One list of plain-SQL files serves both databases (see the first file's header);
//! they are embedded by hand rather than by `sqlx::migrate!` so that building needs
//! no database and no proc-macro.

use std::borrow::Cow;

use sqlx::migrate::{Migration, MigrationType, Migrator};

/// The migrations, oldest first: (version, description, SQL). Never edit one that has
/// shipped: its checksum is recorded in every database it ran on; add a new one.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "jobs", include_str!("../migrations/0001_jobs.sql")),
    (
        2,
        "planning leases",
        include_str!("../migrations/0002_planning_leases.sql"),
    ),
    (
        3,
        "activity",
        include_str!("../migrations/0003_activity.sql"),
    ),
    (
        4,
        "plan attempts",
        include_str!("../migrations/0004_plan_attempts.sql"),
    ),
    (
        5,
        "schedules",
        include_str!("../migrations/0005_schedules.sql"),
    ),
    (
        6,
        "webhook deliveries",
        include_str!("../migrations/0006_webhook_deliveries.sql"),
    ),
    (
        7,
        "object ranges",
        include_str!("../migrations/0007_object_ranges.sql"),
    ),
    (
        8,
        "stream lag",
        include_str!("../migrations/0008_stream_lag.sql"),
    ),
    (
        10,
        "bytes written",
        include_str!("../migrations/0010_bytes_written.sql"),
    ),
    (
        11,
        "retention",
        include_str!("../migrations/0011_retention.sql"),
    ),
    (
        12,
        "lease ids",
        include_str!("../migrations/0012_lease_ids.sql"),
    ),
    (
        13,
        "unit counts",
        include_str!("../migrations/0013_unit_counts.sql"),
    ),
    (
        14,
        "claims from a cursor",
        include_str!("../migrations/0014_claim_from.sql"),
    ),
];

/// The migrator over [`MIGRATIONS`].
pub fn migrator() -> Migrator {
    let migrations = MIGRATIONS
        .iter()
        .map(|&(version, name, sql)| {
            Migration::new(
                version,
                Cow::Borrowed(name),
                MigrationType::Simple,
                Cow::Borrowed(sql),
                false,
            )
        })
        .collect::<Vec<_>>();
    Migrator {
        migrations: Cow::Owned(migrations),
        ..Migrator::DEFAULT
    }
}
