//! The SQLite database file is private to the service's user: it names every job's
//! paths, who submitted it and which workers run it. SQLite creates a missing file
//! with the umask's mode (often 0644), and its `-wal` and `-shm` files with the
//! database file's, so the file is made 0600 before SQLite opens it, and one that
//! group or others may read or write is refused, as `hetch serve` refuses such a key.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

use crate::DbError;

/// Creates the SQLite database file `path` with mode 0600 when it is missing, and
/// refuses it, or its `-wal` or `-shm` file, when group or others may read or write
/// it: one line naming the file and the fix.
pub(crate) fn make_private(path: &str) -> Result<(), DbError> {
    // SQLite's own names for a database in memory, or a temporary one.
    if path.is_empty() || path.starts_with(":memory:") {
        return Ok(());
    }
    let created = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match created {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(file_error(path, format!("cannot create: {e}"))),
    }
    for file in [
        path.to_string(),
        format!("{path}-wal"),
        format!("{path}-shm"),
    ] {
        check_private(&file)?;
    }
    Ok(())
}

/// Refuses `file` when group or others may read or write it (a missing `-wal` or
/// `-shm` file is fine: SQLite makes it with the database file's mode).
fn check_private(file: &str) -> Result<(), DbError> {
    let mode = match std::fs::metadata(file) {
        Ok(md) => md.permissions().mode(),
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(file_error(file, e)),
    };
    if mode & 0o077 != 0 {
        let why = format!(
            "database file is accessible by group or others (mode {:03o}); run `chmod 600 {file}`",
            mode & 0o777
        );
        return Err(file_error(file, why));
    }
    Ok(())
}

fn file_error(path: &str, reason: impl std::fmt::Display) -> DbError {
    DbError::File {
        path: path.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new database file is 0600 whatever the umask; an existing one group or
    /// others reach is refused by name with the fix, as is such a `-wal` file.
    #[test]
    fn the_database_file_is_private_or_refused() {
        let t = tempfile::tempdir().unwrap();
        let db = t.path().join("jobs.db");
        let db = db.to_str().unwrap();
        make_private(db).unwrap();
        let mode = |p: &str| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(db), 0o600);
        make_private(db).unwrap();
        let loosen = |p: &str, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        for (file, loose) in [(db.to_string(), 0o644), (format!("{db}-wal"), 0o640)] {
            std::fs::write(&file, b"").ok();
            loosen(&file, loose);
            let e = make_private(db).unwrap_err().to_string();
            assert!(
                e.starts_with(&file) && e.contains(&format!("chmod 600 {file}")),
                "{e}"
            );
            assert!(!e.contains('\n'), "{e}");
            loosen(&file, 0o600);
        }
        make_private(db).unwrap();
    }
}
