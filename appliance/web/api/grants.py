"""Grant routes (thin: parse, authorise, call grantd.services.grants) and the grant event stream."""

from __future__ import annotations

import asyncio
import dataclasses
import json as jsonlib
from typing import Any

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, empty, json

from grantd.core import policy
from grantd.core.errors import Problem
from grantd.core.fields import field_error
from grantd.core.principals import Principal
from grantd.services import grant_decisions, grant_lists, grant_reviewers, grant_tokens, grants
from grantd.services.context import Services
from grantd.services.events import stream_owner
from grantd.services.grants import Operation
from grantd.store.records import GrantEvent
from grantd.web.api.common import body_of, credentials_of, principal_of, services_of

bp = Blueprint("grants")
EVENT_STREAM = "text/event-stream; charset=utf-8"
REPLAY_PAGE = 50  # events read per step of a replay: all an unread stream holds in memory
REPLAY_MAX = 1000  # a Last-Event-ID further behind than this is not replayed: the stream sends `reset`
SEND_TIMEOUT = 30  # seconds one frame may wait for a reader that does not read; then it is cut off


@bp.post("/api/grants")
async def create(request: Request) -> HTTPResponse:
    services, principal = services_of(request), await principal_of(request)
    await services.limits.grant_request(principal)
    read = credentials_of(request).agents_read  # the bearer's agent, read by the chain (D11)
    answer, status = await grants.create(services, principal, body_of(request), agents_read=read)
    return json(answer, status=status)


@bp.get("/api/grants")
async def list_grants(request: Request) -> HTTPResponse:
    principal = policy.require(await principal_of(request))
    return json(await grant_lists.list_grants(services_of(request), principal, request.args))


def _matches(if_none_match: str, tag: str) -> bool:
    # If-None-Match uses the weak comparison (RFC 9110 13.1.2): W/ is ignored.
    candidates = [c.strip() for c in if_none_match.split(",")]
    return any(c == "*" or c.removeprefix("W/") == tag for c in candidates)


@bp.get("/api/grants/<grant_id:str>", unquote=True)
async def get_grant(request: Request, grant_id: str) -> HTTPResponse:
    services = services_of(request)
    read = await grants.view_ahead(services, credentials_of(request), grant_id)
    principal = policy.require(await principal_of(request))
    grant, tag = await grants.get(services, principal, grant_id, read)
    headers = {"ETag": tag, "Cache-Control": "no-cache"}
    if_none_match = request.headers.get("if-none-match")
    if if_none_match and _matches(if_none_match, tag):
        return empty(status=304, headers=headers)
    return json(grant, headers=headers)


async def _decide(request: Request, grant_id: str, operation: Operation) -> HTTPResponse:
    principal = policy.require(await principal_of(request))
    return json(await operation(services_of(request), principal, grant_id, body_of(request, required=False)))


async def _vote(
    request: Request, grant_id: str, operation: grants.VoteOperation, *, required: bool = False
) -> HTTPResponse:
    principal = policy.require(await principal_of(request))
    body = body_of(request, required=required)
    via = grant_decisions.via_of(body, session=credentials_of(request).session is not None)
    return json(await operation(services_of(request), principal, grant_id, body, via))


@bp.post("/api/grants/<grant_id:str>/approve", unquote=True)
async def approve(request: Request, grant_id: str) -> HTTPResponse:
    return await _vote(request, grant_id, grants.approve)


@bp.post("/api/grants/<grant_id:str>/deny", unquote=True)
async def deny(request: Request, grant_id: str) -> HTTPResponse:
    return await _vote(request, grant_id, grants.deny)


@bp.get("/api/grants/<grant_id:str>/reviewers", unquote=True)
async def reviewers(request: Request, grant_id: str) -> HTTPResponse:
    principal = policy.require(await principal_of(request))
    return json(await grant_reviewers.reviewers(services_of(request), principal, grant_id))


@bp.post("/api/policies/evaluate")
async def evaluate_policies(request: Request) -> HTTPResponse:
    principal = policy.may_evaluate_policies(await principal_of(request))
    return json(await grant_reviewers.evaluate_policies(services_of(request), principal, body_of(request)))


@bp.post("/api/grants/<grant_id:str>/review", unquote=True)
async def review(request: Request, grant_id: str) -> HTTPResponse:
    return await _vote(request, grant_id, grants.review, required=True)


@bp.post("/api/grants/<grant_id:str>/revoke", unquote=True)
async def revoke(request: Request, grant_id: str) -> HTTPResponse:
    return await _decide(request, grant_id, grants.revoke)


@bp.post("/api/grants/<grant_id:str>/token", unquote=True)
async def token(request: Request, grant_id: str) -> HTTPResponse:
    services = services_of(request)
    read = await grants.view_ahead(services, credentials_of(request), grant_id)
    principal = policy.require(await principal_of(request))
    body_of(request, required=False)  # malformed JSON is still a 400
    return json(await grant_tokens.token(services, principal, grant_id, read))


@bp.post("/api/grants/<grant_id:str>/consume", unquote=True)
async def consume(request: Request, grant_id: str) -> HTTPResponse:
    body_of(request, required=False)
    return json(await grant_tokens.consume(services_of(request), credentials_of(request), grant_id))


@bp.post("/api/grants/verify")
async def verify(request: Request) -> HTTPResponse:
    services = services_of(request)
    await services.limits.verify(request.ctx.client_ip)
    return json(await grant_tokens.verify_token(services, body_of(request)))  # D2: its body is required


@bp.post("/api/grants/batch")
async def batch(request: Request) -> HTTPResponse:
    principal = policy.require(await principal_of(request))
    return json(await grants.batch(services_of(request), principal, body_of(request)))


# -- Server-Sent Events ---------------------------------------------------------------------------


def _resume_point(request: Request) -> int | None:
    raw = request.headers.get("last-event-id") or request.args.get("last_event_id")
    if raw is None or raw == "":
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise field_error("Last-Event-ID", "Last-Event-ID must be an event id from this stream")
    return int(raw)


def _frame(row: GrantEvent) -> str:
    grant = row["grant"]
    payload: dict[str, Any] = {"grant": grants.view(grant, grant["status"])}
    if row["event"] == "grant.escalated":
        payload["level"] = grant.get("escalation_level")  # type: ignore[misc]
    data = jsonlib.dumps(payload, separators=(",", ":"))
    return f"id: {row['seq']}\nevent: {row['event']}\ndata: {data}\n\n"


class _Visibility:
    """Which events this caller may see; answers are remembered per requester for the stream's life."""

    def __init__(self, services: Services, principal: Principal):
        self.services = services
        self.principal = principal
        self.known: dict[str, bool] = {}

    async def allows(self, row: GrantEvent) -> bool:
        requester_id = row["grant"]["requester_id"]
        if requester_id not in self.known:
            self.known[requester_id] = await grants.may_see(self.services, self.principal, row["grant"])
        if self.known[requester_id]:
            return True
        # An approver a pinned policy names (D13) sees that grant's events: asked per event, not
        # remembered, since an escalation may add approvers while the stream is open.
        return await grants.visible(self.services, self.principal, row["grant"])


class _CredentialCheck:
    """Whether the stream's credential still holds: checked on every heartbeat and, while events
    flow, at most once per ``INTERVAL`` before sending (D11: a disabled agent's stream ends)."""

    INTERVAL_MS = 1000

    def __init__(self, services: Services, request: Request):
        self.services = services
        self.request = request
        self.checked_at = services.clock.now_ms()

    async def holds(self, *, force: bool = False) -> bool:
        now = self.services.clock.now_ms()
        if not force and now - self.checked_at < self.INTERVAL_MS:
            return True
        self.checked_at = now
        try:
            # the proof was verified when the stream began; its jti is spent (D16)
            credentials = dataclasses.replace(credentials_of(self.request), proof_verified=True)
            return await self.services.authn.principal(self.services, credentials) is not None
        except Problem:
            return False


@bp.get("/api/grants/events")
async def events(request: Request) -> HTTPResponse | None:
    services = services_of(request)
    principal = policy.require(await principal_of(request))
    resume = _resume_point(request)
    hub = services.events
    if not hub.running or hub.closing:
        raise Problem(
            503, "the event stream is not available; poll GET /api/grants/:id", headers={"Retry-After": "5"}
        )
    visibility = _Visibility(services, principal)
    credential = _CredentialCheck(services, request)
    heartbeat = services.config.grants.events_heartbeat
    owner = await stream_owner(services.store, principal)  # D12: a person and their agents share one budget
    async with hub.subscription(
        principal.id, services.limits, owner
    ) as sub:  # 429 beyond the open-stream bounds
        last = await services.store.grants.last_event_seq()
        sent = resume if resume is not None else last
        reset = await _replay_refused(services, resume, last) if resume is not None else None
        response = await request.respond(
            content_type=EVENT_STREAM, headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        )
        try:
            # Sends the headers now: clients learn at once that the stream is open.
            await _send(response, "retry: 2000\n: stream open\n\n")
            if reset is not None:
                sent = last
                await _send(response, _reset_frame(last, reset))
            while resume is not None and reset is None:  # replay what the client missed, a page at a time
                rows = await services.store.grants.events_after(sent, REPLAY_PAGE)
                for row in rows:
                    sent = row["seq"]
                    if await visibility.allows(row):
                        await _send(response, _frame(row))  # waits while the client is not reading
                if len(rows) < REPLAY_PAGE or sub.overflowed:
                    break
            while not hub.closing:
                try:
                    item: GrantEvent | None = await asyncio.wait_for(sub.queue.get(), heartbeat)
                except TimeoutError:
                    if not await credential.holds(force=True):
                        break  # the token expired or the agent was disabled: no more events for it
                    await _send(response, ": heartbeat\n\n")
                    continue
                if item is None or sub.overflowed or sub.ended:
                    break  # shutting down, too far behind (the client resumes from its last id), or ended
                if item["seq"] <= sent:
                    continue
                sent = item["seq"]
                # Every event, seen or not, is a moment to re-check the credential (at most once a
                # second): other principals' events must not keep a dead agent's stream alive.
                if not await credential.holds():
                    break
                if await visibility.allows(item):
                    await _send(response, _frame(item))
            await _send(response, None)
        except TimeoutError:
            # The client stopped reading: cut it off (it resumes with Last-Event-ID) without waiting
            # for a buffer it will not drain.
            request.transport.abort()  # type: ignore[attr-defined]
    return None


async def _send(response: Any, data: str | None) -> None:
    """One frame (None: the end of the stream), waiting at most SEND_TIMEOUT for the client to read."""
    async with asyncio.timeout(SEND_TIMEOUT):
        if data is None:
            await response.eof()
        else:
            await response.send(data)


async def _replay_refused(services: Services, resume: int, last: int) -> str | None:
    """Why the events after ``resume`` are not replayed, or None to replay them: more than
    REPLAY_MAX behind, or some of them are no longer kept (older than ``grants.events_retention``)."""
    if last - resume > REPLAY_MAX:
        return f"more than {REPLAY_MAX} events behind"
    oldest = await services.store.grants.events_after(0, 1)
    if oldest and resume + 1 < oldest[0]["seq"]:
        return "older than the events kept"
    return None


def _reset_frame(last: int, reason: str) -> str:
    """Tells the client that events were skipped: list what it needs again (GET /api/grants), then
    follow the stream, which goes on live from ``last`` (its id becomes the client's Last-Event-ID)."""
    data = jsonlib.dumps(
        {"reason": reason, "last_event_id": last, "relist": "/api/grants"}, separators=(",", ":")
    )
    return f"id: {last}\nevent: reset\ndata: {data}\n\n"
