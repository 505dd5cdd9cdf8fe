"""Persons, passkeys, sessions, registration URLs, WebAuthn challenges on SQLite (``grantd.store.people``)."""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Sequence
from typing import Any, cast

from grantd.core.lifecycle import Lapse
from grantd.core.paging import PageRequest
from grantd.store import Conflict
from grantd.store.records import (
    CREDENTIAL_COLUMNS,
    GRANT_COLUMNS,
    PERSON_CHANGEABLE,
    PERSON_COLUMNS,
    REGISTRATION_COLUMNS,
    SESSION_COLUMNS,
    WEBAUTHN_CHALLENGE_COLUMNS,
    Grant,
    PasskeyCredential,
    Person,
    RegistrationUrl,
    Session,
    WebAuthnChallenge,
)
from grantd.store.rows import credential_row, grant_row, page_rows, person_row, registration_row, to_json
from grantd.store.sql import after_sql, not_lapsed_sql
from grantd.store.tlog import credential_event

from .connection import _Database, _insert, fold
from .grants import _record_event
from .tlog import _record


def _person_id_of(conn: sqlite3.Connection, email: Any) -> str | None:
    """The person an owner/approver e-mail names now (D11), in the caller's transaction."""
    if not email:
        return None
    found = conn.execute("SELECT person_id FROM people WHERE email = ?", (str(email).lower(),)).fetchone()
    return str(found[0]) if found else None


def _insert_person(conn: sqlite3.Connection, person: Person, *, unnamed: bool = False) -> Person:
    """In the caller's transaction: an e-mail is unique across persons and agents (D11); agents that
    name the e-mail without an id are bound to the new person, or with ``unnamed`` any naming
    refuses the insert (``Conflict("named")``)."""
    row: dict[str, Any] = {c: person.get(c) for c in PERSON_COLUMNS}
    row["email"] = str(row["email"]).lower()
    row["admin"] = bool(row["admin"])
    if conn.execute("SELECT 1 FROM agents WHERE email = ?", (row["email"],)).fetchone():
        raise Conflict("email")
    if (
        unnamed
        and conn.execute(
            """SELECT 1 FROM agents WHERE owner = :email OR approver = :email
           UNION ALL SELECT 1 FROM delegations WHERE status = 'active' AND (delegator = :email OR delegate = :email)
           LIMIT 1""",
            {"email": row["email"]},
        ).fetchone()
    ):
        raise Conflict("named")
    try:
        _insert(conn, "people", PERSON_COLUMNS, row)
    except sqlite3.IntegrityError as exc:
        raise Conflict("email" if "people.email" in str(exc) else "id") from None
    for party in ("owner", "approver"):
        conn.execute(
            f"UPDATE agents SET {party}_id = ? WHERE {party} = ? AND {party}_id IS NULL",  # noqa: S608 - fixed names
            (row["person_id"], row["email"]),
        )
    return cast(Person, row)


def _insert_credential(conn: sqlite3.Connection, credential: PasskeyCredential) -> PasskeyCredential:
    row: dict[str, Any] = {c: credential.get(c) for c in CREDENTIAL_COLUMNS}
    row["transports"] = list(row["transports"] or [])
    row["backed_up"] = bool(row["backed_up"])
    try:
        _insert(
            conn, "passkey_credentials", CREDENTIAL_COLUMNS, {**row, "transports": to_json(row["transports"])}
        )
    except sqlite3.IntegrityError:
        raise Conflict("credential_id") from None
    owner = conn.execute("SELECT email FROM people WHERE person_id = ?", (row["person_id"],)).fetchone()
    _record(conn, credential_event(row, owner[0] if owner else None))
    return cast(PasskeyCredential, row)


GET_MANY_CHUNK = 500  # e-mails per statement: well under SQLite's bound on parameters (999 before 3.32)


class SQLitePeople:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, person: Person, *, unnamed: bool = False) -> Person:
        async with self._db.awrite() as conn:
            return _insert_person(conn, person, unnamed=unnamed)

    async def get(self, ident: str) -> Person | None:
        row = self._db.one("SELECT * FROM people WHERE person_id = ? OR email = ?", (ident, ident.lower()))
        return person_row(row) if row else None

    async def get_many(self, emails: Sequence[str]) -> dict[str, Person]:
        wanted = sorted({e.lower() for e in emails})
        found: dict[str, Person] = {}
        for at in range(0, len(wanted), GET_MANY_CHUNK):
            chunk = wanted[at : at + GET_MANY_CHUNK]
            rows = self._db.all(
                f"SELECT * FROM people WHERE email IN ({', '.join('?' * len(chunk))})",  # noqa: S608 - placeholders only
                chunk,
            )
            found.update((row["email"], person_row(row)) for row in rows)
        return found

    async def list(self, page: PageRequest, search: str | None = None) -> tuple[builtins.list[Person], bool]:
        where = ["1 = 1"]
        params: dict[str, Any] = {}
        if search:
            # instr(), not LIKE: the search is a literal substring (% and _ are not wildcards)
            where.append("(instr(grantd_fold(email), :needle) > 0 OR instr(grantd_fold(name), :needle) > 0)")
            params["needle"] = fold(search)
        after_sql(page, "person_id", where, params)
        rows = self._db.all(
            f"SELECT * FROM people WHERE {' AND '.join(where)} ORDER BY created_at DESC, person_id DESC LIMIT :limit",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = page_rows(rows, page.limit)
        return [person_row(r) for r in found], more

    async def admins(self, limit: int) -> builtins.list[str]:
        rows = self._db.all(  # the partial index people_admins (schema 0016) holds exactly these rows
            "SELECT email FROM people WHERE admin = 1 AND status = 'active' ORDER BY created_at, person_id LIMIT ?",
            (limit,),
        )
        return [r["email"] for r in rows]

    async def update(self, person_id: str, changes: dict[str, Any]) -> Person | None:
        cols = [c for c in PERSON_CHANGEABLE if c in changes]
        values = {f"set_{c}": (bool(changes[c]) if c == "admin" else changes[c]) for c in cols}
        async with self._db.awrite() as conn:
            if not cols:
                row = conn.execute("SELECT * FROM people WHERE person_id = ?", (person_id,)).fetchone()
            else:
                row = conn.execute(
                    f"UPDATE people SET {', '.join(f'{c} = :set_{c}' for c in cols)} WHERE person_id = :person_id RETURNING *",  # noqa: S608 - column names from a fixed set
                    {**values, "person_id": person_id},
                ).fetchone()
        return person_row(row) if row else None

    async def delete(self, person_id: str, now: int) -> Person | None:
        async with self._db.awrite() as conn:
            row = conn.execute("DELETE FROM people WHERE person_id = ? RETURNING *", (person_id,)).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM passkey_credentials WHERE person_id = ?", (person_id,))
            conn.execute("DELETE FROM sessions WHERE person_id = ?", (person_id,))
            conn.execute("DELETE FROM webauthn_challenges WHERE person_id = ?", (person_id,))
            conn.execute("DELETE FROM registration_urls WHERE email = ? AND used_at IS NULL", (row["email"],))
            conn.execute("DELETE FROM refresh_tokens WHERE person_id = ?", (person_id,))
            conn.execute("DELETE FROM consents WHERE person_id = ?", (person_id,))
        return person_row(row)

    async def retire(
        self, person_id: str, *, delete: bool, by: str, reason: str, now: int, lapse: Lapse
    ) -> tuple[Person, builtins.list[Grant]] | None:
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS)
        async with self._db.awrite() as conn:
            found = conn.execute("SELECT * FROM people WHERE person_id = ?", (person_id,)).fetchone()
            if found is None:
                return None
            person = person_row(found)
            email = person["email"]
            revoked = [
                dict(r)
                for r in conn.execute(
                    f"""UPDATE grants SET status = 'revoked', revoked_by = :by, revoked_at = :now,
                           decision_reason = :reason, version = version + 1
                        WHERE requester_id = :person_id AND status IN ('pending', 'approved') AND {live}
                        RETURNING *""",  # noqa: S608 - generated from the Lapse over a column allow-list
                    {**params, "by": by, "now": now, "reason": reason, "person_id": person_id},
                ).fetchall()
            ]
            revoked.sort(key=lambda g: (g["created_at"], g["id"]))
            for grant in revoked:
                _record_event(conn, "grant.revoked", grant, now)
            conn.execute(
                """UPDATE delegations SET status = 'revoked', revoked_by = :by, revoked_at = :now
                   WHERE status = 'active' AND (delegator = :email OR delegate = :email)""",
                {"by": by, "now": now, "email": email},
            )
            conn.execute(
                "UPDATE sessions SET revoked_at = ? WHERE person_id = ? AND revoked_at IS NULL",
                (now, person_id),
            )
            conn.execute(
                "UPDATE refresh_tokens SET revoked_at = ? WHERE person_id = ? AND revoked_at IS NULL",
                (now, person_id),
            )
            for party in ("owner", "approver"):
                conn.execute(
                    f"UPDATE agents SET {party}_id = ? WHERE {party} = ? AND {party}_id IS NULL",  # noqa: S608 - fixed names
                    (person_id, email),
                )
            if delete:
                conn.execute("DELETE FROM people WHERE person_id = ?", (person_id,))
                conn.execute("DELETE FROM passkey_credentials WHERE person_id = ?", (person_id,))
                conn.execute("DELETE FROM sessions WHERE person_id = ?", (person_id,))
                conn.execute("DELETE FROM webauthn_challenges WHERE person_id = ?", (person_id,))
                conn.execute("DELETE FROM registration_urls WHERE email = ? AND used_at IS NULL", (email,))
                conn.execute("DELETE FROM refresh_tokens WHERE person_id = ?", (person_id,))
                conn.execute("DELETE FROM consents WHERE person_id = ?", (person_id,))
            else:
                conn.execute(
                    "UPDATE people SET status = 'disabled', updated_at = ? WHERE person_id = ?",
                    (now, person_id),
                )
        return person, [grant_row(g) for g in revoked]


class SQLiteCredentials:
    def __init__(self, db: _Database):
        self._db = db

    async def get(self, credential_id: str) -> PasskeyCredential | None:
        row = self._db.one("SELECT * FROM passkey_credentials WHERE credential_id = ?", (credential_id,))
        return credential_row(row) if row else None

    async def list_for(self, person_id: str) -> builtins.list[PasskeyCredential]:
        rows = self._db.all(
            "SELECT * FROM passkey_credentials WHERE person_id = ? ORDER BY created_at, credential_id",
            (person_id,),
        )
        return [credential_row(r) for r in rows]

    async def add(self, credential: PasskeyCredential) -> PasskeyCredential:
        async with self._db.awrite() as conn:
            return _insert_credential(conn, credential)

    async def use(self, credential_id: str, sign_count: int, now: int) -> PasskeyCredential | None:
        # The conditional UPDATE decides: of concurrent users of one count, exactly one moves it.
        async with self._db.awrite() as conn:
            row = conn.execute(
                """UPDATE passkey_credentials SET sign_count = :count, last_used_at = :now
                   WHERE credential_id = :id AND (sign_count < :count OR (sign_count = 0 AND :count = 0))
                   RETURNING *""",
                {"count": int(sign_count), "now": now, "id": credential_id},
            ).fetchone()
        return credential_row(row) if row else None

    async def delete(self, person_id: str, credential_id: str, now: int) -> bool | None:
        # Counted and deleted under the write lock: two deletes of the last two cannot both win.
        async with self._db.awrite() as conn:
            if not conn.execute(
                "SELECT 1 FROM passkey_credentials WHERE person_id = ? AND credential_id = ?",
                (person_id, credential_id),
            ).fetchone():
                return None
            deleted = conn.execute(
                """DELETE FROM passkey_credentials WHERE person_id = :person AND credential_id = :id
                   AND (SELECT count(*) FROM passkey_credentials WHERE person_id = :person) > 1""",
                {"person": person_id, "id": credential_id},
            ).rowcount
            if deleted == 1:
                conn.execute(
                    "UPDATE sessions SET revoked_at = ? WHERE credential_id = ? AND revoked_at IS NULL",
                    (now, credential_id),
                )
        return deleted == 1


class SQLiteSessions:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, session: Session) -> Session:
        row: dict[str, Any] = {c: session.get(c) for c in SESSION_COLUMNS}
        async with self._db.awrite() as conn:
            # sessions that ended before this one began go (an index range: cheap)
            conn.execute("DELETE FROM sessions WHERE expires_at <= ?", (row["created_at"],))
            try:
                _insert(conn, "sessions", SESSION_COLUMNS, row)
            except sqlite3.IntegrityError:
                raise Conflict("session_id") from None
        return cast(Session, row)

    async def get(self, session_id: str, now: int) -> Session | None:
        row = self._db.one(
            "SELECT * FROM sessions WHERE session_id = ? AND revoked_at IS NULL AND expires_at > ?",
            (session_id, now),
        )
        return cast(Session, row) if row else None

    async def touch(self, session_id: str, now: int) -> None:
        async with self._db.awrite() as conn:
            conn.execute(
                "UPDATE sessions SET last_seen_at = ? WHERE session_id = ? AND last_seen_at < ?",
                (now, session_id, now),
            )

    async def list(
        self, page: PageRequest, person_id: str | None, now: int
    ) -> tuple[builtins.list[Session], bool]:
        where = ["revoked_at IS NULL", "expires_at > :now"]
        params: dict[str, Any] = {"now": now}
        if person_id is not None:
            where.append("person_id = :person_id")
            params["person_id"] = person_id
        after_sql(page, "session_id", where, params)
        rows = self._db.all(
            f"SELECT * FROM sessions WHERE {' AND '.join(where)} ORDER BY created_at DESC, session_id DESC LIMIT :limit",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = page_rows(rows, page.limit)
        return cast(list[Session], found), more

    async def _revoke(self, column: str, value: str, now: int) -> int:
        async with self._db.awrite() as conn:
            return int(
                conn.execute(
                    f"UPDATE sessions SET revoked_at = ? WHERE {column} = ? AND revoked_at IS NULL AND expires_at > ?",  # noqa: S608 - column from this class
                    (now, value, now),
                ).rowcount
            )

    async def revoke_family(self, family_id: str, now: int) -> int:
        return await self._revoke("family_id", family_id, now)

    async def revoke_person(self, person_id: str, now: int) -> int:
        return await self._revoke("person_id", person_id, now)


class SQLiteRegistrations:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, registration: RegistrationUrl) -> RegistrationUrl:
        row: dict[str, Any] = {c: registration.get(c) for c in REGISTRATION_COLUMNS}
        row["email"] = str(row["email"]).lower()
        row["admin"] = bool(row["admin"])
        async with self._db.awrite() as conn:
            try:
                _insert(conn, "registration_urls", REGISTRATION_COLUMNS, row)
            except sqlite3.IntegrityError as exc:
                raise Conflict("token_hash" if "token_hash" in str(exc) else "id") from None
        return cast(RegistrationUrl, row)

    async def get_by_token_hash(self, token_hash: str) -> RegistrationUrl | None:
        row = self._db.one("SELECT * FROM registration_urls WHERE token_hash = ?", (token_hash,))
        return registration_row(row) if row else None

    async def list(self, page: PageRequest) -> tuple[builtins.list[RegistrationUrl], bool]:
        where = ["1 = 1"]
        params: dict[str, Any] = {}
        after_sql(page, "id", where, params)
        rows = self._db.all(
            f"SELECT * FROM registration_urls WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT :limit",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = page_rows(rows, page.limit)
        return [registration_row(r) for r in found], more

    async def delete(self, registration_id: str) -> bool:
        async with self._db.awrite() as conn:
            return (
                int(conn.execute("DELETE FROM registration_urls WHERE id = ?", (registration_id,)).rowcount)
                == 1
            )

    async def complete(
        self, token_hash: str, person: Person, credential: PasskeyCredential, now: int
    ) -> tuple[Person, PasskeyCredential]:
        # One transaction: a Conflict anywhere rolls everything back (the URL stays unused).
        async with self._db.awrite() as conn:
            used = conn.execute(
                """UPDATE registration_urls SET used_at = ?
                   WHERE token_hash = ? AND used_at IS NULL AND expires_at > ? RETURNING *""",
                (now, token_hash, now),
            ).fetchone()
            if used is None:
                raise Conflict("token")  # unknown, used (by a concurrent redeemer too) or expired
            email = str(used["email"]).lower()
            if str(person["email"]).lower() != email:
                raise Conflict("email")  # the record must be for the URL's e-mail
            found = conn.execute("SELECT * FROM people WHERE email = ?", (email,)).fetchone()
            owner = person_row(found) if found else _insert_person(conn, person)
            if (
                used["purpose"] == "register"
                and conn.execute(
                    "SELECT 1 FROM passkey_credentials WHERE person_id = ? AND rp_id = ?",
                    (owner["person_id"], used["rp_id"]),
                ).fetchone()
            ):
                raise Conflict("credential")  # a register URL never grafts onto an account with a passkey
            added = _insert_credential(conn, {**credential, "person_id": owner["person_id"]})
        return owner, added


class SQLiteWebAuthnChallenges:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, challenge: WebAuthnChallenge, now: int) -> None:
        row: dict[str, Any] = {c: challenge.get(c) for c in WEBAUTHN_CHALLENGE_COLUMNS}
        async with self._db.awrite() as conn:
            conn.execute("DELETE FROM webauthn_challenges WHERE expires_at <= ?", (now,))  # index range
            try:
                _insert(conn, "webauthn_challenges", WEBAUTHN_CHALLENGE_COLUMNS, row)
            except sqlite3.IntegrityError:
                raise Conflict("challenge") from None

    async def take(self, challenge: str, purpose: str, now: int) -> WebAuthnChallenge | None:
        # The DELETE decides: of any number of concurrent takers in any process, one sees the row.
        async with self._db.awrite() as conn:
            row = conn.execute(
                "DELETE FROM webauthn_challenges WHERE challenge = ? AND purpose = ? RETURNING *",
                (challenge, purpose),
            ).fetchone()
        if row is None or row["expires_at"] <= now:
            return None
        return cast(WebAuthnChallenge, dict(row))
