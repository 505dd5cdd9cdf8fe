-- 13: CIBA requests and agents' ping settings
-- D16 / issue 25: a backchannel authentication request (the SHA-256 of its auth_req_id) maps to the
-- grant it created; polled, slowed down, redeemed once. An agent in ping mode has its endpoint here.
CREATE TABLE ciba_requests (
        auth_req_hash TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        poll_interval INTEGER NOT NULL,
        last_polled_at INTEGER,
        redeemed_at INTEGER,
        notification_token TEXT
);
CREATE INDEX ciba_requests_expires ON ciba_requests (expires_at);
CREATE INDEX ciba_requests_grant ON ciba_requests (grant_id);
CREATE TABLE ciba_clients (
        agent_id TEXT PRIMARY KEY,
        mode TEXT NOT NULL,
        notification_endpoint TEXT NOT NULL,
        updated_at INTEGER NOT NULL
);
