"""Persons, passkeys, sessions, registration URLs, WebAuthn challenges on PostgreSQL (``grantd.store.people``)."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, cast

from grantd.core.lifecycle import Lapse
from grantd.core.paging import PageRequest
from grantd.store import Conflict
from grantd.store.records import (
    GRANT_COLUMNS,
    PERSON_CHANGEABLE,
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
from grantd.store.rows import credential_row, grant_row, page_rows, person_row, registration_row
from grantd.store.sql import after_sql, not_lapsed_sql

from .connection import (
    _constraint,
    _lock,
    _nul_finds_nothing,
    _on_store_loop,
    _Part,
    _record_events,
    _unique_violation,
)
from .constants import PRINCIPALS_LOCK
from .oauth import _lock_person_refresh
from .principals import (
    _bind_parties,
    _insert_credential,
    _insert_person,
    fold,
)
from .sql import PERSON_SELECT, PG, _insert


class PostgresPeople(_Part):
    @_on_store_loop
    async def create(self, person: Person, *, unnamed: bool = False) -> Person:
        async with self._db.tx() as cur:
            return await _insert_person(cur, person, unnamed=unnamed)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, ident: str) -> Person | None:
        row = await self._db.one(
            f"{PERSON_SELECT} WHERE person_id = %s OR email = %s", (ident, ident.lower())
        )
        return person_row(row) if row else None

    @_on_store_loop
    async def get_many(self, emails: Sequence[str]) -> dict[str, Person]:
        # an e-mail holding NUL names nobody (PostgreSQL text cannot hold it; psycopg refuses to send it)
        wanted = sorted({e.lower() for e in emails if "\x00" not in e})
        rows = await self._db.all(f"{PERSON_SELECT} WHERE email = ANY(%s)", (wanted,))
        return {row["email"]: person_row(row) for row in rows}

    @_on_store_loop
    async def admins(self, limit: int) -> builtins.list[str]:
        rows = await self._db.all(  # the partial index people_admins (schema 0014) holds exactly these rows
            "SELECT email FROM people WHERE admin AND status = 'active' ORDER BY created_at, person_id LIMIT %s",
            (limit,),
        )
        return [r["email"] for r in rows]

    @_nul_finds_nothing(lambda: ([], False))
    @_on_store_loop
    async def list(self, page: PageRequest, search: str | None = None) -> tuple[builtins.list[Person], bool]:
        where = ["TRUE"]
        params: dict[str, Any] = {}
        if search:
            # strpos(), not LIKE: the search is a literal substring (% and _ are not wildcards)
            where.append("(strpos(email_fold, %(needle)s) > 0 OR strpos(name_fold, %(needle)s) > 0)")
            params["needle"] = fold(search)
        after_sql(page, "person_id", where, params, paramstyle=PG)
        rows = await self._db.all(
            f"{PERSON_SELECT} WHERE {' AND '.join(where)} ORDER BY created_at DESC, person_id DESC LIMIT %(limit)s",
            params,
        )
        found, more = page_rows(rows, page.limit)
        return [person_row(r) for r in found], more

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def update(self, person_id: str, changes: dict[str, Any]) -> Person | None:
        cols = [c for c in PERSON_CHANGEABLE if c in changes]
        values: dict[str, Any] = {
            f"set_{c}": (bool(changes[c]) if c == "admin" else changes[c]) for c in cols
        }
        sets = [f"{c} = %(set_{c})s" for c in cols]
        if "name" in changes:
            sets.append("name_fold = %(name_fold)s")
            values["name_fold"] = fold(str(changes["name"]))
        async with self._db.statement() as cur:
            if not cols:
                await cur.execute("SELECT * FROM people WHERE person_id = %s", (person_id,))
            else:
                await cur.execute(
                    f"UPDATE people SET {', '.join(sets)} WHERE person_id = %(person_id)s RETURNING *",  # noqa: S608 - column names from a fixed set
                    {**values, "person_id": person_id},
                )
            row = await cur.fetchone()
        return person_row(row) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def delete(self, person_id: str, now: int) -> Person | None:
        async with self._db.tx() as cur:
            await cur.execute("DELETE FROM people WHERE person_id = %s RETURNING *", (person_id,))
            row = await cur.fetchone()
            if row is None:
                return None
            await cur.execute("DELETE FROM passkey_credentials WHERE person_id = %s", (person_id,))
            await cur.execute("DELETE FROM sessions WHERE person_id = %s", (person_id,))
            await cur.execute("DELETE FROM webauthn_challenges WHERE person_id = %s", (person_id,))
            await cur.execute(
                "DELETE FROM registration_urls WHERE email = %s AND used_at IS NULL", (row["email"],)
            )
            await _lock_person_refresh(cur, person_id)
            await cur.execute("DELETE FROM refresh_tokens WHERE person_id = %s", (person_id,))
            await cur.execute("DELETE FROM consents WHERE person_id = %s", (person_id,))
        return person_row(row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def retire(
        self, person_id: str, *, delete: bool, by: str, reason: str, now: int, lapse: Lapse
    ) -> tuple[Person, builtins.list[Grant]] | None:
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS, paramstyle=PG)
        async with self._db.tx() as cur:
            await cur.execute(f"{PERSON_SELECT} WHERE person_id = %s FOR UPDATE", (person_id,))
            found = await cur.fetchone()
            if found is None:
                return None
            person = person_row(dict(found))
            email = person["email"]
            await cur.execute(
                f"""UPDATE grants SET status = 'revoked', revoked_by = %(by)s, revoked_at = %(now)s,
                       decision_reason = %(reason)s, version = version + 1
                    WHERE requester_id = %(person_id)s AND status IN ('pending', 'approved') AND {live}
                    RETURNING *""",  # noqa: S608 - generated from the Lapse over a column allow-list
                {**params, "by": by, "now": now, "reason": reason, "person_id": person_id},
            )
            revoked = [dict(r) for r in await cur.fetchall()]
            revoked.sort(key=lambda g: (g["created_at"], g["id"]))
            await cur.execute(
                """UPDATE delegations SET status = 'revoked', revoked_by = %(by)s, revoked_at = %(now)s
                   WHERE status = 'active' AND (delegator = %(email)s OR delegate = %(email)s)""",
                {"by": by, "now": now, "email": email},
            )
            await cur.execute(
                "UPDATE sessions SET revoked_at = %s WHERE person_id = %s AND revoked_at IS NULL",
                (now, person_id),
            )
            await _lock_person_refresh(cur, person_id)
            await cur.execute(
                "UPDATE refresh_tokens SET revoked_at = %s WHERE person_id = %s AND revoked_at IS NULL",
                (now, person_id),
            )
            await _bind_parties(cur, email, person_id)
            if delete:
                await cur.execute("DELETE FROM people WHERE person_id = %s", (person_id,))
                await cur.execute("DELETE FROM passkey_credentials WHERE person_id = %s", (person_id,))
                await cur.execute("DELETE FROM sessions WHERE person_id = %s", (person_id,))
                await cur.execute("DELETE FROM webauthn_challenges WHERE person_id = %s", (person_id,))
                await cur.execute(
                    "DELETE FROM registration_urls WHERE email = %s AND used_at IS NULL", (email,)
                )
                await cur.execute("DELETE FROM refresh_tokens WHERE person_id = %s", (person_id,))
                await cur.execute("DELETE FROM consents WHERE person_id = %s", (person_id,))
            else:
                await cur.execute(
                    "UPDATE people SET status = 'disabled', updated_at = %s WHERE person_id = %s",
                    (now, person_id),
                )
            await _record_events(cur, [("grant.revoked", g, now) for g in revoked])
        return person, [grant_row(g) for g in revoked]


class PostgresCredentials(_Part):
    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, credential_id: str) -> PasskeyCredential | None:
        row = await self._db.one(
            "SELECT * FROM passkey_credentials WHERE credential_id = %s", (credential_id,)
        )
        return credential_row(row) if row else None

    @_nul_finds_nothing(list)
    @_on_store_loop
    async def list_for(self, person_id: str) -> builtins.list[PasskeyCredential]:
        rows = await self._db.all(
            "SELECT * FROM passkey_credentials WHERE person_id = %s ORDER BY created_at, credential_id",
            (person_id,),
        )
        return [credential_row(r) for r in rows]

    @_on_store_loop
    async def add(self, credential: PasskeyCredential) -> PasskeyCredential:
        async with self._db.tx() as cur:  # the passkey and its audit event (D14) together
            return await _insert_credential(cur, credential)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def use(self, credential_id: str, sign_count: int, now: int) -> PasskeyCredential | None:
        # The conditional UPDATE decides: of concurrent users of one count, exactly one moves it.
        async with self._db.statement() as cur:
            await cur.execute(
                """UPDATE passkey_credentials SET sign_count = %(count)s, last_used_at = %(now)s
                   WHERE credential_id = %(id)s AND (sign_count < %(count)s OR (sign_count = 0 AND %(count)s = 0))
                   RETURNING *""",
                {"count": int(sign_count), "now": now, "id": credential_id},
            )
            row = await cur.fetchone()
        return credential_row(row) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def delete(self, person_id: str, credential_id: str, now: int) -> bool | None:
        async with self._db.tx() as cur:
            # Lock the person's passkeys first: a concurrent delete waits here, then counts what
            # this one left (two deletes of the last two cannot both win).
            await cur.execute(
                "SELECT credential_id FROM passkey_credentials WHERE person_id = %s ORDER BY credential_id FOR UPDATE",
                (person_id,),
            )
            await cur.fetchall()
            await cur.execute(
                "SELECT count(*) AS n, count(*) FILTER (WHERE credential_id = %s) AS mine FROM passkey_credentials WHERE person_id = %s",
                (credential_id, person_id),
            )
            counted = await cur.fetchone()
            if not counted or not counted["mine"]:
                return None
            if counted["n"] <= 1:
                return False
            await cur.execute(
                "DELETE FROM passkey_credentials WHERE person_id = %s AND credential_id = %s",
                (person_id, credential_id),
            )
            if int(cur.rowcount) != 1:
                return False
            await cur.execute(
                "UPDATE sessions SET revoked_at = %s WHERE credential_id = %s AND revoked_at IS NULL",
                (now, credential_id),
            )
            return True


class PostgresSessions(_Part):
    @_on_store_loop
    async def create(self, session: Session) -> Session:
        row: dict[str, Any] = {c: session.get(c) for c in SESSION_COLUMNS}
        # One statement: sessions that ended before this one began go (an index range: cheap).
        try:
            await self._db.one(
                f"WITH ended AS (DELETE FROM sessions WHERE expires_at <= %(created_at)s) {_insert('sessions', SESSION_COLUMNS)}",  # noqa: S608 - fixed columns
                row,
                rows=False,
            )
        except _unique_violation():
            raise Conflict("session_id") from None
        return cast(Session, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, session_id: str, now: int) -> Session | None:
        row = await self._db.one(
            "SELECT * FROM sessions WHERE session_id = %s AND revoked_at IS NULL AND expires_at > %s",
            (session_id, now),
        )
        return cast(Session, row) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def touch(self, session_id: str, now: int) -> None:
        async with self._db.statement() as cur:
            await cur.execute(
                "UPDATE sessions SET last_seen_at = %s WHERE session_id = %s AND last_seen_at < %s",
                (now, session_id, now),
            )

    @_on_store_loop
    async def list(
        self, page: PageRequest, person_id: str | None, now: int
    ) -> tuple[builtins.list[Session], bool]:
        where = ["revoked_at IS NULL", "expires_at > %(now)s"]
        params: dict[str, Any] = {"now": now}
        if person_id is not None:
            where.append("person_id = %(person_id)s")
            params["person_id"] = person_id
        after_sql(page, "session_id", where, params, paramstyle=PG)
        rows = await self._db.all(
            f"SELECT * FROM sessions WHERE {' AND '.join(where)} ORDER BY created_at DESC, session_id DESC LIMIT %(limit)s",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = page_rows(rows, page.limit)
        return cast(builtins.list[Session], found), more

    async def _revoke(self, column: str, value: str, now: int) -> int:
        async with self._db.statement() as cur:
            await cur.execute(
                f"UPDATE sessions SET revoked_at = %s WHERE {column} = %s AND revoked_at IS NULL AND expires_at > %s",  # noqa: S608 - column from this class
                (now, value, now),
            )
            return int(cur.rowcount)

    @_nul_finds_nothing(0)
    @_on_store_loop
    async def revoke_family(self, family_id: str, now: int) -> int:
        return await self._revoke("family_id", family_id, now)

    @_nul_finds_nothing(0)
    @_on_store_loop
    async def revoke_person(self, person_id: str, now: int) -> int:
        return await self._revoke("person_id", person_id, now)


class PostgresRegistrations(_Part):
    @_on_store_loop
    async def create(self, registration: RegistrationUrl) -> RegistrationUrl:
        row: dict[str, Any] = {c: registration.get(c) for c in REGISTRATION_COLUMNS}
        row["email"] = str(row["email"]).lower()
        row["admin"] = bool(row["admin"])
        async with self._db.statement() as cur:
            try:
                await cur.execute(_insert("registration_urls", REGISTRATION_COLUMNS), row)
            except _unique_violation() as exc:
                raise Conflict(
                    "token_hash" if _constraint(exc) == "registration_urls_token_hash_key" else "id"
                ) from None
        return cast(RegistrationUrl, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get_by_token_hash(self, token_hash: str) -> RegistrationUrl | None:
        row = await self._db.one("SELECT * FROM registration_urls WHERE token_hash = %s", (token_hash,))
        return registration_row(row) if row else None

    @_on_store_loop
    async def list(self, page: PageRequest) -> tuple[builtins.list[RegistrationUrl], bool]:
        where = ["TRUE"]
        params: dict[str, Any] = {}
        after_sql(page, "id", where, params, paramstyle=PG)
        rows = await self._db.all(
            f"SELECT * FROM registration_urls WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT %(limit)s",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = page_rows(rows, page.limit)
        return [registration_row(r) for r in found], more

    @_nul_finds_nothing(False)
    @_on_store_loop
    async def delete(self, registration_id: str) -> bool:
        async with self._db.statement() as cur:
            await cur.execute("DELETE FROM registration_urls WHERE id = %s", (registration_id,))
            return int(cur.rowcount) == 1

    @_on_store_loop
    async def complete(
        self, token_hash: str, person: Person, credential: PasskeyCredential, now: int
    ) -> tuple[Person, PasskeyCredential]:
        # One transaction: a Conflict anywhere rolls everything back (the URL stays unused).
        async with self._db.tx() as cur:
            await cur.execute(
                """UPDATE registration_urls SET used_at = %s
                   WHERE token_hash = %s AND used_at IS NULL AND expires_at > %s RETURNING *""",
                (now, token_hash, now),
            )
            used = await cur.fetchone()
            if used is None:
                raise Conflict("token")  # unknown, used (by a concurrent redeemer too) or expired
            email = str(used["email"]).lower()
            if str(person["email"]).lower() != email:
                raise Conflict("email")  # the record must be for the URL's e-mail
            await _lock(cur, PRINCIPALS_LOCK)  # a concurrent redeemer for the same e-mail creates it once
            await cur.execute(f"{PERSON_SELECT} WHERE email = %s", (email,))
            found = await cur.fetchone()
            owner = person_row(found) if found else await _insert_person(cur, person)
            if used["purpose"] == "register":
                await cur.execute(
                    "SELECT 1 AS x FROM passkey_credentials WHERE person_id = %s AND rp_id = %s",
                    (owner["person_id"], used["rp_id"]),
                )
                if await cur.fetchone():
                    raise Conflict("credential")  # a register URL never grafts onto an account with a passkey
            added = await _insert_credential(
                cur, cast(PasskeyCredential, {**credential, "person_id": owner["person_id"]})
            )
        return owner, added


WEBAUTHN_INSERT = _insert("webauthn_challenges", WEBAUTHN_CHALLENGE_COLUMNS)


class PostgresWebAuthnChallenges(_Part):
    @_on_store_loop
    async def create(self, challenge: WebAuthnChallenge, now: int) -> None:
        row: dict[str, Any] = {c: challenge.get(c) for c in WEBAUTHN_CHALLENGE_COLUMNS}
        # One statement: ended challenges go (an index range) as the new one is stored.
        try:
            await self._db.one(
                f"WITH ended AS (DELETE FROM webauthn_challenges WHERE expires_at <= %(sweep_before)s) {WEBAUTHN_INSERT}",  # noqa: S608 - fixed columns
                {**row, "sweep_before": now},
                rows=False,
            )
        except _unique_violation():
            raise Conflict("challenge") from None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def take(self, challenge: str, purpose: str, now: int) -> WebAuthnChallenge | None:
        # The DELETE decides: of any number of concurrent takers on any node, one sees the row.
        async with self._db.statement() as cur:
            await cur.execute(
                "DELETE FROM webauthn_challenges WHERE challenge = %s AND purpose = %s RETURNING *",
                (challenge, purpose),
            )
            row = await cur.fetchone()
        if row is None or row["expires_at"] <= now:
            return None
        return cast(WebAuthnChallenge, row)
