-- hetch service schema, version 6: the outbox of webhook notes. A job submitted with
-- a webhook gets one row, `armed`, at submission; once the job has ended, a service
-- instance takes the row under a lease (lease_owner, lease_until: with several
-- instances on one database, one sends it at a time), POSTs the note and records
-- the outcome: `delivered`, `pending` again with the next attempt's time (backoff),
-- or `given_up` after the last attempt, with the last error. The row outlives a
-- restart, so no note is lost with the process. `finished` is the job end it is
-- about: a retry arms the row again, so a job retried and ended again is told of
-- again (the delivery id, the same for every attempt, is the job's id and this time).
CREATE TABLE webhook_deliveries (
    job TEXT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    -- armed, pending, delivered, given_up
    state TEXT NOT NULL,
    finished BIGINT,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt BIGINT NOT NULL DEFAULT 0,
    last_error TEXT,
    lease_owner TEXT,
    lease_until BIGINT NOT NULL DEFAULT 0,
    updated BIGINT NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_attempt);
CREATE INDEX webhook_deliveries_by_time ON webhook_deliveries (updated);
