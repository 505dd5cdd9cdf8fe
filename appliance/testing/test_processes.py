"""Several OS processes, each with its own store on one database (a SQLite file, or one PostgreSQL
database: as several nodes would), race for the same record; the database decides, so exactly one
wins (D5, D6, D11)."""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Iterator
from multiprocessing.pool import Pool
from pathlib import Path

import pytest

from grantd.core.paging import PageRequest
from grantd.store import Conflict

from . import _workers
from .factories import (
    HOUR,
    NOW,
    agent,
    device_code,
    grant,
    person,
    refresh_token,
    registration,
    sha,
    token_hash,
)
from .postgres import schemas as postgres_server

PROCESSES = 3
pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def pool() -> Iterator[Pool]:
    # spawn: a forked child would inherit the parent's open SQLite connections
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as workers:
        workers.map(abs, range(PROCESSES))  # warm: every process has imported its modules
        yield workers


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Where the processes meet: a SQLite file, or ``postgres:DSN`` of an empty PostgreSQL schema."""
    if request.param == "sqlite":
        yield str(tmp_path / "grantd.db")
        return
    server = postgres_server()
    dsn = server.create_schema()
    try:
        yield "postgres:" + dsn
    finally:
        server.drop_schema(dsn)


def start_soon() -> float:
    return time.time() + 0.2


async def test_challenge_taken_once_across_processes(target, pool):
    path = target
    store = _workers.open_store(path)
    await store.migrate()
    await store.challenges.create("c1", "agt_a", NOW + 60_000, NOW)
    store.close()
    results = pool.starmap(_workers.take, [(path, start_soon())] * PROCESSES)
    assert [r for rs in results for r in rs if r is not None] == [NOW + 60_000]


async def test_update_if_has_one_winner_across_processes(target, pool):
    path = target
    store = _workers.open_store(path)
    await store.migrate()
    await store.grants.create(grant("g1", status="approved", expires_at=NOW + HOUR), [])
    try:
        results = pool.starmap(_workers.consume, [(path, start_soon(), NOW)] * PROCESSES)
        assert [v for vs in results for v in vs] == [2]
        assert (await store.grants.get("g1"))["status"] == "consumed"
        assert [e["event"] for e in await store.grants.events_after(0, 100)] == ["grant.consumed"]
    finally:
        store.close()


async def test_first_key_inserted_once_across_processes(target, pool):
    path = target
    store = _workers.open_store(path)
    await store.migrate()
    try:
        at = start_soon()
        results = pool.starmap(_workers.add_first_key, [(path, at, f"k{i}", NOW) for i in range(PROCESSES)])
        assert results.count(True) == 1
        assert [k["kid"] for k in await store.keys.all()] == [f"k{results.index(True)}"]
    finally:
        store.close()


async def test_concurrent_migrations(target, pool):
    path = target
    at = start_soon()
    results = pool.starmap(_workers.migrate, [(path, at)] * 2)
    applied = sorted(v for vs in results for v in vs)
    store = _workers.open_store(path)
    try:
        declared = sorted(v for v, _, _ in sys.modules[type(store).__module__].MIGRATIONS)
        assert (
            applied == declared and declared[-1] == store.schema_version()
        )  # each once, by one process or the other
        assert await store.migrate() == []
    finally:
        store.close()


async def test_rate_counter_counts_every_hit_once_across_processes(target, pool):
    path = target
    store = _workers.open_store(path)
    await store.migrate()
    try:
        results = pool.starmap(_workers.hit, [(path, start_soon(), NOW)] * PROCESSES)
        counts = sorted(c for cs in results for c in cs)
        assert counts == list(range(1, PROCESSES * _workers.TAKERS + 1))
        assert await store.rates.count("auth:10.0.0.1", NOW - NOW % 60_000) == PROCESSES * _workers.TAKERS
    finally:
        store.close()


async def test_registration_url_redeemed_once_across_processes(target, pool):
    path = target
    store = _workers.open_store(path)
    await store.migrate()
    await store.registrations.create(registration("r1"))
    try:
        at = start_soon()
        results = pool.starmap(
            _workers.complete_registration,
            [(path, at, token_hash("r1"), f"p{i}_", NOW) for i in range(PROCESSES)],
        )
        flat = [r for rs in results for r in rs]
        winners = [r for r in flat if not r.startswith("conflict:")]
        assert len(winners) == 1
        assert sorted(r for r in flat if r.startswith("conflict:")) == ["conflict:token"] * (len(flat) - 1)
        alice = await store.people.get("alice@example.com")
        assert [c["credential_id"] for c in await store.credentials.list_for(alice["person_id"])] == winners
        assert (await store.people.list(PageRequest(100, None)))[0] == [alice]
        assert (await store.registrations.get_by_token_hash(token_hash("r1")))["used_at"] == NOW
    finally:
        store.close()


# -- OAuth (grantd.store.oauth): single use across processes and nodes ----------------------------------
async def test_onetime_record_taken_once_across_processes(target, pool):
    store = _workers.open_store(target)
    await store.migrate()
    try:
        await store.onetime.put("code", sha("code1"), {"client_id": "apes-cli"}, NOW + 60_000, NOW)
        results = pool.starmap(
            _workers.take_onetime, [(target, start_soon(), "code", sha("code1"), NOW)] * PROCESSES
        )
        assert [r for rs in results for r in rs if r is not None] == [{"client_id": "apes-cli"}]
    finally:
        store.close()


async def test_dpop_jti_is_first_used_once_across_processes(target, pool):
    """D16: the DPoP replay table (``store.onetime`` kind ``dpop``): of every process inserting one
    ``<jkt>:<jti>`` at once, exactly one insert is the proof's first use."""
    store = _workers.open_store(target)
    await store.migrate()
    try:
        key = sha("jkt:jti-race")
        results = pool.starmap(_workers.put_onetime, [(target, start_soon(), "dpop", key, NOW)] * PROCESSES)
        assert [r for rs in results for r in rs].count(True) == 1
        with pytest.raises(Conflict):
            await store.onetime.put("dpop", key, {}, NOW + 70_000, NOW + 1)
    finally:
        store.close()


async def test_ciba_request_redeemed_once_across_processes(target, pool):
    """D16: an auth_req_id is single use, whichever process or node redeems it."""
    from .test_ciba import ciba_request

    store = _workers.open_store(target)
    await store.migrate()
    try:
        await store.ciba.create(ciba_request("race"))
        results = pool.starmap(
            _workers.redeem_ciba, [(target, start_soon(), sha("race"), NOW + 1)] * PROCESSES
        )
        assert [r for rs in results for r in rs].count(True) == 1
    finally:
        store.close()


async def test_refresh_token_rotated_once_across_processes(target, pool):
    store = _workers.open_store(target)
    await store.migrate()
    try:
        first = await store.refresh_tokens.create(refresh_token("r1"))
        at = start_soon()
        results = pool.starmap(
            _workers.rotate_refresh, [(target, at, dict(first), f"p{i}_", NOW + 10) for i in range(PROCESSES)]
        )
        flat = [r for rs in results for r in rs]
        rotated = [h for outcome, h in flat if outcome == "rotated"]
        assert len(rotated) == 1
        assert sorted(outcome for outcome, _ in flat if outcome != "rotated") == ["reused"] * (len(flat) - 1)
        stored = [h for _, h in flat if await store.refresh_tokens.get(h) is not None]
        assert stored == rotated  # only the winner's new token exists
        # the replays revoked the family: the winner's new token is dead too
        assert not await store.refresh_tokens.family_live(first["family_id"], NOW + 10)
        assert (await store.refresh_tokens.get(rotated[0]))["revoked_at"] == NOW + 10
    finally:
        store.close()


async def test_device_code_taken_once_across_processes(target, pool):
    store = _workers.open_store(target)
    await store.migrate()
    try:
        await store.device_codes.create(device_code("d1"))
        assert await store.device_codes.decide("BCDFGHJK", "usr_alice", True, NOW + 1)
        results = pool.starmap(_workers.take_device, [(target, start_soon(), sha("d1"), NOW + 2)] * PROCESSES)
        assert [r for rs in results for r in rs if r is not None] == ["usr_alice"]
        assert await store.device_codes.poll(sha("d1"), NOW + 3) is None
    finally:
        store.close()


async def test_device_code_decided_once_across_processes(target, pool):
    store = _workers.open_store(target)
    await store.migrate()
    try:
        await store.device_codes.create(device_code("d1"))
        at = start_soon()
        results = pool.starmap(
            _workers.decide_device, [(target, at, "BCDFGHJK", f"p{i}_", NOW + 1) for i in range(PROCESSES)]
        )
        winners = [r for rs in results for r in rs if r is not None]
        assert len(winners) == 1
        stored = await store.device_codes.get_by_user_code("BCDFGHJK", NOW + 2)
        assert stored["person_id"] == winners[0] and stored["decided_at"] == NOW + 1
        # the winner's choice is what is stored: even indexes approve, odd ones deny
        assert stored["status"] == ("approved" if int(winners[0].rsplit("_", 1)[1]) % 2 == 0 else "denied")
    finally:
        store.close()


async def test_per_owner_bounds_hold_across_processes(target, pool):
    """Issue 19 (D11): agents_per_person and pending_per_owner are decided in the database, so
    processes racing for the last places together never pass them."""
    path = target
    store = _workers.open_store(path)
    await store.migrate()
    await store.people.create(person("olivia"))
    try:
        at = start_soon()
        results = pool.starmap(
            _workers.enrol_bounded, [(path, at, f"p{i}_", NOW, 7) for i in range(PROCESSES)]
        )
        flat = [r for rs in results for r in rs]
        assert flat.count("created") == 7 and flat.count("agents_per_person") == len(flat) - 7
        assert len(await store.agents.decidable_by("usr_olivia")) == 7
        for name in ("a", "b"):
            await store.agents.create(agent(name, owner="olivia@example.com"), frozenset())
        at = start_soon()
        results = pool.starmap(
            _workers.request_bounded, [(path, at, f"g{i}_", NOW, 5) for i in range(PROCESSES)]
        )
        flat = [r for rs in results for r in rs]
        assert flat.count("created") == 5 and flat.count("pending_per_owner") == len(flat) - 5
    finally:
        store.close()


async def test_twenty_concurrent_votes_finalise_once_across_processes(target, pool):
    """D13: 20 votes at once from several processes (4 voters each in 5 processes, one voter
    twice): one vote per person per grant, no vote once the grant is decided, exactly one
    finalisation wins."""
    path = target
    store = _workers.open_store(path)
    await store.migrate()
    await store.grants.create(grant("g1"), [], review={"policy_ids": ["p"]})
    try:
        voters = [f"v{i}@example.com" for i in range(19)] + ["v0@example.com"]  # v0 twice: 20 votes
        shares = [voters[i::5] for i in range(5)]
        at = start_soon()
        results = [
            r for rs in pool.starmap(_workers.vote, [(path, at, share, NOW) for share in shares]) for r in rs
        ]
        assert len(results) == 20
        assert [outcome for _, outcome in results].count("won") == 1
        assert all(outcome in ("recorded", "won", "decided", "duplicate") for _, outcome in results)
        votes = await store.grants.votes("g1")
        emails = [v["email"] for v in votes]
        assert len(emails) == len(set(emails)) >= 2  # one vote per person
        assert (
            sum(
                1
                for email, outcome in results
                if email == "v0@example.com"
                and outcome == "recorded"
                or email == "v0@example.com"
                and outcome == "won"
            )
            <= 1
        )
        stored = await store.grants.get("g1")
        assert stored["status"] == "approved"
        winner = next(email for email, outcome in results if outcome == "won")
        assert stored["decided_by"] == winner and winner in emails
        events = await store.grants.events_after(0, 100)
        # every recorded vote is one grant.reviewed event (D14), then the one outcome
        assert [e["event"] for e in events] == ["grant.reviewed"] * len(votes) + ["grant.approved"]
        assert sorted(e["grant"]["vote"]["email"] for e in events[:-1]) == sorted(emails)
    finally:
        store.close()


async def test_an_escalation_level_is_announced_once_across_processes(target, pool):
    path = target
    store = _workers.open_store(path)
    await store.migrate()
    await store.grants.create(grant("g1"), [], review={"policy_ids": ["p"]})
    try:
        results = pool.starmap(_workers.escalate, [(path, start_soon(), NOW)] * PROCESSES)
        assert [v for vs in results for v in vs].count(True) == 1
        assert [e["event"] for e in await store.grants.events_after(0, 100)] == ["grant.escalated"]
    finally:
        store.close()


async def test_outbox_rows_are_claimed_once_across_processes(target, pool):
    from .factories import notice

    store = _workers.open_store(target)
    await store.migrate()
    try:
        await store.notify.add([notice(f"n{i:03}") for i in range(120)])
        results = pool.starmap(_workers.claim, [(target, start_soon(), NOW)] * PROCESSES)
        claimed = [i for ids in results for i in ids]
        assert sorted(claimed) == [f"n{i:03}" for i in range(120)]  # every row by exactly one process
    finally:
        store.close()
