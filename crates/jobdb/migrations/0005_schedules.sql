-- hetch service schema, version 5: recurring mirrors. A schedule submits a job (a
-- run) of its spec at each due time: every `every_ms` milliseconds, or at the times
-- of the 5-field cron expression `cron` (UTC); exactly one of the two is set.
-- `next_at` is the next due time; an instance takes a due schedule by moving it on
-- with a conditional UPDATE (`... WHERE next_at = $seen`), so two instances sharing
-- the database never run one due time twice.
CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    spec TEXT NOT NULL,
    every_ms BIGINT,
    cron TEXT,
    next_at BIGINT NOT NULL,
    paused BIGINT NOT NULL DEFAULT 0,
    created BIGINT NOT NULL,
    last_job TEXT
);
CREATE INDEX schedules_due ON schedules (paused, next_at);
CREATE INDEX schedules_by_owner ON schedules (owner, created);
-- What each due time did: the job it submitted, or why it submitted none (its
-- previous run had not ended). Only the newest rows of each schedule are kept.
CREATE TABLE schedule_runs (
    schedule TEXT NOT NULL,
    due BIGINT NOT NULL,
    job TEXT,
    skipped TEXT,
    PRIMARY KEY (schedule, due)
);
