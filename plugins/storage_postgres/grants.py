"""Grants and their events on PostgreSQL (``grantd.store.Grants``)."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Sequence
from typing import Any, cast

from grantd.core.lifecycle import EXPIRED, Lapse
from grantd.core.paging import PageRequest
from grantd.store import Conflict, PendingBound
from grantd.store.notify import OutboxRow
from grantd.store.records import (
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

from .connection import (
    _add_events,
    _Batch,
    _nul_finds_nothing,
    _on_store_loop,
    _Part,
    _record_events,
    _unique_violation,
)
from .constants import OWNER_LOCKS
from .notify import add_notices, add_notices_batch
from .sql import PG, _cols

REVIEW_INSERT = "INSERT INTO grant_reviews (grant_id, review_json, due_at) VALUES (%s, %s, %s)"
# One statement: the vote goes in only while the grant is pending. FOR SHARE makes it wait for a
# concurrent decision (update_if) to commit and then see its status, so no vote lands on a decided grant.
VOTE_INSERT = (
    f"INSERT INTO grant_votes ({_cols(VOTE_COLUMNS)}) SELECT {', '.join(['%s'] * len(VOTE_COLUMNS))} "  # noqa: S608 - fixed columns
    "WHERE EXISTS (SELECT 1 FROM grants WHERE id = %s AND status = 'pending' FOR SHARE) "
    "ON CONFLICT (grant_id, email) DO NOTHING RETURNING seq, grant_id"
)
VOTE_WITH_GRANT = f"WITH v AS ({VOTE_INSERT}) SELECT g.* FROM grants g JOIN v ON g.id = v.grant_id"  # noqa: S608 - fixed text
# A deciding vote locks the grant's row FOR UPDATE before it writes (the decision's UPDATE comes
# in the same transaction): two of them holding FOR SHARE each would wait for the other's.
VOTE_WITH_SEQ = (
    f"WITH v AS ({VOTE_INSERT.replace('FOR SHARE', 'FOR UPDATE')}) "  # noqa: S608 - fixed text
    "SELECT g.*, v.seq AS _seq FROM grants g JOIN v ON g.id = v.grant_id"
)
# The grant, its pinned review and its votes in one statement and one round trip (``view``).
VIEW_SQL = """SELECT g.*, r.review_json AS _review_json, r.escalation_level AS _review_level,
    (SELECT coalesce(json_agg(v ORDER BY v.seq), '[]'::json) FROM grant_votes v WHERE v.grant_id = g.id) AS _votes,
    (SELECT row_to_json(a) FROM agents a WHERE a.agent_id = g.requester_id) AS _agent
    FROM grants g LEFT JOIN grant_reviews r ON r.grant_id = g.id WHERE g.id = %s"""
GRANT_INSERT = (
    f"INSERT INTO grants ({_cols(GRANT_COLUMNS)}) VALUES ({', '.join(['%s'] * len(GRANT_COLUMNS))})"  # noqa: S608 - fixed columns
)


def _update_sql(
    grant_id: str, expect: Sequence[str], changes: dict[str, Any], lapse: Lapse
) -> tuple[str, dict[str, Any]] | None:
    """``update_if``'s conditional UPDATE … RETURNING and its values (None: nothing expected)."""
    if not expect:
        return None
    cols = [c for c in changes if c in GRANT_CHANGEABLE]
    live, params = not_lapsed_sql(lapse, GRANT_COLUMNS, paramstyle=PG)
    sets = ", ".join([*(f"{c} = %(set_{c})s" for c in cols), "version = version + 1"])
    params.update({f"set_{c}": (to_json(changes[c]) if c == "request" else changes[c]) for c in cols})
    params["expect"] = builtins.list(expect)
    params["id"] = grant_id
    sql = f"UPDATE grants SET {sets} WHERE id = %(id)s AND status = ANY(%(expect)s) AND {live} RETURNING *"  # noqa: S608 - column names from a fixed set
    return sql, params


class PostgresGrants(_Part):
    @_on_store_loop
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
        values = [row[k] for k in GRANT_COLUMNS]
        values[GRANT_COLUMNS.index("request")] = to_json(row["request"])
        if bound is not None and bound.counted and row["status"] == "pending":
            owner = await self._db.one(
                "SELECT owner_id, owner FROM agents WHERE agent_id = %s", (row["requester_id"],)
            )
            if owner is not None:
                return await self._create_bounded(
                    row, values, events, owner, bound, review, review_due, notices
                )
        # One round trip: BEGIN, the grant, its events, COMMIT (a unique violation stops the rest; rolled back).
        async with self._db.batch() as batch:
            batch.plain("BEGIN")
            batch.add(GRANT_INSERT, values)
            if review is not None:
                batch.add(REVIEW_INSERT, (row["id"], to_json(review), review_due))
            add_notices_batch(batch, notices)
            _add_events(
                batch,
                [(event, pinned_event_row(row, event, review), int(row["created_at"])) for event in events],
            )
            batch.plain("COMMIT")
            try:
                await batch.send()
            except _unique_violation():
                raise Conflict("id") from None
        return cast(Grant, row)

    async def _create_bounded(
        self,
        row: dict[str, Any],
        values: builtins.list[Any],
        events: Sequence[str],
        owner: dict[str, Any],
        bound: PendingBound,
        review: dict[str, Any] | None = None,
        review_due: int | None = None,
        notices: Sequence[OutboxRow] = (),
    ) -> Grant:
        """An agent's pending grant under ``pending_per_owner`` or ``pending_per_agent``: the
        per-owner lock serialises the count and the insert across processes and nodes (an agent's
        grants all take its owner's lock; several round trips, only for this case)."""
        key = owner["owner_id"] or owner["owner"]
        live, params = not_lapsed_sql(bound.lapse, GRANT_COLUMNS, paramstyle=PG)
        params = {**params, "owner": key, "agent": row["requester_id"]}
        if bound.per_owner > 0:  # both counts in one walk of the owner's agents' pending grants
            same_owner = (
                "owner_id = %(owner)s" if owner["owner_id"] else "owner_id IS NULL AND owner = %(owner)s"
            )
            count = f"""SELECT count(*) AS owners, count(*) FILTER (WHERE requester_id = %(agent)s) AS agents
                FROM grants WHERE status = 'pending' AND {live}
                AND requester_id IN (SELECT agent_id FROM agents WHERE {same_owner})"""  # noqa: S608 - generated from the Lapse
        else:
            count = f"""SELECT 0 AS owners, count(*) AS agents FROM grants
                WHERE status = 'pending' AND {live} AND requester_id = %(agent)s"""  # noqa: S608 - generated from the Lapse
        async with self._db.tx() as cur:
            await cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (OWNER_LOCKS, key))
            await cur.execute(count, params)
            counted = await cur.fetchone()
            assert counted is not None  # an aggregate answers one row
            bound.check(int(counted["owners"]), int(counted["agents"]))
            try:
                await cur.execute(GRANT_INSERT, values)
            except _unique_violation():
                raise Conflict("id") from None
            if review is not None:
                await cur.execute(REVIEW_INSERT, (row["id"], to_json(review), review_due))
            await add_notices(cur, notices)
            await _record_events(
                cur,
                [(event, pinned_event_row(row, event, review), int(row["created_at"])) for event in events],
            )
        return cast(Grant, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, grant_id: str) -> Grant | None:
        row = await self._db.one("SELECT * FROM grants WHERE id = %s", (grant_id,))
        return grant_row(row) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def find_reusable(self, requester_id: str, reuse_key: str, lapse: Lapse) -> Grant | None:
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS, paramstyle=PG)
        row = await self._db.one(
            f"""SELECT * FROM grants WHERE requester_id = %(requester_id)s AND reuse_key = %(reuse_key)s
                AND status = 'approved' AND {live} ORDER BY created_at DESC, id DESC LIMIT 1""",  # noqa: S608 - generated from the Lapse
            {**params, "requester_id": requester_id, "reuse_key": reuse_key},
        )
        return grant_row(row) if row else None

    @_on_store_loop
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
        where = ["TRUE"]
        params: dict[str, Any] = {}
        if status:
            clause, extra = status_sql(lapse, status, GRANT_COLUMNS, paramstyle=PG)
            where.append(clause)
            params.update(extra)
        if requester:
            where.append("requester = %(requester)s")
            params["requester"] = requester
        if requester_ids is not None:
            ids = builtins.list(dict.fromkeys(requester_ids))
            extra_ids = builtins.list(dict.fromkeys(also_ids))
            if not ids and not extra_ids:
                return [], False
            where.append("(requester_id = ANY(%(requester_ids)s) OR id = ANY(%(also_ids)s))")
            params["requester_ids"] = ids
            params["also_ids"] = extra_ids
        after_sql(page, "id", where, params, paramstyle=PG)
        rows = await self._db.all(
            f"SELECT * FROM grants WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT %(limit)s",  # noqa: S608 - generated clauses, values bound
            params,
        )
        found, more = page_rows(rows, page.limit)
        return [grant_row(r) for r in found], more

    @_nul_finds_nothing(None)
    @_on_store_loop
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
        """One conditional UPDATE: a concurrent caller on any node waits for the row lock, re-checks
        the WHERE clause on the row the winner left, and gets no row."""
        update = _update_sql(grant_id, expect, changes, lapse)
        if update is None:
            return None
        # Two round trips: BEGIN and the UPDATE; then the events and COMMIT (or ROLLBACK: no row).
        async with self._db.batch() as batch:
            batch.plain("BEGIN")
            batch.add(*update)
            row = await batch.send()
            if row is None:
                batch.plain("ROLLBACK")
                await batch.send()
                return None
            add_notices_batch(batch, notices)
            _add_events(batch, [(event, row, now)])
            batch.plain("COMMIT")
            await batch.send()
        return grant_row(dict(row))

    @_on_store_loop
    async def expire(self, lapse: Lapse, now: int, events_before: int) -> builtins.list[Grant]:
        lapsed, params = lapsed_sql(lapse, GRANT_COLUMNS, paramstyle=PG)
        found = await self._db.one(
            f"""SELECT EXISTS (SELECT 1 FROM grants WHERE {lapsed}) AS lapsed,
                       EXISTS (SELECT 1 FROM grant_events WHERE created_at < %(events_before)s) AS old""",  # noqa: S608 - generated from the Lapse
            {**params, "events_before": events_before},
        )
        if not found or not (found["lapsed"] or found["old"]):
            return []
        async with self._db.tx() as cur:
            # Several nodes may sweep at once: a row another sweep expired first no longer matches
            # (re-checked after its row lock), so each grant expires, with its event, once.
            await cur.execute(
                f"UPDATE grants SET status = %(expired)s, version = version + 1 WHERE {lapsed} RETURNING *",  # noqa: S608 - generated from the Lapse
                {**params, "expired": EXPIRED},
            )
            rows = [dict(r) for r in await cur.fetchall()]
            rows.sort(key=lambda g: (g["created_at"], g["id"]))
            await cur.execute("DELETE FROM grant_events WHERE created_at < %s", (events_before,))
            await _record_events(cur, [("grant.expired", row, now) for row in rows])
        return [grant_row(r) for r in rows]

    async def events_after(self, seq: int, limit: int) -> builtins.list[GrantEvent]:
        return [grant_event(row) for row in await self.event_rows_after(seq, limit)]

    @_on_store_loop
    async def event_rows_after(self, seq: int, limit: int) -> builtins.list[GrantEventRow]:
        rows = await self._db.all(
            "SELECT seq, event, grant_id, requester, created_at, grant_json FROM grant_events "
            "WHERE seq > %s ORDER BY seq LIMIT %s",
            (seq, limit),
        )
        return [
            (r["seq"], r["event"], r["grant_id"], r["requester"], r["created_at"], r["grant_json"])
            for r in rows
        ]

    @_on_store_loop
    async def last_event_seq(self) -> int:
        row = await self._db.one("SELECT max(seq) AS seq FROM grant_events")
        return int(row["seq"] or 0) if row else 0

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def review_of(self, grant_id: str) -> GrantReview | None:
        row = await self._db.one("SELECT * FROM grant_reviews WHERE grant_id = %s", (grant_id,))
        return review_row(row) if row else None

    @_nul_finds_nothing(list)
    @_on_store_loop
    async def votes(self, grant_id: str) -> builtins.list[Vote]:
        rows = await self._db.all("SELECT * FROM grant_votes WHERE grant_id = %s ORDER BY seq", (grant_id,))
        return [vote_row(r) for r in rows]

    @_on_store_loop
    async def reviews_and_votes(
        self, grant_ids: Sequence[str]
    ) -> tuple[dict[str, GrantReview], dict[str, builtins.list[Vote]]]:
        ids = [
            i for i in dict.fromkeys(grant_ids) if "\x00" not in i
        ]  # PostgreSQL text holds no NUL: no such grant
        if not ids:
            return {}, {}
        rows = await self._db.all("SELECT * FROM grant_reviews WHERE grant_id = ANY(%s)", (ids,))
        reviews = {r["grant_id"]: review_row(r) for r in rows}
        votes: dict[str, builtins.list[Vote]] = {}
        for r in await self._db.all(
            "SELECT * FROM grant_votes WHERE grant_id = ANY(%s) ORDER BY seq", (ids,)
        ):
            votes.setdefault(r["grant_id"], []).append(vote_row(r))
        return reviews, votes

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def view(self, grant_id: str) -> GrantView | None:
        row = await self._db.one(VIEW_SQL, (grant_id,))
        return view_row(row) if row else None

    @_on_store_loop
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
        update = _update_sql(vote["grant_id"], expect, changes, lapse)
        values = [vote.get(c) for c in VOTE_COLUMNS]
        evidence = VOTE_COLUMNS.index("evidence")
        values[evidence] = to_json(values[evidence]) if values[evidence] is not None else None
        # Three round trips where a vote and then update_if took four: BEGIN and the vote (returning
        # its grant's row and its seq); the conditional UPDATE, which also requires that exactly
        # ``seen`` votes committed before this one (a statement of its own: it sees every vote
        # committed until then, as the re-read of the votes after a separate add_vote did); then
        # both events, the outbox rows and COMMIT. The vote locks the grant's row FOR UPDATE
        # (VOTE_WITH_SEQ): concurrent deciding votes on one grant take turns.
        updated: Grant | None = None
        async with self._db.batch() as batch:
            batch.plain("BEGIN")
            batch.add(VOTE_WITH_SEQ, [*values, vote["grant_id"]])
            found = await batch.send()
            if found is None:
                batch.plain("ROLLBACK")
                await batch.send()
            else:
                updated = await self._decide(batch, dict(found), vote, update, seen, event, now, notices)
        if found is None:  # asked on another connection once this one is back in the pool
            return await self._not_recorded(vote), None
        return "recorded", updated

    @staticmethod
    async def _decide(
        batch: _Batch,
        grant: dict[str, Any],
        vote: Vote,
        update: tuple[str, dict[str, Any]] | None,
        seen: int,
        event: str,
        now: int,
        notices: Sequence[OutboxRow],
    ) -> Grant | None:
        """``add_deciding_vote`` once the vote is in: the decision if it still holds, the events, COMMIT."""
        seq = grant.pop("_seq")
        updated = None
        if update is not None:
            sql, params = update
            batch.add(
                sql.replace(
                    " RETURNING *",
                    " AND (SELECT count(*) FROM grant_votes c WHERE c.grant_id = %(id)s AND c.seq < %(seq)s)"
                    " = %(seen)s RETURNING *",
                ),
                {**params, "seq": seq, "seen": seen},
            )
            updated = await batch.send()
        kept = {k: v for k, v in vote.items() if k != "evidence" or v is not None}
        events = [("grant.reviewed", {**grant, "vote": kept}, int(vote["at"]))]
        if updated is not None:
            add_notices_batch(batch, notices)
            events.append((event, updated, now))
        _add_events(batch, events)
        batch.plain("COMMIT")
        await batch.send()
        return grant_row(dict(updated)) if updated is not None else None

    async def _not_recorded(self, vote: Vote) -> str:
        again = await self._db.one(
            "SELECT 1 AS x FROM grant_votes WHERE grant_id = %s AND email = %s",
            (vote["grant_id"], vote["email"]),
        )
        return "duplicate" if again is not None else "decided"

    @_on_store_loop
    async def add_vote(self, vote: Vote) -> str:
        values = [vote.get(c) for c in VOTE_COLUMNS]
        evidence = VOTE_COLUMNS.index("evidence")
        values[evidence] = to_json(values[evidence]) if values[evidence] is not None else None
        # Two round trips, as update_if: BEGIN and the vote (returning its grant's row); then its
        # grant.reviewed event (D14: every vote is a leaf; live streams see it) and COMMIT.
        async with self._db.batch() as batch:
            batch.plain("BEGIN")
            batch.add(VOTE_WITH_GRANT, [*values, vote["grant_id"]])
            grant = await batch.send()
            if grant is not None:
                kept = {k: v for k, v in vote.items() if k != "evidence" or v is not None}
                _add_events(batch, [("grant.reviewed", {**grant, "vote": kept}, int(vote["at"]))])
                batch.plain("COMMIT")
                await batch.send()
                return "recorded"
            batch.plain("ROLLBACK")
            await batch.send()
        return await self._not_recorded(vote)

    @_nul_finds_nothing(False)
    @_on_store_loop
    async def escalate_if(
        self, grant_id: str, seen: int, level: int, now: int, notices: Sequence[OutboxRow] = ()
    ) -> bool:
        async with self._db.tx() as cur:
            await cur.execute(
                """UPDATE grant_reviews SET escalation_level = %s WHERE grant_id = %s AND escalation_level = %s
                   AND EXISTS (SELECT 1 FROM grants WHERE id = %s AND status = 'pending' FOR SHARE)""",
                (level, grant_id, seen, grant_id),
            )
            if cur.rowcount != 1:
                return False
            await cur.execute("SELECT * FROM grants WHERE id = %s", (grant_id,))
            row = dict(await cur.fetchone() or {})
            await add_notices(cur, notices)
            await _record_events(
                cur,
                [
                    ("grant.escalated", {**row, "escalation_level": reached}, now)
                    for reached in range(seen + 1, level + 1)
                ],
            )
            return True

    @_on_store_loop
    async def due_reviews(self, now: int, limit: int) -> builtins.list[GrantReview]:
        rows = await self._db.all(  # the partial index grant_reviews_due (schema 0015) holds only these
            "SELECT * FROM grant_reviews WHERE due_at <= %s ORDER BY due_at, grant_id LIMIT %s", (now, limit)
        )
        return review_rows(rows)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def set_review_due(self, grant_id: str, due: int | None) -> None:
        await self._db.one(
            "UPDATE grant_reviews SET due_at = %s WHERE grant_id = %s", (due, grant_id), rows=False
        )

    @_on_store_loop
    async def pending_review_groups(self, limit: int) -> builtins.list[ReviewGroup]:
        rows = await self._db.all(
            """SELECT review_json, escalation_level, array_agg(grant_id) AS grant_ids FROM (
                   SELECT r.review_json, r.escalation_level, r.grant_id FROM grant_reviews r
                   JOIN grants g ON g.id = r.grant_id WHERE g.status = 'pending'
                   ORDER BY g.created_at, g.id LIMIT %s
               ) oldest GROUP BY review_json, escalation_level""",
            (limit,),
        )
        return review_group_rows(rows)

    @_on_store_loop
    async def summary(self, lapse: Lapse) -> tuple[dict[str, int], int | None]:
        # One statement: stored counts per status (grants_status), lapsed ones moved to expired
        # (index ranges on grants_lapse / grants_status), the oldest live pending one.
        lapsed, params = lapsed_sql(lapse, GRANT_COLUMNS, paramstyle=PG)
        pending, extra = status_sql(lapse, "pending", GRANT_COLUMNS, paramstyle=PG)
        async with self._db.tx() as cur:
            await cur.execute("SELECT status, count(*) AS n FROM grants GROUP BY status")
            counts = {str(r["status"]): int(r["n"]) for r in await cur.fetchall()}
            await cur.execute(
                f"SELECT status, count(*) AS n FROM grants WHERE {lapsed} GROUP BY status",  # noqa: S608 - generated from the Lapse
                params,
            )
            moved = await cur.fetchall()
            await cur.execute(f"SELECT min(created_at) AS oldest FROM grants WHERE {pending}", extra)  # noqa: S608 - generated from the Lapse
            row = await cur.fetchone()
        for r in moved:
            counts[str(r["status"])] -= int(r["n"])
            counts[EXPIRED] = counts.get(EXPIRED, 0) + int(r["n"])
        oldest = row["oldest"] if row else None
        return {k: v for k, v in counts.items() if v}, (int(oldest) if oldest is not None else None)

    async def wait_for_events(self, seconds: float) -> None:
        """Return when grant events may have been committed by any node (NOTIFY) since the last
        call returned, or after ``seconds``. While the LISTEN connection is down it just
        waits the timeout (the hub then polls)."""
        db = self._db
        if db.served_events is not None and asyncio.get_running_loop() is db.served_loop:
            await db.served_events.wait(seconds)
        else:
            assert db.events is not None
            await db.loop.run(db.events.wait(seconds))
