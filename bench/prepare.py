"""Set-up before the clock runs: enrolled and signed-in agents, and the grants each operation works on."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Iterable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.lean_http import LeanClient
from bench.load import AgentCred, bearer, expect, grant_body

T = TypeVar("T")
SETUP_CONCURRENCY = 32
BATCH_SIZE = 100  # the server's limit for POST /api/grants/batch


class Connections:
    """Keep-alive connections lent to set-up requests, one request per connection at a time."""

    def __init__(self, url: str, count: int = SETUP_CONCURRENCY):
        self._idle: asyncio.Queue[LeanClient] = asyncio.Queue()
        for _ in range(count):
            self._idle.put_nowait(LeanClient(url))

    @asynccontextmanager
    async def one(self) -> AsyncIterator[LeanClient]:
        http = await self._idle.get()
        try:
            yield http
        finally:
            self._idle.put_nowait(http)

    async def aclose(self) -> None:
        while not self._idle.empty():
            await self._idle.get_nowait().aclose()


@asynccontextmanager
async def connections(url: str) -> AsyncIterator[Connections]:
    pool = Connections(url)
    try:
        yield pool
    finally:
        await pool.aclose()


async def gather_all(work: Iterable[Awaitable[T]]) -> list[T]:
    """Await everything (the connections bound how many run at once), results in order."""
    return await asyncio.gather(*work)


# -- agents ---------------------------------------------------------------------------------------------


def _new_key() -> tuple[bytes, str]:
    """A raw Ed25519 private key and its public key as an OpenSSH line (what enrolment takes)."""
    key = Ed25519PrivateKey.generate()
    raw = key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return raw, public.decode()


async def _sign_in(http: LeanClient, agent: AgentCred) -> AgentCred:
    ident = {"agent_id": agent.agent_id}
    challenge = expect(await http.post("/api/agent/challenge", json=ident), 200, "challenge")["challenge"]
    answer = {**ident, "challenge": challenge, "signature": agent.sign(challenge)}
    token = expect(await http.post("/api/agent/authenticate", json=answer), 200, "authenticate")["token"]
    return AgentCred(agent.agent_id, agent.email, agent.private_key, token)


async def _enroll_one(conns: Connections, management: str, number: int, dialect: str) -> AgentCred:
    raw, public = _new_key()
    email = f"bench-{os.getpid()}-{number}@example.com"
    body = {"email": email, "name": f"bench agent {number}", "publicKey": public}
    if dialect == "peer":  # an owner makes it an agent; the peer answers 200 and names it by e-mail
        body["owner"] = "admin@example.com"
    async with conns.one() as http:
        answer = await http.post("/api/agent/enroll", json=body, headers=bearer(management))
        enrolled = expect(answer, 200 if dialect == "peer" else 201, "enroll")
        agent_id = email if dialect == "peer" else enrolled["agent_id"]
        return await _sign_in(http, AgentCred(agent_id, email, raw, ""))


async def enroll_agents(
    conns: Connections, management: str, count: int, dialect: str = "grantd"
) -> list[AgentCred]:
    return await gather_all(_enroll_one(conns, management, n, dialect) for n in range(count))


# -- grants -------------------------------------------------------------------------------------------------


async def _create(
    conns: Connections, agent: AgentCred, grant_type: str, host: str, retries: int
) -> tuple[AgentCred, str]:
    """One pending grant. `retries`: the peer's file store sometimes reads a grant while another
    request writes it and answers 500, or drops the connection without an answer (peer-facts: its
    create fails under load); set-up of the peer tries again (a pool grant made twice is one pending
    grant more, nothing else), grantd's never does."""
    for attempt in range(retries + 1):
        try:
            async with conns.one() as http:
                answer = await http.post(
                    "/api/grants", json=grant_body(grant_type, host), headers=bearer(agent.token)
                )
        except (ConnectionResetError, asyncio.IncompleteReadError):
            if attempt == retries:
                raise
            await asyncio.sleep(0.05)
            continue
        if answer.status_code < 500 or attempt == retries:
            break
        await asyncio.sleep(0.05)
    return agent, expect(answer, 201, "create")["id"]


async def create_grants(
    conns: Connections,
    agents: list[AgentCred],
    count: int,
    grant_type: str = "once",
    host: str = "web-1",
    retries: int = 0,
) -> list[tuple[AgentCred, str]]:
    """`count` pending grants, requested by the agents in turn."""
    return await gather_all(
        _create(conns, agent, grant_type, host, retries)
        for agent in itertools.islice(itertools.cycle(agents), count)
    )


async def _approve_batch(conns: Connections, management: str, grant_ids: list[str]) -> dict[str, str]:
    operations = [{"id": grant_id, "action": "approve"} for grant_id in grant_ids]
    async with conns.one() as http:
        answer = await http.post(
            "/api/grants/batch", json={"operations": operations}, headers=bearer(management)
        )
    results = expect(answer, 200, "batch approve")["results"]
    failed = [r for r in results if not r.get("success")]
    if failed:
        raise RuntimeError(f"set-up could not approve {len(failed)} grants, e.g. {failed[0]}")
    return {r["id"]: r["authz_jwt"] for r in results}


async def approve_grants(conns: Connections, management: str, grant_ids: list[str]) -> dict[str, str]:
    """Approve through the batch endpoint (100 a request): set-up is not what we measure, and it is
    quicker. Returns each grant's AuthZ-JWT."""
    chunks = [grant_ids[i : i + BATCH_SIZE] for i in range(0, len(grant_ids), BATCH_SIZE)]
    tokens: dict[str, str] = {}
    for answer in await gather_all(_approve_batch(conns, management, chunk) for chunk in chunks):
        tokens.update(answer)
    return tokens


async def _approve_one(conns: Connections, management: str, grant_id: str) -> tuple[str, str]:
    async with conns.one() as http:
        answer = await http.post(f"/api/grants/{grant_id}/approve", json={}, headers=bearer(management))
    return grant_id, expect(answer, 200, "approve")["authz_jwt"]


async def approve_one_by_one(conns: Connections, management: str, grant_ids: list[str]) -> dict[str, str]:
    """The peer's batch answers carry no AuthZ-JWT: its set-up approves each grant on its own."""
    return dict(await gather_all(_approve_one(conns, management, grant_id) for grant_id in grant_ids))


async def _with_etag(conns: Connections, agent: AgentCred, grant_id: str) -> tuple[str, str, str]:
    async with conns.one() as http:
        response = await http.get(f"/api/grants/{grant_id}", headers=bearer(agent.token))
    expect(response, 200, "get")
    return agent.token, grant_id, response.headers["etag"]


# -- the pool of each operation -------------------------------------------------------------------------------

POOLED_OPS = {"get_etag", "token", "verify", "approve", "consume", "consume_always"}


async def pool_for(
    op: str, conns: Connections, management: str, agents: list[AgentCred], size: int, dialect: str = "grantd"
) -> list[Any]:
    """The items an operation works on (see bench.load: each operation's `c.pool.take()`).
    The peer's verify consumes a once grant (peer-facts 3.3), so its verify pool holds always
    grants (the same check on the token and one read of the grant, no write)."""
    if op not in POOLED_OPS:
        return []
    always = op == "consume_always" or (op == "verify" and dialect == "peer")
    created = await create_grants(
        conns,
        agents,
        size,
        "always" if always else "once",
        f"web-{op}" if always else "web-1",
        retries=20 if dialect == "peer" else 0,
    )
    if op == "approve":
        return [grant_id for _, grant_id in created]
    if op == "get_etag":
        return await gather_all(_with_etag(conns, agent, grant_id) for agent, grant_id in created)
    approve_all = approve_one_by_one if dialect == "peer" else approve_grants
    tokens = await approve_all(conns, management, [grant_id for _, grant_id in created])
    if op == "token":
        return [(agent.token, grant_id) for agent, grant_id in created]
    if op == "verify":
        return [tokens[grant_id] for _, grant_id in created]
    return [(grant_id, tokens[grant_id]) for _, grant_id in created]  # consume, consume_always
