-- hetch service schema, version 10: bytes a job's units wrote at the destination, as
-- their workers report them (a file already in place writes none), beside the bytes
-- of its listing that are done (`bytes_done`, its progress). A run of a recurring
-- mirror over an unchanged tree is done with every byte and wrote none.
ALTER TABLE jobs ADD COLUMN bytes_written BIGINT NOT NULL DEFAULT 0;
