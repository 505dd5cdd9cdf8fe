-- 6: OAuth one-time records, refresh tokens, device codes, consents; guest sessions; keys per algorithm
-- Issue "OAuth": one-time records (codes, flow states, used assertion ids), refresh-token
-- families, device codes, remembered consent; guest sessions of SP login (person_id NULL, idp,
-- email, name). SQLite cannot make a column nullable: sessions is rebuilt (the documented
-- 12-step way, inside the migration's transaction), keeping its rows and indexes.
CREATE TABLE oauth_onetime (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        data TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (kind, key)
) WITHOUT ROWID;
CREATE INDEX oauth_onetime_expires ON oauth_onetime (expires_at);
CREATE TABLE refresh_tokens (
        token_hash TEXT PRIMARY KEY,
        family_id TEXT NOT NULL,
        client_id TEXT NOT NULL,
        person_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        auth_time INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        used_at INTEGER,
        revoked_at INTEGER
);
CREATE INDEX refresh_tokens_family ON refresh_tokens (family_id);
CREATE INDEX refresh_tokens_person ON refresh_tokens (person_id, client_id);
CREATE INDEX refresh_tokens_expires ON refresh_tokens (expires_at);
CREATE TABLE device_codes (
        device_code_hash TEXT PRIMARY KEY,
        user_code TEXT NOT NULL UNIQUE,
        client_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        interval INTEGER NOT NULL,
        last_polled_at INTEGER,
        status TEXT NOT NULL,
        person_id TEXT,
        decided_at INTEGER
);
CREATE INDEX device_codes_expires ON device_codes (expires_at);
CREATE TABLE consents (
        person_id TEXT NOT NULL,
        client_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (person_id, client_id)
) WITHOUT ROWID;
CREATE TABLE sessions_new (
        session_id TEXT PRIMARY KEY,
        family_id TEXT NOT NULL,
        person_id TEXT,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        last_seen_at INTEGER NOT NULL,
        user_agent TEXT NOT NULL,
        revoked_at INTEGER,
        idp TEXT,
        email TEXT,
        name TEXT
);
INSERT INTO sessions_new (session_id, family_id, person_id, created_at, expires_at, last_seen_at,
                              user_agent, revoked_at)
    SELECT session_id, family_id, person_id, created_at, expires_at, last_seen_at, user_agent, revoked_at
    FROM sessions;
DROP TABLE sessions;
ALTER TABLE sessions_new RENAME TO sessions;
CREATE INDEX sessions_family ON sessions (family_id);
CREATE INDEX sessions_person ON sessions (person_id, created_at DESC);
CREATE INDEX sessions_created ON sessions (created_at DESC, session_id DESC);
CREATE INDEX sessions_expires ON sessions (expires_at);
-- D3: keys of several algorithms coexist; the active key is looked up per algorithm.
CREATE INDEX signing_keys_alg ON signing_keys (alg, retired_at, created_at);
