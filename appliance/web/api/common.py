"""Small helpers every route module uses to reach the process's services and the caller."""

from __future__ import annotations

from typing import Any

from sanic import Request

from grantd.auth import Principal, principal_from_authorization
from grantd.context import Services
from grantd.validation import json_body


def services_of(request: Request) -> Services:
    return request.app.ctx.services  # type: ignore[no-any-return]


async def principal_of(request: Request) -> Principal | None:
    """The caller, resolved once per request."""
    if not hasattr(request.ctx, "principal"):
        request.ctx.principal = await principal_from_authorization(
            services_of(request), request.headers.get("authorization")
        )
    return request.ctx.principal  # type: ignore[no-any-return]


def body_of(request: Request, *, required: bool = True) -> dict[str, Any]:
    return json_body(request.body, required=required)
