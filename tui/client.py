"""The console's HTTP client for grantd: grants, decisions, agents and the grant event stream.

Credentials are `httpx.Auth` flows, so a kind that needs more than a static header (a user
session that refreshes itself on 401, once human sign-in exists) slots in without touching the
client: subclass `Credential`, implement `auth_flow`, pass it to `GrantdClient`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from grantd.client.problems import read_problem
from grantd.client.sse import SseDecoder, SseEvent
from grantd.tui.models import AgentInfo, Grant, Reviewers

EVENT_STREAM = "text/event-stream"
LIST_PAGE_LIMIT = 100  # the server clamps larger values to 100 (D6)


class Credential(httpx.Auth):
    """Who the console acts as. `label` is shown in the status bar (never the secret)."""

    label = "credential"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise NotImplementedError


class BearerCredential(Credential):
    """A static bearer token (e.g. a user's access token)."""

    def __init__(self, token: str, label: str = "bearer token") -> None:
        token = token.strip()
        if not token:
            raise ValueError("empty token")
        self._token = token
        self.label = label

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._token}"
        yield request

    def __repr__(self) -> str:  # never print the secret
        return f"{type(self).__name__}({self.label!r})"


class ManagementTokenCredential(BearerCredential):
    """The operator's management token (from the config's admin.management_token or a file)."""

    def __init__(self, token: str) -> None:
        super().__init__(token, label="management token")

    @classmethod
    def from_file(cls, path: Path) -> ManagementTokenCredential:
        return cls(path.read_text(encoding="utf-8"))


class ApiError(Exception):
    """A non-2xx answer; `detail` is the problem+json detail when the server sent one."""

    def __init__(self, status: int, detail: str, body: Any = None) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail
        self.body = body


class EventsUnavailable(ApiError):
    """The server has no usable event stream (older server, or a proxy that strips it): poll instead."""


@dataclass(frozen=True)
class Decision:
    grant_id: str
    partial: dict[str, Any]
    authz_jwt: str | None = None


def _error_of(response: httpx.Response) -> ApiError:
    """The server's words, escaped (grantd.client.problems, D18): shown in notifications and the status line."""
    problem = read_problem(response)
    return ApiError(response.status_code, problem.detail or problem.reason or "request failed", problem.body)


class GrantdClient:
    def __init__(
        self,
        base_url: str,
        credential: Credential,
        *,
        timeout: float = 10.0,
        event_read_timeout: float = 45.0,
        events_path: str = "/api/grants/events",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.credential = credential
        # The stream's read timeout is three heartbeats: a silent connection is a dead one.
        self.event_read_timeout = event_read_timeout
        self.events_path = events_path
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            auth=credential,
            timeout=timeout,
            headers={"Accept": "application/json", "User-Agent": "grantd-tui"},
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> GrantdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise _error_of(response)
        try:
            return response.json()
        except ValueError:
            raise ApiError(
                response.status_code, "the server answered with something that is not JSON"
            ) from None

    # -- approval policies (D13) -------------------------------------------------------------------
    async def evaluate_policies(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/policies/evaluate``: a dry run; creates nothing (administrators)."""
        answer = await self._json("POST", "/api/policies/evaluate", json=body)
        if not isinstance(answer, dict):
            raise ApiError(200, "the server's answer is not an object")
        return answer

    # -- grants ----------------------------------------------------------------------------------
    async def list_grants(
        self, *, status: str | None = None, requester: str | None = None, max_items: int = 1000
    ) -> list[Grant]:
        """Every grant matching the filters, following the cursor up to `max_items`."""
        params: dict[str, str | int] = {"limit": LIST_PAGE_LIMIT}
        if status:
            params["status"] = status
        if requester:
            params["requester"] = requester
        grants: list[Grant] = []
        while True:
            page = await self._json("GET", "/api/grants", params=params)
            items = page.get("data") if isinstance(page, dict) else page
            for item in items if isinstance(items, list) else []:
                try:
                    grants.append(Grant.from_json(item))
                except ValueError:
                    continue
            pagination = page.get("pagination") if isinstance(page, dict) else None
            cursor = pagination.get("cursor") if isinstance(pagination, dict) else None
            if (
                not (isinstance(pagination, dict) and pagination.get("has_more") and cursor)
                or len(grants) >= max_items
            ):
                return grants[:max_items]
            params["cursor"] = cursor

    async def get_grant(self, grant_id: str) -> Grant:
        return Grant.from_json(await self._json("GET", f"/api/grants/{quote(grant_id, safe='')}"))

    async def approve(
        self, grant_id: str, *, grant_type: str | None = None, duration: int | None = None
    ) -> Decision:
        body: dict[str, Any] = {"via": "tui"}  # the vote's `via` (D13); servers before issue 22 ignore it
        if grant_type:
            body["grant_type"] = grant_type
        if duration is not None:
            body["duration"] = duration
        answer = await self._json("POST", f"/api/grants/{quote(grant_id, safe='')}/approve", json=body)
        return Decision(
            grant_id, _partial_of(answer), answer.get("authz_jwt") if isinstance(answer, dict) else None
        )

    async def deny(self, grant_id: str, *, reason: str | None = None) -> Decision:
        body: dict[str, Any] = {"via": "tui", **({"reason": reason} if reason else {})}
        answer = await self._json("POST", f"/api/grants/{quote(grant_id, safe='')}/deny", json=body)
        return Decision(grant_id, _partial_of(answer))

    async def revoke(self, grant_id: str) -> Decision:
        answer = await self._json("POST", f"/api/grants/{quote(grant_id, safe='')}/revoke", json={})
        return Decision(grant_id, _partial_of(answer))

    async def reviewers(self, grant_id: str) -> Reviewers:
        """``GET /api/grants/:id/reviewers`` (D13): per requirement, who may still approve."""
        return Reviewers.from_json(
            await self._json("GET", f"/api/grants/{quote(grant_id, safe='')}/reviewers")
        )

    # -- agents ----------------------------------------------------------------------------------
    async def agent(self, ident: str) -> AgentInfo:
        return AgentInfo.from_json(await self._json("GET", f"/api/admin/agents/{quote(ident, safe='')}"))

    # -- events ----------------------------------------------------------------------------------
    async def events(
        self, last_event_id: str | None = None, *, on_open: Callable[[], Awaitable[None]] | None = None
    ) -> AsyncIterator[SseEvent]:
        """Yield grant events until the connection ends. Raises EventsUnavailable when there is no stream.

        `on_open` is awaited once the stream is accepted, before any event is read (the caller
        reloads its list there, so events queued meanwhile apply on top of it). The caller owns
        reconnection; each event's `id` is what to resume from.
        """
        headers = {"Accept": EVENT_STREAM, "Cache-Control": "no-cache"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        timeout = httpx.Timeout(self._http.timeout.connect, read=self.event_read_timeout)
        async with self._http.stream("GET", self.events_path, headers=headers, timeout=timeout) as response:
            if response.status_code in (404, 405, 406, 501):
                await response.aread()
                raise EventsUnavailable(response.status_code, "the server has no grant event stream")
            if response.status_code >= 400:
                await response.aread()
                raise _error_of(response)
            if not response.headers.get("content-type", "").startswith(EVENT_STREAM):
                raise EventsUnavailable(
                    response.status_code, "the grant event stream is not text/event-stream"
                )
            if on_open is not None:
                await on_open()
            decoder = SseDecoder(last_event_id)
            async for line in response.aiter_lines():
                event = decoder.feed_line(line)
                if event is not None:
                    yield event


def _partial_of(answer: Any) -> dict[str, Any]:
    grant = answer.get("grant") if isinstance(answer, dict) else None
    return grant if isinstance(grant, dict) else {}


def grant_of_event(event: SseEvent) -> Grant | None:
    """The grant carried by a `grant.*` event (`data: {"grant": {...}}`), or None for anything else."""
    if not event.event.startswith("grant."):
        return None
    try:
        payload = json.loads(event.data)
        return Grant.from_json(payload.get("grant") if isinstance(payload, dict) else None)
    except ValueError:
        return None


class GrantSource(Protocol):
    """What the console needs from a server; `GrantdClient` is the implementation that talks HTTP."""

    @property
    def base_url(self) -> str: ...

    @property
    def credential(self) -> Credential: ...

    async def list_grants(
        self, *, status: str | None = None, requester: str | None = None, max_items: int = 1000
    ) -> list[Grant]: ...

    async def get_grant(self, grant_id: str) -> Grant: ...

    async def approve(
        self, grant_id: str, *, grant_type: str | None = None, duration: int | None = None
    ) -> Decision: ...

    async def deny(self, grant_id: str, *, reason: str | None = None) -> Decision: ...

    async def revoke(self, grant_id: str) -> Decision: ...

    async def reviewers(self, grant_id: str) -> Reviewers: ...

    async def agent(self, ident: str) -> AgentInfo: ...

    def events(
        self, last_event_id: str | None = None, *, on_open: Callable[[], Awaitable[None]] | None = None
    ) -> AsyncIterator[SseEvent]: ...

    async def aclose(self) -> None: ...
