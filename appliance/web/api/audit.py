"""The decision log's routes (D14): public checkpoint and keys, the log for administrators, the
management token and auditors (an agent its own grants), host enrolment and receipts."""

from __future__ import annotations

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json, text

from grantd.core.errors import Problem
from grantd.services import audit
from grantd.web.api.common import body_of, principal_of, services_of

bp = Blueprint("audit")

NOTE_TYPE = "text/plain; charset=utf-8"


@bp.get("/api/audit/checkpoint")
async def checkpoint(request: Request) -> HTTPResponse:
    services = services_of(request)
    note = await audit.log_of(services).checkpoint()
    if note is None:
        raise Problem(503, "no checkpoint signed yet", headers={"Retry-After": "1"})
    return text(note, content_type=NOTE_TYPE, headers={"Cache-Control": "no-store"})


@bp.get("/api/audit/key")
async def key(request: Request) -> HTTPResponse:
    vkeys = await audit.log_of(services_of(request)).vkeys()
    return text("".join(v + "\n" for v in vkeys), content_type=NOTE_TYPE)


@bp.get("/api/audit/entries")
async def entries(request: Request) -> HTTPResponse:
    return json(await audit.read_entries(services_of(request), await principal_of(request), request.args))


@bp.get("/api/audit/proof/inclusion")
async def inclusion(request: Request) -> HTTPResponse:
    return json(await audit.read_inclusion(services_of(request), await principal_of(request), request.args))


@bp.get("/api/audit/proof/consistency")
async def consistency(request: Request) -> HTTPResponse:
    return json(await audit.read_consistency(services_of(request), await principal_of(request), request.args))


@bp.get("/api/audit/grants/<grant_id:str>", unquote=True)
async def grant(request: Request, grant_id: str) -> HTTPResponse:
    return json(await audit.read_grant(services_of(request), await principal_of(request), grant_id))


@bp.post("/api/audit/receipts")
async def receipts(request: Request) -> HTTPResponse:
    answer, new = await audit.add_receipt(services_of(request), body_of(request))
    return json(answer, status=201 if new else 200)


@bp.post("/api/hosts")
async def hosts(request: Request) -> HTTPResponse:
    return json(
        await audit.enrol_host(services_of(request), await principal_of(request), body_of(request)),
        status=201,
    )
