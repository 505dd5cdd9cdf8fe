"""Agent enrolment and sign-in routes (thin: parse, authorise, call grantd.services.agents)."""

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.core import policy
from grantd.services import agents
from grantd.web.api.common import body_of, principal_of, services_of

bp = Blueprint("agents")


@bp.post("/api/agent/enroll")
@bp.post("/api/auth/enroll", name="enroll_alias")
async def enroll(request: Request) -> HTTPResponse:
    principal = policy.may_manage_agents(await principal_of(request))
    agent = await agents.enroll(services_of(request), principal, body_of(request))
    return json(agents.public_view(agent), status=201)


@bp.post("/api/agent/challenge")
@bp.post("/api/auth/challenge", name="challenge_alias")
async def challenge(request: Request) -> HTTPResponse:
    return json({"challenge": await agents.issue_challenge(services_of(request), body_of(request))})


@bp.post("/api/agent/authenticate")
@bp.post("/api/auth/authenticate", name="authenticate_alias")
async def authenticate(request: Request) -> HTTPResponse:
    return json(await agents.authenticate(services_of(request), body_of(request)))


@bp.get("/api/me")
async def me(request: Request) -> HTTPResponse:
    """Who the presented credential is (agents and the management token; human sessions later)."""
    principal = policy.require(await principal_of(request))
    return json({
        "sub": principal.email, "email": principal.email, "act": principal.kind.value, "kind": principal.kind.value,
        "id": principal.id, "agent_id": principal.agent_id, "admin": principal.admin,
    })
