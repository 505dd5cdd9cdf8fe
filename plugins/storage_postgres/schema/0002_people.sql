-- 2: people, passkeys, sessions, registration URLs, WebAuthn challenges
-- email_fold/name_fold: Python's casefold() of each, for a search that folds exactly as
-- every backend does whatever the database's locale (lower() under "C" is ASCII-only).
CREATE TABLE people (
        person_id TEXT COLLATE "C" PRIMARY KEY,
        email TEXT COLLATE "C" NOT NULL CONSTRAINT people_email_key UNIQUE,
        name TEXT COLLATE "C" NOT NULL,
        admin BOOLEAN NOT NULL,
        status TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        email_fold TEXT COLLATE "C" NOT NULL,
        name_fold TEXT COLLATE "C" NOT NULL
);
CREATE INDEX people_created ON people (created_at DESC, person_id DESC);
CREATE TABLE passkey_credentials (
        credential_id TEXT COLLATE "C" PRIMARY KEY,
        person_id TEXT COLLATE "C" NOT NULL,
        rp_id TEXT COLLATE "C" NOT NULL,
        public_key TEXT COLLATE "C" NOT NULL,
        sign_count BIGINT NOT NULL,
        transports TEXT COLLATE "C" NOT NULL,
        aaguid TEXT COLLATE "C" NOT NULL,
        name TEXT COLLATE "C" NOT NULL,
        backed_up BOOLEAN NOT NULL,
        created_at BIGINT NOT NULL,
        last_used_at BIGINT
);
CREATE INDEX passkey_credentials_person ON passkey_credentials (person_id, created_at);
CREATE TABLE sessions (
        session_id TEXT COLLATE "C" PRIMARY KEY,
        family_id TEXT COLLATE "C" NOT NULL,
        person_id TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        last_seen_at BIGINT NOT NULL,
        user_agent TEXT COLLATE "C" NOT NULL,
        revoked_at BIGINT
);
CREATE INDEX sessions_family ON sessions (family_id);
CREATE INDEX sessions_person ON sessions (person_id, created_at DESC);
CREATE INDEX sessions_created ON sessions (created_at DESC, session_id DESC);
CREATE INDEX sessions_expires ON sessions (expires_at);
CREATE TABLE registration_urls (
        id TEXT COLLATE "C" PRIMARY KEY,
        token_hash TEXT COLLATE "C" NOT NULL CONSTRAINT registration_urls_token_hash_key UNIQUE,
        email TEXT COLLATE "C" NOT NULL,
        admin BOOLEAN NOT NULL,
        purpose TEXT COLLATE "C" NOT NULL,
        rp_id TEXT COLLATE "C" NOT NULL,
        created_by TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        used_at BIGINT
);
CREATE INDEX registration_urls_email ON registration_urls (email);
CREATE INDEX registration_urls_created ON registration_urls (created_at DESC, id DESC);
CREATE TABLE webauthn_challenges (
        challenge TEXT COLLATE "C" PRIMARY KEY,
        purpose TEXT COLLATE "C" NOT NULL,
        rp_id TEXT COLLATE "C" NOT NULL,
        person_id TEXT COLLATE "C",
        registration_id TEXT COLLATE "C",
        expires_at BIGINT NOT NULL
);
CREATE INDEX webauthn_challenges_expires ON webauthn_challenges (expires_at);
CREATE INDEX webauthn_challenges_person ON webauthn_challenges (person_id);
