"""Passkey and session routes: /api/webauthn/* (the ceremonies of grantd.services.passkeys) and
/api/logout. Thin: parse, rate-limit, call the service, set or clear the session cookie.

Bodies (JSON; a passkey ``response`` is the PublicKeyCredential JSON the browser produced, with
base64url fields, as ``{response: ...}`` or as the body itself):

- ``POST register/options {token}`` → creation options; ``POST register/verify {token, response,
  name?, person_name?}`` → 200 ``{person, credential}`` and the session cookie.
- ``POST login/options {email?}`` → request options (by e-mail, or discoverable without one);
  ``POST login/verify {response}`` → 200 ``{person, credential}`` and the session cookie.
- Both options answers set ``grantd_passkey`` (HttpOnly, SameSite=Strict, path /api/webauthn/, 5
  minutes): the binding of the challenge to this browser that verify checks (D8).
- ``GET credentials`` → ``{data: [credential, ...]}`` (own, oldest first);
  ``POST credentials/add/reauth`` → request options (user verification required) for one of the
  person's passkeys; ``POST credentials/add/options {response}`` (that assertion) → creation
  options; ``POST credentials/add/verify {response, name?}`` → 201 ``{credential}``;
  ``DELETE credentials/:id`` → 200 ``{deleted: credential}`` (and the sessions it started end).
- ``GET /api/sessions`` → ``{data: [session, ...]}`` (the person's own live sessions, newest first,
  ``current`` marks this browser's); ``DELETE /api/sessions/:id`` → 200 ``{ended, revoked}``.
- ``POST /api/logout`` → 200 ``{ok: true}``, revokes the session's family and clears the cookie.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.core.errors import Problem
from grantd.core.fields import email_field
from grantd.services import sessions
from grantd.web.api.common import (
    body_of,
    clear_session_cookie,
    principal_of,
    services_of,
    set_session_cookie,
)

bp = Blueprint("webauthn")


def _passkeys() -> ModuleType:
    """grantd.services.passkeys, imported at a process's first passkey request: py_webauthn with
    pyOpenSSL, pyasn1 and cbor2 is 5.8 MiB in every server process, which a process that serves
    agents only never needs (issue 14, docs/performance.md)."""
    from grantd.services import passkeys

    return passkeys


def _user_agent(request: Request) -> str:
    return request.headers.get("user-agent", "")


async def _end_current_session(request: Request) -> None:
    """A new sign-in replaces the session the browser had (if any)."""
    if request.headers.get("authorization") is None:
        current = request.cookies.get(sessions.SESSION_COOKIE)
        if current:
            await sessions.end(services_of(request), current)


async def _signed_in(request: Request, person: Any, credential: Any, cookie_value: str) -> HTTPResponse:
    """The answer of a passkey sign-in (registration or login): the new session replaces the
    browser's old one, and its cookie is set."""
    services = services_of(request)
    await _end_current_session(request)
    response = json(
        {
            "person": _passkeys().person_view(services, person),
            "credential": _passkeys().credential_view(credential),
        }
    )
    set_session_cookie(response, services, cookie_value)
    return response


def _binding_cookie(request: Request) -> str | None:
    return request.cookies.get(_passkeys().BINDING_COOKIE)


def _bound_options(request: Request, options: dict[str, Any], binding: str) -> HTTPResponse:
    """The options, and the cookie that binds their challenge to this browser (D8)."""
    passkeys = _passkeys()
    response = json(options)
    response.add_cookie(
        passkeys.BINDING_COOKIE,
        binding,
        path=passkeys.BINDING_PATH,
        max_age=passkeys.CHALLENGE_TTL_MS // 1000,
        httponly=True,
        samesite="Strict",
        secure=sessions.secure_cookie(services_of(request)),
    )
    return response


@bp.post("/api/webauthn/register/options")
async def register_options(request: Request) -> HTTPResponse:
    services, body = services_of(request), body_of(request)
    binding = _passkeys().binding_of(_binding_cookie(request))
    return _bound_options(
        request, await _passkeys().register_options(services, body.get("token"), binding), binding
    )


@bp.post("/api/webauthn/register/verify")
async def register_verify(request: Request) -> HTTPResponse:
    return await _verified(request, "register-verify")


@bp.post("/api/webauthn/login/options")
async def login_options(request: Request) -> HTTPResponse:
    services, body = services_of(request), body_of(request, required=False)
    await _passkeys().limit(services, request.ctx.client_ip, "login-options")
    binding = _passkeys().binding_of(_binding_cookie(request))
    options = await _passkeys().login_options(services, email_field(body, "email", required=False), binding)
    return _bound_options(request, options, binding)


@bp.post("/api/webauthn/login/verify")
async def login_verify(request: Request) -> HTTPResponse:
    return await _verified(request, "login-verify")


async def _verified(request: Request, step: str) -> HTTPResponse:
    """A passkey registration or sign-in verified: the person signed in. D12: only a failure is
    charged to the client address, so a valid passkey is never refused for others' failures."""
    services, passkeys = services_of(request), _passkeys()
    verify = passkeys.register_verify if step == "register-verify" else passkeys.login_verify
    try:
        person, credential, value, _ = await verify(
            services, body_of(request), _user_agent(request), _binding_cookie(request)
        )
    except Problem:
        await passkeys.limit(services, request.ctx.client_ip, step)
        raise
    return await _signed_in(request, person, credential, value)


@bp.get("/api/webauthn/credentials")
async def list_credentials(request: Request) -> HTTPResponse:
    services = services_of(request)
    found = await _passkeys().list_own(services, await principal_of(request))
    return json({"data": [_passkeys().credential_view(c) for c in found]})


@bp.post("/api/webauthn/credentials/add/reauth")
async def add_reauth(request: Request) -> HTTPResponse:
    services = services_of(request)
    body_of(request, required=False)  # an optional body must still be JSON
    return json(await _passkeys().reauth_options(services, await principal_of(request)))


@bp.post("/api/webauthn/credentials/add/options")
async def add_options(request: Request) -> HTTPResponse:
    services = services_of(request)
    body = body_of(request, required=False)
    return json(await _passkeys().add_options(services, await principal_of(request), body))


@bp.post("/api/webauthn/credentials/add/verify")
async def add_verify(request: Request) -> HTTPResponse:
    services, body = services_of(request), body_of(request)
    credential = await _passkeys().add_verify(services, await principal_of(request), body)
    return json({"credential": _passkeys().credential_view(credential)}, status=201)


@bp.delete("/api/webauthn/credentials/<credential_id:str>")
async def delete_credential(request: Request, credential_id: str) -> HTTPResponse:
    services = services_of(request)
    deleted = await _passkeys().delete_own(services, await principal_of(request), credential_id)
    return json({"deleted": _passkeys().credential_view(deleted)})


@bp.get("/api/sessions")
async def list_own_sessions(request: Request) -> HTTPResponse:
    services = services_of(request)
    found = await sessions.own(services, await principal_of(request))
    current = _current_session_id(request)
    return json({"data": [sessions.own_view(s, current) for s in found]})


@bp.delete("/api/sessions/<session_id:str>", unquote=True)
async def end_own_session(request: Request, session_id: str) -> HTTPResponse:
    services = services_of(request)
    return json(await sessions.end_own(services, await principal_of(request), session_id))


def _current_session_id(request: Request) -> str | None:
    cookie = None if request.headers.get("authorization") else request.cookies.get(sessions.SESSION_COOKIE)
    return sessions.session_id_of(cookie) if cookie else None


@bp.post("/api/logout")
async def logout(request: Request) -> HTTPResponse:
    """End the browser session (its whole family) and clear the cookie; 200 without one too."""
    services = services_of(request)
    current = None if request.headers.get("authorization") else request.cookies.get(sessions.SESSION_COOKIE)
    if current:
        await sessions.end(services, current)
    response = json({"ok": True})
    if current is not None:
        clear_session_cookie(response, services)
    return response
