-- 12: reaching approvers (D15): the notification outbox and each person's channel settings
-- Issue 24: one row per notice to one person on one channel, written in the grant's transaction;
-- a delivery worker leases due rows (claimed_by, claimed_until: a conditional UPDATE, one winner
-- across processes), sends, and records status, attempts and the error.
CREATE TABLE notify_outbox (
        id TEXT PRIMARY KEY,
        grant_id TEXT,
        channel TEXT NOT NULL,
        recipient TEXT NOT NULL,
        person_id TEXT,
        kind TEXT NOT NULL,
        level INTEGER NOT NULL DEFAULT 0,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_at INTEGER NOT NULL,
        claimed_by TEXT,
        claimed_until INTEGER,
        error TEXT,
        created_at INTEGER NOT NULL,
        sent_at INTEGER,
        payload TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX notify_outbox_due ON notify_outbox (status, next_at);
CREATE INDEX notify_outbox_grant ON notify_outbox (grant_id, created_at);
CREATE INDEX notify_outbox_recipient ON notify_outbox (recipient, channel, created_at);
CREATE TABLE notify_prefs (
        person_id TEXT PRIMARY KEY,
        prefs_json TEXT NOT NULL,
        updated_at INTEGER NOT NULL
);
