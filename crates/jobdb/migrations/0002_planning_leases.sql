-- hetch service schema, version 2: planning leases. The service instance writing a
-- job's listing and units (a job in state planning) holds it until planner_until,
-- which it keeps pushing forward; once that has passed, another instance takes the
-- job over and plans it again from the start. Jobs from version 1 have no planner
-- and are taken over at once.
ALTER TABLE jobs ADD COLUMN planner TEXT;
ALTER TABLE jobs ADD COLUMN planner_until BIGINT NOT NULL DEFAULT 0;
-- When its planning ended (its listing complete); NULL while it has not, so that a
-- retry of a job cancelled or failed before then plans it again instead of running a
-- partial listing. Version 1 jobs that were queued or claimed had been planned.
ALTER TABLE jobs ADD COLUMN planned BIGINT;
UPDATE jobs SET planned = created
    WHERE state IN ('queued', 'running', 'done') OR started IS NOT NULL;
