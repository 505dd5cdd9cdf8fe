"""bench/seed.py (issue 27, item 5): a seeded database is one a real server reads as its own — every
grant listed and read through the API with the status it was seeded with, its vote shown, the
agents listed, nothing left for the expiry sweep to rewrite, and the seeded events integrated by
the decision log. Small N (1,000 grants, 100 agents); SQLite, or PostgreSQL under
GRANTD_TEST_STORAGE=postgres."""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.postgres import server_sql

from conftest import ROOT, Server, make_server

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.seed import Counts, seed  # noqa: E402

GRANTS, AGENTS = 1000, 100


def _list_all(server: Server, path: str, **query: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = None
    with server.admin() as http:
        while True:
            answer = http.get(path, params={**query, "limit": 100, **({"cursor": cursor} if cursor else {})})
            assert answer.status_code == 200, answer.text
            body = answer.json()
            found.extend(body["data"])
            cursor = body["pagination"]["cursor"]
            if not body["pagination"]["has_more"]:
                return found


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    directory = tmp_path_factory.mktemp("seeded")
    # the expiry sweep runs every second, so a seeded grant it would still rewrite shows up in time
    server = make_server(directory, extra="[grants]\nexpiry_sweep_interval = 1\n")
    dsn_file = directory / "postgres-dsn"
    where = (
        {"dsn": dsn_file.read_text().strip()} if dsn_file.exists() else {"sqlite": directory / "grantd.db"}
    )
    counts = seed(grants=GRANTS, agents=AGENTS, **where)  # type: ignore[arg-type]
    seeded_at = int(time.time() * 1000)
    events_seeded = server_sql(directory, "SELECT count(*) FROM grant_events")[0][0]
    server.start(timeout=60)
    yield server, counts, events_seeded, seeded_at
    server.stop()


def test_every_seeded_grant_is_listed_with_its_status(seeded: tuple[Server, Counts, int, int]) -> None:
    server, counts, *_ = seeded
    grants = _list_all(server, "/api/grants")
    assert len(grants) == GRANTS == counts.grants
    assert len({g["id"] for g in grants}) == GRANTS
    assert Counter(g["status"] for g in grants) == Counter(counts.statuses)
    # a realistic mix: every outcome is there, most grants are over
    assert {"approved", "consumed", "denied", "expired", "revoked"} <= set(counts.statuses or {})
    created = [g["created_at"] for g in grants]
    assert created == sorted(created, reverse=True)


def test_a_seeded_grant_reads_like_a_served_one(seeded: tuple[Server, Counts, int, int]) -> None:
    server, *_ = seeded
    grants = _list_all(server, "/api/grants", status="consumed")
    assert grants and all(g["status"] == "consumed" for g in grants)
    with server.admin() as http:
        for listed in grants[:20]:
            answer = http.get(f"/api/grants/{listed['id']}")
            assert answer.status_code == 200, answer.text
            grant = answer.json()
            assert answer.headers["etag"]
            assert grant["status"] == "consumed" and grant["used_at"] and grant["decided_by"]
            assert grant["request"]["cmd_hash"].startswith("sha256:")
            assert grant["requester"].endswith("@seed.example.com")
            again = http.get(f"/api/grants/{listed['id']}", headers={"If-None-Match": answer.headers["etag"]})
            assert again.status_code == 304
        reviewers = http.get(f"/api/grants/{grants[0]['id']}/reviewers")
        assert reviewers.status_code == 200, reviewers.text


def test_seeded_agents_are_listed(seeded: tuple[Server, Counts, int, int]) -> None:
    server, counts, *_ = seeded
    agents = _list_all(server, "/api/admin/agents")
    assert len([a for a in agents if a["email"].endswith("@seed.example.com")]) == AGENTS == counts.agents


def test_nothing_left_for_the_sweep_and_the_log_integrates_the_seeded_events(
    seeded: tuple[Server, Counts, int, int],
) -> None:
    server, counts, events_seeded, seeded_at = seeded
    directory = Path(server.directory)
    assert events_seeded == counts.events > 0
    last = server_sql(directory, "SELECT max(seq) FROM grant_events")[0][0]
    deadline = time.monotonic() + 20
    integrated = -1
    while time.monotonic() < deadline:
        integrated = server_sql(directory, "SELECT grant_seq FROM tlog_state")[0][0]
        if integrated >= last:
            break
        time.sleep(0.3)
    # the log's sequencer took every seeded event (it refuses a leaf it cannot check)
    assert integrated == last, server.log()[-3000:]
    leaves = server_sql(directory, "SELECT count(*) FROM tlog_leaves WHERE grant_id IS NOT NULL")[0][0]
    assert leaves >= events_seeded
    time.sleep(1.5)  # past a sweep (every second here): a lapsed grant left unswept would expire now
    swept = server_sql(
        directory,
        "SELECT count(*) FROM grant_events WHERE event = 'grant.expired' AND created_at > ?",
        (seeded_at,),
    )[0][0]
    assert swept == 0
