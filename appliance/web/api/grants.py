"""Grant routes (thin: parse, authorise, call grantd.idp.grants) and the grant event stream."""

from __future__ import annotations

import asyncio
import json as jsonlib
from typing import Any

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, empty, json

from grantd.api.common import body_of, principal_of, services_of
from grantd.auth import Principal, principal_from_authorization, require_principal
from grantd.context import Services
from grantd.errors import Problem
from grantd.idp import grants
from grantd.idp.events import GrantEventHub

bp = Blueprint("grants")
EVENT_STREAM = "text/event-stream; charset=utf-8"


def _hub(services: Services) -> GrantEventHub | None:
    return services.extras.get("events")


def _changed(services: Services) -> None:
    hub = _hub(services)
    if hub is not None:
        hub.poke()


@bp.post("/api/grants")
async def create(request: Request) -> HTTPResponse:
    services = services_of(request)
    answer, status = await grants.create(services, await principal_of(request), body_of(request))
    if status == 201:
        _changed(services)
    return json(answer, status=status)


@bp.get("/api/grants")
async def list_grants(request: Request) -> HTTPResponse:
    principal = require_principal(await principal_of(request))
    return json(await grants.list_grants(services_of(request), principal, request.args))


def _matches(if_none_match: str, tag: str) -> bool:
    # If-None-Match uses the weak comparison (RFC 9110 13.1.2): W/ is ignored.
    candidates = [c.strip() for c in if_none_match.split(",")]
    return any(c == "*" or c.removeprefix("W/") == tag for c in candidates)


@bp.get("/api/grants/<grant_id:str>", unquote=True)
async def get_grant(request: Request, grant_id: str) -> HTTPResponse:
    principal = require_principal(await principal_of(request))
    grant, tag = await grants.get(services_of(request), principal, grant_id)
    headers = {"ETag": tag, "Cache-Control": "no-cache"}
    if_none_match = request.headers.get("if-none-match")
    if if_none_match and _matches(if_none_match, tag):
        return empty(status=304, headers=headers)
    return json(grant, headers=headers)


async def _decide(request: Request, grant_id: str, operation: Any) -> HTTPResponse:
    services = services_of(request)
    principal = require_principal(await principal_of(request))
    answer = await operation(services, principal, grant_id, body_of(request, required=False))
    _changed(services)
    return json(answer)


@bp.post("/api/grants/<grant_id:str>/approve", unquote=True)
async def approve(request: Request, grant_id: str) -> HTTPResponse:
    return await _decide(request, grant_id, grants.approve)


@bp.post("/api/grants/<grant_id:str>/deny", unquote=True)
async def deny(request: Request, grant_id: str) -> HTTPResponse:
    return await _decide(request, grant_id, grants.deny)


@bp.post("/api/grants/<grant_id:str>/revoke", unquote=True)
async def revoke(request: Request, grant_id: str) -> HTTPResponse:
    return await _decide(request, grant_id, grants.revoke)


@bp.post("/api/grants/<grant_id:str>/token", unquote=True)
async def token(request: Request, grant_id: str) -> HTTPResponse:
    principal = require_principal(await principal_of(request))
    body_of(request, required=False)  # malformed JSON is still a 400
    return json(await grants.token(services_of(request), principal, grant_id))


@bp.post("/api/grants/<grant_id:str>/consume", unquote=True)
async def consume(request: Request, grant_id: str) -> HTTPResponse:
    services = services_of(request)
    body_of(request, required=False)
    answer = await grants.consume(services, request.headers.get("authorization"), grant_id)
    if answer.get("status") == "consumed":
        _changed(services)
    return json(answer)


@bp.post("/api/grants/verify")
async def verify(request: Request) -> HTTPResponse:
    return json(await grants.verify_token(services_of(request), body_of(request, required=False)))


@bp.post("/api/grants/batch")
async def batch(request: Request) -> HTTPResponse:
    services = services_of(request)
    principal = require_principal(await principal_of(request))
    answer = await grants.batch(services, principal, body_of(request))
    _changed(services)
    return json(answer)


# -- Server-Sent Events ---------------------------------------------------------------------------


def _resume_point(request: Request) -> int | None:
    raw = request.headers.get("last-event-id") or request.args.get("last_event_id")
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise Problem(400, "Last-Event-ID must be an event id from this stream", extra={"field": "Last-Event-ID"})
    return int(raw)


def _frame(row: dict[str, Any]) -> str:
    grant = row["grant"]
    data = jsonlib.dumps({"grant": grants.view(grant, grant["status"])}, separators=(",", ":"))
    return f"id: {row['seq']}\nevent: {row['event']}\ndata: {data}\n\n"


class _Visibility:
    """Which events this caller may see; answers are remembered per requester for the stream's life."""

    def __init__(self, services: Services, principal: Principal):
        self.services = services
        self.principal = principal
        self.known: dict[str, bool] = {}

    async def allows(self, row: dict[str, Any]) -> bool:
        requester = row["requester"]
        if requester not in self.known:
            self.known[requester] = await grants.may_see(self.services, self.principal, row["grant"])
        return self.known[requester]


async def _still_allowed(services: Services, request: Request) -> bool:
    try:
        return await principal_from_authorization(services, request.headers.get("authorization")) is not None
    except Problem:
        return False


@bp.get("/api/grants/events")
async def events(request: Request) -> HTTPResponse | None:
    services = services_of(request)
    principal = require_principal(await principal_of(request))
    resume = _resume_point(request)
    hub = _hub(services)
    if hub is None or hub.closing:
        raise Problem(503, "the event stream is not available; poll GET /api/grants/:id", headers={"Retry-After": "5"})
    visibility = _Visibility(services, principal)
    heartbeat = services.config.grants.events_heartbeat
    async with hub.subscription() as sub:
        sent = resume if resume is not None else await services.store.last_grant_event_seq()
        response = await request.respond(
            content_type=EVENT_STREAM, headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        )
        # Sends the headers now: clients learn at once that the stream is open.
        await response.send("retry: 2000\n: stream open\n\n")
        while resume is not None:  # replay what the client missed
            rows = await services.store.grant_events_after(sent, 500)
            for row in rows:
                sent = row["seq"]
                if await visibility.allows(row):
                    await response.send(_frame(row))
            if len(rows) < 500:
                break
        while not hub.closing:
            try:
                item: dict[str, Any] | None = await asyncio.wait_for(sub.queue.get(), heartbeat)
            except TimeoutError:
                if not await _still_allowed(services, request):
                    break  # the token expired or the agent was disabled: no more events for it
                await response.send(": heartbeat\n\n")
                continue
            if item is None or sub.overflowed:
                break  # shutting down, or too far behind: the client resumes from its last id
            if item["seq"] <= sent:
                continue
            sent = item["seq"]
            if await visibility.allows(item):
                await response.send(_frame(item))
        await response.eof()
    return None
