-- hetch service schema, version 3: what the web interface shows of the work going on.
-- Who finished each unit and the bytes it reported (a job's share per node); bytes a
-- leased unit has moved so far, from its worker's heartbeats (a job's live progress,
-- zeroed when the unit ends); and what each worker says of itself when it asks for
-- work (its host, bytes moved since it started, the host checks it found).
ALTER TABLE units ADD COLUMN done_by TEXT;
ALTER TABLE units ADD COLUMN moved BIGINT NOT NULL DEFAULT 0;
ALTER TABLE units ADD COLUMN progress BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN moved BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN checks TEXT NOT NULL DEFAULT '[]';
-- The newest finished jobs, once a second.
CREATE INDEX jobs_by_created ON jobs (created);
