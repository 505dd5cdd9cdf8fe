"""Issue 27, item 5: the queries of the hot paths (sign-in, create, approve, token, verify, consume,
GET, list and the abuse-limit counters) use an index, so their cost does not grow with the number
of grants and agents stored. Every statement the SQLite store runs for them is captured from its
connections and its plan (EXPLAIN QUERY PLAN) must not scan a table without an index."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from grantd.plugins.storage_sqlite import SQLiteStore
from grantd.plugins.storage_sqlite import connection as sqlite_connection
from grantd.testing.factories import NOW, agent, first_page, grant, lapse

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# Partial indexes that hold exactly the rows their query asks for: walking one reads those rows
# only, however many others the table holds (people_admins: the active administrators;
# grant_reviews_due: the reviews the sweep must still look at, by due time).
PARTIAL_INDEXES = ("people_admins", "grant_reviews_due")


def _plan_scans(conn: sqlite3.Connection, sql: str) -> list[str]:
    """The plan lines that walk a whole table: a SCAN, unless it walks an index in order under a
    LIMIT with no filter (a page of the newest grants reads one page, whatever the table holds; with
    a filter the walk may read every row that does not match), or walks one of PARTIAL_INDEXES, or
    walks the rows a subquery made (the subquery's own lines say how it read them)."""
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
    unfiltered_page = bool(re.search(r"WHERE 1 = 1 ORDER BY .* LIMIT \d+$", " ".join(sql.split())))
    return [
        row[3]
        for row in rows
        if row[3].startswith("SCAN ")
        and not row[3].startswith("SCAN CONSTANT ROW")
        and not row[3].startswith("SCAN (subquery-")  # a subquery's own rows: its plan lines are checked
        and not (unfiltered_page and "USING INDEX" in row[3])
        and not any(row[3].endswith(f"USING INDEX {index}") for index in PARTIAL_INDEXES)
    ]


async def _hot_paths(store: SQLiteStore) -> None:
    """What the hot routes ask of the store (see the profiles in docs/performance.md)."""
    for i in range(50):
        await store.agents.create(agent(f"a{i}"), frozenset())
    for i in range(200):
        await store.grants.create(
            grant(f"g{i}", requester=f"a{i % 50}@agents.example.com", requester_id=f"agt_a{i % 50}"),
            ["grant.created"],
        )
    await store.agents.get_by_id("agt_a1")
    await store.agents.get("a1@agents.example.com")
    await store.agents.get("agt_a1")
    await store.grants.get("g1")
    await store.grants.review_of("g1")
    await store.grants.votes("g1")
    await store.grants.find_reusable("agt_a1", "rk", lapse(NOW))
    vote = {
        "grant_id": "g2",
        "email": "o@example.com",
        "voter_id": "usr_o",
        "decision": "approve",
        "via": "api",
        "at": NOW,
        "reason": None,
        "grant_type": None,
        "duration": None,
        "management": False,
    }
    await store.grants.add_vote(vote)  # type: ignore[arg-type]
    await store.grants.view("g2")  # GET, token and a vote: the grant, its review and votes in one
    await store.grants.add_deciding_vote(
        {**vote, "grant_id": "g3"},  # type: ignore[arg-type]
        seen=0,
        expect=("pending",),
        changes={"status": "approved", "decided_at": NOW, "decided_by": "o@example.com"},
        event="grant.approved",
        lapse=lapse(NOW),
        now=NOW,
    )
    await store.grants.update_if(
        "g1",
        expect=("pending",),
        changes={"status": "approved", "decided_at": NOW, "decided_by": "o@example.com"},
        event="grant.approved",
        lapse=lapse(NOW),
        now=NOW,
    )
    await store.grants.list(lapse=lapse(NOW), page=first_page(), requester_ids=["agt_a1", "agt_a2"])
    await store.grants.list(lapse=lapse(NOW), page=first_page(), status="approved", requester_ids=["agt_a1"])
    await store.grants.list(lapse=lapse(NOW), page=first_page())
    await store.grants.list(lapse=lapse(NOW), page=first_page(), status="pending")
    await store.rates.hit("verify:10.0.0.1", NOW, 60_000, NOW)
    await store.rates.count("verify:10.0.0.1", NOW)
    await store.challenges.create("c1", "agt_a1", NOW + 60_000, NOW)
    await store.challenges.take("c1", "agt_a1")
    await store.challenges.create_for("c2", "a1@agents.example.com", NOW + 60_000, NOW)  # sign-in
    await store.challenges.take_for("c2", "agt_a1")
    await store.tlog.grant_indexes("g1", 10, NOW)  # GET /api/audit/grants/:id: a grant's leaves
    await store.people.admins(2000)  # who may approve under @admins: a grant's notices, its reviewers
    await store.people.get_many(["a@example.com", "b@example.com"])  # the people a grant's notices tell
    for i in range(20):  # pinned to a policy, due in an hour (every 5 s every process sweeps them)
        await store.grants.create(
            grant(f"p{i}"), [], review={"policy_ids": ["p"]}, review_due=NOW + 3_600_000
        )
    await store.grants.due_reviews(NOW, 1000)  # the sweep: only the reviews that came due
    await store.grants.pending_review_groups(1000)  # a person's list: grants naming them through a group
    await store.grants.set_review_due("p1", None)


async def _scans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drop: tuple[str, ...] = ()
) -> dict[str, list[str]]:
    """Each hot-path statement whose plan walks a whole table, with those plan lines."""
    statements: list[str] = []
    connect = sqlite_connection._Database.connect

    def traced(self: sqlite_connection._Database, busy_timeout_ms: int) -> sqlite3.Connection:
        conn = connect(self, busy_timeout_ms)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite_connection._Database, "connect", traced)
    store = SQLiteStore(tmp_path / "grantd.db")
    await store.migrate()
    try:
        for index in drop:  # the test breaks the schema on purpose
            store._db.conn.execute(f"DROP INDEX {index}")  # noqa: SLF001
        statements.clear()  # the migration's own statements are not the hot paths
        await _hot_paths(store)
    finally:
        store.close()
    checked = [
        s
        for s in dict.fromkeys(statements)
        if s.lstrip().split(None, 1)[0].upper() in ("SELECT", "UPDATE", "DELETE", "INSERT", "WITH")
    ]
    assert len(checked) >= 10, checked  # the capture worked
    conn = sqlite3.connect(tmp_path / "grantd.db")
    conn.create_function("grantd_fold", 1, lambda v: v, deterministic=True)
    try:
        return {s: found for s in checked if (found := _plan_scans(conn, s))}
    finally:
        conn.close()


async def test_hot_queries_use_indexes_on_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    assert await _scans(tmp_path, monkeypatch) == {}


async def test_the_check_sees_a_missing_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Without the indexes that lead with a grant's requester, listing an agent's grants walks
    every grant (in the order of another index): the check says so, and names that statement."""
    dropped = ("grants_requester_id", "grants_reuse", "grants_pending_requester")
    scans = await _scans(tmp_path, monkeypatch, drop=dropped)
    assert scans and all("requester_id IN" in statement for statement in scans), scans


async def test_the_check_sees_the_administrators_read_without_their_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Without people_admins, finding the administrators walks every person: the check says so."""
    scans = await _scans(tmp_path, monkeypatch, drop=("people_admins",))
    assert list(scans) == [s for s in scans if "FROM people WHERE admin = 1" in s] and scans, scans


async def test_the_check_sees_the_sweep_read_without_its_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Without grant_reviews_due, the sweep's due reviews are found by walking every pinned one."""
    scans = await _scans(tmp_path, monkeypatch, drop=("grant_reviews_due",))
    assert list(scans) == [s for s in scans if "FROM grant_reviews WHERE due_at" in s] and scans, scans
