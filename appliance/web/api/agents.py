"""Agent enrolment and sign-in routes (thin: parse, authorise, call grantd.services.agents)."""

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.core import policy
from grantd.core.errors import Problem
from grantd.core.principals import Kind
from grantd.services import agents, sessions
from grantd.web.api.common import body_of, principal_of, proof_request, services_of

bp = Blueprint("agents")


@bp.post("/api/agent/enroll")
@bp.post("/api/auth/enroll", name="enroll_alias")
async def enroll(request: Request) -> HTTPResponse:
    services = services_of(request)
    principal = policy.may_enrol_agents(
        await principal_of(request)
    )  # admins, or a person for themselves (D8)
    await services.limits.enrol(request.ctx.client_ip, principal)
    agent = await agents.enroll(services, principal, body_of(request))
    return json(agents.public_view(agent), status=201)


@bp.post("/api/agent/challenge")
@bp.post("/api/auth/challenge", name="challenge_alias")
async def challenge(request: Request) -> HTTPResponse:
    services = services_of(request)
    try:
        body = body_of(request)
        await services.limits.sign_in(services, body, step="challenge")
        return json({"challenge": await agents.issue_challenge(services, body)})
    except Problem:  # D12: only failures are charged to the address (a valid agent is never refused)
        await services.limits.sign_in_failed(request.ctx.client_ip, step="challenge")
        raise


@bp.post("/api/agent/authenticate")
@bp.post("/api/auth/authenticate", name="authenticate_alias")
async def authenticate(request: Request) -> HTTPResponse:
    services = services_of(request)
    try:
        body = body_of(request)
        await services.limits.sign_in(services, body, step="authenticate")
        return json(await agents.authenticate(services, body, proof_request(request)))
    except Problem:  # D12: only failures are charged to the address (a valid credential is never refused)
        await services.limits.sign_in_failed(request.ctx.client_ip, step="authenticate")
        raise


@bp.get("/api/me")
async def me(request: Request) -> HTTPResponse:
    """Who the presented credential is: an agent, the management token, or a signed-in person
    (``act: "human"``, the peer's word for people; ``name`` from the person record; a person through
    an exchanged token: ``act`` is its RFC 8693 actor chain, D16), or a guest of
    SP login (``kind: "guest"``, with the ``idp`` that vouched for them, D9)."""
    principal = policy.identify(await principal_of(request))
    if principal.kind is Kind.GUEST:
        guest = await sessions.live_guest(services_of(request), request.cookies.get(sessions.SESSION_COOKIE))
        return json(
            {
                "sub": principal.email,
                "email": principal.email,
                "name": (guest["name"] if guest else None) or principal.email,
                "act": "human",
                "kind": principal.kind.value,
                "id": principal.id,
                "admin": False,
                "idp": guest["idp"] if guest else None,
            }
        )
    if principal.kind is Kind.PERSON:
        person = await services_of(request).store.people.get(principal.id)
        return json(
            {
                "sub": principal.email,
                "email": principal.email,
                "name": person["name"] if person else principal.email,
                # D16: an exchanged token's actor chain ({sub: agent[, act: ...]}) is never dropped
                "act": principal.act if principal.act is not None else "human",
                "kind": principal.kind.value,
                "id": principal.id,
                "admin": principal.admin,
            }
        )
    return json(
        {
            "sub": principal.email,
            "email": principal.email,
            "act": principal.kind.value,
            "kind": principal.kind.value,
            "id": principal.id,
            "agent_id": principal.agent_id,
            "admin": principal.admin,
        }
    )
