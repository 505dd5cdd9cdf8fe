-- 1: signing keys, agents, challenges
CREATE TABLE signing_keys (
        kid TEXT PRIMARY KEY,
        alg TEXT NOT NULL,
        private_pem TEXT NOT NULL,
        public_jwk TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        retired_at INTEGER
);
CREATE TABLE agents (
        agent_id TEXT PRIMARY KEY,
        email TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        public_key TEXT NOT NULL,
        key_id TEXT NOT NULL UNIQUE,
        owner TEXT NOT NULL,
        approver TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
);
CREATE TABLE challenges (
        challenge TEXT PRIMARY KEY,
        agent_id TEXT NOT NULL,
        expires_at INTEGER NOT NULL
);
CREATE INDEX challenges_expires ON challenges (expires_at);
