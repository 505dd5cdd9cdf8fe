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
-- Review links {issuer}/r/<token>: only the SHA-256 of the token is kept, bound to one grant and
-- one person; a GET reads it (changes nothing), a deny link is used once (used_at).
CREATE TABLE review_links (
        token_hash TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL,
        person_id TEXT,
        email TEXT NOT NULL,
        action TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        used_at INTEGER,
        created_at INTEGER NOT NULL
);
CREATE INDEX review_links_expiry ON review_links (expires_at);
-- Web Push subscriptions (RFC 8030): a person's browsers and phones.
CREATE TABLE push_subscriptions (
        id TEXT PRIMARY KEY,
        person_id TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        p256dh TEXT NOT NULL,
        auth TEXT NOT NULL,
        expiration_time INTEGER,
        created_at INTEGER NOT NULL,
        UNIQUE (person_id, endpoint)
);
-- A vote cast from a review link keeps its passkey assertion over the grant's digest (D14, D15).
ALTER TABLE grant_votes ADD COLUMN evidence TEXT;
