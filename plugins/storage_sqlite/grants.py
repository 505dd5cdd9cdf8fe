"""Grants and their events on SQLite (``grantd.store.Grants``)."""

from __future__ import annotations

import asyncio
import builtins
import sqlite3
from collections.abc import Sequence
from typing import Any, cast

from grantd.core.lifecycle import EXPIRED, Lapse
from grantd.core.paging import PageRequest
from grantd.store import Conflict, PendingBound
from grantd.store.notify import OutboxRow
from grantd.store.records import (
    AGENT_COLUMNS,
    GRANT_CHANGEABLE,
    GRANT_COLUMNS,
    VOTE_COLUMNS,
    Grant,
    GrantEvent,
    GrantEventRow,
    GrantReview,
    GrantView,
    ReviewGroup,
    Vote,
)
from grantd.store.rows import (
    event_json,
    grant_event,
    grant_row,
    page_rows,
    pinned_event_row,
    review_group_rows,
    review_row,
    review_rows,
    to_json,
    view_row,
    vote_row,
)
from grantd.store.sql import after_sql, lapsed_sql, not_lapsed_sql, status_sql

from .connection import _Database
from .notify import add_notices

# The grant, its pinned review and its votes in one statement (``view``): the votes as one JSON
# array with their ``seq`` (view_row puts them in recorded order), read through grant_votes_grant;
# the requesting agent as a JSON object, by its primary key.
VOTES_JSON = "json_object({})".format(", ".join(f"'{c}', {c}" for c in (*VOTE_COLUMNS, "seq")))
AGENT_JSON = "json_object({})".format(", ".join(f"'{c}', {c}" for c in AGENT_COLUMNS))
VIEW_SQL = f"""SELECT g.*, r.review_json AS _review_json, r.escalation_level AS _review_level,
    (SELECT json_group_array(json({VOTES_JSON})) FROM grant_votes v WHERE v.grant_id = g.id) AS _votes,
    (SELECT {AGENT_JSON} FROM agents a WHERE a.agent_id = g.requester_id) AS _agent
    FROM grants g LEFT JOIN grant_reviews r ON r.grant_id = g.id WHERE g.id = ?"""  # noqa: S608 - fixed columns


def _record_event(conn: sqlite3.Connection, event: str, row: dict[str, Any], now: int) -> None:
    """One grant event, in the caller's transaction; ``seq`` grows in commit order (BEGIN IMMEDIATE
    serialises writers, AUTOINCREMENT never reuses a number)."""
    conn.execute(
        "INSERT INTO grant_events (event, grant_id, requester, grant_json, created_at) VALUES (?, ?, ?, ?, ?)",
        (event, row["id"], row["requester"], event_json(row, GRANT_COLUMNS), now),
    )


class SQLiteGrants:
    def __init__(self, db: _Database):
        self._db = db

    async def create(
        self,
        grant: Grant,
        events: Sequence[str],
        *,
        bound: PendingBound | None = None,
        review: dict[str, Any] | None = None,
        review_due: int | None = None,
        notices: Sequence[OutboxRow] = (),
    ) -> Grant:
        row: dict[str, Any] = {k: grant.get(k) for k in GRANT_COLUMNS}
        row["version"] = 1
        stored = {**row, "request": to_json(row["request"])}
        async with self._db.awrite() as conn:  # BEGIN IMMEDIATE: one writer at a time, so the count holds
            if bound is not None and bound.counted and row["status"] == "pending":
                self._check_pending_bound(conn, str(row["requester_id"]), bound)
            try:
                conn.execute(
                    f"INSERT INTO grants ({', '.join(GRANT_COLUMNS)}) VALUES ({', '.join(':' + c for c in GRANT_COLUMNS)})",  # noqa: S608 - fixed column list
                    stored,
                )
            except sqlite3.IntegrityError:
                raise Conflict("id") from None
            if review is not None:
                conn.execute(
                    "INSERT INTO grant_reviews (grant_id, review_json, due_at) VALUES (?, ?, ?)",
                    (row["id"], to_json(review), review_due),
                )
            for event in events:
                _record_event(conn, event, pinned_event_row(row, event, review), int(row["created_at"]))
            add_notices(conn, notices)
        return cast(Grant, row)

    @staticmethod
    def _check_pending_bound(conn: sqlite3.Connection, requester_id: str, bound: PendingBound) -> None:
        agent = conn.execute(
            "SELECT owner_id, owner FROM agents WHERE agent_id = ?", (requester_id,)
        ).fetchone()
        if agent is None:
            return  # a person's own request, or the management token's for someone not enrolled
        live, params = not_lapsed_sql(bound.lapse, GRANT_COLUMNS)
        params = {**params, "agent": requester_id, "owner": agent["owner_id"] or agent["owner"]}
        if bound.per_owner > 0:  # both counts in one walk of the owner's agents' pending grants
            same_owner = "owner_id = :owner" if agent["owner_id"] else "owner_id IS NULL AND owner = :owner"
            owners, agents = conn.execute(
                f"""SELECT count(*), total(requester_id = :agent) FROM grants WHERE status = 'pending'
                    AND {live} AND requester_id IN (SELECT agent_id FROM agents WHERE {same_owner})""",  # noqa: S608 - generated from the Lapse
                params,
            ).fetchone()
        else:  # the agent's own alone
            owners = 0
            (agents,) = conn.execute(
                f"SELECT count(*) FROM grants WHERE status = 'pending' AND {live} AND requester_id = :agent",  # noqa: S608 - generated from the Lapse
                params,
            ).fetchone()
        bound.check(int(owners), int(agents))

    async def get(self, grant_id: str) -> Grant | None:
        row = self._db.one("SELECT * FROM grants WHERE id = ?", (grant_id,))
        return grant_row(row) if row else None

    async def find_reusable(self, requester_id: str, reuse_key: str, lapse: Lapse) -> Grant | None:
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS)
        row = self._db.one(
            f"""SELECT * FROM grants WHERE requester_id = :requester_id AND reuse_key = :reuse_key
                AND status = 'approved' AND {live} ORDER BY created_at DESC, id DESC LIMIT 1""",  # noqa: S608 - generated from the Lapse
            {**params, "requester_id": requester_id, "reuse_key": reuse_key},
        )
        return grant_row(row) if row else None

    async def list(
        self,
        *,
        lapse: Lapse,
        page: PageRequest,
        status: str | None = None,
        requester: str | None = None,
        requester_ids: Sequence[str] | None = None,
        also_ids: Sequence[str] = (),
    ) -> tuple[list[Grant], bool]:
        where = ["1 = 1"]
        params: dict[str, Any] = {}
        if status:
            clause, extra = status_sql(lapse, status, GRANT_COLUMNS)
            where.append(clause)
            params.update(extra)
        if requester:
            where.append("requester = :requester")
            params["requester"] = requester
        if requester_ids is not None:
            ids = list(dict.fromkeys(requester_ids))
            extra_ids = list(dict.fromkeys(also_ids))
            if not ids and not extra_ids:
                return [], False
            scope = [f"requester_id IN ({', '.join(f':rid_{i}' for i in range(len(ids)))})"] if ids else []
            if extra_ids:
                scope.append(f"id IN ({', '.join(f':gid_{i}' for i in range(len(extra_ids)))})")
            where.append(f"({' OR '.join(scope)})")
            params.update({f"rid_{i}": v for i, v in enumerate(ids)})
            params.update({f"gid_{i}": v for i, v in enumerate(extra_ids)})
        after_sql(page, "id", where, params)
        rows = self._db.all(
            f"SELECT * FROM grants WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT :limit",  # noqa: S608 - generated clauses, values bound
            params,
        )
        found, more = page_rows(rows, page.limit)
        return [grant_row(r) for r in found], more

    async def update_if(
        self,
        grant_id: str,
        *,
        expect: Sequence[str],
        changes: dict[str, Any],
        event: str,
        lapse: Lapse,
        now: int,
        notices: Sequence[OutboxRow] = (),
    ) -> Grant | None:
        """The conditional UPDATE and its RETURNING decide between concurrent callers in any process."""
        update = self._update_sql(grant_id=grant_id, expect=expect, changes=changes, lapse=lapse)
        if update is None:
            return None
        async with self._db.awrite() as conn:
            row = conn.execute(*update).fetchone()
            if row is None:
                return None
            updated = dict(row)
            _record_event(conn, event, updated, now)
            add_notices(conn, notices)
        return grant_row(updated)

    @staticmethod
    def _update_sql(
        *, grant_id: str, expect: Sequence[str], changes: dict[str, Any], lapse: Lapse
    ) -> tuple[str, dict[str, Any]] | None:
        """``update_if``'s conditional UPDATE … RETURNING and its values (None: nothing expected)."""
        if not expect:
            return None
        cols = [c for c in changes if c in GRANT_CHANGEABLE]
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS)
        sets = ", ".join([*(f"{c} = :set_{c}" for c in cols), "version = version + 1"])
        marks = ", ".join(f":expect_{i}" for i in range(len(expect)))
        params.update({f"set_{c}": (to_json(changes[c]) if c == "request" else changes[c]) for c in cols})
        params.update({f"expect_{i}": s for i, s in enumerate(expect)})
        params["id"] = grant_id
        sql = f"UPDATE grants SET {sets} WHERE id = :id AND status IN ({marks}) AND {live} RETURNING *"  # noqa: S608 - column names from a fixed set
        return sql, params

    async def expire(self, lapse: Lapse, now: int, events_before: int) -> builtins.list[Grant]:
        # Each lapse term is an index range (grants_lapse on (status, expires_at), grants_status on
        # (status, created_at)), so a sweep costs nothing while nothing lapsed, however many grants
        # exist; the write lock is taken only when there is something to write.
        lapsed, params = lapsed_sql(lapse, GRANT_COLUMNS)
        found = self._db.one(f"SELECT 1 AS x FROM grants WHERE {lapsed} LIMIT 1", params)  # noqa: S608 - generated from the Lapse
        old_events = self._db.one(
            "SELECT 1 AS x FROM grant_events WHERE created_at < ? LIMIT 1", (events_before,)
        )
        if found is None and old_events is None:
            return []
        async with self._db.awrite() as conn:
            rows = [
                dict(r)
                for r in conn.execute(
                    f"UPDATE grants SET status = :expired, version = version + 1 WHERE {lapsed} RETURNING *",  # noqa: S608 - generated from the Lapse
                    {**params, "expired": EXPIRED},
                ).fetchall()
            ]
            rows.sort(key=lambda g: (g["created_at"], g["id"]))
            for row in rows:
                _record_event(conn, "grant.expired", row, now)
            conn.execute("DELETE FROM grant_events WHERE created_at < ?", (events_before,))
        return [grant_row(r) for r in rows]

    async def events_after(self, seq: int, limit: int) -> builtins.list[GrantEvent]:
        return [grant_event(row) for row in await self.event_rows_after(seq, limit)]

    async def event_rows_after(self, seq: int, limit: int) -> builtins.list[GrantEventRow]:
        cursor = self._db.conn.cursor()
        cursor.row_factory = None  # plain tuples, not sqlite3.Row: the sequencer reads every event (issue 23)
        return cursor.execute(
            "SELECT seq, event, grant_id, requester, created_at, grant_json FROM grant_events "
            "WHERE seq > ? ORDER BY seq LIMIT ?",
            (seq, limit),
        ).fetchall()

    async def last_event_seq(self) -> int:
        row = self._db.one("SELECT max(seq) AS seq FROM grant_events")
        return int(row["seq"] or 0) if row else 0

    async def review_of(self, grant_id: str) -> GrantReview | None:
        row = self._db.one("SELECT * FROM grant_reviews WHERE grant_id = ?", (grant_id,))
        return review_row(row) if row else None

    async def votes(self, grant_id: str) -> builtins.list[Vote]:
        return [
            vote_row(r)
            for r in self._db.all("SELECT * FROM grant_votes WHERE grant_id = ? ORDER BY seq", (grant_id,))
        ]

    async def reviews_and_votes(
        self, grant_ids: Sequence[str]
    ) -> tuple[dict[str, GrantReview], dict[str, builtins.list[Vote]]]:
        ids = list(dict.fromkeys(grant_ids))
        if not ids:
            return {}, {}
        marks = ", ".join("?" for _ in ids)
        reviews = {
            r["grant_id"]: review_row(r)
            for r in self._db.all(
                f"SELECT * FROM grant_reviews WHERE grant_id IN ({marks})",  # noqa: S608 - placeholders only
                ids,
            )
        }
        votes: dict[str, builtins.list[Vote]] = {}
        for r in self._db.all(f"SELECT * FROM grant_votes WHERE grant_id IN ({marks}) ORDER BY seq", ids):  # noqa: S608 - placeholders only
            votes.setdefault(r["grant_id"], []).append(vote_row(r))
        return reviews, votes

    async def view(self, grant_id: str) -> GrantView | None:
        row = self._db.one(VIEW_SQL, (grant_id,))
        return view_row(row) if row else None

    async def add_vote(self, vote: Vote) -> str:
        async with self._db.awrite() as conn:  # BEGIN IMMEDIATE: the status read and the insert are one step
            return self._add_vote(conn, vote)[0]

    @staticmethod
    def _add_vote(conn: sqlite3.Connection, vote: Vote) -> tuple[str, int]:
        """In the caller's write transaction: the outcome and how many votes came before it."""
        values = {c: vote.get(c) for c in VOTE_COLUMNS}
        values["evidence"] = to_json(values["evidence"]) if values["evidence"] is not None else None
        values["management"] = 1 if vote["management"] else 0
        found = conn.execute(
            "SELECT g.*, (SELECT count(*) FROM grant_votes v WHERE v.grant_id = g.id) AS _before FROM grants g WHERE g.id = ?",
            (vote["grant_id"],),
        ).fetchone()
        if found is None or found["status"] != "pending":
            return "decided", 0
        try:
            conn.execute(
                f"INSERT INTO grant_votes ({', '.join(VOTE_COLUMNS)}) VALUES ({', '.join(':' + c for c in VOTE_COLUMNS)})",  # noqa: S608 - fixed column list
                values,
            )
        except sqlite3.IntegrityError:
            return "duplicate", 0
        # every vote is a grant event (D14: a leaf; live streams see it), in the vote's transaction
        kept = {k: v for k, v in vote.items() if k != "evidence" or v is not None}
        grant = dict(found)
        before = int(grant.pop("_before"))
        _record_event(conn, "grant.reviewed", {**grant, "vote": kept}, int(vote["at"]))
        return "recorded", before

    async def add_deciding_vote(
        self,
        vote: Vote,
        *,
        seen: int,
        expect: Sequence[str],
        changes: dict[str, Any],
        event: str,
        lapse: Lapse,
        now: int,
        notices: Sequence[OutboxRow] = (),
    ) -> tuple[str, Grant | None]:
        update = self._update_sql(grant_id=vote["grant_id"], expect=expect, changes=changes, lapse=lapse)
        async with self._db.awrite() as conn:  # one write transaction: the vote, the decision, their events
            outcome, before = self._add_vote(conn, vote)
            if outcome != "recorded" or before != seen or update is None:
                return outcome, None
            row = conn.execute(*update).fetchone()
            if row is None:
                return outcome, None  # lapsed meanwhile: the vote stays, the caller refuses
            updated = dict(row)
            _record_event(conn, event, updated, now)
            add_notices(conn, notices)
        return outcome, grant_row(updated)

    async def escalate_if(
        self, grant_id: str, seen: int, level: int, now: int, notices: Sequence[OutboxRow] = ()
    ) -> bool:
        async with self._db.awrite() as conn:
            cur = conn.execute(
                """UPDATE grant_reviews SET escalation_level = ? WHERE grant_id = ? AND escalation_level = ?
                   AND EXISTS (SELECT 1 FROM grants WHERE id = ? AND status = 'pending')""",
                (level, grant_id, seen, grant_id),
            )
            if cur.rowcount != 1:
                return False
            row = dict(conn.execute("SELECT * FROM grants WHERE id = ?", (grant_id,)).fetchone())
            for reached in range(seen + 1, level + 1):
                _record_event(conn, "grant.escalated", {**row, "escalation_level": reached}, now)
            add_notices(conn, notices)
            return True

    async def due_reviews(self, now: int, limit: int) -> builtins.list[GrantReview]:
        rows = self._db.all(  # the partial index grant_reviews_due (schema 0017) holds only these
            "SELECT * FROM grant_reviews WHERE due_at <= ? ORDER BY due_at, grant_id LIMIT ?", (now, limit)
        )
        return review_rows(rows)

    async def set_review_due(self, grant_id: str, due: int | None) -> None:
        async with self._db.awrite() as conn:
            conn.execute("UPDATE grant_reviews SET due_at = ? WHERE grant_id = ?", (due, grant_id))

    async def pending_review_groups(self, limit: int) -> builtins.list[ReviewGroup]:
        rows = self._db.all(
            """SELECT review_json, escalation_level, json_group_array(grant_id) AS grant_ids FROM (
                   SELECT r.review_json, r.escalation_level, r.grant_id FROM grant_reviews r
                   JOIN grants g ON g.id = r.grant_id WHERE g.status = 'pending'
                   ORDER BY g.created_at, g.id LIMIT ?
               ) GROUP BY review_json, escalation_level""",
            (limit,),
        )
        return review_group_rows(rows)

    async def wait_for_events(self, seconds: float) -> None:
        """SQLite cannot tell another process's commit: wait the poll interval (the hub polls)."""
        await asyncio.sleep(seconds)

    async def summary(self, lapse: Lapse) -> tuple[dict[str, int], int | None]:
        # Index-only: the stored counts come from grants_status, each lapse term is an index range
        # (grants_status / grants_lapse), the oldest pending one a range scan's first entry.
        counts = {
            r["status"]: int(r["n"])
            for r in self._db.all("SELECT status, count(*) AS n FROM grants GROUP BY status")
        }
        for stored in lapse.cutoffs:
            if not counts.get(stored):
                continue
            clause, params = lapsed_sql(lapse, GRANT_COLUMNS, only=stored)
            row = self._db.one(f"SELECT count(*) AS n FROM grants WHERE {clause}", params)  # noqa: S608 - generated from the Lapse
            moved = int(row["n"]) if row else 0
            counts[stored] -= moved
            counts[EXPIRED] = counts.get(EXPIRED, 0) + moved
        clause, params = status_sql(lapse, "pending", GRANT_COLUMNS)
        row = self._db.one(f"SELECT min(created_at) AS oldest FROM grants WHERE {clause}", params)  # noqa: S608 - generated from the Lapse
        oldest = row["oldest"] if row else None
        return {k: v for k, v in counts.items() if v}, (int(oldest) if oldest is not None else None)
