"""Issue 27, item 5, on PostgreSQL: the statements of the hot paths (the same calls as
tests/server/test_query_plans.py) are captured from the store's cursors and planned with sequential
scans priced out (``enable_seqscan = off``): a plan that still reads a whole table has no index
to use. And the abuse-limit counters live in an UNLOGGED table (schema 0009: no WAL flush per
counted request), still counting every hit once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from server.test_query_plans import _hot_paths

pytest.importorskip("psycopg")
pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # a PostgreSQL server of its own: ~10 s


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _captured(pg_dsn: str, monkeypatch: pytest.MonkeyPatch, drop: tuple[str, ...] = ()) -> list[Any]:
    import psycopg

    from grantd.plugins.storage_postgres import PostgresStore

    statements: list[tuple[str, Any]] = []
    execute = psycopg.AsyncCursor.execute

    async def traced(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if isinstance(query, str):
            statements.append((query, params))
        return await execute(self, query, params, **kwargs)

    store = PostgresStore(pg_dsn, pool_size=4)
    await store.migrate()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for index in drop:  # the test breaks the schema on purpose
            conn.execute(f"DROP INDEX {index}")
    monkeypatch.setattr(psycopg.AsyncCursor, "execute", traced)
    try:
        await _hot_paths(store)
    finally:
        monkeypatch.undo()
        store.close()
    # one statement at a time (the batched writes join several with "; ": EXPLAIN takes one)
    return [(q, p) for q, p in statements if ";" not in q.strip().rstrip(";")]


def _whole_table_reads(plan: dict[str, Any], limited: bool = False) -> list[str]:
    """Plan nodes that read a whole table: a sequential scan, or an index walked from end to end
    (no Index Cond) unless it is an unfiltered page under a LIMIT (the newest grants: one page)."""
    kind = plan["Node Type"]
    limited = limited or kind == "Limit"
    found = []
    if kind == "Seq Scan":
        found.append(f"Seq Scan on {plan.get('Relation Name')}")
    elif kind in ("Index Scan", "Index Only Scan") and "Index Cond" not in plan:
        if not (limited and "Filter" not in plan):
            found.append(
                f"{kind} using {plan.get('Index Name')} on {plan.get('Relation Name')} without a condition"
            )
    for child in plan.get("Plans", []):
        found.extend(_whole_table_reads(child, limited))
    return found


# The sweep of ended rate windows reads at most RATE_SWEEP_LIMIT rows that have all ended, at most
# once a second per process (grantd.store.RATE_SWEEP_EVERY_MS), off the per-request path.
NOT_HOT = ("DELETE FROM rate_counters WHERE (key, window_start) IN",)


def _seq_scans(pg_dsn: str, statements: list[tuple[str, Any]]) -> dict[str, list[str]]:
    import psycopg

    found: dict[str, list[str]] = {}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")  # an empty table is cheaper to scan: price that out
        for query, params in statements:
            verb = query.lstrip().split(None, 1)[0].upper()
            if verb not in ("SELECT", "UPDATE", "DELETE", "INSERT", "WITH") or query.lstrip().startswith(
                NOT_HOT
            ):
                continue
            row = conn.execute("EXPLAIN (FORMAT JSON) " + query, params).fetchone()
            assert row is not None
            document = row[0] if not isinstance(row[0], str) else json.loads(row[0])
            scans = _whole_table_reads(document[0]["Plan"])
            if scans:
                found[" ".join(query.split())] = scans
    return found


async def test_hot_queries_use_indexes_on_postgres(pg_dsn: str, monkeypatch: pytest.MonkeyPatch):
    statements = await _captured(pg_dsn, monkeypatch)
    assert len(statements) >= 10, statements  # the capture worked
    assert await asyncio.to_thread(_seq_scans, pg_dsn, statements) == {}


async def test_the_postgres_check_sees_a_missing_index(pg_dsn: str, monkeypatch: pytest.MonkeyPatch):
    dropped = ("grants_requester_id", "grants_reuse", "grants_pending_requester")
    statements = await _captured(pg_dsn, monkeypatch, drop=dropped)
    scans = await asyncio.to_thread(_seq_scans, pg_dsn, statements)
    assert any("requester_id" in statement for statement in scans), scans


async def test_rate_counters_are_unlogged_and_count_every_hit(pg_dsn: str):
    import psycopg

    from grantd.plugins.storage_postgres import PostgresStore

    store = PostgresStore(pg_dsn, pool_size=4)
    await store.migrate()
    try:
        counts = await asyncio.gather(*(store.rates.hit("verify:10.0.0.9", 0, 60_000, 1) for _ in range(40)))
        assert sorted(counts) == list(range(1, 41))
    finally:
        store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT relpersistence FROM pg_class WHERE relname = 'rate_counters' AND relnamespace = "
            "current_schema()::regnamespace"
        ).fetchone()
    assert row == ("u",)


async def test_the_postgres_check_sees_the_sweep_read_without_its_index(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
):
    """Without grant_reviews_due, the sweep's due reviews are found by walking every pinned one."""
    statements = await _captured(pg_dsn, monkeypatch, drop=("grant_reviews_due",))
    scans = await asyncio.to_thread(_seq_scans, pg_dsn, statements)
    assert list(scans) == [s for s in scans if "FROM grant_reviews WHERE due_at" in s] and scans, scans
