"""Admin agent management (management token or admin session)."""

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.core import policy
from grantd.oauth import ciba_ping
from grantd.services import agents
from grantd.web.api.common import body_of, principal_of, services_of

bp = Blueprint("admin")


@bp.get("/api/admin/agents")
async def list_agents(request: Request) -> HTTPResponse:
    policy.may_manage_agents(await principal_of(request))
    return json(await agents.list_agents(services_of(request), request.args))


@bp.post("/api/admin/agents")
async def create_agent(request: Request) -> HTTPResponse:
    principal = policy.may_manage_agents(await principal_of(request))
    services = services_of(request)
    agent = await agents.enroll(services, principal, body_of(request))
    return json(await agents.described(services, agent), status=201)


@bp.get("/api/admin/agents/<ident:str>", unquote=True)
async def get_agent(request: Request, ident: str) -> HTTPResponse:
    policy.may_manage_agents(await principal_of(request))
    services = services_of(request)
    agent = await agents.find_agent(services, ident)
    # D16: the agent's CIBA delivery mode, as PUT set it
    return json(
        {
            **await agents.described(services, agent),
            "ciba": await ciba_ping.agent_ciba(services, agent["agent_id"]),
        }
    )


@bp.put("/api/admin/agents/<ident:str>", unquote=True)
async def update_agent(request: Request, ident: str) -> HTTPResponse:
    principal = policy.may_manage_agents(await principal_of(request))
    services = services_of(request)
    body = body_of(request)
    found = await agents.find_agent(services, ident)
    if "ciba" in body:  # D16: the agent's CIBA delivery mode (grantd.oauth.ciba_ping)
        ciba = await ciba_ping.set_agent_ciba(services, found["agent_id"], body.pop("ciba"))
    else:
        ciba = await ciba_ping.agent_ciba(services, found["agent_id"])
    answer = await agents.described(services, await agents.update(services, principal, ident, body))
    return json({**answer, "ciba": ciba})


@bp.delete("/api/admin/agents/<ident:str>", unquote=True)
async def delete_agent(request: Request, ident: str) -> HTTPResponse:
    principal = policy.may_manage_agents(await principal_of(request))
    agent = await agents.delete(services_of(request), principal, ident)
    return json({"deleted": True, "agent": agents.public_view(agent)})
