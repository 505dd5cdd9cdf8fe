"""Review links (D15), thin: ``GET /r/<token>`` shows the grant's page to the person the link was
sent to (after sign-in) and changes nothing; ``POST /r/<token>/options`` and ``POST /r/<token>``
decide with the person's passkey over the grant's digest; ``POST /r/<token>/deny`` is a chat's
single-use deny (grantd.services.review_decisions)."""

from __future__ import annotations

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.services import review_decisions, review_links
from grantd.web.api.common import body_of, principal_of, services_of
from grantd.web.pages import approval_page
from grantd.web.views import Viewer, page

bp = Blueprint("review_links")


@bp.get("/r/<token:str>", name="review_link_page")
@page()
async def review_link_page(request: Request, viewer: Viewer, token: str) -> HTTPResponse:
    link = await review_links.resolve(services_of(request), token, action="review")
    review_links.check_person(link, viewer.principal)
    return await approval_page(request, viewer, link["grant_id"], review_token=token)


@bp.post("/r/<token:str>/options", name="review_link_options")
async def review_link_options(request: Request, token: str) -> HTTPResponse:
    services = services_of(request)
    return json(await review_decisions.options(services, await principal_of(request), token))


@bp.post("/r/<token:str>", name="review_link_decide")
async def review_link_decide(request: Request, token: str) -> HTTPResponse:
    services = services_of(request)
    return json(await review_decisions.decide(services, await principal_of(request), token, body_of(request)))


@bp.post("/r/<token:str>/deny", name="review_link_deny")
async def review_link_deny(request: Request, token: str) -> HTTPResponse:
    signature = request.headers.get("x-grantd-signature")
    answer = await review_decisions.deny_from_chat(
        services_of(request), token, signature, request.body or b""
    )
    return json(answer)
