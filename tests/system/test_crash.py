"""Crash safety: `kill -9` every server process in the middle of a write load, restart, and check
that every acknowledged write is there exactly as acknowledged and that nothing is half-done.

A real `grantd serve` with ``workers = 2`` on SQLite takes grant requests (agents) and decisions
(the management token: approve or deny) from a few client threads. At some moment the whole
process group gets SIGKILL (no graceful shutdown, no atexit, no WAL checkpoint). After a restart:

- every grant whose creation was answered 2xx exists, with the request it was answered with;
- its state is the last one a client saw acknowledged (or, when a decision was in flight at the
  kill, that decision's outcome): status, decided_by, decided_at, expires_at equal the answer;
- no grant is half-done: its stored events are exactly those its status implies (created, then
  approved or denied), an approved grant has decided_by, decided_at and expires_at (D6), a denied
  one decided_by and decided_at, a pending one none of them;
- ``PRAGMA integrity_check`` is ok (on SQLite; ``GRANTD_TEST_STORAGE=postgres`` runs the rest on PostgreSQL);
- the decision log (issue 23) catches up: every grant event is in it exactly once under a signed
  checkpoint, and every checkpoint stored before and after the kills is consistent with the newest.

The kill comes at three moments (early, mid-load, late) on the same database. Bounded: < 60 s.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import postgres as pg

from conftest import Server, make_server, signed_in
from grants_support import grant_body

pytestmark = pytest.mark.slow

THREADS = 4
KILL_AFTER = (0.6, 1.5, 2.7)  # seconds of load before each kill -9
LIMITS_OFF = "\n[limits]\n" + "".join(
    f"{k} = 0\n"
    for k in (
        "grants_per_agent",
        "pending_per_agent",
        "pending_per_owner",
        "authenticate_per_agent",
        "authenticate_per_address",
        "enroll_per_address",
        "verify_per_address",
        "failed_bearer_per_address",
    )
)


@dataclass
class Seen:
    """What clients saw of one grant: the last acknowledged answer and a decision still in flight."""

    created: dict[str, Any]
    acked: dict[str, Any]
    in_flight: str | None = None  # "approved" / "denied" when the kill came before the answer


@dataclass
class Ledger:
    grants: dict[str, Seen] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    acknowledged: int = 0
    failed: int = 0


def load(srv: Server, tokens: list[str], ledger: Ledger, stop: threading.Event, worker: int) -> None:
    agent = httpx.Client(
        base_url=srv.url, headers={"Authorization": f"Bearer {tokens[worker % len(tokens)]}"}, timeout=5
    )
    admin = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {srv.token}"}, timeout=5)
    n = 0
    try:
        while not stop.is_set():
            n += 1
            try:
                r = agent.post("/api/grants", json=grant_body(reason=f"w{worker}-{n}"))
            except httpx.HTTPError:
                ledger.failed += 1
                continue
            if r.status_code != 201:
                continue
            created = r.json()
            with ledger.lock:
                ledger.grants[created["id"]] = Seen(created, created)
                ledger.acknowledged += 1
            if n % 3 == 0:
                continue  # some stay pending
            verb, target = ("approve", "approved") if n % 3 == 1 else ("deny", "denied")
            seen = ledger.grants[created["id"]]
            seen.in_flight = target
            try:
                d = admin.post(
                    f"/api/grants/{created['id']}/{verb}", json={} if verb == "approve" else {"reason": "no"}
                )
            except httpx.HTTPError:
                ledger.failed += 1
                continue  # in flight at the kill: either outcome may be stored
            if d.status_code == 200:
                with ledger.lock:
                    seen.acked = d.json()["grant"]
                    seen.in_flight = None
                    ledger.acknowledged += 1
    finally:
        agent.close()
        admin.close()


def kill_everything(srv: Server) -> None:
    assert srv.proc is not None
    os.killpg(srv.proc.pid, signal.SIGKILL)  # the main process and both workers: start_new_session
    srv.proc.wait(10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the group is gone once no process answers signal 0
        try:
            os.killpg(srv.proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError("server processes survived kill -9")


EXPECTED_EVENTS = {
    "pending": (["grant.created"], ["grant.created", "grant.reviewed"]),  # killed between vote and outcome
    "approved": (["grant.created", "grant.reviewed", "grant.approved"],),
    "denied": (["grant.created", "grant.reviewed", "grant.denied"],),
}


def check_database(directory: Path, ledger: Ledger) -> dict[str, dict[str, Any]]:
    """The server's database, SQLite or PostgreSQL."""
    if not (directory / "postgres-dsn").exists():
        assert pg.server_sql(directory, "PRAGMA integrity_check")[0][0] == "ok"
    columns = ("id", "status", "decided_by", "decided_at", "expires_at")
    rows = {
        r[0]: dict(zip(columns, r, strict=True))
        for r in pg.server_sql(directory, f"SELECT {', '.join(columns)} FROM grants")
    }  # noqa: S608 - fixed columns
    events: dict[str, list[str]] = {}
    for grant_id, event in pg.server_sql(directory, "SELECT grant_id, event FROM grant_events ORDER BY seq"):
        events.setdefault(grant_id, []).append(event)
    for gid, row in rows.items():
        status = row["status"]
        assert status in EXPECTED_EVENTS, (gid, status)
        assert events.get(gid) in EXPECTED_EVENTS[status], (
            f"half-done grant {gid}: {status} with events {events.get(gid)}"
        )
        if status == "approved":
            assert row["decided_by"] and row["decided_at"] and row["expires_at"], row
        elif status == "denied":
            assert row["decided_by"] and row["decided_at"] and row["expires_at"] is None, row
        else:
            assert row["decided_by"] is None and row["decided_at"] is None and row["expires_at"] is None, row
    assert not set(events) - set(rows), "events of grants that do not exist"
    return rows


LEAVES_OF = {  # every vote is a grant event of its own; the outcome follows it (D14)
    "grant.created": ["grant.created"],
    "grant.reviewed": ["grant.reviewed"],
    "grant.approved": ["grant.approved"],
    "grant.denied": ["grant.denied"],
}


def check_log(srv: Server) -> int:
    """The decision log after a kill -9 (issue 23): once the sequencer caught up, every grant event is
    in it exactly once, in event order, under a signed checkpoint; the leaves verify against it, and
    every checkpoint the server ever stored is consistent with the newest (none signed a fork)."""
    from grantd.core.tlog.leaves import parse_leaf
    from grantd.core.tlog.verify import verify_log

    expected: dict[str, list[str]] = {}
    for grant_id, event in pg.server_sql(
        srv.directory, "SELECT grant_id, event FROM grant_events ORDER BY seq"
    ):
        expected.setdefault(grant_id, []).extend(LEAVES_OF[event])
    others = int(
        pg.server_sql(srv.directory, "SELECT count(*) FROM audit_events")[0][0]
    )  # agents enrolled, ...
    size = sum(len(kinds) for kinds in expected.values()) + others
    deadline = time.monotonic() + 15
    while True:
        note = httpx.get(f"{srv.url}/api/audit/checkpoint", timeout=5)
        if note.status_code == 200 and int(note.text.split("\n")[1]) >= size:
            break
        assert time.monotonic() < deadline, f"the log did not catch up with {size} leaves: {note.text}"
        time.sleep(0.1)
    assert int(note.text.split("\n")[1]) == size, "more leaves than events: an event was integrated twice"
    with srv.admin() as http:
        vkeys = http.get("/api/audit/key").text.splitlines()
        leaves: list[bytes] = []
        while len(leaves) < size:
            leaves += [
                e["leaf"].encode()
                for e in http.get("/api/audit/entries", params={"start": len(leaves), "end": size}).json()[
                    "entries"
                ]
            ]
    seen: dict[str, list[str]] = {}
    for raw in leaves:
        leaf = parse_leaf(raw)
        if leaf.grant_id is not None:
            seen.setdefault(leaf.grant_id, []).append(leaf.kind)
    assert seen == expected, "the log's leaves are not the grant events, once each"
    earlier = [
        str(r[0]) for r in pg.server_sql(srv.directory, "SELECT note FROM tlog_checkpoints ORDER BY size")
    ]
    result = verify_log(note.text, vkeys, None, leaves, earlier=earlier)
    assert result.code == 0, result.reason
    return size


def check_acknowledged(srv: Server, ledger: Ledger, rows: dict[str, dict[str, Any]]) -> None:
    missing = [gid for gid in ledger.grants if gid not in rows]
    assert not missing, f"{len(missing)} acknowledged grants lost, e.g. {missing[:3]}"
    with srv.admin() as http:
        for gid, seen in ledger.grants.items():
            grant = http.get(f"/api/grants/{gid}").json()
            assert grant["request"] == seen.created["request"], gid
            if seen.in_flight is not None and grant["status"] == seen.in_flight:
                assert grant["decided_by"] and grant["decided_at"], grant
                seen.acked, seen.in_flight = grant, None  # the stored outcome is now what we know
                continue
            for key in ("status", "decided_by", "decided_at", "expires_at", "created_at"):
                assert grant[key] == seen.acked[key], (gid, key, grant[key], seen.acked[key])
            seen.in_flight = None


@pytest.fixture(scope="module")
def postgres_server() -> Any:
    pg.require()
    server = pg.Postgres().start()
    try:
        yield server
    finally:
        server.stop()


def storage_lines(directory: Path, storage: str, request: pytest.FixtureRequest) -> str | None:
    """``sqlite``: the suite's default (``GRANTD_TEST_STORAGE`` may still switch it); ``postgres``: a
    fresh database on this module's own PostgreSQL server, whatever the switch says (issue 23: the
    crash test on both backends)."""
    if storage == "sqlite":
        return None
    directory.mkdir(parents=True, exist_ok=True)
    dsn_file = directory / "postgres-dsn"
    dsn_file.write_text(request.getfixturevalue("postgres_server").create_database() + "\n")
    dsn_file.chmod(0o600)
    return 'plugin = "postgres"\ndsn = "file:postgres-dsn"\npool_size = 4'


@pytest.mark.parametrize(
    ("storage", "sequencer"), [("sqlite", "inline"), ("postgres", "inline"), ("sqlite", "process")]
)
def test_kill_9_under_load_loses_no_acknowledged_write(
    tmp_path: Path, storage: str, sequencer: str, request: pytest.FixtureRequest
) -> None:
    """kill -9 of the whole group (the server processes, and the log's sequencer, which integrates the
    load as it arrives: inside them, or with ``sequencer = "process"`` in a process of its own) at
    three moments, on SQLite and on PostgreSQL."""
    started = time.monotonic()
    lines = storage_lines(tmp_path / "srv", storage, request)
    extra = LIMITS_OFF + f'\n[audit]\nsequencer = "{sequencer}"\n'
    srv = make_server(tmp_path / "srv", workers=2, extra=extra, storage=lines).start()
    try:
        tokens = [signed_in(srv, tmp_path / f"keys{i}").token for i in range(2)]
        ledger = Ledger()
        for moment in KILL_AFTER:
            stop = threading.Event()
            threads = [
                threading.Thread(target=load, args=(srv, tokens, ledger, stop, i), daemon=True)
                for i in range(THREADS)
            ]
            acknowledged = ledger.acknowledged
            for t in threads:
                t.start()
            time.sleep(moment)
            # A loaded machine (the suite's other worker, a browser) can take longer than the moment
            # to answer the first write: the kill still comes under load, after one was acknowledged.
            deadline = time.monotonic() + 15
            while ledger.acknowledged == acknowledged and time.monotonic() < deadline:
                time.sleep(0.05)
            before = ledger.acknowledged
            stop.set()  # no new request after this one; those on the wire now are cut by the kill
            kill_everything(srv)
            for t in threads:
                t.join(10)
            assert before > acknowledged, f"no write was acknowledged in 15 s ({ledger.failed} failed)"
            srv.start()
            rows = check_database(srv.directory, ledger)
            check_acknowledged(srv, ledger, rows)
            check_log(srv)
        assert ledger.acknowledged >= 20, ledger.acknowledged
        decided = sum(1 for seen in ledger.grants.values() if seen.acked["status"] != "pending")
        print(
            f"crash: {len(ledger.grants)} grants acknowledged ({decided} decided), {ledger.acknowledged} writes "
            f"acknowledged, {ledger.failed} requests cut off, {len(KILL_AFTER)} kills, {time.monotonic() - started:.1f} s"
        )
    finally:
        srv.stop()
