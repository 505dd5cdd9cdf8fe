"""Upstream identity providers people may sign in with: the public list a login page shows."""

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

bp = Blueprint("federation")


@bp.get("/api/federation/providers")
async def providers(request: Request) -> HTTPResponse:
    """No credential needed (a login page lists them); each entry is public_info(): no secrets."""
    return json({"providers": [provider.public_info() for provider in request.app.ctx.federation]})
