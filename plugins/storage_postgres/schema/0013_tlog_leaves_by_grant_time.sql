-- 13: the decision log finds a grant's leaves by the grant's creation time and id
-- Issue 23: the index on (grant_id, idx) took every new leaf to a random page of a B-tree as large
-- as the log (grant ids are random): a page read, dirtied and written per leaf. A grant's
-- created_at grows with time, so the keys a step adds land together at the newest end. Leaves
-- written before this migration (and leaves whose grant's created_at the sequencer does not hold,
-- such as receipts) keep the old key, in an index of their own.
ALTER TABLE tlog_leaves ADD COLUMN grant_created BIGINT;
DROP INDEX tlog_leaves_grant;
CREATE INDEX tlog_leaves_grant ON tlog_leaves (grant_id, idx) WHERE grant_created IS NULL;
CREATE INDEX tlog_leaves_grant_created ON tlog_leaves (grant_created, grant_id, idx)
        WHERE grant_created IS NOT NULL;
