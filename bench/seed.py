#!/usr/bin/env python3
"""Fill a grantd database with stored volume (issue 27, item 5): people, agents and grants as a
deployment accumulates them over a year, written fast (bulk SQL) into the store's own schema.

    .venv/bin/python bench/seed.py --sqlite /tmp/seeded.db --grants 1000000 --agents 100000
    .venv/bin/python bench/seed.py --postgres "host=... dbname=..." --grants 1000000 --agents 100000

The schema comes from the store itself (``SQLiteStore.migrate`` / ``PostgresStore.migrate``: the
same migrations a server runs); the rows are then inserted in batches (``executemany`` in one
transaction on SQLite, ``COPY`` on PostgreSQL) with every index in place, so the indexes are the
ones the store declares and the planner's statistics are refreshed afterwards (ANALYZE).

What a real deployment of that age would hold, and therefore what is seeded:

- **people** (one per 20 agents) own and approve the **agents** (real Ed25519 keys, bound to their
  owner's person id as the store binds them, D11);
- **grants** spread evenly over the last ``--days`` (365), requested by the agents with a skew
  (a fifth of the agents make most requests), on 2,000 hosts, with a mix of types (once 60 %,
  always 25 %, timed 15 %) and outcomes: once grants mostly consumed, some denied, revoked, never
  used or never decided; always grants approved, revoked or denied; timed grants that ran out.
  Each is stored as the expiry sweep leaves it: a grant whose time is over reads ``expired`` in
  its stored status (a seeded approved grant past ``expires_at`` would otherwise make the first
  sweep rewrite a million rows while the bench measures);
- a **vote** (``grant_votes``) for every decided grant, cast by the owner on the web page, as the
  review of the default policy records it (no ``[[policies]]``: no ``grant_reviews`` rows, as on
  a deployment without approval policies);
- **grant events** only of the last 23 hours (``events_retention`` is a day: the sweep deletes
  older events; the hour's margin keeps a copy started soon after from trimming any at once), each event carrying the grant as it was after that step (created, reviewed,
  approved/denied, consumed, revoked, expired), in time order.

The decision log (issue 23) is not seeded: its tables start empty and the server's sequencer
integrates the seeded recent events (a few thousand) when it starts, before anything is measured
(bench/run.py waits for the signed size to stop growing), as on a deployment whose log began a day
ago. No events are written for the seeded agents' enrolments (the log would integrate 100,000 of
them; the measured requests do not depend on the log's size).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from grantd.commands import cmd_hash  # noqa: E402
from grantd.services.grant_requests import reuse_key  # noqa: E402
from grantd.sshkeys import parse_public_key  # noqa: E402
from grantd.store.records import GRANT_COLUMNS, VOTE_COLUMNS  # noqa: E402
from grantd.store.rows import event_json, to_json  # noqa: E402

DAY_MS = 86_400_000
HOSTS = 2_000
AGENTS_PER_PERSON = 20
ONCE_TTL_MS = 3_600_000  # grants.once_ttl's default
PENDING_TTL_MS = 172_800_000  # grants.pending_ttl's default
# grants.events_retention's default is a day; the seed keeps the events of the last 23 hours, so a
# server started on a copy within the hour trims none of them under the log's sequencer
EVENTS_KEPT_MS = DAY_MS - 3_600_000
BATCH = 20_000
COMMANDS = [
    ["systemctl", "restart", "nginx"],
    ["systemctl", "reload", "postgresql"],
    ["apt-get", "upgrade", "-y"],
    ["journalctl", "-u", "grantd", "--since", "today"],
    ["docker", "compose", "pull"],
    ["rsync", "-a", "/srv/app/", "backup:/srv/app/"],
    ["cat", "/etc/shadow"],
    ["kubectl", "rollout", "restart", "deploy/web"],
]


@dataclass
class Counts:
    people: int = 0
    agents: int = 0
    grants: int = 0
    votes: int = 0
    events: int = 0
    statuses: dict[str, int] = field(default_factory=dict)


# -- the rows -------------------------------------------------------------------------------------------


def people_rows(count: int, now: int) -> list[dict[str, Any]]:
    return [
        {
            "person_id": f"usr_seed{i:018d}",
            "email": f"person{i}@seed.example.com",
            "name": f"Person {i}",
            "admin": 0,
            "status": "active",
            "created_at": now - 400 * DAY_MS + i,
            "updated_at": now - 400 * DAY_MS + i,
        }
        for i in range(count)
    ]


def _public_key_line() -> tuple[str, str]:
    public = Ed25519PrivateKey.generate().public_key()
    line = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    _, normalized, key_id = parse_public_key(line)
    return normalized, key_id


def agent_rows(count: int, people: list[dict[str, Any]], now: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(count):
        owner = people[i % len(people)]
        normalized, key_id = _public_key_line()
        created = now - 390 * DAY_MS + i * 1000
        rows.append(
            {
                "agent_id": f"agt_seed{i:014d}",
                "email": f"agent{i}@seed.example.com",
                "name": f"seed agent {i}",
                "public_key": normalized,
                "key_id": key_id,
                "key_generation": 1,
                "owner": owner["email"],
                "approver": owner["email"],
                "owner_id": owner["person_id"],
                "approver_id": owner["person_id"],
                "status": "active" if i % 50 else "disabled",
                "created_at": created,
                "updated_at": created,
            }
        )
    return rows


def _outcome(rng: random.Random, grant_type: str) -> str:
    """How a grant of this type ended (or stands): weights of a plausible deployment."""
    roll = rng.random()
    if grant_type == "once":
        table = [
            (0.70, "consumed"),
            (0.80, "denied"),
            (0.88, "unused"),
            (0.95, "undecided"),
            (1.0, "revoked"),
        ]
    elif grant_type == "always":
        table = [(0.60, "approved"), (0.85, "revoked"), (1.0, "denied")]
    else:
        table = [(0.80, "approved"), (0.90, "revoked"), (1.0, "denied")]
    return next(name for bound, name in table if roll < bound)


def grant_history(
    rng: random.Random, agent: dict[str, Any], person_ids: dict[str, str], created: int, now: int
) -> tuple[dict[str, Any], dict[str, Any] | None, list[tuple[str, dict[str, Any], int]]]:
    """One grant as stored now, its vote (or None) and its events: (event, the grant after it, at)."""
    grant_type = rng.choices(("once", "always", "timed"), (60, 25, 15))[0]
    command = COMMANDS[rng.randrange(len(COMMANDS))]
    request: dict[str, Any] = {
        "requester": agent["email"],
        "target_host": f"host-{rng.randrange(HOSTS):04d}.seed.example.net",
        "audience": "escapes",
        "grant_type": grant_type,
        "command": command,
        "cmd_hash": cmd_hash(command),
        "reason": "seeded",
    }
    if grant_type == "timed":
        request["duration"] = rng.choice((900, 3600, 28_800, 86_400))
    grant: dict[str, Any] = {
        "id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "type": "command",
        "requester": agent["email"],
        "requester_id": agent["agent_id"],
        "request": to_json(request),
        "grant_type": grant_type,
        "status": "pending",
        "created_at": created,
        "decided_by": None,
        "decided_at": None,
        "expires_at": None,
        "used_at": None,
        "decision_reason": None,
        "delegation_id": None,
        "revoked_by": None,
        "revoked_at": None,
        "reuse_key": reuse_key(request),
        "version": 1,
    }
    events: list[tuple[str, dict[str, Any], int]] = [("grant.created", dict(grant), created)]
    outcome = _outcome(rng, grant_type)
    decided = created + rng.randrange(5_000, 600_000)
    if outcome == "undecided" or decided > now:
        if created <= now - PENDING_TTL_MS:  # the sweep expired it
            grant.update(status="expired", version=2)
            events.append(("grant.expired", dict(grant), created + PENDING_TTL_MS))
        return grant, None, events
    person = agent["owner"]
    vote = {
        "grant_id": grant["id"],
        "email": person,
        "voter_id": person_ids[person],
        "decision": "deny" if outcome == "denied" else "approve",
        "via": "web",
        "at": decided,
        "reason": None,
        "grant_type": None,
        "duration": None,
        "management": 0,
        "evidence": None,
    }
    kept = {k: v for k, v in vote.items() if k != "evidence"}
    events.append(("grant.reviewed", {**grant, "vote": {**kept, "management": False}}, decided))
    grant.update(decided_by=person, decided_at=decided, version=2)
    if outcome == "denied":
        grant["status"] = "denied"
        events.append(("grant.denied", dict(grant), decided))
        return grant, vote, events
    expires = {"once": decided + ONCE_TTL_MS, "timed": decided + request.get("duration", 0) * 1000}
    grant.update(status="approved", expires_at=expires.get(grant_type))
    events.append(("grant.approved", dict(grant), decided))
    if outcome == "consumed" and decided + 2_000 <= now:
        grant.update(status="consumed", used_at=decided + 2_000, version=3)
        events.append(("grant.consumed", dict(grant), decided + 2_000))
    elif outcome == "revoked":
        revoked = decided + rng.randrange(60_000, 30 * DAY_MS)
        if revoked <= now and (grant["expires_at"] is None or revoked < grant["expires_at"]):
            grant.update(status="revoked", revoked_by=person, revoked_at=revoked, version=3)
            events.append(("grant.revoked", dict(grant), revoked))
    if grant["status"] == "approved" and grant["expires_at"] is not None and grant["expires_at"] <= now:
        grant.update(status="expired", version=grant["version"] + 1)  # the sweep persisted the lapse
        events.append(("grant.expired", dict(grant), grant["expires_at"]))
    return grant, vote, events


def grant_batches(
    count: int, agents: list[dict[str, Any]], person_ids: dict[str, str], now: int, days: int, seed: int
) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]]:
    """(grants, votes, events) in batches, oldest first; events only within the retention window."""
    rng = random.Random(seed)
    span = days * DAY_MS
    start = now - span
    grants: list[dict[str, Any]] = []
    votes: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for i in range(count):
        created = start + (span * i) // count
        agent = agents[int(len(agents) * rng.random() ** 3)]  # skewed: a fifth of the agents ask most
        grant, vote, history = grant_history(rng, agent, person_ids, created, now)
        grants.append(grant)
        if vote is not None:
            votes.append(vote)
        for event, snapshot, at in history:
            if now - EVENTS_KEPT_MS <= at <= now:
                events.append(
                    {
                        "event": event,
                        "grant_id": grant["id"],
                        "requester": grant["requester"],
                        "grant_json": event_json(snapshot, GRANT_COLUMNS),
                        "created_at": at,
                    }
                )
        if len(grants) >= BATCH:
            yield grants, votes, events
            grants, votes, events = [], [], []
    if grants:
        yield grants, votes, events


# -- writing ------------------------------------------------------------------------------------------------


class _Writer(Protocol):
    """Bulk inserts into one database; ``columns`` are the table's own (read from the database)."""

    def insert(self, table: str, rows: list[dict[str, Any]]) -> None: ...

    def finish(self) -> None: ...


class SQLiteWriter:
    def __init__(self, path: Path):
        import sqlite3

        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(
            "PRAGMA synchronous = OFF"
        )  # seeding only: the bench's server runs its own settings
        self.conn.execute("PRAGMA cache_size = -262144")
        self.conn.execute("BEGIN")

    def insert(self, table: str, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        columns = list(rows[0])
        marks = ", ".join("?" for _ in columns)
        self.conn.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})",  # noqa: S608 - our own column names
            [tuple(row[c] for c in columns) for row in rows],
        )

    def finish(self) -> None:
        self.conn.execute("COMMIT")
        self.conn.execute("ANALYZE")
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.conn.close()


class PostgresWriter:
    def __init__(self, dsn: str):
        import psycopg

        self.conn = psycopg.connect(dsn)

    def insert(self, table: str, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        if table == "people":  # PostgreSQL's people search reads Python's casefold of each (0002_people.sql)
            rows = [
                {**r, "email_fold": r["email"].casefold(), "name_fold": r["name"].casefold()} for r in rows
            ]
        columns = list(rows[0])
        with self.conn.cursor() as cur:
            with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(tuple(row[c] for c in columns))

    def finish(self) -> None:
        self.conn.commit()
        self.conn.autocommit = True
        self.conn.execute("ANALYZE")
        self.conn.close()


async def _migrate(sqlite: Path | None, dsn: str | None) -> None:
    """The schema, exactly as a server makes it: the store's own migrations."""
    if sqlite is not None:
        from grantd.plugins.storage_sqlite import SQLiteStore

        store: Any = SQLiteStore(sqlite)
    else:
        from grantd.plugins.storage_postgres import PostgresStore

        store = PostgresStore(str(dsn), pool_size=1)
    try:
        await store.migrate()
    finally:
        store.close()


def seed(
    *,
    grants: int,
    agents: int,
    sqlite: Path | None = None,
    dsn: str | None = None,
    days: int = 365,
    now: int | None = None,
    random_seed: int = 27,
    progress: Any = None,
) -> Counts:
    """Migrate the database (SQLite file or PostgreSQL DSN) and fill it; returns what was written."""
    if (sqlite is None) == (dsn is None):
        raise ValueError("give exactly one of sqlite and dsn")
    asyncio.run(_migrate(sqlite, dsn))
    now = now if now is not None else int(time.time() * 1000)
    writer: _Writer = SQLiteWriter(sqlite) if sqlite is not None else PostgresWriter(str(dsn))
    counts = Counts()
    people = people_rows(max(1, agents // AGENTS_PER_PERSON), now)
    writer.insert("people", people)
    counts.people = len(people)
    agent_list = agent_rows(agents, people, now)
    writer.insert("agents", agent_list)
    counts.agents = len(agent_list)
    person_ids = {p["email"]: p["person_id"] for p in people}
    vote_columns = list(VOTE_COLUMNS)
    for batch, votes, events in grant_batches(grants, agent_list, person_ids, now, days, random_seed):
        writer.insert("grants", [{c: g[c] for c in GRANT_COLUMNS} for g in batch])
        writer.insert("grant_votes", [{c: v[c] for c in vote_columns} for v in votes])
        writer.insert("grant_events", events)
        counts.grants += len(batch)
        counts.votes += len(votes)
        counts.events += len(events)
        for g in batch:
            counts.statuses[g["status"]] = counts.statuses.get(g["status"], 0) + 1
        if progress:
            progress(f"    {counts.grants:,} grants written")
    writer.finish()
    return counts


@contextmanager
def seed_template(args: Any, postgres: Any) -> Iterator[Any]:
    """bench/run.py --seeded: the seeded database every "seeded" server starts from (a copy of it),
    made once per run: a SQLite file (or --seeded-from's), or a PostgreSQL database on the run's
    private server used as a template. None without --seeded."""
    if not args.seeded:
        yield None
        return
    agents = max(1, args.seeded // 10)
    log = _log
    if args.storage == "sqlite" and args.seeded_from:
        yield args.seeded_from
        return
    with tempfile.TemporaryDirectory(prefix="grantd-seed-") as tmp:
        started = time.monotonic()
        log(f"seeding {args.seeded:,} grants and {agents:,} agents ({args.storage})")
        if args.storage == "sqlite":
            target: Any = Path(tmp) / "seeded.db"
            counts = seed(grants=args.seeded, agents=agents, sqlite=target)
        else:
            target = "seeded_" + uuid.uuid4().hex[:12]
            postgres.admin_sql(f"CREATE DATABASE {target} TEMPLATE template0")
            counts = seed(grants=args.seeded, agents=agents, dsn=postgres.dsn(target))
        log(
            f"  seeded in {time.monotonic() - started:.0f} s: {counts.grants:,} grants, {counts.events:,} events"
        )
        yield target


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--sqlite", type=Path, help="a new SQLite file")
    where.add_argument("--postgres", metavar="DSN", help="an empty PostgreSQL database")
    parser.add_argument("--grants", type=int, default=1_000_000)
    parser.add_argument("--agents", type=int, default=100_000)
    parser.add_argument(
        "--days", type=int, default=365, help="the grants' creation times span this many days"
    )
    args = parser.parse_args(argv)
    if args.sqlite is not None and args.sqlite.exists():
        parser.error(f"{args.sqlite} exists: seeding fills a new database")
    started = time.monotonic()
    counts = seed(
        grants=args.grants,
        agents=args.agents,
        sqlite=args.sqlite,
        dsn=args.postgres,
        days=args.days,
        progress=lambda m: print(m, file=sys.stderr, flush=True),
    )
    print(
        f"seeded {counts.people:,} people, {counts.agents:,} agents, {counts.grants:,} grants "
        f"({', '.join(f'{k} {v:,}' for k, v in sorted(counts.statuses.items()))}), "
        f"{counts.votes:,} votes, {counts.events:,} grant events in {time.monotonic() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
