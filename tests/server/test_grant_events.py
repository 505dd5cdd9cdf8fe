"""GET /api/grants/events: live grant changes for whoever may see them, resumable, from every process."""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import Agent, Server, make_server, problem, signed_in
from grants_support import EventReader, admin_post, approve, consume, request_grant


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two processes, a quick heartbeat and a quick expiry sweep."""
    srv = make_server(
        tmp_path_factory.mktemp("events"),
        workers=2,
        extra="[grants]\nevents_heartbeat = 1\nexpiry_sweep_interval = 1\n",
    ).start()
    yield srv
    srv.stop()


@pytest.fixture
def requester(live: Server, tmp_path: Path) -> Agent:
    return signed_in(live, tmp_path / "keys")


def test_every_change_arrives_in_order_with_ids(live: Server, requester: Agent) -> None:
    stream = EventReader(live, live.token)
    assert stream.status == 200 and stream.headers is not None
    assert stream.headers["content-type"].startswith("text/event-stream")
    grant = request_grant(live, requester)
    token = approve(live, grant["id"])["authz_jwt"]
    consume(live, grant["id"], token)
    mine = [stream.until(lambda e: e["grant"]["id"] == grant["id"]) for _ in range(4)]
    # every vote is an event of its own (D14), before the outcome it led to
    assert [e["event"] for e in mine] == [
        "grant.created",
        "grant.reviewed",
        "grant.approved",
        "grant.consumed",
    ]
    assert [e["grant"]["status"] for e in mine] == ["pending", "pending", "approved", "consumed"]
    ids = [int(e["id"]) for e in mine]
    assert ids == sorted(ids) and len(set(ids)) == 4
    stream.close()


def test_a_caller_sees_only_the_grants_it_may_see(live: Server, requester: Agent, tmp_path: Path) -> None:
    other = signed_in(live, tmp_path / "other")
    watching = EventReader(live, other.token)
    hidden = request_grant(live, requester)
    visible = request_grant(live, other)
    seen = watching.until(lambda e: e["grant"]["id"] in (hidden["id"], visible["id"]))
    assert seen["grant"]["id"] == visible["id"]
    admin_post(live, f"/api/grants/{hidden['id']}/deny")
    admin_post(live, f"/api/grants/{visible['id']}/deny")
    assert watching.until(lambda e: e["event"] == "grant.denied")["grant"]["id"] == visible["id"]
    assert all(e["grant"]["requester"] == other.email for e in watching.drain())
    watching.close()


def test_last_event_id_replays_what_was_missed(live: Server, requester: Agent) -> None:
    first = EventReader(live, live.token)
    grant = request_grant(live, requester)
    created = first.until(lambda e: e["grant"]["id"] == grant["id"])
    first.close()
    # while nobody listens
    approve(live, grant["id"])
    admin_post(live, f"/api/grants/{grant['id']}/revoke")
    resumed = EventReader(live, live.token, last_event_id=created["id"])
    replay = [resumed.until(lambda e: e["grant"]["id"] == grant["id"]) for _ in range(3)]
    assert [e["event"] for e in replay] == ["grant.reviewed", "grant.approved", "grant.revoked"]
    resumed.close()
    with httpx.Client(
        base_url=live.url, headers={"Authorization": f"Bearer {live.token}"}, timeout=5
    ) as http:
        r = http.get("/api/grants/events", headers={"Last-Event-ID": "not-a-number"})
    assert r.status_code == 400 and problem(r)["field"] == "Last-Event-ID"


def test_heartbeats_keep_an_idle_stream_alive(live: Server) -> None:
    stream = EventReader(live, live.token)
    deadline = time.monotonic() + 10
    while "heartbeat" not in stream.comments and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "heartbeat" in stream.comments
    stream.close()


def test_streams_need_a_credential(live: Server) -> None:
    with httpx.Client(base_url=live.url, timeout=5) as http:
        r = http.get("/api/grants/events")
    assert r.status_code == 401 and problem(r)["status"] == 401


def test_every_stream_sees_writes_made_by_either_process(live: Server, requester: Agent) -> None:
    # Each stream and each write lands on one of the two processes; every stream must see every write.
    streams = [EventReader(live, live.token) for _ in range(6)]
    grants = [request_grant(live, requester, reason=f"fan-out {i}")["id"] for i in range(6)]
    for stream in streams:
        got: set[str] = set()
        deadline = time.monotonic() + 10
        while got != set(grants) and time.monotonic() < deadline:
            try:
                event = stream.next(timeout=1)
            except queue.Empty:
                continue
            if event["event"] == "grant.created" and event["grant"]["id"] in grants:
                got.add(event["grant"]["id"])
        assert got == set(grants)
        stream.close()


def test_expiry_is_announced(live: Server, requester: Agent) -> None:
    stream = EventReader(live, live.token)
    grant = request_grant(live, requester, grant_type="timed", duration=1, command=["date"])
    approve(live, grant["id"])
    expired = stream.until(
        lambda e: e["event"] == "grant.expired" and e["grant"]["id"] == grant["id"], timeout=15
    )
    assert expired["grant"]["status"] == "expired"
    stream.close()


def test_a_restart_ends_streams_promptly(tmp_path: Path) -> None:
    srv = make_server(tmp_path / "restart").start()
    stream = EventReader(srv, srv.token)
    started = time.monotonic()
    assert srv.stop() == 0
    assert time.monotonic() - started < 10  # open streams do not hold up a graceful shutdown
    stream.close()


def test_a_stream_ends_when_its_agent_is_disabled(live: Server, requester: Agent) -> None:
    stream = EventReader(live, requester.token)
    with live.admin() as http:
        assert (
            http.put(f"/api/admin/agents/{requester.agent_id}", json={"status": "disabled"}).status_code
            == 200
        )
    stream._thread.join(timeout=10)  # heartbeats are 1 s here; the next one finds the credential gone
    assert not stream._thread.is_alive(), "the stream stayed open for a disabled agent"
