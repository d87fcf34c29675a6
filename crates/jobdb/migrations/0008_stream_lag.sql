-- hetch service schema, version 8: streaming jobs. A `stream` unit follows one
-- source operand of a job while its files are written; its worker reports the lag
-- from bytes appended at the source to bytes durable and verified at the
-- destination (milliseconds, over the unit's current run) with each heartbeat. NULL
-- until it shipped appended bytes; kept when the run ends, cleared when another starts.
ALTER TABLE units ADD COLUMN lag_p50 BIGINT;
ALTER TABLE units ADD COLUMN lag_p99 BIGINT;
