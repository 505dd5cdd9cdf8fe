"""The numbered PostgreSQL migrations, each a list of statements run in one transaction."""

from __future__ import annotations

# Text compares byte-wise, as in SQLite: ids page and sort the same on every backend and locale.
T = 'TEXT COLLATE "C"'

# A deleted person's e-mail (migration 6): no person or agent has it, a registration URL was redeemed for it.
_GONE = """(NOT EXISTS (SELECT 1 FROM people p WHERE p.email = lower({email}))
            AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.email = lower({email}))
            AND EXISTS (SELECT 1 FROM registration_urls r WHERE r.email = lower({email}) AND r.used_at IS NOT NULL))"""

# Numbered migrations, each a list of statements run in one transaction. Never edit a released one.
MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (1, "signing keys, agents, challenges, grants, grant events, delegations, rate counters", [
        f"""CREATE TABLE signing_keys (
            kid {T} PRIMARY KEY,
            alg {T} NOT NULL,
            private_pem {T} NOT NULL,
            public_jwk {T} NOT NULL,
            created_at BIGINT NOT NULL,
            retired_at BIGINT,
            seq BIGSERIAL NOT NULL
        )""",
        f"""CREATE TABLE agents (
            agent_id {T} PRIMARY KEY,
            email {T} NOT NULL CONSTRAINT agents_email_key UNIQUE,
            name {T} NOT NULL,
            public_key {T} NOT NULL,
            key_id {T} NOT NULL CONSTRAINT agents_key_id_key UNIQUE,
            key_generation INTEGER NOT NULL DEFAULT 1,
            owner {T} NOT NULL,
            approver {T} NOT NULL,
            status {T} NOT NULL,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL
        )""",
        "CREATE INDEX agents_created ON agents (created_at DESC, agent_id DESC)",
        "CREATE INDEX agents_owner ON agents (owner)",
        "CREATE INDEX agents_approver ON agents (approver)",
        f"""CREATE TABLE challenges (
            challenge {T} PRIMARY KEY,
            agent_id {T} NOT NULL,
            expires_at BIGINT NOT NULL
        )""",
        "CREATE INDEX challenges_expires ON challenges (expires_at)",
        "CREATE INDEX challenges_agent ON challenges (agent_id)",
        f"""CREATE TABLE grants (
            id {T} PRIMARY KEY,
            type {T} NOT NULL,
            requester {T} NOT NULL,
            requester_id {T},
            request {T} NOT NULL,
            grant_type {T} NOT NULL,
            status {T} NOT NULL,
            created_at BIGINT NOT NULL,
            decided_by {T},
            decided_at BIGINT,
            expires_at BIGINT,
            used_at BIGINT,
            decision_reason {T},
            delegation_id {T},
            revoked_by {T},
            revoked_at BIGINT,
            reuse_key {T},
            version INTEGER NOT NULL DEFAULT 1
        )""",
        "CREATE INDEX grants_requester ON grants (requester, created_at DESC)",
        "CREATE INDEX grants_requester_id ON grants (requester_id, created_at DESC)",
        "CREATE INDEX grants_created ON grants (created_at DESC, id DESC)",
        "CREATE INDEX grants_status ON grants (status, created_at)",
        "CREATE INDEX grants_lapse ON grants (status, expires_at)",
        "CREATE INDEX grants_reuse ON grants (requester_id, reuse_key, status)",
        f"""CREATE TABLE grant_events (
            seq BIGSERIAL PRIMARY KEY,
            event {T} NOT NULL,
            grant_id {T} NOT NULL,
            requester {T} NOT NULL,
            grant_json {T} NOT NULL,
            created_at BIGINT NOT NULL
        )""",
        "CREATE INDEX grant_events_created ON grant_events (created_at)",
        f"""CREATE TABLE delegations (
            id {T} PRIMARY KEY,
            delegator {T} NOT NULL,
            delegate {T} NOT NULL,
            audience {T} NOT NULL,
            scopes {T} NOT NULL,
            approval {T} NOT NULL,
            duration BIGINT,
            created_at BIGINT NOT NULL,
            expires_at BIGINT,
            status {T} NOT NULL,
            revoked_at BIGINT,
            revoked_by {T}
        )""",
        "CREATE INDEX delegations_delegate ON delegations (delegate, audience, status)",
        "CREATE INDEX delegations_delegator ON delegations (delegator, created_at)",
        f"""CREATE TABLE rate_counters (
            key {T} NOT NULL,
            window_start BIGINT NOT NULL,
            count INTEGER NOT NULL,
            ends_at BIGINT NOT NULL,
            PRIMARY KEY (key, window_start)
        )""",
        "CREATE INDEX rate_counters_ends ON rate_counters (ends_at)",
    ]),
    (2, "people, passkeys, sessions, registration URLs, WebAuthn challenges", [
        # email_fold/name_fold: Python's casefold() of each, for a search that folds exactly as
        # every backend does whatever the database's locale (lower() under "C" is ASCII-only).
        f"""CREATE TABLE people (
            person_id {T} PRIMARY KEY,
            email {T} NOT NULL CONSTRAINT people_email_key UNIQUE,
            name {T} NOT NULL,
            admin BOOLEAN NOT NULL,
            status {T} NOT NULL,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            email_fold {T} NOT NULL,
            name_fold {T} NOT NULL
        )""",
        "CREATE INDEX people_created ON people (created_at DESC, person_id DESC)",
        f"""CREATE TABLE passkey_credentials (
            credential_id {T} PRIMARY KEY,
            person_id {T} NOT NULL,
            rp_id {T} NOT NULL,
            public_key {T} NOT NULL,
            sign_count BIGINT NOT NULL,
            transports {T} NOT NULL,
            aaguid {T} NOT NULL,
            name {T} NOT NULL,
            backed_up BOOLEAN NOT NULL,
            created_at BIGINT NOT NULL,
            last_used_at BIGINT
        )""",
        "CREATE INDEX passkey_credentials_person ON passkey_credentials (person_id, created_at)",
        f"""CREATE TABLE sessions (
            session_id {T} PRIMARY KEY,
            family_id {T} NOT NULL,
            person_id {T} NOT NULL,
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            last_seen_at BIGINT NOT NULL,
            user_agent {T} NOT NULL,
            revoked_at BIGINT
        )""",
        "CREATE INDEX sessions_family ON sessions (family_id)",
        "CREATE INDEX sessions_person ON sessions (person_id, created_at DESC)",
        "CREATE INDEX sessions_created ON sessions (created_at DESC, session_id DESC)",
        "CREATE INDEX sessions_expires ON sessions (expires_at)",
        f"""CREATE TABLE registration_urls (
            id {T} PRIMARY KEY,
            token_hash {T} NOT NULL CONSTRAINT registration_urls_token_hash_key UNIQUE,
            email {T} NOT NULL,
            admin BOOLEAN NOT NULL,
            purpose {T} NOT NULL,
            rp_id {T} NOT NULL,
            created_by {T} NOT NULL,
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            used_at BIGINT
        )""",
        "CREATE INDEX registration_urls_email ON registration_urls (email)",
        "CREATE INDEX registration_urls_created ON registration_urls (created_at DESC, id DESC)",
        f"""CREATE TABLE webauthn_challenges (
            challenge {T} PRIMARY KEY,
            purpose {T} NOT NULL,
            rp_id {T} NOT NULL,
            person_id {T},
            registration_id {T},
            expires_at BIGINT NOT NULL
        )""",
        "CREATE INDEX webauthn_challenges_expires ON webauthn_challenges (expires_at)",
        "CREATE INDEX webauthn_challenges_person ON webauthn_challenges (person_id)",
    ]),
    (3, "OAuth one-time records, refresh tokens, device codes, consents; guest sessions; keys per algorithm", [
        f"""CREATE TABLE oauth_onetime (
            kind {T} NOT NULL,
            key {T} NOT NULL,
            data {T} NOT NULL,
            expires_at BIGINT NOT NULL,
            PRIMARY KEY (kind, key)
        )""",
        "CREATE INDEX oauth_onetime_expires ON oauth_onetime (expires_at)",
        f"""CREATE TABLE refresh_tokens (
            token_hash {T} PRIMARY KEY,
            family_id {T} NOT NULL,
            client_id {T} NOT NULL,
            person_id {T} NOT NULL,
            scope {T} NOT NULL,
            auth_time BIGINT NOT NULL,
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            used_at BIGINT,
            revoked_at BIGINT
        )""",
        "CREATE INDEX refresh_tokens_family ON refresh_tokens (family_id)",
        "CREATE INDEX refresh_tokens_person ON refresh_tokens (person_id, client_id)",
        "CREATE INDEX refresh_tokens_expires ON refresh_tokens (expires_at)",
        f"""CREATE TABLE device_codes (
            device_code_hash {T} PRIMARY KEY,
            user_code {T} NOT NULL CONSTRAINT device_codes_user_code_key UNIQUE,
            client_id {T} NOT NULL,
            scope {T} NOT NULL,
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            "interval" INTEGER NOT NULL,
            last_polled_at BIGINT,
            status {T} NOT NULL,
            person_id {T},
            decided_at BIGINT
        )""",
        "CREATE INDEX device_codes_expires ON device_codes (expires_at)",
        f"""CREATE TABLE consents (
            person_id {T} NOT NULL,
            client_id {T} NOT NULL,
            scope {T} NOT NULL,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            PRIMARY KEY (person_id, client_id)
        )""",
        # guest sessions of SP login: no person here, the IdP that vouched and what it asserted
        "ALTER TABLE sessions ALTER COLUMN person_id DROP NOT NULL",
        f"ALTER TABLE sessions ADD COLUMN idp {T}",
        f"ALTER TABLE sessions ADD COLUMN email {T}",
        f"ALTER TABLE sessions ADD COLUMN name {T}",
        # D3: keys of several algorithms coexist; the active key is looked up per algorithm
        "CREATE INDEX signing_keys_alg ON signing_keys (alg, retired_at)",
    ]),
    (4, "device codes remember the client address that asked", [
        f"ALTER TABLE device_codes ADD COLUMN client_address {T}",  # D12: the /device page says where
    ]),
    (5, "the passkey that started each session", [
        # Issue 19: a session records the passkey that started it; deleting the passkey ends it.
        f"ALTER TABLE sessions ADD COLUMN credential_id {T}",
        "CREATE INDEX sessions_credential ON sessions (credential_id)",
    ]),
    (6, "owners and approvers bound to person ids; pending grants per requester", [
        # Issue 19 (D11): existing rows are bound to the persons their e-mails name today; e-mails
        # that name no person stay unbound until that person is created.
        f"ALTER TABLE agents ADD COLUMN owner_id {T}",
        f"ALTER TABLE agents ADD COLUMN approver_id {T}",
        "UPDATE agents SET owner_id = (SELECT person_id FROM people WHERE people.email = lower(agents.owner))",
        "UPDATE agents SET approver_id = (SELECT person_id FROM people WHERE people.email = lower(agents.approver))",
        # An e-mail that names no person now but redeemed a registration URL once was a person
        # deleted before this migration: a tombstone id (nobody's), and their delegations end.
        f"UPDATE agents SET owner_id = 'usr_deleted:' || owner WHERE owner_id IS NULL AND {_GONE.format(email='agents.owner')}",  # noqa: S608 - fixed names
        f"""UPDATE agents SET approver_id = 'usr_deleted:' || approver
            WHERE approver_id IS NULL AND {_GONE.format(email='agents.approver')}""",  # noqa: S608 - fixed names
        f"""UPDATE delegations SET status = 'revoked', revoked_by = 'grantd migration 6',
                revoked_at = (extract(epoch from clock_timestamp()) * 1000)::bigint
            WHERE status = 'active' AND ({_GONE.format(email='delegations.delegator')}
                                         OR {_GONE.format(email='delegations.delegate')})""",  # noqa: S608 - fixed names
        "CREATE INDEX agents_owner_id ON agents (owner_id)",
        "CREATE INDEX agents_approver_id ON agents (approver_id)",
        "CREATE INDEX grants_pending_requester ON grants (requester_id) WHERE status = 'pending'",
    ]),
]
