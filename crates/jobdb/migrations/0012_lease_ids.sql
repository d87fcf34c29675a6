-- hetch service schema, version 12: a random id for each lease. A claim gives the
-- worker an unguessable id with each unit, and a heartbeat, a report or a unit's call
-- about its upload is taken only with it: naming a unit and a worker's name (both
-- shown to users) no longer proves holding it. Leases held at the upgrade have none:
-- their workers' reports are refused, and the units go again when they run out.
ALTER TABLE units ADD COLUMN lease_id TEXT;
