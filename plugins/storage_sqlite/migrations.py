"""The numbered SQLite migrations. Never edit a released one: add the next number."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # sqlite-utils runs the migrations only; a server process on a current schema never imports it
    # (4.5 MiB per process, issue 14).
    import sqlite_utils



def _now_ms() -> int:
    return int(time.time() * 1000)


# Numbered migrations. Never edit a released one: add the next number.
def _m1_core(db: sqlite_utils.Database) -> None:
    db.execute(
        """CREATE TABLE signing_keys (
            kid TEXT PRIMARY KEY,
            alg TEXT NOT NULL,
            private_pem TEXT NOT NULL,
            public_jwk TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            retired_at INTEGER
        )"""
    )
    db.execute(
        """CREATE TABLE agents (
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
        )"""
    )
    db.execute(
        """CREATE TABLE challenges (
            challenge TEXT PRIMARY KEY,
            agent_id TEXT NOT NULL,
            expires_at INTEGER NOT NULL
        )"""
    )
    db.execute("CREATE INDEX challenges_expires ON challenges (expires_at)")


def _m2_grants(db: sqlite_utils.Database) -> None:
    # `request` is the JSON of the grant request as stored (server-computed cmd_hash included);
    # `reuse_key` is the digest of what makes two timed/always requests "the same" (D6);
    # `version` grows on every change and feeds the strong ETag.
    db.execute(
        """CREATE TABLE grants (
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
        )"""
    )
    db.execute("CREATE INDEX grants_requester ON grants (requester, created_at DESC)")
    db.execute("CREATE INDEX grants_created ON grants (created_at DESC, id DESC)")
    db.execute("CREATE INDEX grants_status ON grants (status, created_at)")
    db.execute("CREATE INDEX grants_lapse ON grants (status, expires_at)")
    db.execute("CREATE INDEX grants_reuse ON grants (requester, reuse_key, status)")
    # Every change of a grant, in commit order: the source of the event stream for all processes.
    db.execute(
        """CREATE TABLE grant_events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            event TEXT NOT NULL,
            grant_id TEXT NOT NULL,
            requester TEXT NOT NULL,
            grant_json TEXT NOT NULL,
            created_at INTEGER NOT NULL
        )"""
    )
    db.execute("CREATE INDEX grant_events_created ON grant_events (created_at)")
    db.execute(
        """CREATE TABLE delegations (
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
        )"""
    )
    db.execute("CREATE INDEX delegations_delegate ON delegations (delegate, audience, status)")
    db.execute("CREATE INDEX delegations_delegator ON delegations (delegator, created_at)")


def _m3_principals(db: sqlite_utils.Database) -> None:
    # D11: an identity token carries the agent's key generation; grants name their requester by a
    # stable id (the agent_id of an agent, else the person's e-mail) that survives re-enrolment.
    db.execute("ALTER TABLE agents ADD COLUMN key_generation INTEGER NOT NULL DEFAULT 1")
    db.execute("CREATE INDEX agents_created ON agents (created_at DESC, agent_id DESC)")
    db.execute("CREATE INDEX agents_owner ON agents (owner)")
    db.execute("CREATE INDEX agents_approver ON agents (approver)")
    db.execute("ALTER TABLE grants ADD COLUMN requester_id TEXT")
    db.execute(
        """UPDATE grants SET requester_id = coalesce(
               (SELECT agent_id FROM agents WHERE agents.email = grants.requester), requester)"""
    )
    db.execute("CREATE INDEX grants_requester_id ON grants (requester_id, created_at DESC)")
    db.execute("DROP INDEX grants_reuse")
    db.execute("CREATE INDEX grants_reuse ON grants (requester_id, reuse_key, status)")
    # D12: a retired key only verifies; its private half is deleted.
    db.execute("UPDATE signing_keys SET private_pem = '' WHERE retired_at IS NOT NULL")


def _m4_rate_counters(db: sqlite_utils.Database) -> None:
    # D12: abuse-limit counters shared by every process; one row per (key, fixed window). The
    # index on the window's end lets each hit drop ended windows with an index range.
    db.execute(
        """CREATE TABLE rate_counters (
            key TEXT NOT NULL,
            window_start INTEGER NOT NULL,
            count INTEGER NOT NULL,
            ends_at INTEGER NOT NULL,
            PRIMARY KEY (key, window_start)
        ) WITHOUT ROWID"""
    )
    db.execute("CREATE INDEX rate_counters_ends ON rate_counters (ends_at)")


def _m5_people(db: sqlite_utils.Database) -> None:
    # Issue "People": persons (e-mails unique across persons and agents, D11, checked by both
    # inserts), their passkeys, server-side sessions, registration URLs and WebAuthn challenges.
    db.execute(
        """CREATE TABLE people (
            person_id TEXT PRIMARY KEY,
            email TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            admin INTEGER NOT NULL,
            status TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )"""
    )
    db.execute("CREATE INDEX people_created ON people (created_at DESC, person_id DESC)")
    db.execute(
        """CREATE TABLE passkey_credentials (
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
        )"""
    )
    db.execute("CREATE INDEX passkey_credentials_person ON passkey_credentials (person_id, created_at)")
    db.execute(
        """CREATE TABLE sessions (
            session_id TEXT PRIMARY KEY,
            family_id TEXT NOT NULL,
            person_id TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            last_seen_at INTEGER NOT NULL,
            user_agent TEXT NOT NULL,
            revoked_at INTEGER
        )"""
    )
    db.execute("CREATE INDEX sessions_family ON sessions (family_id)")
    db.execute("CREATE INDEX sessions_person ON sessions (person_id, created_at DESC)")
    db.execute("CREATE INDEX sessions_created ON sessions (created_at DESC, session_id DESC)")
    db.execute("CREATE INDEX sessions_expires ON sessions (expires_at)")
    db.execute(
        """CREATE TABLE registration_urls (
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
        )"""
    )
    db.execute("CREATE INDEX registration_urls_email ON registration_urls (email)")
    db.execute("CREATE INDEX registration_urls_created ON registration_urls (created_at DESC, id DESC)")
    db.execute(
        """CREATE TABLE webauthn_challenges (
            challenge TEXT PRIMARY KEY,
            purpose TEXT NOT NULL,
            rp_id TEXT NOT NULL,
            person_id TEXT,
            registration_id TEXT,
            expires_at INTEGER NOT NULL
        )"""
    )
    db.execute("CREATE INDEX webauthn_challenges_expires ON webauthn_challenges (expires_at)")
    db.execute("CREATE INDEX webauthn_challenges_person ON webauthn_challenges (person_id)")


def _m6_oauth(db: sqlite_utils.Database) -> None:
    # Issue "OAuth": one-time records (codes, flow states, used assertion ids), refresh-token
    # families, device codes, remembered consent; guest sessions of SP login (person_id NULL, idp,
    # email, name). SQLite cannot make a column nullable: sessions is rebuilt (the documented
    # 12-step way, inside the migration's transaction), keeping its rows and indexes.
    db.execute(
        """CREATE TABLE oauth_onetime (
            kind TEXT NOT NULL,
            key TEXT NOT NULL,
            data TEXT NOT NULL,
            expires_at INTEGER NOT NULL,
            PRIMARY KEY (kind, key)
        ) WITHOUT ROWID"""
    )
    db.execute("CREATE INDEX oauth_onetime_expires ON oauth_onetime (expires_at)")
    db.execute(
        """CREATE TABLE refresh_tokens (
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
        )"""
    )
    db.execute("CREATE INDEX refresh_tokens_family ON refresh_tokens (family_id)")
    db.execute("CREATE INDEX refresh_tokens_person ON refresh_tokens (person_id, client_id)")
    db.execute("CREATE INDEX refresh_tokens_expires ON refresh_tokens (expires_at)")
    db.execute(
        """CREATE TABLE device_codes (
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
        )"""
    )
    db.execute("CREATE INDEX device_codes_expires ON device_codes (expires_at)")
    db.execute(
        """CREATE TABLE consents (
            person_id TEXT NOT NULL,
            client_id TEXT NOT NULL,
            scope TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            PRIMARY KEY (person_id, client_id)
        ) WITHOUT ROWID"""
    )
    db.execute(
        """CREATE TABLE sessions_new (
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
        )"""
    )
    db.execute(
        """INSERT INTO sessions_new (session_id, family_id, person_id, created_at, expires_at, last_seen_at,
                                     user_agent, revoked_at)
           SELECT session_id, family_id, person_id, created_at, expires_at, last_seen_at, user_agent, revoked_at
           FROM sessions"""
    )
    db.execute("DROP TABLE sessions")
    db.execute("ALTER TABLE sessions_new RENAME TO sessions")
    db.execute("CREATE INDEX sessions_family ON sessions (family_id)")
    db.execute("CREATE INDEX sessions_person ON sessions (person_id, created_at DESC)")
    db.execute("CREATE INDEX sessions_created ON sessions (created_at DESC, session_id DESC)")
    db.execute("CREATE INDEX sessions_expires ON sessions (expires_at)")
    # D3: keys of several algorithms coexist; the active key is looked up per algorithm.
    db.execute("CREATE INDEX signing_keys_alg ON signing_keys (alg, retired_at, created_at)")


def _m7_device_address(db: sqlite_utils.Database) -> None:
    # D12: the /device page says where a device sign-in came from.
    db.execute("ALTER TABLE device_codes ADD COLUMN client_address TEXT")


def _m8_session_credentials(db: sqlite_utils.Database) -> None:
    # Issue 19: a session records the passkey that started it; deleting the passkey ends it.
    db.execute("ALTER TABLE sessions ADD COLUMN credential_id TEXT")
    db.execute("CREATE INDEX sessions_credential ON sessions (credential_id)")


# A deleted person's e-mail (migration 9): no person or agent has it, a registration URL was redeemed for it.
_GONE = """(NOT EXISTS (SELECT 1 FROM people p WHERE p.email = lower({email}))
            AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.email = lower({email}))
            AND EXISTS (SELECT 1 FROM registration_urls r WHERE r.email = lower({email}) AND r.used_at IS NOT NULL))"""


def _m9_bound_parties(db: sqlite_utils.Database) -> None:
    # Issue 19 (D11): owners and approvers are bound to the person's id, not the e-mail. Existing
    # rows are bound to the persons their e-mails name today (lowercase, as stored); e-mails that
    # name no person stay unbound until that person is created. Pending grants are counted per
    # owner (pending_per_owner): a partial index keeps the count to the pending rows.
    db.execute("ALTER TABLE agents ADD COLUMN owner_id TEXT")
    db.execute("ALTER TABLE agents ADD COLUMN approver_id TEXT")
    db.execute("UPDATE agents SET owner_id = (SELECT person_id FROM people WHERE people.email = lower(agents.owner))")
    db.execute("UPDATE agents SET approver_id = (SELECT person_id FROM people WHERE people.email = lower(agents.approver))")
    # An e-mail that names no person now but redeemed a registration URL once was a person who was
    # deleted before this migration: bind it to a tombstone id (nobody's), and end the delegations
    # that still name that person, so nobody created later with the e-mail inherits them.
    for party in ("owner", "approver"):
        db.execute(
            f"""UPDATE agents SET {party}_id = 'usr_deleted:' || {party}
                WHERE {party}_id IS NULL AND {_GONE.format(email=f"agents.{party}")}"""  # noqa: S608 - fixed names
        )
    db.execute(
        f"""UPDATE delegations SET status = 'revoked', revoked_by = 'grantd migration 9', revoked_at = ?
            WHERE status = 'active' AND ({_GONE.format(email="delegations.delegator")}
                                         OR {_GONE.format(email="delegations.delegate")})""",  # noqa: S608 - fixed names
        [_now_ms()],
    )
    db.execute("CREATE INDEX agents_owner_id ON agents (owner_id)")
    db.execute("CREATE INDEX agents_approver_id ON agents (approver_id)")
    db.execute("CREATE INDEX grants_pending_requester ON grants (requester_id) WHERE status = 'pending'")


MIGRATIONS: list[tuple[int, str, Callable[[sqlite_utils.Database], None]]] = [
    (1, "signing keys, agents, challenges", _m1_core),
    (2, "grants, grant events, delegations", _m2_grants),
    (3, "key generation, requester ids, agent paging, retired keys without private keys", _m3_principals),
    (4, "rate counters", _m4_rate_counters),
    (5, "people, passkeys, sessions, registration URLs, WebAuthn challenges", _m5_people),
    (6, "OAuth one-time records, refresh tokens, device codes, consents; guest sessions; keys per algorithm", _m6_oauth),
    (7, "device codes remember the client address that asked", _m7_device_address),
    (8, "the passkey that started each session", _m8_session_credentials),
    (9, "owners and approvers bound to person ids; pending grants per requester", _m9_bound_parties),
]
