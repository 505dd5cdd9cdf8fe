"""Several grantd nodes on one PostgreSQL database (issue 12): three real `grantd serve` processes on
their own ports, one issuer (as behind a load balancer), one database on a private PostgreSQL
server (tests/support/postgres.py). Whatever one node writes, every node obeys at once: challenges,
once grants, events, signing keys, rate limits. The grant event poll is set to 5 s here, so an
event that arrives in well under that came through LISTEN/NOTIFY, not polling."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from people_support import SESSION_COOKIE
from support import postgres as pg

from grantd.plugins.storage_postgres import MIGRATIONS

from conftest import Server, enroll, make_server, sign_in, signed_in
from grants_support import EventReader, approve, request_grant

ISSUER = "https://idp.nodes.example"
NODES = 3
AUTH_LIMIT = 6
LATEST_PG_SCHEMA = max(
    version for version, _, _ in MIGRATIONS
)  # what `grantd db migrate` brings a database to


@pytest.fixture(scope="module")
def database() -> Iterator[tuple[pg.Postgres, str]]:
    pg.require()
    server = pg.Postgres().start()
    try:
        yield server, server.create_database()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def nodes(
    database: tuple[pg.Postgres, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Server]]:
    _, dsn = database
    started: list[Server] = []
    try:
        for i in range(NODES):
            directory = tmp_path_factory.mktemp(f"node{i}")
            (directory / "postgres-dsn").write_text(dsn + "\n")
            (directory / "postgres-dsn").chmod(0o600)
            node = make_server(
                directory,
                storage='plugin = "postgres"\ndsn = "file:postgres-dsn"\npool_size = 4',
                extra=f"[grants]\nevents_poll_ms = 5000\nevents_heartbeat = 1\n[limits]\nauthenticate_per_agent = {AUTH_LIMIT}\n",
            )
            config = node.config_path.read_text().replace(
                f"port = {node.port}\n", f'port = {node.port}\nissuer = "{ISSUER}"\n', 1
            )
            node.config_path.write_text(config)
            if started:  # one management token for the deployment
                node.token = started[0].token
                (directory / "management-token").write_text(node.token + "\n")
            started.append(node)
        # all at once: concurrent starts must migrate once and create one signing key
        with ThreadPoolExecutor(NODES) as pool:
            list(pool.map(lambda n: n.start(timeout=60), started))
        yield started
    finally:
        for node in started:
            node.stop()


def jwks(node: Server) -> set[str]:
    with node.client() as http:
        return {k["kid"] for k in http.get("/.well-known/jwks.json").json()["keys"]}


def eventually(check: Any, timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.05)


def test_nodes_started_together_share_one_schema_and_one_key(nodes: list[Server]) -> None:
    assert all(n.proc is not None and n.proc.poll() is None for n in nodes)
    kids = [jwks(n) for n in nodes]
    assert len(kids[0]) == 1 and all(k == kids[0] for k in kids)
    assert f"schema version {LATEST_PG_SCHEMA}" in nodes[0].grantd("db", "migrate").stdout


def test_a_challenge_from_one_node_is_answered_at_another_once(nodes: list[Server], tmp_path: Path) -> None:
    a, b, c = nodes
    agent = enroll(a, tmp_path)
    with a.client() as http:
        challenge = http.post("/api/agent/challenge", json={"agent_id": agent.email}).json()["challenge"]
    body = {"agent_id": agent.email, "challenge": challenge, "signature": agent.sign_raw(challenge)}
    with b.client() as http:
        r = http.post("/api/agent/authenticate", json=body)
    assert r.status_code == 200, r.text
    token = r.json()["token"]
    with c.client() as http:
        assert http.post("/api/agent/authenticate", json=body).status_code == 401  # used up, on every node
        assert http.get("/api/me", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_a_once_grant_consumed_at_every_node_at_once_is_consumed_once(
    nodes: list[Server], tmp_path: Path
) -> None:
    agent = signed_in(nodes[0], tmp_path)
    grant = request_grant(nodes[0], agent, grant_type="once")
    authz = approve(nodes[1], grant["id"])["authz_jwt"]

    def consume(i: int) -> dict[str, Any]:
        with httpx.Client(base_url=nodes[i % NODES].url, timeout=30) as http:
            r = http.post(f"/api/grants/{grant['id']}/consume", headers={"Authorization": f"Bearer {authz}"})
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(consume, range(20)))
    winners = [a for a in answers if "error" not in a]
    assert len(winners) == 1 and winners[0]["status"] == "consumed", answers
    assert [a["error"] for a in answers if "error" in a] == ["already_consumed"] * 19


def test_events_reach_streams_on_other_nodes_at_once(nodes: list[Server], tmp_path: Path) -> None:
    a, b, c = nodes
    agent = signed_in(a, tmp_path)
    streams = [EventReader(b, b.token), EventReader(c, c.token)]
    try:
        time.sleep(0.5)  # the streams' subscriptions are in place
        delays = []
        for _ in range(3):
            grant = request_grant(a, agent)
            written = time.monotonic()
            for stream in streams:
                stream.until(
                    lambda e, gid=grant["id"]: e["grant"]["id"] == gid and e["event"] == "grant.created",
                    timeout=10,
                )
                delays.append(time.monotonic() - written)
        # the poll interval is 5 s: this fast, the NOTIFY of the commit woke the other nodes
        assert max(delays) < 0.2, delays
    finally:
        for stream in streams:
            stream.close()


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        found.update(kids := children.get(todo.pop(), []))
        todo.extend(kids)
    return found


def _log_of(node: Server, grant_ids: list[str], timeout: float) -> tuple[str, list[bytes]]:
    """The newest signed checkpoint and its leaves once they hold every grant's creation."""
    from grantd.core.tlog.leaves import parse_leaf

    deadline = time.monotonic() + timeout
    with node.admin() as http:
        while True:
            note = http.get("/api/audit/checkpoint")
            leaves: list[bytes] = []
            if note.status_code == 200:
                size = int(note.text.split("\n")[1])
                while len(leaves) < size:
                    page = http.get("/api/audit/entries", params={"start": len(leaves), "end": size})
                    leaves += [e["leaf"].encode() for e in page.json()["entries"]]
                created = [parse_leaf(x).grant_id for x in leaves if parse_leaf(x).kind == "grant.created"]
                if set(grant_ids) <= set(created):
                    assert len(created) == len(set(created)), "a grant was integrated twice"
                    return note.text, leaves
            assert time.monotonic() < deadline, (
                f"the log did not take in {len(grant_ids)} grants in {timeout} s"
            )
            time.sleep(0.1)


@pytest.mark.slow
def test_the_nodes_share_one_log_one_sequencer_and_another_node_takes_over_from_a_killed_one(
    nodes: list[Server], tmp_path: Path
) -> None:
    """Issue 23 on several PostgreSQL nodes: every node runs a sequencer (inline by default: in its
    server process), the lease lets one work; events written at every node at once are each in the one log once, every checkpoint any
    node signed is consistent with the newest; kill -9 the node whose sequencer holds the lease and
    another node's sequencer takes over once the lease (5 s) ran out."""
    from grantd.core.tlog.verify import verify_log

    agent = signed_in(nodes[0], tmp_path)
    with ThreadPoolExecutor(6) as pool:
        ids = list(pool.map(lambda i: request_grant(nodes[i % NODES], agent)["id"], range(30)))
    holders = set()
    for _ in range(10):
        holders.add(pg.server_sql(nodes[0].directory, "SELECT holder FROM tlog_state")[0][0])
        time.sleep(0.1)
    assert len(holders) == 1 and None not in holders, holders  # one sequencer works, the others wait
    [holder] = holders
    note, leaves = _log_of(nodes[1], ids, timeout=10)
    with nodes[2].client() as http:
        vkeys = http.get("/api/audit/key").text.splitlines()
    earlier = [
        str(r[0])
        for r in pg.server_sql(nodes[0].directory, "SELECT note FROM tlog_checkpoints ORDER BY size")
    ]
    result = verify_log(note, vkeys, None, leaves, earlier=earlier)
    assert result.code == 0, result.reason

    pid = int(holder.split(":")[1])
    victim = next(n for n in nodes if n.proc is not None and pid in {n.proc.pid} | _descendants(n.proc.pid))
    survivor = next(n for n in nodes if n is not victim)
    victim.stop(signal.SIGKILL)
    try:
        killed_at = time.monotonic()
        more = [request_grant(survivor, agent)["id"] for _ in range(3)]
        note, leaves = _log_of(survivor, ids + more, timeout=20)
        assert time.monotonic() - killed_at < 5 + 3  # the lease's 5 s, then a step and a signature
        now_holder = pg.server_sql(survivor.directory, "SELECT holder FROM tlog_state")[0][0]
        assert now_holder != holder
        earlier = [
            str(r[0])
            for r in pg.server_sql(survivor.directory, "SELECT note FROM tlog_checkpoints ORDER BY size")
        ]
        result = verify_log(note, vkeys, None, leaves, earlier=earlier)
        assert result.code == 0, result.reason
    finally:
        victim.start(timeout=60)


def test_rotate_and_revoke_take_effect_on_every_node(nodes: list[Server], tmp_path: Path) -> None:
    a, b, c = nodes
    agent = signed_in(b, tmp_path)
    old_token = agent.token
    before_all = jwks(a)
    rotated = a.grantd("keys", "rotate", "--json").stdout
    assert '"kid"' in rotated
    assert all(eventually(lambda n=n: len(jwks(n)) == len(before_all) + 1) for n in nodes)
    sign_in(c, agent)  # signed with the new key, on another node
    with b.client(agent.token) as http:
        assert http.get("/api/me").status_code == 200
    for kid in before_all:
        a.grantd("keys", "revoke", kid)
    for node in nodes:  # a token signed by a revoked key is refused everywhere (within a second)
        assert eventually(
            lambda node=node: node.client(old_token).get("/api/me").status_code == 401, timeout=3
        )
        with node.client(agent.token) as http:
            assert http.get("/api/me").status_code == 200
    # (each node's JWKS drops it when that node next re-reads its keys: verifying a token does)
    assert all(eventually(lambda n=n: not (jwks(n) & before_all), timeout=3) for n in nodes)


def test_rate_limits_count_across_nodes(nodes: list[Server], tmp_path: Path) -> None:
    agent = enroll(nodes[0], tmp_path)
    statuses = []
    for i in range(AUTH_LIMIT + 3):
        with nodes[i % NODES].client() as http:
            statuses.append(http.post("/api/agent/challenge", json={"agent_id": agent.email}).status_code)
    assert statuses == [200] * AUTH_LIMIT + [429] * 3  # each node alone saw at most 3


def test_a_session_from_one_node_is_accepted_at_another_and_a_logout_there_ends_it(
    nodes: list[Server],
) -> None:
    """A person registers a passkey and is signed in at node A (a real WebAuthn ceremony over HTTP,
    as a browser at the deployment's one origin); node B accepts the cookie; logging out at B ends
    the session at A and C as well: sessions live in the shared database, not in a node."""
    from support.soft_webauthn import PasskeyBrowser

    a, b, c = nodes
    email = f"person-{uuid.uuid4().hex[:8]}@people.example"
    with a.admin() as http:
        r = http.post("/api/admin/registration-urls", json={"email": email})
    assert r.status_code == 201, r.text
    browser = PasskeyBrowser(a.url, ISSUER)
    registered = browser.register(r.json()["token"])
    assert registered.status_code == 200, registered.text
    cookie = browser.cookie
    assert cookie

    def me(node: Server) -> int:
        with httpx.Client(base_url=node.url, cookies={SESSION_COOKIE: cookie}, timeout=10) as http:
            answer = http.get("/api/me")
        assert answer.status_code != 200 or answer.json()["email"] == email, answer.text
        return answer.status_code

    assert [me(n) for n in nodes] == [200, 200, 200]
    browser.base_url = b.url
    assert browser.request("POST", "/api/logout").status_code == 200
    assert [me(n) for n in nodes] == [401, 401, 401]  # ended at B, over at A and C too


def test_backup_is_a_private_pg_dump_that_restores(
    nodes: list[Server], database: tuple[pg.Postgres, str], tmp_path: Path
) -> None:
    server, _ = database
    enroll(nodes[0], tmp_path, email="kept@agents.example")
    target = tmp_path / "backup.dump"
    nodes[1].grantd("db", "backup", str(target))
    assert os.stat(target).st_mode & 0o777 == 0o600
    assert target.read_bytes()[:5] == b"PGDMP"  # pg_dump's custom format

    async def restore_into_a_new_database() -> None:
        from grantd.plugins.storage_postgres import PostgresStore

        store = PostgresStore(server.create_database())
        try:
            await store.migrate()
            await store.agents.create(_agent("gone"), frozenset())
            kept = await store.restore(str(target))
            assert Path(kept).stat().st_mode & 0o777 == 0o600
            assert await store.agents.get("kept@agents.example") is not None
            assert await store.agents.get("agt_gone") is None
            assert store.schema_version() == LATEST_PG_SCHEMA and await store.ping()
        finally:
            store.close()

    asyncio.run(restore_into_a_new_database())


def test_restore_refuses_while_a_node_uses_the_database(
    nodes: list[Server], database: tuple[pg.Postgres, str], tmp_path: Path
) -> None:
    target = tmp_path / "backup.dump"
    nodes[0].grantd("db", "backup", str(target))
    _, dsn = database

    async def restore() -> None:
        from grantd.plugins.storage_postgres import PostgresStore
        from grantd.store import StoreError

        store = PostgresStore(dsn)
        try:
            with pytest.raises(StoreError, match="in use"):
                await store.restore(str(target))
        finally:
            store.close()

    asyncio.run(restore())
    assert all(n.client().get("/readyz").status_code == 200 for n in nodes)


def _agent(name: str) -> Any:
    return {
        "agent_id": f"agt_{name}",
        "email": f"{name}@agents.example",
        "name": name,
        "public_key": f"ssh-ed25519 KEY{name}",
        "key_id": f"SHA256:{name}",
        "key_generation": 1,
        "owner": "owner@example.com",
        "approver": "owner@example.com",
        "status": "active",
        "created_at": 1,
        "updated_at": 1,
    }
