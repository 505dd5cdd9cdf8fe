"""Agents and their enrolment challenges on PostgreSQL (``grantd.store.Agents``, ``Challenges``)."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any, cast

from grantd.core.lifecycle import Lapse
from grantd.core.paging import PageRequest
from grantd.store import Conflict, LimitReached
from grantd.store.records import (
    AGENT_CHANGEABLE,
    AGENT_COLUMNS,
    GRANT_COLUMNS,
    Agent,
    Grant,
)
from grantd.store.rows import grant_row, page_rows
from grantd.store.sql import after_sql, not_lapsed_sql
from grantd.store.tlog import agent_event

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
from .principals import _email_taken, _person_id_of
from .sql import PG, _insert
from .tlog import _record

if TYPE_CHECKING:
    import psycopg


class PostgresAgents(_Part):
    @staticmethod
    async def _check_people(cur: psycopg.AsyncCursor[Any], owner: str | None, approver: str | None) -> None:
        """Owners and approvers are persons: never an agent's e-mail (D11)."""
        for field, email in (("owner", owner), ("approver", approver)):
            if email is None:
                continue
            await cur.execute("SELECT 1 AS x FROM agents WHERE email = %s", (email.lower(),))
            if await cur.fetchone():
                raise Conflict(field)

    @staticmethod
    async def _check_key(cur: psycopg.AsyncCursor[Any], key_id: str, agent_id: str) -> None:
        await cur.execute(
            "SELECT 1 AS x FROM agents WHERE key_id = %s AND agent_id != %s", (key_id, agent_id)
        )
        if await cur.fetchone():
            raise Conflict("publicKey")

    @_on_store_loop
    async def create(
        self, agent: Agent, reserved_emails: frozenset[str], *, max_per_owner: int = 0, by: str | None = None
    ) -> Agent:
        row: dict[str, Any] = {c: agent.get(c) for c in AGENT_COLUMNS}
        row["key_generation"] = row["key_generation"] or 1
        email = str(row["email"])
        if email.lower() in {e.lower() for e in reserved_emails}:
            raise Conflict("email")
        async with self._db.tx() as cur:
            await _lock(cur, PRINCIPALS_LOCK)  # e-mails are unique across tables: one checker at a time
            if await _email_taken(cur, email):
                raise Conflict("email")
            row["owner_id"] = await _person_id_of(cur, row["owner"])
            row["approver_id"] = await _person_id_of(cur, row["approver"])
            if max_per_owner > 0:  # PRINCIPALS_LOCK serialises enrolments: the count holds
                await cur.execute(
                    "SELECT count(*) AS n FROM agents WHERE owner_id = %s"
                    if row["owner_id"]
                    else "SELECT count(*) AS n FROM agents WHERE owner_id IS NULL AND owner = %s",
                    (row["owner_id"] or row["owner"],),
                )
                counted = await cur.fetchone()
                if counted is not None and int(counted["n"]) >= max_per_owner:
                    raise LimitReached("agents_per_person", max_per_owner)
            await self._check_key(cur, row["key_id"], row["agent_id"])
            await self._check_people(cur, row["owner"], row["approver"])
            try:
                await cur.execute(_insert("agents", AGENT_COLUMNS), row)
            except _unique_violation() as exc:
                name = _constraint(exc)
                raise Conflict(
                    "email"
                    if name == "agents_email_key"
                    else "publicKey"
                    if name == "agents_key_id_key"
                    else "id"
                ) from None
            await _record(cur, agent_event("agent.enrolled", row, by, int(row["created_at"])))
        return cast(Agent, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, ident: str) -> Agent | None:
        row = await self._db.one(
            "SELECT * FROM agents WHERE agent_id = %s OR email = %s", (ident, ident.lower())
        )
        return cast(Agent | None, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get_by_id(self, agent_id: str) -> Agent | None:
        return cast(Agent | None, await self._db.one("SELECT * FROM agents WHERE agent_id = %s", (agent_id,)))

    @_on_store_loop
    async def list(self, page: PageRequest) -> tuple[list[Agent], bool]:
        where = ["TRUE"]
        params: dict[str, Any] = {}
        after_sql(page, "agent_id", where, params, paramstyle=PG)
        rows = await self._db.all(
            f"SELECT * FROM agents WHERE {' AND '.join(where)} ORDER BY created_at DESC, agent_id DESC LIMIT %(limit)s",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = page_rows(rows, page.limit)
        return cast(list[Agent], found), more

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def update(self, agent_id: str, changes: dict[str, Any], *, by: str | None = None) -> Agent | None:
        cols = [c for c in AGENT_CHANGEABLE if c in changes]
        async with self._db.tx() as cur:
            await _lock(cur, PRINCIPALS_LOCK)
            await cur.execute("SELECT * FROM agents WHERE agent_id = %s FOR UPDATE", (agent_id,))
            current = await cur.fetchone()
            if current is None:
                return None
            await self._check_people(cur, changes.get("owner"), changes.get("approver"))
            if "key_id" in changes:
                await self._check_key(cur, changes["key_id"], agent_id)
            if not cols:
                return cast(Agent, current)
            new_key = "public_key" in changes and changes["public_key"] != current["public_key"]
            sets = [f"{c} = %(set_{c})s" for c in cols]
            values = {f"set_{c}": changes[c] for c in cols}
            for party in ("owner", "approver"):  # a new e-mail is bound to its person now (D11)
                if party in changes and changes[party] != current[party]:
                    sets.append(f"{party}_id = %(set_{party}_id)s")
                    values[f"set_{party}_id"] = await _person_id_of(cur, changes[party])
            if new_key:
                sets.append("key_generation = key_generation + 1")  # tokens of the old key stop working (D11)
            try:
                await cur.execute(
                    f"UPDATE agents SET {', '.join(sets)} WHERE agent_id = %(agent_id)s RETURNING *",  # noqa: S608 - column names from a fixed set
                    {**values, "agent_id": agent_id},
                )
            except _unique_violation():
                raise Conflict("publicKey") from None
            row = await cur.fetchone()
            if new_key and row is not None:
                await _record(cur, agent_event("agent.key_replaced", dict(row), by, int(row["updated_at"])))
        return cast(Agent, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def retire(
        self, agent_id: str, *, delete: bool, by: str, reason: str, now: int, lapse: Lapse
    ) -> tuple[Agent, builtins.list[Grant]] | None:
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS, paramstyle=PG)
        async with self._db.tx() as cur:
            await cur.execute("SELECT * FROM agents WHERE agent_id = %s FOR UPDATE", (agent_id,))
            found = await cur.fetchone()
            if found is None or (found["status"] == "disabled" and not delete):
                return None
            agent = dict(found)
            await cur.execute(
                f"""UPDATE grants SET status = 'revoked', revoked_by = %(by)s, revoked_at = %(now)s,
                       decision_reason = %(reason)s, version = version + 1
                    WHERE requester_id = %(agent_id)s AND status IN ('pending', 'approved') AND {live}
                    RETURNING *""",  # noqa: S608 - generated from the Lapse over a column allow-list
                {**params, "by": by, "now": now, "reason": reason, "agent_id": agent_id},
            )
            revoked = [dict(r) for r in await cur.fetchall()]
            revoked.sort(key=lambda g: (g["created_at"], g["id"]))
            await cur.execute(
                "UPDATE delegations SET status = 'revoked', revoked_by = %s, revoked_at = %s WHERE delegate = %s AND status = 'active'",
                (by, now, agent["email"]),
            )
            await cur.execute("DELETE FROM challenges WHERE agent_id = %s", (agent_id,))
            if delete:
                await cur.execute("DELETE FROM agents WHERE agent_id = %s", (agent_id,))
            else:
                await cur.execute(
                    "UPDATE agents SET status = 'disabled', key_generation = key_generation + 1, updated_at = %s WHERE agent_id = %s",
                    (now, agent_id),
                )
            await _record_events(cur, [("grant.revoked", g, now) for g in revoked])
            await _record(cur, agent_event("agent.disabled", agent, by, now))
        return cast(Agent, agent), [grant_row(g) for g in revoked]

    @_nul_finds_nothing(list)
    @_on_store_loop
    async def decidable_by(self, person_id: str) -> builtins.list[str]:
        rows = await self._db.all(
            "SELECT agent_id FROM agents WHERE owner_id = %s OR approver_id = %s ORDER BY created_at, agent_id",
            (person_id, person_id),
        )
        return [str(r["agent_id"]) for r in rows]


class PostgresChallenges(_Part):
    @_on_store_loop
    async def create(self, challenge: str, agent_id: str, expires_at: int, now: int) -> None:
        # One statement: ended challenges go (an index range) as the new one is stored.
        await self._db.one(
            """WITH ended AS (DELETE FROM challenges WHERE expires_at < %s)
               INSERT INTO challenges (challenge, agent_id, expires_at) VALUES (%s, %s, %s)""",
            (now, challenge, agent_id, expires_at),
            rows=False,
        )

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def take(self, challenge: str, agent_id: str) -> int | None:
        # The DELETE decides: a concurrent taker on any node waits for the row lock, then finds no row.
        async with self._db.statement() as cur:
            await cur.execute(
                "DELETE FROM challenges WHERE challenge = %s AND agent_id = %s RETURNING expires_at",
                (challenge, agent_id),
            )
            row = await cur.fetchone()
        return int(row["expires_at"]) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def create_for(self, challenge: str, ident: str, expires_at: int, now: int) -> str | None:
        # One statement: the agent found and active, ended challenges dropped, the new one stored.
        row = await self._db.one(
            """WITH a AS (SELECT agent_id FROM agents WHERE (agent_id = %s OR email = %s) AND status = 'active' LIMIT 1),
                    ended AS (DELETE FROM challenges WHERE expires_at < %s AND EXISTS (SELECT 1 FROM a))
               INSERT INTO challenges (challenge, agent_id, expires_at) SELECT %s, a.agent_id, %s FROM a
               RETURNING agent_id""",
            (ident, ident.lower(), now, challenge, expires_at),
        )
        return str(row["agent_id"]) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def take_for(self, challenge: str, ident: str) -> tuple[Agent, int] | None:
        # One statement and round trip where agents.get and take were two: the DELETE decides (a
        # concurrent taker on any node waits for the row lock, then finds no row).
        row = await self._db.one(
            """WITH a AS (SELECT * FROM agents WHERE (agent_id = %s OR email = %s) AND status = 'active' LIMIT 1),
                    t AS (DELETE FROM challenges c USING a WHERE c.challenge = %s AND c.agent_id = a.agent_id
                          RETURNING c.expires_at)
               SELECT a.*, t.expires_at AS _expires_at FROM a, t""",
            (ident, ident.lower(), challenge),
        )
        if row is None:
            return None
        expires_at = int(row.pop("_expires_at"))
        return cast(Agent, row), expires_at
