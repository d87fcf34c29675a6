-- hetch service schema, version 11: retention of finished jobs. A finished job beyond
-- the newest the operator keeps, or older than they keep, has its row deleted in one
-- short transaction and its id recorded here; what it left (listing rows, units, range
-- reports, uploads: millions for a large job) is then deleted in small batches, and
-- the record with the last of them, so that no statement holds the database for long.
CREATE TABLE purged_jobs (
    job TEXT PRIMARY KEY,
    since BIGINT NOT NULL
);
CREATE INDEX purged_jobs_by_time ON purged_jobs (since);
-- Finished jobs, newest or oldest first, without a scan of every job.
CREATE INDEX jobs_by_finished ON jobs (finished);
