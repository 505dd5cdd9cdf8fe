-- 1: signing keys, agents, challenges, grants, grant events, delegations, rate counters
CREATE TABLE signing_keys (
        kid TEXT COLLATE "C" PRIMARY KEY,
        alg TEXT COLLATE "C" NOT NULL,
        private_pem TEXT COLLATE "C" NOT NULL,
        public_jwk TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL,
        retired_at BIGINT,
        seq BIGSERIAL NOT NULL
);
CREATE TABLE agents (
        agent_id TEXT COLLATE "C" PRIMARY KEY,
        email TEXT COLLATE "C" NOT NULL CONSTRAINT agents_email_key UNIQUE,
        name TEXT COLLATE "C" NOT NULL,
        public_key TEXT COLLATE "C" NOT NULL,
        key_id TEXT COLLATE "C" NOT NULL CONSTRAINT agents_key_id_key UNIQUE,
        key_generation INTEGER NOT NULL DEFAULT 1,
        owner TEXT COLLATE "C" NOT NULL,
        approver TEXT COLLATE "C" NOT NULL,
        status TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
);
CREATE INDEX agents_created ON agents (created_at DESC, agent_id DESC);
CREATE INDEX agents_owner ON agents (owner);
CREATE INDEX agents_approver ON agents (approver);
CREATE TABLE challenges (
        challenge TEXT COLLATE "C" PRIMARY KEY,
        agent_id TEXT COLLATE "C" NOT NULL,
        expires_at BIGINT NOT NULL
);
CREATE INDEX challenges_expires ON challenges (expires_at);
CREATE INDEX challenges_agent ON challenges (agent_id);
CREATE TABLE grants (
        id TEXT COLLATE "C" PRIMARY KEY,
        type TEXT COLLATE "C" NOT NULL,
        requester TEXT COLLATE "C" NOT NULL,
        requester_id TEXT COLLATE "C",
        request TEXT COLLATE "C" NOT NULL,
        grant_type TEXT COLLATE "C" NOT NULL,
        status TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL,
        decided_by TEXT COLLATE "C",
        decided_at BIGINT,
        expires_at BIGINT,
        used_at BIGINT,
        decision_reason TEXT COLLATE "C",
        delegation_id TEXT COLLATE "C",
        revoked_by TEXT COLLATE "C",
        revoked_at BIGINT,
        reuse_key TEXT COLLATE "C",
        version INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX grants_requester ON grants (requester, created_at DESC);
CREATE INDEX grants_requester_id ON grants (requester_id, created_at DESC);
CREATE INDEX grants_created ON grants (created_at DESC, id DESC);
CREATE INDEX grants_status ON grants (status, created_at);
CREATE INDEX grants_lapse ON grants (status, expires_at);
CREATE INDEX grants_reuse ON grants (requester_id, reuse_key, status);
CREATE TABLE grant_events (
        seq BIGSERIAL PRIMARY KEY,
        event TEXT COLLATE "C" NOT NULL,
        grant_id TEXT COLLATE "C" NOT NULL,
        requester TEXT COLLATE "C" NOT NULL,
        grant_json TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL
);
CREATE INDEX grant_events_created ON grant_events (created_at);
CREATE TABLE delegations (
        id TEXT COLLATE "C" PRIMARY KEY,
        delegator TEXT COLLATE "C" NOT NULL,
        delegate TEXT COLLATE "C" NOT NULL,
        audience TEXT COLLATE "C" NOT NULL,
        scopes TEXT COLLATE "C" NOT NULL,
        approval TEXT COLLATE "C" NOT NULL,
        duration BIGINT,
        created_at BIGINT NOT NULL,
        expires_at BIGINT,
        status TEXT COLLATE "C" NOT NULL,
        revoked_at BIGINT,
        revoked_by TEXT COLLATE "C"
);
CREATE INDEX delegations_delegate ON delegations (delegate, audience, status);
CREATE INDEX delegations_delegator ON delegations (delegator, created_at);
CREATE TABLE rate_counters (
        key TEXT COLLATE "C" NOT NULL,
        window_start BIGINT NOT NULL,
        count INTEGER NOT NULL,
        ends_at BIGINT NOT NULL,
        PRIMARY KEY (key, window_start)
);
CREATE INDEX rate_counters_ends ON rate_counters (ends_at);
