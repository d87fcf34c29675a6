-- hetch service schema, version 4: how many times a job's planning was started. A
-- planner that takes its service down with it (or is stopped at every start) would
-- otherwise have the job taken over and planned again forever; past a few starts the
-- job fails instead, with why. A retry starts the count again.
ALTER TABLE jobs ADD COLUMN plan_attempts BIGINT NOT NULL DEFAULT 0;
