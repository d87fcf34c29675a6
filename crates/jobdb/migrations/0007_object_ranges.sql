-- hetch service schema, version 7: large files moved in ranges into an object store
-- (s3://, gs://, az://) as one multipart upload whose parts come from several workers.
-- The upload's id, created by the first worker that needed it (the first to record it
-- wins; a worker that lost the race aborts its own), and what each range unit reported
-- when it was done: its part ids (one a line) and its blocks' BLAKE3
-- digests (hex, concatenated), which the commit unit checks and merges into the
-- whole file's digest before it completes the upload. Every number and string here
-- was bounded and checked by the service before it was stored.
CREATE TABLE object_uploads (
    job TEXT NOT NULL,
    file BIGINT NOT NULL,
    upload TEXT NOT NULL,
    created BIGINT NOT NULL,
    PRIMARY KEY (job, file)
);

CREATE TABLE range_reports (
    job TEXT NOT NULL,
    seq BIGINT NOT NULL,
    file BIGINT NOT NULL,
    first_block BIGINT NOT NULL,
    end_block BIGINT NOT NULL,
    size BIGINT NOT NULL,
    parts TEXT NOT NULL,
    digests TEXT NOT NULL,
    PRIMARY KEY (job, seq)
);
CREATE INDEX range_reports_by_file ON range_reports (job, file, first_block);
