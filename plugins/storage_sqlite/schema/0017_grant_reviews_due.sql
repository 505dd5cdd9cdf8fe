-- 17: when the sweep must next look at a pinned review
-- Issue 27, item 5: every process's sweep (every 5 s) read the oldest 1,000 pending grants under a
-- policy and each one's grant, due or not: 29 ms a sweep with 1,000 waiting, and a grant behind
-- 1,000 older ones was never escalated or timed out. `due_at` (ms) is its next escalation or its
-- pinned timeout; the sweep reads only the due ones through this index, moves their time on and
-- clears it once the grant is no longer pending. Pending grants pinned before this version are
-- due at once, so the first sweep sets their real time.
ALTER TABLE grant_reviews ADD COLUMN due_at INTEGER;
UPDATE grant_reviews SET due_at = 0 WHERE grant_id IN (SELECT id FROM grants WHERE status = 'pending');
CREATE INDEX grant_reviews_due ON grant_reviews (due_at, grant_id) WHERE due_at IS NOT NULL;
