-- 5: people, passkeys, sessions, registration URLs, WebAuthn challenges
-- Issue "People": persons (e-mails unique across persons and agents, D11, checked by both
-- inserts), their passkeys, server-side sessions, registration URLs and WebAuthn challenges.
CREATE TABLE people (
        person_id TEXT PRIMARY KEY,
        email TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        admin INTEGER NOT NULL,
        status TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
);
CREATE INDEX people_created ON people (created_at DESC, person_id DESC);
CREATE TABLE passkey_credentials (
        credential_id TEXT PRIMARY KEY,
        person_id TEXT NOT NULL,
        rp_id TEXT NOT NULL,
        public_key TEXT NOT NULL,
        sign_count INTEGER NOT NULL,
        transports TEXT NOT NULL,
        aaguid TEXT NOT NULL,
        name TEXT NOT NULL,
        backed_up INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        last_used_at INTEGER
);
CREATE INDEX passkey_credentials_person ON passkey_credentials (person_id, created_at);
CREATE TABLE sessions (
        session_id TEXT PRIMARY KEY,
        family_id TEXT NOT NULL,
        person_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        last_seen_at INTEGER NOT NULL,
        user_agent TEXT NOT NULL,
        revoked_at INTEGER
);
CREATE INDEX sessions_family ON sessions (family_id);
CREATE INDEX sessions_person ON sessions (person_id, created_at DESC);
CREATE INDEX sessions_created ON sessions (created_at DESC, session_id DESC);
CREATE INDEX sessions_expires ON sessions (expires_at);
CREATE TABLE registration_urls (
        id TEXT PRIMARY KEY,
        token_hash TEXT NOT NULL UNIQUE,
        email TEXT NOT NULL,
        admin INTEGER NOT NULL,
        purpose TEXT NOT NULL,
        rp_id TEXT NOT NULL,
        created_by TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        used_at INTEGER
);
CREATE INDEX registration_urls_email ON registration_urls (email);
CREATE INDEX registration_urls_created ON registration_urls (created_at DESC, id DESC);
CREATE TABLE webauthn_challenges (
        challenge TEXT PRIMARY KEY,
        purpose TEXT NOT NULL,
        rp_id TEXT NOT NULL,
        person_id TEXT,
        registration_id TEXT,
        expires_at INTEGER NOT NULL
);
CREATE INDEX webauthn_challenges_expires ON webauthn_challenges (expires_at);
CREATE INDEX webauthn_challenges_person ON webauthn_challenges (person_id);
