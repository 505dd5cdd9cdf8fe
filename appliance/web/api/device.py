"""The device authorization grant's routes (RFC 8628; the logic is ``grantd.oauth.device``):

- ``POST /device_authorization`` (form-encoded or JSON: ``client_id``, ``scope?``) → 200
  ``{device_code, user_code, verification_uri, verification_uri_complete, expires_in, interval}``;
  errors are ``{error, error_description}`` (``invalid_request``, ``invalid_client``,
  ``unauthorized_client``, ``invalid_scope``), always ``Cache-Control: no-store``.
- ``GET /device`` (the page; a signed-in person, else ``/login?next=``): a form for the user code;
  with ``?user_code=`` (typed, or from ``verification_uri_complete``) it shows which client asks,
  from which address and since when, and what the device will be able to do for the signed-in
  person — administrator rights spelled out when it asked for the ``admin`` scope and the person
  is an administrator, "no administrator rights" otherwise (D12) — with Approve and Deny buttons.
  Nothing is decided by opening the page.
- ``POST /api/device/decide {user_code, approve}`` (the page's script; a person's browser session
  only: a bearer, even a person's access token, cannot approve another device) → 200
  ``{status, client_id, client_name, scope}``; 404 unknown or expired code, 409 already decided.

Every user-code lookup (the page with ``?user_code=`` and the decide call) counts against
``limits.device_code_per_address`` per client address, so user codes cannot be guessed at speed;
starting a device authorization has its own counter with the same limit (429 ``slow_down``).
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.core import policy
from grantd.core.errors import Problem, bad_request
from grantd.oauth import device
from grantd.oauth.errors import OAuthError, invalid_client
from grantd.services.context import Services
from grantd.services.limits import Rule
from grantd.web import views
from grantd.web.api.common import body_of, credentials_of, principal_of, services_of
from grantd.web.api.oauth import CORS, NO_STORE, oauth_error, params_of

bp = Blueprint("device")

SCOPE_TEXT = {
    "openid": "confirm who you are",
    "email": "see your e-mail address",
    "profile": "see your name",
    "offline_access": "stay signed in until you sign out there",
    device.ADMIN_SCOPE: "administer grantd as you",
}
# What a device that asked for the admin scope may do for an administrator (the page says it in full).
ADMIN_POWERS = (
    "create, change and delete people, their sessions and registration links",
    "enrol, change, disable and delete any agent",
    "approve, deny and revoke every agent's grants",
    "manage signing keys and delegations",
)


@bp.post("/device_authorization")
async def device_authorization(request: Request) -> HTTPResponse:
    services = services_of(request)
    try:
        params = params_of(request)  # form-encoded or JSON, as at /token
        client_id = params.get("client_id")
        if not client_id:
            raise OAuthError("invalid_request", "client_id is required")
        try:
            await services.limits.hit(start_rule(services), getattr(request.ctx, "client_ip", None))
        except Problem as exc:
            raise OAuthError("slow_down", exc.detail, status=429, headers=exc.headers) from None
        client = await services.oauth_clients.get(client_id) if len(client_id) <= 255 else None
        if client is None:
            raise invalid_client("unknown client", basic=True)  # 401 with a challenge (RFC 6749 §5.2)
        if not client.public:
            # RFC 8628 §3.1: confidential clients authenticate; grantd's device clients are public.
            raise OAuthError(
                "unauthorized_client", "only public clients may use the device authorization grant"
            )
        answer = await device.start(
            services, client, params.get("scope"), getattr(request.ctx, "client_ip", None)
        )
    except OAuthError as exc:
        return oauth_error(exc)
    return json(answer, headers={**NO_STORE, **CORS})


# -- the person's side ----------------------------------------------------------------------------


def start_rule(services: Services) -> Rule:
    """Device authorizations started per client address (a flood of live codes would make user codes
    easier to hit by chance); the same limit as the user-code lookups, counted on its own."""
    return Rule(
        "device-start.address",
        services.config.limits.device_code_per_address,
        "too many device sign-ins started",
    )


def code_rule(services: Services) -> Rule:
    return Rule(
        "device-code.address", services.config.limits.device_code_per_address, "too many user code attempts"
    )


async def _count_attempt(request: Request) -> None:
    services = services_of(request)
    await services.limits.hit(code_rule(services), getattr(request.ctx, "client_ip", None))


async def request_view(services: Services, record: Any, viewer_admin: bool = False) -> dict[str, Any]:
    """What /device shows about a request (D12): the client, where and when the request started,
    and what the device will be able to do for *this* person (``viewer_admin``): with the ``admin``
    scope an administrator hands over administrator rights (spelled out); without it, none."""
    client = await services.oauth_clients.get(record["client_id"])
    scopes = [s for s in record["scope"].split(" ") if s]
    asks_admin = device.ADMIN_SCOPE in scopes
    return {
        "user_code": device.display_user_code(record["user_code"]),
        "client_id": record["client_id"],
        "client_name": (client.name if client is not None and client.name else record["client_id"]),
        "api_access": bool(client is not None and client.api_access),
        "scope": record["scope"],
        "scopes": [{"name": s, "text": SCOPE_TEXT.get(s, s)} for s in scopes if s != device.ADMIN_SCOPE],
        "asks_admin": asks_admin,
        "gets_admin": asks_admin and viewer_admin and bool(client is not None and client.api_access),
        "viewer_admin": viewer_admin,
        "admin_powers": ADMIN_POWERS,
        "client_address": record.get("client_address") or "",
        "created_at": record["created_at"],
        "status": record["status"],
        "expires_at": record["expires_at"],
    }


@bp.get("/device")
@views.page()
async def device_page(request: Request, viewer: views.Viewer) -> HTTPResponse:
    services = services_of(request)
    typed = request.args.get("user_code")
    found: dict[str, Any] | None = None
    problem = ""
    if typed:
        await _count_attempt(request)
        if device.normalize_user_code(typed) is None:
            problem = "That is not a code from a terminal: it has 8 letters, like BCDF-GHJK."
        else:
            record = await device.lookup(services, typed)
            if record is None:
                problem = "No sign-in is waiting for that code (it may have expired). Check the code on your terminal."
            else:
                found = await request_view(services, record, viewer.admin)
    shown = typed if (typed and len(typed) <= 20 and typed.isprintable()) else ""
    return views.render(
        "device.html",
        status=200,
        viewer=viewer,
        title="Sign in a terminal",
        request=found,
        typed=shown,
        problem=problem,
    )


@bp.post("/api/device/decide")
async def decide(request: Request) -> HTTPResponse:
    services = services_of(request)
    principal = policy.may_decide_device_sign_in(
        await principal_of(request), in_this_browser=credentials_of(request).session is not None
    )
    await _count_attempt(request)
    body = body_of(request)
    approve = body.get("approve")
    if not isinstance(approve, bool):
        raise bad_request("approve must be true or false")
    code = device.normalize_user_code(body.get("user_code"))
    if code is None:
        raise bad_request("user_code must be the 8 letters shown on the terminal (like BCDF-GHJK)")
    record = await device.lookup(services, code)
    if record is None:
        raise Problem(404, "no sign-in is waiting for that code (it may have expired)")
    decided = await device.decide(services, code, principal.id, approve)
    if decided is None:
        raise Problem(409, "that sign-in was already decided")
    view = await request_view(services, decided, principal.admin)
    return json(
        {
            "status": decided["status"],
            "client_id": view["client_id"],
            "client_name": view["client_name"],
            "scope": decided["scope"],
        }
    )
