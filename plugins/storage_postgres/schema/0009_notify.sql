-- 9: reaching approvers (D15): the notification outbox and each person's channel settings
-- Issue 24: one row per notice to one person on one channel, written in the grant's transaction;
-- a delivery worker leases due rows (claimed_by, claimed_until: a conditional UPDATE, one winner
-- across processes), sends, and records status, attempts and the error.
CREATE TABLE notify_outbox (
        id TEXT COLLATE "C" PRIMARY KEY,
        grant_id TEXT COLLATE "C",
        channel TEXT COLLATE "C" NOT NULL,
        recipient TEXT COLLATE "C" NOT NULL,
        person_id TEXT COLLATE "C",
        kind TEXT COLLATE "C" NOT NULL,
        level INTEGER NOT NULL DEFAULT 0,
        status TEXT COLLATE "C" NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_at BIGINT NOT NULL,
        claimed_by TEXT COLLATE "C",
        claimed_until BIGINT,
        error TEXT,
        created_at BIGINT NOT NULL,
        sent_at BIGINT,
        payload TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX notify_outbox_due ON notify_outbox (status, next_at);
CREATE INDEX notify_outbox_grant ON notify_outbox (grant_id, created_at);
CREATE INDEX notify_outbox_recipient ON notify_outbox (recipient, channel, created_at);
CREATE TABLE notify_prefs (
        person_id TEXT COLLATE "C" PRIMARY KEY,
        prefs_json TEXT NOT NULL,
        updated_at BIGINT NOT NULL
);
-- Review links {issuer}/r/<token>: only the SHA-256 of the token is kept, bound to one grant and
-- one person; a GET reads it (changes nothing), a deny link is used once (used_at).
CREATE TABLE review_links (
        token_hash TEXT COLLATE "C" PRIMARY KEY,
        grant_id TEXT COLLATE "C" NOT NULL,
        person_id TEXT COLLATE "C",
        email TEXT COLLATE "C" NOT NULL,
        action TEXT COLLATE "C" NOT NULL,
        expires_at BIGINT NOT NULL,
        used_at BIGINT,
        created_at BIGINT NOT NULL
);
CREATE INDEX review_links_expiry ON review_links (expires_at);
-- Web Push subscriptions (RFC 8030): a person's browsers and phones.
CREATE TABLE push_subscriptions (
        id TEXT COLLATE "C" PRIMARY KEY,
        person_id TEXT COLLATE "C" NOT NULL,
        endpoint TEXT COLLATE "C" NOT NULL,
        p256dh TEXT NOT NULL,
        auth TEXT NOT NULL,
        expiration_time BIGINT,
        created_at BIGINT NOT NULL,
        UNIQUE (person_id, endpoint)
);
-- A vote cast from a review link keeps its passkey assertion over the grant's digest (D14, D15).
ALTER TABLE grant_votes ADD COLUMN evidence TEXT;
