-- 3: OAuth one-time records, refresh tokens, device codes, consents; guest sessions; keys per algorithm
CREATE TABLE oauth_onetime (
        kind TEXT COLLATE "C" NOT NULL,
        key TEXT COLLATE "C" NOT NULL,
        data TEXT COLLATE "C" NOT NULL,
        expires_at BIGINT NOT NULL,
        PRIMARY KEY (kind, key)
);
CREATE INDEX oauth_onetime_expires ON oauth_onetime (expires_at);
CREATE TABLE refresh_tokens (
        token_hash TEXT COLLATE "C" PRIMARY KEY,
        family_id TEXT COLLATE "C" NOT NULL,
        client_id TEXT COLLATE "C" NOT NULL,
        person_id TEXT COLLATE "C" NOT NULL,
        scope TEXT COLLATE "C" NOT NULL,
        auth_time BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        used_at BIGINT,
        revoked_at BIGINT
);
CREATE INDEX refresh_tokens_family ON refresh_tokens (family_id);
CREATE INDEX refresh_tokens_person ON refresh_tokens (person_id, client_id);
CREATE INDEX refresh_tokens_expires ON refresh_tokens (expires_at);
CREATE TABLE device_codes (
        device_code_hash TEXT COLLATE "C" PRIMARY KEY,
        user_code TEXT COLLATE "C" NOT NULL CONSTRAINT device_codes_user_code_key UNIQUE,
        client_id TEXT COLLATE "C" NOT NULL,
        scope TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        "interval" INTEGER NOT NULL,
        last_polled_at BIGINT,
        status TEXT COLLATE "C" NOT NULL,
        person_id TEXT COLLATE "C",
        decided_at BIGINT
);
CREATE INDEX device_codes_expires ON device_codes (expires_at);
CREATE TABLE consents (
        person_id TEXT COLLATE "C" NOT NULL,
        client_id TEXT COLLATE "C" NOT NULL,
        scope TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        PRIMARY KEY (person_id, client_id)
);
-- guest sessions of SP login: no person here, the IdP that vouched and what it asserted
ALTER TABLE sessions ALTER COLUMN person_id DROP NOT NULL;
ALTER TABLE sessions ADD COLUMN idp TEXT COLLATE "C";
ALTER TABLE sessions ADD COLUMN email TEXT COLLATE "C";
ALTER TABLE sessions ADD COLUMN name TEXT COLLATE "C";
-- D3: keys of several algorithms coexist; the active key is looked up per algorithm
CREATE INDEX signing_keys_alg ON signing_keys (alg, retired_at);
