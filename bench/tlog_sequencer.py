"""Does the wired sequencer keep up with 2,000 events a second (issue 23)? In this process, on a real
SQLite file: write N grants, each with its grant.created, grant.reviewed (the vote) and grant.approved
events (as the grants service writes them, each in its own transaction), then let ``grantd.services.audit.AuditLog``
integrate them step by step (lease, read events, encode leaves, append leaves and nodes in one
transaction, sign a consistent checkpoint) and report events integrated per second of wall and CPU time.

    .venv/bin/python bench/tlog_sequencer.py [--grants 10000]
    .venv/bin/python bench/tlog_sequencer.py --quiet 300   # a quiet server: steps with 0 and 1 event
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grantd.core.clock import SYSTEM_CLOCK  # noqa: E402
from grantd.core.lifecycle import grant_lapse  # noqa: E402
from grantd.plugins.storage_sqlite import SQLiteStore  # noqa: E402
from grantd.services.audit import AuditLog  # noqa: E402


def grant(i: int, now: int) -> dict:
    return {
        "id": f"gr_{i:08d}",
        "type": "command",
        "requester": "bot@agents.example.com",
        "requester_id": "agt_bench",
        "request": {
            "command": ["systemctl", "restart", f"svc{i}"],
            "audience": "escapes",
            "target_host": "web-1",
            "cmd_hash": "sha256:" + "ab" * 32,
        },
        "grant_type": "once",
        "status": "approved",
        "created_at": now,
        "decided_by": "alice@example.com",
        "decided_at": now,
        "expires_at": now + 3_600_000,
        "used_at": None,
        "decision_reason": None,
        "delegation_id": None,
        "revoked_by": None,
        "revoked_at": None,
        "reuse_key": None,
        "version": 1,
    }


def vote(i: int, now: int) -> dict:
    return {
        "grant_id": f"gr_{i:08d}",
        "email": "alice@example.com",
        "voter_id": "prs_alice",
        "decision": "approve",
        "via": "api",
        "at": now,
        "reason": None,
        "grant_type": None,
        "duration": None,
        "management": False,
    }


async def write_decided_grants(store: SQLiteStore, count: int) -> None:
    """``count`` grants, each with its grant.created, grant.reviewed (the vote) and grant.approved
    events, as the grants service writes them, each in its own transaction."""
    now = SYSTEM_CLOCK.now_ms()
    lapse = grant_lapse(now, 48 * 3600)
    for i in range(count):
        await store.grants.create({**grant(i, now), "status": "pending"}, ["grant.created"])  # type: ignore[arg-type,typeddict-item]
        await store.grants.add_vote(vote(i, now))  # type: ignore[arg-type]
        await store.grants.update_if(
            f"gr_{i:08d}",
            expect=("pending",),
            changes={"status": "approved", "decided_by": "alice@example.com", "decided_at": now},
            event="grant.approved",
            lapse=lapse,
            now=now,
        )


async def main(count: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = SQLiteStore(Path(directory) / "bench.db")
        await store.migrate()
        await write_decided_grants(store, count)
        events = count * 3
        log = AuditLog(store, SYSTEM_CLOCK, "bench.example/grantd", "admin@example.com")
        await log.ensure_key()
        wall, cpu = time.perf_counter(), time.process_time()
        steps = 0
        while (await store.tlog.head())["grant_seq"] < events:
            await log.step()
            steps += 1
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        head = await store.tlog.head()
        print(
            f"{events} events -> {head['size']} leaves in {steps} steps: {wall:.2f} s wall, {cpu:.3f} s CPU "
            f"({cpu / events * 1e6:.1f} µs per event); "
            f"{events / wall:,.0f} events/s (wall), {events / cpu:,.0f} events/s per CPU second; "
            f"checkpoint size {(await store.tlog.latest_checkpoint() or (0, ''))[0]}"
        )
        store.close()


async def quiet(steps: int) -> None:
    """What the log costs a quiet server: a step with nothing new, and a step that integrates and
    signs the one event a lone create wrote (CPU of the steps only; the creates are not counted)."""
    with tempfile.TemporaryDirectory() as directory:
        store = SQLiteStore(Path(directory) / "bench.db")
        await store.migrate()
        now = SYSTEM_CLOCK.now_ms()
        log = AuditLog(store, SYSTEM_CLOCK, "bench.example/grantd", "admin@example.com")
        await log.ensure_key()
        await store.grants.create({**grant(0, now), "status": "pending"}, ["grant.created"])  # type: ignore[arg-type,typeddict-item]
        await log.step()
        await log.step()
        cpu = time.process_time()
        for _ in range(steps):
            await log.step()
        idle = (time.process_time() - cpu) / steps
        busy = 0.0
        for i in range(1, steps + 1):
            await store.grants.create({**grant(i, now), "status": "pending"}, ["grant.created"])  # type: ignore[arg-type,typeddict-item]
            cpu = time.process_time()
            await log.step()
            busy += time.process_time() - cpu
        print(
            f"a step with nothing new: {idle * 1e6:.0f} µs CPU; "
            f"a step integrating and signing one event: {busy / steps * 1e6:.0f} µs CPU ({steps} steps each)"
        )
        store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--grants", type=int, default=10_000)
    parser.add_argument(
        "--quiet", type=int, metavar="STEPS", help="measure a quiet server's steps instead (e.g. 300)"
    )
    args = parser.parse_args()
    asyncio.run(quiet(args.quiet) if args.quiet else main(args.grants))
