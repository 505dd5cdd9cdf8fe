"""Agents and their enrolment challenges on SQLite (``grantd.store.Agents``, ``Challenges``)."""

from __future__ import annotations

import builtins
import sqlite3
from typing import Any, cast

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

from .connection import _Database
from .grants import _record_event
from .people import _person_id_of
from .tlog import _record


class SQLiteAgents:
    def __init__(self, db: _Database):
        self._db = db

    @staticmethod
    def _check_people(conn: sqlite3.Connection, owner: str | None, approver: str | None) -> None:
        """Owners and approvers are persons: never an agent's e-mail (D11)."""
        for field, email in (("owner", owner), ("approver", approver)):
            if (
                email is not None
                and conn.execute("SELECT 1 FROM agents WHERE email = ?", (email.lower(),)).fetchone()
            ):
                raise Conflict(field)

    @staticmethod
    def _check_key(conn: sqlite3.Connection, key_id: str, agent_id: str) -> None:
        if conn.execute(
            "SELECT 1 FROM agents WHERE key_id = ? AND agent_id != ?", (key_id, agent_id)
        ).fetchone():
            raise Conflict("publicKey")

    async def create(
        self, agent: Agent, reserved_emails: frozenset[str], *, max_per_owner: int = 0, by: str | None = None
    ) -> Agent:
        row: dict[str, Any] = {c: agent.get(c) for c in AGENT_COLUMNS}
        row["key_generation"] = row["key_generation"] or 1
        email = str(row["email"])
        if email.lower() in {e.lower() for e in reserved_emails}:
            raise Conflict("email")
        async with self._db.awrite() as conn:
            row["owner_id"] = _person_id_of(conn, row["owner"])
            row["approver_id"] = _person_id_of(conn, row["approver"])
            if max_per_owner > 0:
                owned = conn.execute(
                    "SELECT count(*) FROM agents WHERE owner_id = ?"
                    if row["owner_id"]
                    else "SELECT count(*) FROM agents WHERE owner_id IS NULL AND owner = ?",
                    (row["owner_id"] or row["owner"],),
                ).fetchone()[0]
                if owned >= max_per_owner:
                    raise LimitReached("agents_per_person", max_per_owner)
            if conn.execute(
                """SELECT 1 FROM agents WHERE email = :email OR owner = :email OR approver = :email
                   UNION ALL SELECT 1 FROM delegations WHERE delegator = :email
                   UNION ALL SELECT 1 FROM people WHERE email = :lower LIMIT 1""",
                {"email": email, "lower": email.lower()},
            ).fetchone():
                raise Conflict("email")
            self._check_key(conn, row["key_id"], row["agent_id"])
            self._check_people(conn, row["owner"], row["approver"])
            try:
                conn.execute(
                    f"INSERT INTO agents ({', '.join(AGENT_COLUMNS)}) VALUES ({', '.join(':' + c for c in AGENT_COLUMNS)})",  # noqa: S608 - fixed column list
                    row,
                )
            except sqlite3.IntegrityError as exc:
                raise Conflict("email" if "agents.email" in str(exc) else "id") from None
            _record(conn, agent_event("agent.enrolled", row, by, int(row["created_at"])))
        return cast(Agent, row)

    async def get(self, ident: str) -> Agent | None:
        return cast(
            Agent | None,
            self._db.one("SELECT * FROM agents WHERE agent_id = ? OR email = ?", (ident, ident.lower())),
        )

    async def get_by_id(self, agent_id: str) -> Agent | None:
        return cast(Agent | None, self._db.one("SELECT * FROM agents WHERE agent_id = ?", (agent_id,)))

    async def list(self, page: PageRequest) -> tuple[list[Agent], bool]:
        where = ["1 = 1"]
        params: dict[str, Any] = {}
        after_sql(page, "agent_id", where, params)
        rows = self._db.all(
            f"SELECT * FROM agents WHERE {' AND '.join(where)} ORDER BY created_at DESC, agent_id DESC LIMIT :limit",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = page_rows(rows, page.limit)
        return cast(list[Agent], found), more

    async def update(self, agent_id: str, changes: dict[str, Any], *, by: str | None = None) -> Agent | None:
        cols = [c for c in AGENT_CHANGEABLE if c in changes]
        async with self._db.awrite() as conn:
            current = conn.execute("SELECT * FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
            if current is None:
                return None
            self._check_people(conn, changes.get("owner"), changes.get("approver"))
            if "key_id" in changes:
                self._check_key(conn, changes["key_id"], agent_id)
            if not cols:
                return cast(Agent, dict(current))
            new_key = "public_key" in changes and changes["public_key"] != current["public_key"]
            sets = [f"{c} = :set_{c}" for c in cols]
            values = {f"set_{c}": changes[c] for c in cols}
            for party in ("owner", "approver"):  # a new e-mail is bound to its person now (D11)
                if party in changes and changes[party] != current[party]:
                    sets.append(f"{party}_id = :set_{party}_id")
                    values[f"set_{party}_id"] = _person_id_of(conn, changes[party])
            if new_key:
                sets.append("key_generation = key_generation + 1")  # tokens of the old key stop working (D11)
            row = conn.execute(
                f"UPDATE agents SET {', '.join(sets)} WHERE agent_id = :agent_id RETURNING *",  # noqa: S608 - column names from a fixed set
                {**values, "agent_id": agent_id},
            ).fetchone()
            if new_key:
                _record(conn, agent_event("agent.key_replaced", dict(row), by, int(row["updated_at"])))
        return cast(Agent, dict(row))

    async def retire(
        self, agent_id: str, *, delete: bool, by: str, reason: str, now: int, lapse: Lapse
    ) -> tuple[Agent, builtins.list[Grant]] | None:
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS)
        async with self._db.awrite() as conn:
            found = conn.execute("SELECT * FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
            if found is None or (found["status"] == "disabled" and not delete):
                return None
            agent = dict(found)
            revoked = [
                dict(r)
                for r in conn.execute(
                    f"""UPDATE grants SET status = 'revoked', revoked_by = :by, revoked_at = :now,
                           decision_reason = :reason, version = version + 1
                        WHERE requester_id = :agent_id AND status IN ('pending', 'approved') AND {live}
                        RETURNING *""",  # noqa: S608 - generated from the Lapse over a column allow-list
                    {**params, "by": by, "now": now, "reason": reason, "agent_id": agent_id},
                ).fetchall()
            ]
            revoked.sort(key=lambda g: (g["created_at"], g["id"]))
            for grant in revoked:
                _record_event(conn, "grant.revoked", grant, now)
            conn.execute(
                "UPDATE delegations SET status = 'revoked', revoked_by = ?, revoked_at = ? WHERE delegate = ? AND status = 'active'",
                (by, now, agent["email"]),
            )
            conn.execute("DELETE FROM challenges WHERE agent_id = ?", (agent_id,))
            _record(conn, agent_event("agent.disabled", agent, by, now))
            if delete:
                conn.execute("DELETE FROM agents WHERE agent_id = ?", (agent_id,))
            else:
                conn.execute(
                    "UPDATE agents SET status = 'disabled', key_generation = key_generation + 1, updated_at = ? WHERE agent_id = ?",
                    (now, agent_id),
                )
        return cast(Agent, agent), [grant_row(g) for g in revoked]

    async def decidable_by(self, person_id: str) -> builtins.list[str]:
        rows = self._db.all(
            "SELECT agent_id FROM agents WHERE owner_id = ? OR approver_id = ? ORDER BY created_at, agent_id",
            (person_id, person_id),
        )
        return [str(r["agent_id"]) for r in rows]


class SQLiteChallenges:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, challenge: str, agent_id: str, expires_at: int, now: int) -> None:
        async with self._db.awrite() as conn:
            conn.execute("DELETE FROM challenges WHERE expires_at < ?", (now,))  # index range
            conn.execute(
                "INSERT INTO challenges (challenge, agent_id, expires_at) VALUES (?, ?, ?)",
                (challenge, agent_id, expires_at),
            )

    async def take(self, challenge: str, agent_id: str) -> int | None:
        # The DELETE decides who wins: of any number of concurrent takers in any process,
        # exactly one sees the row.
        async with self._db.awrite() as conn:
            row = conn.execute(
                "DELETE FROM challenges WHERE challenge = ? AND agent_id = ? RETURNING expires_at",
                (challenge, agent_id),
            ).fetchone()
        return int(row[0]) if row else None

    async def create_for(self, challenge: str, ident: str, expires_at: int, now: int) -> str | None:
        async with self._db.awrite() as conn:
            found = conn.execute(_ACTIVE_AGENT, (ident, ident.lower())).fetchone()
            if found is None:
                return None
            conn.execute("DELETE FROM challenges WHERE expires_at < ?", (now,))  # index range
            conn.execute(
                "INSERT INTO challenges (challenge, agent_id, expires_at) VALUES (?, ?, ?)",
                (challenge, found["agent_id"], expires_at),
            )
            return str(found["agent_id"])

    async def take_for(self, challenge: str, ident: str) -> tuple[Agent, int] | None:
        async with self._db.awrite() as conn:  # the agent's state and the DELETE in one transaction
            found = conn.execute(_ACTIVE_AGENT, (ident, ident.lower())).fetchone()
            if found is None:
                return None
            row = conn.execute(
                "DELETE FROM challenges WHERE challenge = ? AND agent_id = ? RETURNING expires_at",
                (challenge, found["agent_id"]),
            ).fetchone()
        return (cast(Agent, dict(found)), int(row[0])) if row else None


_ACTIVE_AGENT = "SELECT * FROM agents WHERE (agent_id = ? OR email = ?) AND status = 'active'"
