"""Notification routes (D15), thin: parse, call grantd.services.notify_account.

- ``GET /api/grants/:id/notifications`` → ``{data: [{channel, recipient, kind, level, status, attempts,
  at, created_at, error?}]}``: who was told what about the grant, when, and the outcome;
  whoever may read the grant may read them.
- ``GET /api/account/notifications`` → ``{channels, available}``; ``PUT /api/account/notifications
  {channels: {<channel id>: {topic?} | true | false}}`` replaces the signed-in person's settings.
"""

from __future__ import annotations

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.core import policy
from grantd.services import notify_account, push
from grantd.web.api.common import body_of, principal_of, services_of

bp = Blueprint("notify")


@bp.get("/api/grants/<grant_id:str>/notifications", unquote=True)
async def grant_notifications(request: Request, grant_id: str) -> HTTPResponse:
    principal = policy.require(await principal_of(request))
    return json(await notify_account.notifications_of(services_of(request), principal, grant_id))


@bp.get("/api/account/notifications", name="notification_settings")
async def notification_settings(request: Request) -> HTTPResponse:
    return json(await notify_account.preferences(services_of(request), await principal_of(request)))


@bp.put("/api/account/notifications", name="set_notification_settings")
async def set_notification_settings(request: Request) -> HTTPResponse:
    services = services_of(request)
    body = body_of(request)
    return json(await notify_account.set_preferences(services, await principal_of(request), body))


@bp.get("/api/push/vapid", name="push_vapid")
async def push_vapid(request: Request) -> HTTPResponse:
    return json(push.vapid(services_of(request)))


@bp.post("/api/push/subscriptions", name="push_subscribe")
async def push_subscribe(request: Request) -> HTTPResponse:
    services = services_of(request)
    return json(await push.subscribe(services, await principal_of(request), body_of(request)), status=201)


@bp.get("/api/push/subscriptions", name="push_subscriptions")
async def push_subscriptions(request: Request) -> HTTPResponse:
    return json(await push.subscriptions(services_of(request), await principal_of(request)))


@bp.delete("/api/push/subscriptions/<subscription_id:str>", name="push_unsubscribe", unquote=True)
async def push_unsubscribe(request: Request, subscription_id: str) -> HTTPResponse:
    services = services_of(request)
    return json(await push.unsubscribe(services, await principal_of(request), subscription_id))
