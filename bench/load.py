"""The load itself: N concurrent clients repeating one operation until a deadline.

Each simulated client has its own HTTP/1.1 keep-alive connection. Everything a load process needs
is in a picklable `Plan`, so the same code runs in this process or in several load processes
(`--client-procs`), whose `Tally`s are merged afterwards."""

from __future__ import annotations

import asyncio
import base64
import functools
import itertools
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.lean_http import LeanClient

try:
    import uvloop
except ImportError:  # Sanic installs it; without it the stock loop is a little slower
    uvloop = None  # type: ignore[assignment]

COMMAND = ["systemctl", "restart", "nginx"]
CLIENT_KINDS = ("lean", "httpx")


@functools.lru_cache(maxsize=4096)
def _private_key(raw: bytes) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(raw)


@dataclass(frozen=True)
class AgentCred:
    """An enrolled agent: its raw Ed25519 private key (to sign challenges) and a current identity token."""

    agent_id: str
    email: str
    private_key: bytes
    token: str

    def sign(self, challenge: str) -> str:
        return base64.b64encode(_private_key(self.private_key).sign(challenge.encode())).decode()


@dataclass
class Plan:
    op: str
    urls: list[str]  # the nodes: client i of this plan connects to urls[i % len(urls)]
    clients: int
    start_at: float  # wall clock (time.time()), shared by every load process
    duration: float
    management_token: str
    agents: list[AgentCred]
    items: list[Any] = field(default_factory=list)  # this process's share of the operation's pool
    client_kind: str = "lean"
    dialect: str = "grantd"  # "grantd" or "peer" (the peer's IdP: bench/peer_live.py)


@dataclass
class Tally:
    """What the clients of one or more processes saw."""

    latencies_ms: list[float] = field(default_factory=list)  # of whole operations that succeeded
    request_latencies_ms: list[float] = field(default_factory=list)  # of every HTTP exchange
    errors: Counter[str] = field(default_factory=Counter)
    finished_at: float = 0.0  # wall clock of the last completed operation
    exhausted_at: float | None = None  # wall clock at which a use-once pool ran dry
    client_cpu_s: float = 0.0  # CPU the load processes themselves used while measuring

    def merge(self, other: Tally) -> None:
        self.latencies_ms.extend(other.latencies_ms)
        self.request_latencies_ms.extend(other.request_latencies_ms)
        self.errors.update(other.errors)
        self.client_cpu_s += other.client_cpu_s
        self.finished_at = max(self.finished_at, other.finished_at)
        if other.exhausted_at is not None:
            self.exhausted_at = min(self.exhausted_at or other.exhausted_at, other.exhausted_at)


class PoolEmpty(Exception):
    """A use-once pool (grants to approve or consume) has no items left."""


class Unexpected(Exception):
    """An answer other than the one the operation expects; the message is the error's bucket."""


class UseOnce:
    """Items each used by exactly one operation (one approve or consume per grant)."""

    def __init__(self, items: list[Any]):
        self._items = deque(items)

    def take(self) -> Any:
        if not self._items:
            raise PoolEmpty
        return self._items.popleft()


class Reusable:
    """Items used over and over, round robin (grants to GET, tokens to verify)."""

    def __init__(self, items: list[Any]):
        self._items: Iterator[Any] = itertools.cycle(items) if items else iter(())

    def take(self) -> Any:
        try:
            return next(self._items)
        except StopIteration:
            raise PoolEmpty from None


class Timed:
    """Records the latency of every HTTP exchange of an operation (authenticate and the full flow
    are several requests; their per-request figures are reported too)."""

    def __init__(self, http: Any, latencies_ms: list[float]):
        self.http = (
            http  # LeanClient or httpx.AsyncClient: both offer get/post and status_code/headers/json()
        )
        self.latencies_ms = latencies_ms

    async def get(self, path: str, **kwargs: Any) -> Any:
        started = time.perf_counter()
        response = await self.http.get(path, **kwargs)
        self.latencies_ms.append((time.perf_counter() - started) * 1000)
        return response

    async def post(self, path: str, **kwargs: Any) -> Any:
        started = time.perf_counter()
        response = await self.http.post(path, **kwargs)
        self.latencies_ms.append((time.perf_counter() - started) * 1000)
        return response


@dataclass
class Client:
    """One simulated client: its own connection, its own agent, and the operation's (shared) pool."""

    http: Timed
    agent: AgentCred
    management: dict[str, str]
    pool: UseOnce | Reusable
    dialect: str = "grantd"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def expect(response: Any, status: int, what: str) -> dict[str, Any]:
    """The JSON body of an answer with the expected status; anything else is an error named by `what`."""
    if response.status_code != status:
        raise Unexpected(f"{what}: {response.status_code} {response.text[:100]}")
    return response.json() if response.content else {}


def grant_body(grant_type: str = "once", host: str = "web-1") -> dict[str, Any]:
    """The peer reuses an approved non-once grant of the same requester and target host for any
    new request (peer-facts 3.3), so set-up gives each pool of always grants its own host."""
    return {
        "target_host": host,
        "audience": "escapes",
        "grant_type": grant_type,
        "command": COMMAND,
        "reason": "bench",
    }


# -- operations -------------------------------------------------------------------------------------


async def healthz(c: Client) -> None:
    expect(await c.http.get("/healthz"), 200, "healthz")


async def authenticate(c: Client) -> None:
    ident = {"agent_id": c.agent.agent_id}
    challenge = expect(await c.http.post("/api/agent/challenge", json=ident), 200, "challenge")["challenge"]
    answer = {**ident, "challenge": challenge, "signature": c.agent.sign(challenge)}
    expect(await c.http.post("/api/agent/authenticate", json=answer), 200, "authenticate")


async def create_grant(c: Client) -> None:
    expect(await c.http.post("/api/grants", json=grant_body(), headers=bearer(c.agent.token)), 201, "create")


async def get_with_etag(c: Client) -> None:
    token, grant_id, tag = c.pool.take()
    headers = {**bearer(token), "If-None-Match": tag}
    expect(await c.http.get(f"/api/grants/{grant_id}", headers=headers), 304, "get")


async def token(c: Client) -> None:
    agent_token, grant_id = c.pool.take()
    answer = expect(
        await c.http.post(f"/api/grants/{grant_id}/token", headers=bearer(agent_token)), 200, "token"
    )
    if not answer.get("authz_jwt"):
        raise Unexpected("token: no authz_jwt")


async def verify(c: Client) -> None:
    answer = expect(await c.http.post("/api/grants/verify", json={"token": c.pool.take()}), 200, "verify")
    if answer.get("valid") is not True:
        raise Unexpected(f"verify: {answer.get('error')}")


def approve_kwargs(c: Client) -> dict[str, Any]:
    """The peer answers a body-less approve with 500 (peer-facts 3.1): it gets `{}`, as apes would
    have to send."""
    return {"headers": c.management, "json": {}} if c.dialect == "peer" else {"headers": c.management}


async def approve(c: Client) -> None:
    grant_id = c.pool.take()
    answer = expect(await c.http.post(f"/api/grants/{grant_id}/approve", **approve_kwargs(c)), 200, "approve")
    if not answer.get("authz_jwt"):
        raise Unexpected("approve: no authz_jwt")


async def _consume(c: Client, grant_id: str, authz_jwt: str) -> None:
    answer = expect(
        await c.http.post(f"/api/grants/{grant_id}/consume", headers=bearer(authz_jwt)), 200, "consume"
    )
    if answer.get("status") != "consumed":
        raise Unexpected(f"consume: {answer.get('error') or answer.get('status')}")


async def consume(c: Client) -> None:
    grant_id, authz_jwt = c.pool.take()
    await _consume(c, grant_id, authz_jwt)


async def consume_always(c: Client) -> None:
    """A target host checks an always grant's AuthZ-JWT each time it runs the command: valid, no write."""
    grant_id, authz_jwt = c.pool.take()
    answer = expect(
        await c.http.post(f"/api/grants/{grant_id}/consume", headers=bearer(authz_jwt)), 200, "consume"
    )
    if answer.get("status") != "valid":
        raise Unexpected(f"consume_always: {answer.get('error') or answer.get('status')}")


LIST_PAGE = 50


async def list_own(c: Client) -> None:
    """An agent lists its own grants, newest first (a page of 50)."""
    answer = expect(
        await c.http.get(f"/api/grants?limit={LIST_PAGE}", headers=bearer(c.agent.token)), 200, "list"
    )
    if not isinstance(answer.get("data"), list):
        raise Unexpected("list: no data")


async def list_all(c: Client) -> None:
    """The management token lists every grant, newest first (a page of 50): the admin's view."""
    answer = expect(await c.http.get(f"/api/grants?limit={LIST_PAGE}", headers=c.management), 200, "list")
    if len(answer.get("data") or []) == 0:
        raise Unexpected("list_all: an empty page")


async def full_flow(c: Client) -> None:
    """create -> approve (management token) -> token (requester) -> consume (AuthZ-JWT)."""
    agent = bearer(c.agent.token)
    grant_id = expect(await c.http.post("/api/grants", json=grant_body(), headers=agent), 201, "create")["id"]
    expect(await c.http.post(f"/api/grants/{grant_id}/approve", **approve_kwargs(c)), 200, "approve")
    authz_jwt = expect(await c.http.post(f"/api/grants/{grant_id}/token", headers=agent), 200, "token")[
        "authz_jwt"
    ]
    await _consume(c, grant_id, authz_jwt)


Operation = Callable[[Client], Awaitable[None]]
OPERATIONS: dict[str, Operation] = {
    "healthz": healthz,
    "authenticate": authenticate,
    "create": create_grant,
    "get_etag": get_with_etag,
    "token": token,
    "verify": verify,
    "approve": approve,
    "consume": consume,
    "consume_always": consume_always,
    "flow": full_flow,
    "list": list_own,
    "list_all": list_all,
}
USE_ONCE = {"approve", "consume"}


# -- the load loop ---------------------------------------------------------------------------------------


def _bucket(exc: Exception) -> str:
    return str(exc) if isinstance(exc, Unexpected) else type(exc).__name__


# Transport failures of either client kind count as errors of the operation, not as crashes.
FAILURES = (
    httpx.HTTPError,
    OSError,
    asyncio.IncompleteReadError,
    asyncio.LimitOverrunError,
    Unexpected,
    KeyError,
    ValueError,
)


async def _client_loop(operation: Operation, client: Client, deadline: float, tally: Tally) -> None:
    while time.time() < deadline:
        started = time.perf_counter()
        try:
            await operation(client)
        except PoolEmpty:
            tally.exhausted_at = tally.exhausted_at or time.time()
            return
        except FAILURES as exc:
            tally.errors[_bucket(exc)] += 1
            continue
        tally.latencies_ms.append((time.perf_counter() - started) * 1000)
        tally.finished_at = time.time()


def connection(url: str, kind: str) -> Any:
    """One client's keep-alive connection. httpx gets a pool of exactly one connection per client:
    64 requests sharing one AsyncClient pool crawl (~100/s, its connection assignment is quadratic)."""
    if kind == "httpx":
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        return httpx.AsyncClient(base_url=url, limits=limits, timeout=httpx.Timeout(30.0), http2=False)
    return LeanClient(url)


# A cheap GET that opens each connection before the clock starts (the peer has no /healthz).
OPEN_PATH = {"grantd": "/healthz", "peer": "/.well-known/jwks.json"}


async def _open(http: Any, dialect: str = "grantd") -> Any:
    """Connect before the clock starts, so connection set-up is not measured."""
    expect(await http.get(OPEN_PATH[dialect]), 200, "open")
    return http


async def run_plan_async(plan: Plan) -> Tally:
    operation = OPERATIONS[plan.op]
    pool: UseOnce | Reusable = UseOnce(plan.items) if plan.op in USE_ONCE else Reusable(plan.items)
    tally = Tally()
    management = bearer(plan.management_token)
    async with AsyncExitStack() as stack:
        https = [
            await stack.enter_async_context(connection(plan.urls[i % len(plan.urls)], plan.client_kind))
            for i in range(plan.clients)
        ]
        await asyncio.gather(*(_open(http, plan.dialect) for http in https))
        clients = [
            Client(
                Timed(http, tally.request_latencies_ms),
                plan.agents[i % len(plan.agents)],
                management,
                pool,
                plan.dialect,
            )
            for i, http in enumerate(https)
        ]
        await asyncio.sleep(max(0.0, plan.start_at - time.time()))
        deadline = plan.start_at + plan.duration
        cpu_before = time.process_time()
        await asyncio.gather(*(_client_loop(operation, c, deadline, tally) for c in clients))
        tally.client_cpu_s = time.process_time() - cpu_before
    return tally


def run_async(work: Awaitable[Any]) -> Any:
    """Run a coroutine on uvloop when it is there (it costs the load generator less CPU)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop if uvloop else None) as runner:
        return runner.run(work)  # type: ignore[arg-type]


def warm_up(seconds: float) -> None:
    """Run in each load process before the first measurement: by then the process exists and has
    imported everything, so it connects well before the clock starts."""
    time.sleep(seconds)


def run_plan(plan: Plan) -> Tally:
    """Entry point of a load process (and of the in-process run)."""
    return run_async(run_plan_async(plan))
