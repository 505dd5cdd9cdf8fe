"""The admin API for people (management token or an administrator's session; docs/api.md):
users, their passkeys, sessions and registration URLs. Thin: parse, ask policy, call
grantd.services.people."""

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.core import policy
from grantd.services import people
from grantd.web.api.common import body_of, principal_of, services_of

bp = Blueprint("people_admin")


# -- users ----------------------------------------------------------------------------------------


@bp.get("/api/admin/users")
async def list_users(request: Request) -> HTTPResponse:
    policy.may_manage_people(await principal_of(request))
    return json(await people.list_people(services_of(request), request.args))


@bp.post("/api/admin/users")
async def create_user(request: Request) -> HTTPResponse:
    principal = policy.may_manage_people(await principal_of(request))
    return json(await people.create_user(services_of(request), principal, body_of(request)), status=201)


@bp.get("/api/admin/users/<ident:str>", unquote=True)
async def get_user(request: Request, ident: str) -> HTTPResponse:
    policy.may_manage_people(await principal_of(request))
    services = services_of(request)
    return json(people.person_view(await people.get_person(services, ident), services.admin_emails))


@bp.patch("/api/admin/users/<ident:str>", unquote=True)
async def update_user(request: Request, ident: str) -> HTTPResponse:
    principal = policy.may_manage_people(await principal_of(request))
    services = services_of(request)
    person = await people.update_person(services, principal, ident, body_of(request))
    return json(people.person_view(person, services.admin_emails))


@bp.delete("/api/admin/users/<ident:str>", unquote=True)
async def delete_user(request: Request, ident: str) -> HTTPResponse:
    principal = policy.may_manage_people(await principal_of(request))
    services = services_of(request)
    person = await people.delete_person(services, principal, ident)
    return json({"ok": True, "deleted": True, "user": people.person_view(person, services.admin_emails)})


@bp.get("/api/admin/users/<ident:str>/credentials", unquote=True)
async def user_credentials(request: Request, ident: str) -> HTTPResponse:
    policy.may_manage_people(await principal_of(request))
    return json({"data": await people.credentials_of(services_of(request), ident)})


# -- sessions -------------------------------------------------------------------------------------


@bp.get("/api/admin/sessions")
async def list_sessions(request: Request) -> HTTPResponse:
    policy.may_manage_people(await principal_of(request))
    return json(await people.list_sessions(services_of(request), request.args))


@bp.delete("/api/admin/sessions/<family_id:str>", unquote=True)
async def revoke_family(request: Request, family_id: str) -> HTTPResponse:
    policy.may_manage_people(await principal_of(request))
    return json(await people.revoke_session_family(services_of(request), family_id))


@bp.delete("/api/admin/sessions/user/<ident:str>", unquote=True)
async def revoke_user_sessions(request: Request, ident: str) -> HTTPResponse:
    policy.may_manage_people(await principal_of(request))
    return json(await people.revoke_person_sessions(services_of(request), ident))


# -- registration URLs ----------------------------------------------------------------------------


@bp.get("/api/admin/registration-urls")
async def list_registration_urls(request: Request) -> HTTPResponse:
    policy.may_manage_people(await principal_of(request))
    return json(await people.list_registration_urls(services_of(request), request.args))


@bp.post("/api/admin/registration-urls")
async def create_registration_url(request: Request) -> HTTPResponse:
    principal = policy.may_manage_people(await principal_of(request))
    answer = await people.create_registration_from(services_of(request), principal, body_of(request))
    return json(answer, status=201)


@bp.delete("/api/admin/registration-urls/<ident:str>", unquote=True)
async def delete_registration_url(request: Request, ident: str) -> HTTPResponse:
    policy.may_manage_people(await principal_of(request))
    return json(await people.delete_registration_url(services_of(request), ident))
