"""Single use is decided by the database, across server processes ([server] workers = 2)."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import Agent, Server, make_server, signed_in
from grants_support import approve, grant_body, request_grant

PARALLEL = 20


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Any:
    srv = make_server(tmp_path_factory.mktemp("two-workers"), workers=2).start()
    yield srv
    srv.stop()


@pytest.fixture
def requester(two_workers: Server, tmp_path: Path) -> Agent:
    return signed_in(two_workers, tmp_path / "keys")


def in_parallel(server: Server, calls: list[tuple[str, str, str | None]]) -> list[httpx.Response]:
    """Each call on its own connection, released together, so both processes take a share."""

    def one(call: tuple[str, str, str | None]) -> httpx.Response:
        method, path, token = call
        with httpx.Client(
            base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {token}"}
        ) as http:
            return http.request(method, path, json={} if method == "POST" else None)

    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(one, calls))


def test_parallel_consumes_of_a_once_grant_yield_exactly_one_consumed(
    two_workers: Server, requester: Agent
) -> None:
    for _ in range(3):  # a few rounds: a lucky interleaving once proves little
        grant = request_grant(two_workers, requester)
        token = approve(two_workers, grant["id"])["authz_jwt"]
        answers = in_parallel(two_workers, [("POST", f"/api/grants/{grant['id']}/consume", token)] * PARALLEL)
        assert {r.status_code for r in answers} == {200}
        outcome = Counter(
            r.json().get("status") if "error" not in r.json() else r.json()["error"] for r in answers
        )
        assert outcome == {"consumed": 1, "already_consumed": PARALLEL - 1}, outcome


def test_parallel_approvals_have_exactly_one_winner(two_workers: Server, requester: Agent) -> None:
    for _ in range(3):
        grant = request_grant(two_workers, requester)
        answers = in_parallel(
            two_workers, [("POST", f"/api/grants/{grant['id']}/approve", two_workers.token)] * PARALLEL
        )
        codes = sorted(r.status_code for r in answers)
        # One winner. The others are one identity voting again: 400 once the grant is decided, or
        # 409 "already reviewed" (D13: one vote per person) when its first vote is recorded but
        # still finalising (the vote and the outcome are two transactions; seen in 1 of 4 runs).
        assert codes.count(200) == 1 and set(codes) <= {200, 400, 409}, codes
        assert all(r.json()["detail"] == "grant already decided" for r in answers if r.status_code == 400)
        assert all(r.json()["detail"] == "already reviewed" for r in answers if r.status_code == 409)
        with two_workers.admin() as http:
            final = http.get(f"/api/grants/{grant['id']}").json()
        assert final["status"] == "approved"


def test_approve_racing_deny_leaves_one_decision(two_workers: Server, requester: Agent) -> None:
    grant = request_grant(two_workers, requester)
    calls = [
        ("POST", f"/api/grants/{grant['id']}/{'approve' if i % 2 else 'deny'}", two_workers.token)
        for i in range(PARALLEL)
    ]
    answers = in_parallel(two_workers, calls)
    winners = [r for r in answers if r.status_code == 200]
    assert len(winners) == 1
    with two_workers.admin() as http:
        final = http.get(f"/api/grants/{grant['id']}").json()
    assert final["status"] == winners[0].json()["grant"]["status"]


def test_parallel_identical_timed_requests_never_lose_data(two_workers: Server, requester: Agent) -> None:
    body = grant_body(grant_type="timed", duration=600, command=["uptime", "--pretty"])

    def create(_: int) -> httpx.Response:
        with two_workers.client(requester.token) as http:
            return http.post("/api/grants", json=body)

    with ThreadPoolExecutor(PARALLEL) as pool:
        answers = list(pool.map(create, range(PARALLEL)))
    assert {r.status_code for r in answers} == {201}
    ids = {r.json()["id"] for r in answers}
    with two_workers.client(requester.token) as http:
        listed = {g["id"] for g in http.get("/api/grants", params={"limit": 100}).json()["data"]}
    assert ids <= listed
