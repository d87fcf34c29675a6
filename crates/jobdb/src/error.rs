//! What can go wrong talking to the database.

/// A database call that did not go through.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The URL names no database hetch can use.
    #[error("database URL {0:?} is not sqlite://PATH or postgres://...")]
    Url(String),
    /// The SQLite database file could not be made, or is not private to its owner.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why, and the fix where there is one.
        reason: String,
    },
    /// The database could not be reached or opened.
    #[error("cannot open database {url}: {source}")]
    Open {
        /// The URL, without its password.
        url: String,
        /// Why.
        source: sqlx::Error,
    },
    /// The schema could not be brought up to date.
    #[error("cannot migrate database {url}: {source}")]
    Migrate {
        /// The URL, without its password.
        url: String,
        /// Why.
        source: sqlx::migrate::MigrateError,
    },
    /// A statement failed.
    #[error("database: {0}")]
    Sql(#[from] sqlx::Error),
    /// A row held something this version cannot read (a newer schema, or damage).
    #[error("database row: {0}")]
    Row(String),
    /// A planning write by an instance that no longer plans the job: it was
    /// cancelled, or another instance took it over after this one's lease ran out.
    #[error("job {0} is no longer planned by this instance (cancelled or taken over)")]
    NotPlanning(String),
    /// There is no such job.
    #[error("no job {0}")]
    NoJob(String),
}

impl DbError {
    /// Whether the database gave the statement's transaction up to break a deadlock
    /// or a serialization conflict (PostgreSQL's SQLSTATE 40P01 and 40001): nothing of
    /// it was kept, and running it again goes through.
    pub fn is_conflict(&self) -> bool {
        let DbError::Sql(e) = self else {
            return false;
        };
        let code = e.as_database_error().and_then(|d| d.code());
        matches!(code.as_deref(), Some("40P01" | "40001"))
    }
}
