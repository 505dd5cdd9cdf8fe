"""Rows that agents and persons share on PostgreSQL: e-mail uniqueness, person rows, party binding."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any, cast

from grantd.store import Conflict
from grantd.store.records import (
    CREDENTIAL_COLUMNS,
    PERSON_COLUMNS,
    PasskeyCredential,
    Person,
)
from grantd.store.rows import fold, to_json
from grantd.store.tlog import credential_event

from .connection import _constraint, _lock, _unique_violation
from .constants import PRINCIPALS_LOCK
from .sql import _insert
from .tlog import _record

if TYPE_CHECKING:
    import psycopg


async def _email_taken(cur: psycopg.AsyncCursor[Any], email: str) -> bool:
    """Is ``email`` an agent's, a person's, or used as a person's (an owner, approver or delegator)?
    Callers hold PRINCIPALS_LOCK."""
    await cur.execute(
        """SELECT 1 AS x FROM agents WHERE email = %(email)s OR owner = %(email)s OR approver = %(email)s
           UNION ALL SELECT 1 FROM delegations WHERE delegator = %(email)s
           UNION ALL SELECT 1 FROM people WHERE email = %(lower)s LIMIT 1""",
        {"email": email, "lower": email.lower()},
    )
    return await cur.fetchone() is not None


async def _has_table(cur: psycopg.AsyncCursor[Any], name: str) -> bool:
    await cur.execute("SELECT to_regclass(%s) IS NOT NULL AS present", (name,))
    row = await cur.fetchone()
    return bool(row and row["present"])


async def _person_id_of(cur: psycopg.AsyncCursor[Any], email: Any) -> str | None:
    """The person an owner/approver e-mail names now (D11), in the caller's transaction."""
    if not email:
        return None
    await cur.execute("SELECT person_id FROM people WHERE email = %s", (str(email).lower(),))
    found = await cur.fetchone()
    return str(found["person_id"]) if found else None


async def _bind_parties(cur: psycopg.AsyncCursor[Any], email: str, person_id: str) -> None:
    """Agents that name ``email`` as owner/approver without an id are bound to ``person_id`` (D11)."""
    for party in ("owner", "approver"):
        await cur.execute(
            f"UPDATE agents SET {party}_id = %s WHERE {party} = %s AND {party}_id IS NULL",  # noqa: S608 - fixed names
            (person_id, email),
        )


async def _insert_person(cur: psycopg.AsyncCursor[Any], person: Person, *, unnamed: bool = False) -> Person:
    """In the caller's transaction: an e-mail is unique across persons and agents (D11); agents that
    name the e-mail without an id are bound to the new person, or with ``unnamed`` any naming
    refuses the insert (``Conflict("named")``)."""
    row: dict[str, Any] = {c: person.get(c) for c in PERSON_COLUMNS}
    row["email"] = str(row["email"]).lower()
    row["admin"] = bool(row["admin"])
    await _lock(cur, PRINCIPALS_LOCK)
    await cur.execute("SELECT 1 AS x FROM agents WHERE email = %s", (row["email"],))
    if await cur.fetchone():
        raise Conflict("email")
    if unnamed:
        await cur.execute(
            """SELECT 1 AS x FROM agents WHERE owner = %(email)s OR approver = %(email)s
               UNION ALL SELECT 1 FROM delegations
               WHERE status = 'active' AND (delegator = %(email)s OR delegate = %(email)s) LIMIT 1""",
            {"email": row["email"]},
        )
        if await cur.fetchone():
            raise Conflict("named")
    columns = (*PERSON_COLUMNS, "email_fold", "name_fold")
    try:
        await cur.execute(
            _insert("people", columns),
            {**row, "email_fold": fold(row["email"]), "name_fold": fold(str(row["name"]))},
        )
    except _unique_violation() as exc:
        raise Conflict("email" if _constraint(exc) == "people_email_key" else "id") from None
    await _bind_parties(cur, row["email"], row["person_id"])
    return cast(Person, row)


async def _insert_credential(
    cur: psycopg.AsyncCursor[Any], credential: PasskeyCredential
) -> PasskeyCredential:
    row: dict[str, Any] = {c: credential.get(c) for c in CREDENTIAL_COLUMNS}
    row["transports"] = builtins.list(row["transports"] or [])
    row["backed_up"] = bool(row["backed_up"])
    try:
        await cur.execute(
            _insert("passkey_credentials", CREDENTIAL_COLUMNS),
            {**row, "transports": to_json(row["transports"])},
        )
    except _unique_violation():
        raise Conflict("credential_id") from None
    await cur.execute("SELECT email FROM people WHERE person_id = %s", (row["person_id"],))
    owner = await cur.fetchone()
    await _record(cur, credential_event(row, owner["email"] if owner else None))
    return cast(PasskeyCredential, row)
