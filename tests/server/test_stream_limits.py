"""The bounds on open event streams (D12): per principal, per owner across their agents, bounded
replay, and the memory of unread streams, over real HTTP against real servers.
(The counted request limits are tests/server/test_limits.py.)"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from inproc import InProcessServer
from support import postgres as pg

from grantd.store.records import Grant
from grantd.testing.factories import grant

from conftest import Server, make_server, signed_in, ssh_keygen

# -- event streams -------------------------------------------------------------------------------------


def _grant_record(i: int, now: int) -> Grant:
    """A pending grant of about 1.5 KB (the contract suite's factory, a long command and reason)."""
    return grant(
        f"g{i:06d}",
        requester="bot@example.com",
        requester_id="agt_bot",
        created_at=now,
        request={
            "command": ["systemctl", "restart", f"svc-{i}", *["--flag"] * 20],
            "audience": "escapes",
            "target_host": "web-1",
            "grant_type": "once",
            "reason": "r" * 600,
            "requester": "bot@example.com",
        },
    )


def populate_events(directory: Path, count: int) -> None:
    """``count`` grant.created events (grants of about 1.5 KB each), written into the database of the
    server in ``directory`` (SQLite or PostgreSQL) before it starts."""

    async def write() -> None:
        store = pg.open_store(directory)
        try:
            await store.migrate()
            now = int(time.time() * 1000)
            for i in range(count):
                await store.grants.create(_grant_record(i, now), ["grant.created"])
        finally:
            store.close()

    asyncio.run(write())


def vm_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def open_stream(port: int, token: str, last_event_id: int | None = None) -> socket.socket:
    """A raw event-stream request whose answer is never read (a tiny receive buffer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    resume = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id is not None else ""
    sock.sendall(
        f"GET /api/grants/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n{resume}\r\n".encode()
    )
    return sock


def status_of(sock: socket.socket) -> tuple[int, str]:
    sock.settimeout(10)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return int(head.split(b" ", 2)[1]), head.decode(errors="replace")


@pytest.fixture(scope="module")
def event_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real server holding 3000 grant events, per-principal streams unbounded (the memory test
    opens 100 streams with the management token)."""
    directory = tmp_path_factory.mktemp("events")
    srv = make_server(directory, extra="[limits]\nstreams_per_principal = 0\n")
    populate_events(directory, 3000)
    srv.start()
    yield srv
    srv.stop()


def read_frames(srv: Server, last_event_id: int, frames: int) -> list[dict[str, str]]:
    found: list[dict[str, str]] = []
    with (
        httpx.Client(base_url=srv.url, timeout=10) as http,
        http.stream(
            "GET",
            "/api/grants/events",
            headers={"Authorization": f"Bearer {srv.token}", "Last-Event-ID": str(last_event_id)},
        ) as r,
    ):
        assert r.status_code == 200
        event: dict[str, str] = {}
        for line in r.iter_lines():
            if line == "":
                if event:
                    found.append(event)
                    if len(found) == frames:
                        return found
                event = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                event[name] = value
    return found


def test_a_resume_too_far_behind_gets_a_reset_then_live_events(event_server):
    opening, reset = read_frames(event_server, 0, 2)  # 3000 events behind (> 1000): no replay
    assert opening == {"retry": "2000"}
    assert reset["event"] == "reset"
    assert reset["id"] == "3000"
    assert json.loads(reset["data"])["last_event_id"] == 3000


def test_a_resume_close_behind_is_replayed(event_server):
    frames = [f for f in read_frames(event_server, 2995, 6) if "event" in f]
    assert [f["id"] for f in frames] == ["2996", "2997", "2998", "2999", "3000"]
    assert {f["event"] for f in frames} == {"grant.created"}


def test_unread_streams_keep_the_server_small(event_server):
    """100 streams that never read, half resuming from 0 (reset), half 1000 events behind (paged
    replay): the server's memory stays bounded (before these limits: +290 MB for 100 streams)."""
    pid = event_server.proc.pid  # workers = 1: the server runs in this very process
    before = vm_rss_kb(pid)
    socks = [open_stream(event_server.port, event_server.token, 0 if i % 2 else 2000) for i in range(100)]
    try:
        peak = before
        for _ in range(10):
            time.sleep(0.3)  # the server fills every stream's buffers meanwhile
            peak = max(peak, vm_rss_kb(pid))
        with event_server.admin() as http:
            assert http.get("/api/me").status_code == 200  # still serving
        grown_mb = (peak - before) / 1024
        print(f"server RSS {before // 1024} MB -> peak {peak // 1024} MB with 100 unread streams")
        assert grown_mb < 60, f"server grew {grown_mb:.0f} MB"
    finally:
        for sock in socks:
            sock.close()


def test_the_ninth_stream_of_one_agent_gets_429(server, tmp_path):
    agent = signed_in(server, tmp_path / "keys")
    other = signed_in(server, tmp_path / "keys")
    socks = [open_stream(server.port, agent.token) for _ in range(8)]
    try:
        assert [status_of(s)[0] for s in socks] == [200] * 8
        ninth = open_stream(server.port, agent.token)
        code, head = status_of(ninth)
        ninth.close()
        assert code == 429 and "retry-after: 10" in head.lower()
        another = open_stream(server.port, other.token)  # other principals are not affected
        assert status_of(another)[0] == 200
        another.close()
        socks.pop().close()  # one closes: a place is free again (once the server notices)
        deadline = time.monotonic() + 10
        while True:
            again = open_stream(server.port, agent.token)
            code = status_of(again)[0]
            socks.append(again)
            if code == 200 or time.monotonic() > deadline:
                break
            socks.pop().close()
            time.sleep(0.1)
        assert code == 200
    finally:
        for sock in socks:
            sock.close()


def test_default_stream_bound_keeps_management_streams_in_check(server):
    with server.client(server.token) as http:  # the management token is a principal like any other
        assert http.get("/api/me").status_code == 200
    socks = [open_stream(server.port, server.token) for _ in range(9)]
    try:
        codes = sorted(status_of(s)[0] for s in socks)
        assert codes == [200] * 8 + [429]
    finally:
        for sock in socks:
            sock.close()


# -- issue 19 item 12 (part): streams per owner across agents -------------------------------------------


@pytest.mark.slow
def test_one_owner_cannot_escape_the_stream_bound_by_streaming_as_many_agents(tmp_path):
    """One person owns 25 agents and opens 4 unread streams as each (100 in all, half replaying
    from 1000 events behind, half reset, as the memory test above): streams_per_principal (4) holds
    for each agent, but only streams_per_owner (10) are open across them; the rest get 429 naming
    the per-person bound, another owner's agent still streams, and the server stays small. Before
    the per-owner bound every one of the 100 was served."""
    directory = tmp_path / "owner"
    srv = make_server(directory, extra="[limits]\nstreams_per_principal = 4\nstreams_per_owner = 10\n")
    populate_events(directory, 3000)
    srv.start()
    socks: list[socket.socket] = []
    try:
        owner = "olive@example.com"
        agents = [signed_in(srv, tmp_path / "keys", owner=owner, approver=owner) for _ in range(25)]
        stranger = signed_in(srv, tmp_path / "keys", owner="sam@example.com", approver="sam@example.com")
        pid = srv.proc.pid
        before = vm_rss_kb(pid)
        peak = before
        codes: list[int] = []
        heads: list[str] = []
        for i in range(100):
            sock = open_stream(srv.port, agents[i // 4].token, 0 if i % 2 else 2000)
            code, head = status_of(sock)
            codes.append(code)
            heads.append(head)
            if code == 200:
                socks.append(sock)  # held open, never read
            else:
                sock.close()
            peak = max(peak, vm_rss_kb(pid))
        for _ in range(5):
            time.sleep(0.3)  # the server fills every open stream's buffers meanwhile
            peak = max(peak, vm_rss_kb(pid))
        assert codes.count(200) == 10, codes
        assert codes[:10] == [200] * 10 and set(codes[10:]) == {429}
        refused = heads[10]
        assert "retry-after: 10" in refused.lower() and "per person across their agents" in refused
        # one agent alone is still bounded by streams_per_principal (its fifth stream is refused first)
        other = open_stream(srv.port, stranger.token)
        assert status_of(other)[0] == 200
        socks.append(other)
        grown_mb = (peak - before) / 1024
        print(
            f"server RSS {before // 1024} MB -> peak {peak // 1024} MB with 100 stream attempts by one owner"
        )
        assert grown_mb < 25, f"server grew {grown_mb:.0f} MB"
        # a stream that closes frees its owner's place (once the server notices)
        socks.pop(0).close()
        deadline = time.monotonic() + 10
        while True:
            again = open_stream(srv.port, agents[-1].token)
            code = status_of(again)[0]
            if code == 200 or time.monotonic() > deadline:
                socks.append(again)
                break
            again.close()
            time.sleep(0.1)
        assert code == 200
    finally:
        for sock in socks:
            sock.close()
        srv.stop()


def test_a_person_and_the_agents_they_own_share_one_stream_budget(tmp_path):
    """The hub itself (a real in-process server, its store and limits): a person's own streams and
    their agents' count together; the management token counts with the agents enrolled for the
    management identity; another person is not affected."""
    from contextlib import AsyncExitStack

    from grantd.core import principals
    from grantd.core.errors import Problem
    from grantd.services.events import stream_owner

    srv = InProcessServer(
        tmp_path / "hub", extra="[limits]\nstreams_per_principal = 3\nstreams_per_owner = 5\n"
    ).start()
    try:
        services = srv.services
        with srv.admin() as http:
            made = [
                http.post(
                    "/api/agent/enroll",
                    json={
                        "email": f"bot{i}@example.com",
                        "name": "bot",
                        "publicKey": ssh_keygen(tmp_path / "k", name=f"k{i}")[1],
                        "owner": "pat@example.com" if i < 2 else services.config.admin.management_identity,
                    },
                )
                for i in range(3)
            ]
        assert all(r.status_code == 201 for r in made), [r.text for r in made]
        pat = principals.person("pat@example.com", frozenset())
        bots = [principals.agent(r.json()["agent_id"], r.json()["email"]) for r in made]
        management = principals.management(services.config.admin.management_identity)
        lee = principals.person("lee@example.com", frozenset())

        async def open_all(order: list[Any]) -> list[int]:
            codes: list[int] = []
            async with AsyncExitStack() as stack:
                for principal in order:
                    owner = await stream_owner(services.store, principal)
                    try:
                        await stack.enter_async_context(
                            services.events.subscription(principal.id, services.limits, owner)
                        )
                        codes.append(200)
                    except Problem as exc:
                        codes.append(exc.status)
            return codes

        # pat: 3 own (the per-principal bound), then 2 as each agent: 5 in all, the rest refused
        codes = srv.call(open_all([pat] * 4 + [bots[0]] * 2 + [bots[1]] * 2 + [lee] * 3))
        assert codes == [200, 200, 200, 429, 200, 200, 429, 429, 200, 200, 200]
        # the management token and the agent enrolled for the management identity share a budget too
        codes = srv.call(open_all([management] * 3 + [bots[2]] * 3))
        assert codes == [200, 200, 200, 200, 200, 429]
    finally:
        srv.stop()
