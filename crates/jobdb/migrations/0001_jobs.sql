-- hetch service schema, version 1. Plain SQL valid on SQLite and PostgreSQL alike:
-- BIGINT everywhere (times are milliseconds since the epoch), TEXT for names and
-- states, ids made by the service (no serial columns, whose syntax differs).

-- A job: what `hetch cp` takes, as submitted, and where it is.
CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    submitted_by TEXT NOT NULL,
    spec TEXT NOT NULL,
    priority BIGINT NOT NULL DEFAULT 0,
    rate_limit BIGINT NOT NULL DEFAULT 0,
    -- planning, queued, running, done, failed, cancelled
    state TEXT NOT NULL,
    created BIGINT NOT NULL,
    started BIGINT,
    finished BIGINT,
    error TEXT,
    files BIGINT NOT NULL DEFAULT 0,
    bytes BIGINT NOT NULL DEFAULT 0,
    files_done BIGINT NOT NULL DEFAULT 0,
    bytes_done BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX jobs_by_state ON jobs (state, created);

-- The job's listing, in order: a unit names its files by index. `path` is the wire
-- path (the operand's own name, then the path inside it) of source operand number
-- `operand` of the job.
CREATE TABLE files (
    job TEXT NOT NULL,
    idx BIGINT NOT NULL,
    operand BIGINT NOT NULL,
    path TEXT NOT NULL,
    size BIGINT NOT NULL,
    error TEXT,
    PRIMARY KEY (job, idx)
);

-- Work units: a batch of files (files file_from..file_to), a block range of one
-- file (file_from, blocks block_from..block_to), or the commit of one split file.
CREATE TABLE units (
    job TEXT NOT NULL,
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,
    file_from BIGINT NOT NULL,
    file_to BIGINT NOT NULL,
    block_from BIGINT NOT NULL DEFAULT 0,
    block_to BIGINT NOT NULL DEFAULT 0,
    bytes BIGINT NOT NULL,
    -- waiting (a commit whose ranges are not all done), ready, leased, done,
    -- failed, cancelled
    state TEXT NOT NULL,
    lease_owner TEXT,
    lease_until BIGINT,
    attempts BIGINT NOT NULL DEFAULT 0,
    max_attempts BIGINT NOT NULL,
    error TEXT,
    PRIMARY KEY (job, seq)
);
CREATE INDEX units_by_state ON units (job, state, seq);
CREATE INDEX units_by_owner ON units (lease_owner);
CREATE INDEX units_by_lease ON units (state, lease_until);

-- Workers that have asked for work, and when they were last heard.
CREATE TABLE workers (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    site TEXT NOT NULL DEFAULT '',
    capacity BIGINT NOT NULL,
    last_seen BIGINT NOT NULL
);
