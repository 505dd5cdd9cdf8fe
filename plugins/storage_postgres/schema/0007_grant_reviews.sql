-- 7: approval policies (D13): the review a grant was pinned to, and the votes on it
-- Issue 22: a grant that matched [[policies]] keeps the combined review it was pinned to at
-- creation and its escalation level (raised by a conditional update: one sweep on one node emits
-- each level). A grant without a row follows the default policy. One vote per person per grant.
CREATE TABLE grant_reviews (
        grant_id TEXT COLLATE "C" PRIMARY KEY REFERENCES grants (id) ON DELETE CASCADE,
        review_json TEXT NOT NULL,
        escalation_level INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE grant_votes (
        seq BIGSERIAL PRIMARY KEY,
        grant_id TEXT COLLATE "C" NOT NULL REFERENCES grants (id) ON DELETE CASCADE,
        email TEXT COLLATE "C" NOT NULL,
        voter_id TEXT COLLATE "C" NOT NULL,
        decision TEXT COLLATE "C" NOT NULL,
        via TEXT COLLATE "C" NOT NULL,
        at BIGINT NOT NULL,
        reason TEXT,
        grant_type TEXT COLLATE "C",
        duration BIGINT,
        management BOOLEAN NOT NULL DEFAULT FALSE,
        UNIQUE (grant_id, email)
);
CREATE INDEX grant_votes_grant ON grant_votes (grant_id, seq);
