"""Liveness and readiness for load balancers and orchestrators."""

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.core.errors import Problem
from grantd.web.api.common import services_of

bp = Blueprint("health")


@bp.get("/healthz")
async def healthz(request: Request) -> HTTPResponse:
    return json({"status": "ok"})


@bp.get("/readyz")
async def readyz(request: Request) -> HTTPResponse:
    if not await services_of(request).store.ping():
        raise Problem(503, "database unreachable")
    return json({"status": "ready"})
