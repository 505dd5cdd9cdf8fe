"""The browser pages (D8): server-rendered HTML for people, with one small script for what needs it.

Pages only read: they render what the signed-in person may see, from the same services and policy
the API uses. Every change is made by the page's script calling the JSON API with ``fetch``
(same origin, ``Content-Type: application/json``), which the web layer's D8 check makes CSRF-safe;
no page posts an HTML form. A page that needs a session sends a visitor without one to
``/login?next=...``; ``next`` is only ever a local path (``safe_next``). Pages carry a strict
Content-Security-Policy: scripts, styles and images come from this origin only, and nothing
inline runs. Untrusted text (an agent's argv, names, reasons) is escaped twice over: Jinja2
autoescapes HTML, and control/format characters are shown as visible escapes
(``grantd.core.display``, the same rule as the TUI's), so an approver reads exactly what would run.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlsplit

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, raw, redirect

from grantd.core import policy
from grantd.core.errors import Problem
from grantd.core.paging import PageRequest
from grantd.oauth import authorize
from grantd.services import agents, grant_lists, grant_reviewers, grants, people
from grantd.services.context import Services
from grantd.services.sessions import SESSION_COOKIE
from grantd.services.sessions import own as own_sessions
from grantd.services.sessions import own_view as own_session_view
from grantd.web.api.common import services_of
from grantd.web.views import (
    DEFAULT_NEXT,
    STATIC_FILES,
    Viewer,
    current_session_id,
    federation_buttons,
    page,
    render,
    safe_next,
    viewer_of,
)

bp = Blueprint("pages")

EARLIER_LIMIT = 100  # the requester's grants read to find earlier ones for the same command
LIST_LIMIT = 100  # rows an admin or inbox list shows (with a note when there are more)


@bp.get("/static/<name:str>")
async def static(request: Request, name: str) -> HTTPResponse:
    found = STATIC_FILES.get(name)
    if found is None:
        raise Problem(404, "no such file")
    headers = {
        "ETag": found.etag,
        "Cache-Control": "public, max-age=3600",
        "X-Content-Type-Options": "nosniff",
    }
    if request.headers.get("if-none-match") == found.etag:
        return HTTPResponse(status=304, headers=headers)
    return raw(found.body, content_type=found.content_type, headers=headers)


@bp.get("/sw.js")
async def service_worker(request: Request) -> HTTPResponse:
    """The service worker Web Push notices go through (D15): same origin, scope /, never cached
    for long (a new version must reach browsers)."""
    found = STATIC_FILES["sw.js"]
    headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff", "ETag": found.etag}
    return raw(found.body, content_type=found.content_type, headers=headers)


# -- sign-in, registration, account ---------------------------------------------------------------


@bp.get("/")
async def home(request: Request) -> HTTPResponse:
    """People go on to their grants, visitors to /login. The page itself is shown to a guest of SP
    login (who they are, through which IdP) and whenever ``?error=`` carries the code of why a login
    failed (grantd.web.api.sp sends failures here): the fixed message of a known code
    (``grantd.sp.login.LOGIN_ERRORS``), the generic one for any other value — never the query's
    text, so a link cannot put words of its maker's choosing on this origin (issue 19)."""
    from grantd.services.sessions import live_guest
    from grantd.sp.login import error_message

    viewer = await viewer_of(request)
    error = error_message(request.args.get("error"))
    guest = None
    if viewer is None and request.headers.get("authorization") is None:
        guest = await live_guest(services_of(request), request.cookies.get(SESSION_COOKIE))
    if error is None and guest is None:
        return redirect(
            DEFAULT_NEXT if viewer else "/login", status=303, headers={"Cache-Control": "no-store"}
        )
    response = render(
        "home.html", viewer=viewer, title="Login failed" if error else "Signed in", error=error, guest=guest
    )
    response.headers["Cache-Control"] = "no-store"
    return response


def _authority(scheme: str, netloc: str) -> str:
    """``host:port`` in lower case with the scheme's default port made explicit."""
    netloc = netloc.strip().lower()
    if netloc.startswith("[") and "]:" in netloc or not netloc.startswith("[") and ":" in netloc:
        return netloc
    return f"{netloc}:{443 if scheme == 'https' else 80}"


def issuer_login_elsewhere(request: Request, target: str) -> str | None:
    """The issuer's /login when this request reached the server at another address (D18): passkeys
    and session cookies belong to the issuer's origin, so signing in here would fail."""
    issuer = services_of(request).issuer.rstrip("/")
    parts = urlsplit(issuer)
    host = request.headers.get("host") or ""
    if not host or _authority(parts.scheme, host) == _authority(parts.scheme, parts.netloc):
        return None
    return f"{issuer}/login" + ("" if target == DEFAULT_NEXT else "?next=" + quote(target, safe="/"))


@bp.get("/login")
async def login(request: Request) -> HTTPResponse:
    target = safe_next(request.args.get("next"))
    if await viewer_of(request) is not None:
        return redirect(target, status=303, headers={"Cache-Control": "no-store"})
    return render(
        "login.html",
        viewer=None,
        title="Sign in",
        next=target,
        providers=federation_buttons(request, target),
        sp_login=bool(services_of(request).config.sp.enabled),
        elsewhere=issuer_login_elsewhere(request, target),
        issuer=services_of(request).issuer.rstrip("/"),
    )


@bp.get("/register")
async def register(request: Request) -> HTTPResponse:
    """The registration URL's page. A token that names no usable registration URL (unknown, used,
    expired, another RP) is said at once (404) instead of after the click; the ceremony itself
    (POST /api/webauthn/register/options) checks it again."""
    from grantd.services.passkeys import registration_usable

    token = request.args.get("token") or ""
    well_formed = 0 < len(token) <= 200 and token.isascii() and token.isprintable()
    usable = well_formed and await registration_usable(services_of(request), token)
    viewer = await viewer_of(request)
    return render(
        "register.html",
        status=200 if usable else 400 if not well_formed else 404,
        viewer=viewer,
        title="Register a passkey",
        token=token if usable else "",
        incomplete=not well_formed,
    )


@bp.get("/account")
@page()
async def account(request: Request, viewer: Viewer) -> HTTPResponse:
    services = services_of(request)
    credentials = await services.store.credentials.list_for(viewer.principal.id)
    # every live session of the person, each of which they may end (issue 19: a stolen one too)
    current = current_session_id(request)
    own = [own_session_view(s, current) for s in await own_sessions(services, viewer.principal)]
    names = {c["credential_id"]: c["name"] for c in credentials}
    consents = await authorize.consents_of(
        services, viewer.principal.id
    )  # remembered OAuth consents, withdrawable (D9)
    return render(
        "account.html",
        viewer=viewer,
        title="Your account",
        credentials=credentials,
        sessions=own,
        passkey_names=names,
        person=viewer.person,
        consents=consents,
        web_push=any(c.type == "webpush" for c in services.notify_channels.values()),
        push_subscriptions=await services.store.notify.subscriptions(viewer.principal.id),
    )


# -- grants ---------------------------------------------------------------------------------------


@bp.get("/grants")
@page()
async def grants_page(request: Request, viewer: Viewer) -> HTTPResponse:
    data = await grant_lists.inbox(services_of(request), viewer.principal, LIST_LIMIT)
    if request.args.get("part") == "list":  # the live list's refresh: just the lists, same rendering
        return render("_grant_lists.html", viewer=viewer, **data)
    return render("grants.html", viewer=viewer, title="Grants", **data)


@bp.get("/grant-approval")
@page()
async def grant_approval(request: Request, viewer: Viewer) -> HTTPResponse:
    grant_id = request.args.get("grant_id") or ""
    if not grant_id or len(grant_id) > 200 or not grant_id.isprintable():
        raise Problem(400, "the link names no grant (grant_id)", title="No grant named")
    return await approval_page(request, viewer, grant_id)


async def approval_page(
    request: Request, viewer: Viewer, grant_id: str, review_token: str | None = None
) -> HTTPResponse:
    """The page of one grant (also what a review link shows, D15: then deciding needs the passkey)."""
    services = services_of(request)
    record = await services.store.grants.get(grant_id)
    try:  # its requester, who may decide it, and the approvers its pinned policy names (D13)
        panel = (
            await grant_reviewers.approval_panel(services, viewer.principal, grant_id)
            if record is not None
            else None
        )
    except Problem as problem:
        if problem.status != 404:
            raise
        panel = None
    if record is None or panel is None:
        raise Problem(404, "There is no such grant, or it is not yours to see.", title="Grant not found")
    reader = grants.Reader(services)
    grant = panel["grant"]
    agent = await grants.requesting_agent(services, record)
    may_revoke = policy.may_revoke_grant(viewer.principal, record, agent, services.admin_emails)
    earlier = await _earlier_grants(services, record, reader)
    request_body = grant["request"]
    return render(
        "grant_approval.html",
        viewer=viewer,
        title="Grant request",
        grant=grant,
        request_body=request_body,
        agent=agent,
        may_decide=panel["may_vote"],
        may_revoke=may_revoke,
        panel=panel,
        earlier=earlier,
        grant_types=("once", "timed", "always"),
        max_duration=services.config.grants.max_duration,
        review_token=review_token,
    )


async def _earlier_grants(services: Services, record: Any, reader: grants.Reader) -> list[dict[str, Any]]:
    """The requester's earlier grants for the same command (same cmd_hash) or the same
    permissions, newest first."""
    request = record["request"]
    key = request.get("cmd_hash") or json.dumps(sorted(request.get("permissions") or []))
    rows, _ = await services.store.grants.list(
        lapse=reader.lapse, page=PageRequest(EARLIER_LIMIT, None), requester_ids=(record["requester_id"],)
    )
    same = []
    for row in rows:
        other = row["request"]
        other_key = other.get("cmd_hash") or json.dumps(sorted(other.get("permissions") or []))
        if row["id"] != record["id"] and other_key == key and row["created_at"] <= record["created_at"]:
            same.append(reader.view(row))
    return same


# -- agents ---------------------------------------------------------------------------------------


@bp.get("/enroll")
@page()
async def enroll(request: Request, viewer: Viewer) -> HTTPResponse:
    """An owner enrols an agent; the peer CLI opens ``/enroll?name=...&key=...`` (D8). Without an
    e-mail (``?email=`` or typed), a person's agent gets ``agent+NAME@<their domain>``
    (grantd.services.agents.default_agent_email, shown as the field's placeholder)."""
    name = (request.args.get("name") or "")[:255]
    key = (request.args.get("key") or "")[:1000]
    email = (request.args.get("email") or "")[:254]
    domain = viewer.email.rpartition("@")[2]
    try:
        suggestion = (
            agents.default_agent_email(viewer.email, name)
            if name
            else f"{policy.AGENT_EMAIL_PREFIX}NAME@{domain}"
        )
    except Problem:
        suggestion = f"{policy.AGENT_EMAIL_PREFIX}NAME@{domain}"
    return render(
        "enroll.html",
        viewer=viewer,
        title="Enrol an agent",
        name=name,
        key=key,
        email=email,
        suggestion=suggestion,
        domain=domain,
    )


# -- administration -------------------------------------------------------------------------------


@bp.get("/admin")
@page(admin=True)
async def admin(request: Request, viewer: Viewer) -> HTTPResponse:
    services = services_of(request)
    store = services.store
    now = services.clock.now_ms()
    first = PageRequest(LIST_LIMIT, None)
    search = (request.args.get("q") or "").strip()[:200] or None
    persons, more_people = await store.people.list(first, search)
    agent_rows, more_agents = await store.agents.list(first)
    states = await agents.party_states(
        services, agent_rows
    )  # D11: ownerless agents wait for an administrator
    registrations, more_registrations = await store.registrations.list(first)
    sessions, more_sessions = await store.sessions.list(first, None, now)
    emails: dict[str, str | None] = {p["person_id"]: p["email"] for p in persons}
    for session in sessions:
        if (
            session["person_id"] is not None and session["person_id"] not in emails
        ):  # None: a guest (SP login)
            found = await store.people.get(session["person_id"])
            emails[session["person_id"]] = found["email"] if found else None
    current = current_session_id(request)
    return render(
        "admin.html",
        viewer=viewer,
        title="Administration",
        search=search or "",
        people=[people.person_view(p, services.admin_emails) for p in persons],
        more_people=more_people,
        agents=[agents.admin_view(a, states) for a in agent_rows],
        more_agents=more_agents,
        registrations=[people.registration_view(r, now) for r in registrations],
        more_registrations=more_registrations,
        sessions=[
            {
                **people.session_view(s, emails[s["person_id"]] if s["person_id"] else s.get("email")),
                "current": s["session_id"] == current,
            }
            for s in sessions
        ],
        more_sessions=more_sessions,
        registration_ttl=services.config.people.registration_ttl,
    )
