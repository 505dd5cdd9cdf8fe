-- 2: grants, grant events, delegations
-- `request` is the JSON of the grant request as stored (server-computed cmd_hash included);
-- `reuse_key` is the digest of what makes two timed/always requests "the same" (D6);
-- `version` grows on every change and feeds the strong ETag.
CREATE TABLE grants (
        id TEXT PRIMARY KEY,
        type TEXT NOT NULL,
        requester TEXT NOT NULL,
        request TEXT NOT NULL,
        grant_type TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        decided_by TEXT,
        decided_at INTEGER,
        expires_at INTEGER,
        used_at INTEGER,
        decision_reason TEXT,
        delegation_id TEXT,
        revoked_by TEXT,
        revoked_at INTEGER,
        reuse_key TEXT,
        version INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX grants_requester ON grants (requester, created_at DESC);
CREATE INDEX grants_created ON grants (created_at DESC, id DESC);
CREATE INDEX grants_status ON grants (status, created_at);
CREATE INDEX grants_lapse ON grants (status, expires_at);
CREATE INDEX grants_reuse ON grants (requester, reuse_key, status);
-- Every change of a grant, in commit order: the source of the event stream for all processes.
CREATE TABLE grant_events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        event TEXT NOT NULL,
        grant_id TEXT NOT NULL,
        requester TEXT NOT NULL,
        grant_json TEXT NOT NULL,
        created_at INTEGER NOT NULL
);
CREATE INDEX grant_events_created ON grant_events (created_at);
CREATE TABLE delegations (
        id TEXT PRIMARY KEY,
        delegator TEXT NOT NULL,
        delegate TEXT NOT NULL,
        audience TEXT NOT NULL,
        scopes TEXT NOT NULL,
        approval TEXT NOT NULL,
        duration INTEGER,
        created_at INTEGER NOT NULL,
        expires_at INTEGER,
        status TEXT NOT NULL,
        revoked_at INTEGER,
        revoked_by TEXT
);
CREATE INDEX delegations_delegate ON delegations (delegate, audience, status);
CREATE INDEX delegations_delegator ON delegations (delegator, created_at);
