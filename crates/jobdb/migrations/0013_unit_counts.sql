-- hetch service schema, version 13: a job's unit counts on its row, and a time before
-- which a unit that failed is not handed out again.
--
-- Counting a job's units by state at each claim, finish or view cost a scan of all of
-- them (a million-unit job's every claim read a million rows). The counts now live on
-- the job's row, changed in the same transaction as the units they count; the
-- statements below fill them in for the jobs there are.
ALTER TABLE jobs ADD COLUMN units_waiting BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN units_ready BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN units_leased BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN units_done BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN units_failed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN units_cancelled BIGINT NOT NULL DEFAULT 0;
-- Units tried more than once (in any state).
ALTER TABLE jobs ADD COLUMN units_retried BIGINT NOT NULL DEFAULT 0;
UPDATE jobs SET
    units_waiting = (SELECT COUNT(*) FROM units u WHERE u.job = jobs.id AND u.state = 'waiting'),
    units_ready = (SELECT COUNT(*) FROM units u WHERE u.job = jobs.id AND u.state = 'ready'),
    units_leased = (SELECT COUNT(*) FROM units u WHERE u.job = jobs.id AND u.state = 'leased'),
    units_done = (SELECT COUNT(*) FROM units u WHERE u.job = jobs.id AND u.state = 'done'),
    units_failed = (SELECT COUNT(*) FROM units u WHERE u.job = jobs.id AND u.state = 'failed'),
    units_cancelled = (SELECT COUNT(*) FROM units u WHERE u.job = jobs.id AND u.state = 'cancelled'),
    units_retried = (SELECT COUNT(*) FROM units u WHERE u.job = jobs.id AND u.attempts > 0);

-- A unit whose attempt failed waits until this time (milliseconds) before it is
-- handed out again: a destination full for a minute is not three attempts in a second.
ALTER TABLE units ADD COLUMN not_before BIGINT NOT NULL DEFAULT 0;

-- A split file's commit and ranges, found by the file they share: when a range ends,
-- only its own file's commit is looked at.
CREATE INDEX units_by_file ON units (job, file_from, kind);

-- Ready units in the order they are handed out: those never tried (not_before 0) in
-- order, then those trying again, as their waits end. A claim reads the first few.
CREATE INDEX units_ready_by_time ON units (job, state, not_before, seq);
