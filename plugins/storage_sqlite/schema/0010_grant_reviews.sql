-- 10: approval policies (D13): the review a grant was pinned to, and the votes on it
-- Issue 22: a grant that matched [[policies]] keeps the combined review it was pinned to at
-- creation (a config reload never changes what a pending grant needs) and its escalation level
-- (raised by a conditional update: one sweep in one process emits each level). A grant without a
-- row follows the default policy. One vote per person per grant: the primary key refuses a second.
CREATE TABLE grant_reviews (
        grant_id TEXT PRIMARY KEY REFERENCES grants (id) ON DELETE CASCADE,
        review_json TEXT NOT NULL,
        escalation_level INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE grant_votes (
        grant_id TEXT NOT NULL REFERENCES grants (id) ON DELETE CASCADE,
        email TEXT NOT NULL,
        voter_id TEXT NOT NULL,
        decision TEXT NOT NULL,
        via TEXT NOT NULL,
        at INTEGER NOT NULL,
        reason TEXT,
        grant_type TEXT,
        duration INTEGER,
        management INTEGER NOT NULL DEFAULT 0,
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        UNIQUE (grant_id, email)
);
CREATE INDEX grant_votes_grant ON grant_votes (grant_id, seq);
