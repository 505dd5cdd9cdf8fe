"""Delegation routes (D7)."""

from __future__ import annotations

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.core import policy
from grantd.oauth import exchange_flow
from grantd.services import delegations
from grantd.web.api.common import body_of, principal_of, services_of

bp = Blueprint("delegations")


@bp.post("/api/delegations")
async def create(request: Request) -> HTTPResponse:
    principal = policy.require(await principal_of(request))
    services = services_of(request)
    answer = await delegations.create(services, principal, body_of(request))
    # D16: the standard subject token the delegate exchanges at /token (RFC 8693)
    answer["delegation_token"] = await exchange_flow.delegation_token(services, answer)
    return json(answer, status=201)


@bp.get("/api/delegations")
async def list_delegations(request: Request) -> HTTPResponse:
    principal = policy.require(await principal_of(request))
    return json(await delegations.list_delegations(services_of(request), principal, request.args))


@bp.delete("/api/delegations/<delegation_id:str>", unquote=True)
async def delete(request: Request, delegation_id: str) -> HTTPResponse:
    principal = policy.require(await principal_of(request))
    return json(await delegations.delete(services_of(request), principal, delegation_id))


@bp.post("/api/delegations/<delegation_id:str>/validate", unquote=True)
async def validate(request: Request, delegation_id: str) -> HTTPResponse:
    principal = policy.require(await principal_of(request))
    return json(
        await delegations.validate(
            services_of(request),
            principal,
            delegation_id,
            body_of(request),  # D7/D2: a required body
        )
    )
