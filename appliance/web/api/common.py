"""Small helpers every route module uses to reach the process's services and the caller."""

from __future__ import annotations

from typing import Any

from sanic import Request

from grantd.core.fields import json_body
from grantd.core.principals import Principal
from grantd.services.authn import Credentials, bearer_token
from grantd.services.context import Services


def services_of(request: Request) -> Services:
    return request.app.ctx.services  # type: ignore[no-any-return]


def credentials_of(request: Request) -> Credentials:
    """What the request presented; the authentication chain decides what it proves."""
    return Credentials(bearer=bearer_token(request.headers.get("authorization")))


async def principal_of(request: Request) -> Principal | None:
    """The caller, resolved once per request through the authentication chain."""
    if not hasattr(request.ctx, "principal"):
        services = services_of(request)
        request.ctx.principal = await services.authn.principal(services, credentials_of(request))
    return request.ctx.principal  # type: ignore[no-any-return]


def body_of(request: Request, *, required: bool = True) -> dict[str, Any]:
    return json_body(request.body, required=required)
