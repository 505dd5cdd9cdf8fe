-- 10: CIBA requests and agents' ping settings
-- D16 / issue 25: a backchannel authentication request (the SHA-256 of its auth_req_id) maps to the
-- grant it created; polled, slowed down, redeemed once. An agent in ping mode has its endpoint here.
CREATE TABLE ciba_requests (
        auth_req_hash TEXT COLLATE "C" PRIMARY KEY,
        grant_id TEXT COLLATE "C" NOT NULL,
        agent_id TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        poll_interval INTEGER NOT NULL,
        last_polled_at BIGINT,
        redeemed_at BIGINT,
        notification_token TEXT COLLATE "C"
);
CREATE INDEX ciba_requests_expires ON ciba_requests (expires_at);
CREATE INDEX ciba_requests_grant ON ciba_requests (grant_id);
CREATE TABLE ciba_clients (
        agent_id TEXT COLLATE "C" PRIMARY KEY,
        mode TEXT COLLATE "C" NOT NULL,
        notification_endpoint TEXT COLLATE "C" NOT NULL,
        updated_at BIGINT NOT NULL
);
