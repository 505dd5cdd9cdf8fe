"""Browser sessions of people (D8): a cookie that names a server-side session record.

- The cookie ``grantd_session`` holds 32 random bytes (base64url); the store keeps only their
  SHA-256 (hex) as the ``session_id``, so a copy of the database signs nobody in.
- Each sign-in (a passkey login or registration) starts a new session in a new family; logging out
  or an administrator's revocation revokes the whole family, and the next request carrying the
  cookie finds no live session: it is answered as unauthenticated and told to drop the cookie.
- A session records the passkey that started it (``credential_id``); deleting that passkey ends
  it (``store.credentials.delete``, one transaction). A person sees their own live sessions and
  ends any of them (``own``, ``end_own``: /account and ``/api/sessions``) — issue 19: a stolen
  session is not allowed to outlive what its owner can see and stop.
- Lifetime: ``sessions.ttl`` seconds from sign-in, **absolute** (activity does not extend it; the
  cookie's Max-Age is the same). An absolute lifetime bounds what a stolen cookie is worth, and a
  sign-in with a passkey takes a second. ``last_seen_at`` is recorded (at most once a minute) for
  the session lists on /account and /admin.
- A session authenticates its person only while the person exists and is active: disabling or
  deleting a person ends their sessions at once, even before the records are revoked.
- The cookie is HttpOnly, SameSite=Lax, Path=/, and Secure when the issuer is https. Requests
  that carry it and change state must pass the cross-site check of ``grantd.web.csrf``.
- A request with an ``Authorization`` header never uses the cookie (the bearer alone decides).
- A **guest** session (D9: one kind of browser session) is started by SP login (``grantd.sp``):
  ``person_id`` is None and ``idp``, ``email``, ``name`` say who another IdP vouched for. It
  authenticates a ``guest`` principal (``grantd.core.principals.guest``), never a person of this
  grantd, whatever its e-mail; ``live`` (people) does not see it, ``live_guest`` does.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from typing import TYPE_CHECKING, Any

from grantd.core import policy, principals
from grantd.core.errors import not_found
from grantd.core.fields import check_identifier
from grantd.core.paging import Cursor, PageRequest
from grantd.core.principals import Principal
from grantd.store.records import Person, Session

if TYPE_CHECKING:
    from grantd.services.authn import Credentials
    from grantd.services.context import Services

SESSION_COOKIE = "grantd_session"
TOUCH_EVERY_MS = 60_000
_COOKIE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def session_id_of(cookie_value: str) -> str:
    """The stored id of a cookie value: SHA-256, hex."""
    return hashlib.sha256(cookie_value.encode("utf-8", "surrogatepass")).hexdigest()


def plausible(cookie_value: str | None) -> bool:
    """A value we could have minted (43 base64url characters): others are not looked up."""
    return cookie_value is not None and len(cookie_value) == 43 and set(cookie_value) <= _COOKIE_CHARS


def ttl_seconds(services: Services) -> int:
    return int(services.config.sessions.ttl)


def secure_cookie(services: Services) -> bool:
    return services.issuer.startswith("https://")


async def start(
    services: Services, person: Person, user_agent: str, *, credential_id: str | None = None
) -> tuple[str, Session]:
    """Sign ``person`` in: a new session in a new family. Returns the cookie value and the record.
    ``credential_id``: the passkey the person signed in with (deleting it ends the session)."""
    return await _start(services, user_agent, person_id=person["person_id"], credential_id=credential_id)


async def start_guest(
    services: Services, *, idp: str, email: str, name: str | None, user_agent: str
) -> tuple[str, Session]:
    """Sign a guest in (SP login: ``idp`` vouched for ``email``): a new session in a new family,
    with no person of this grantd behind it. Returns the cookie value and the record."""
    return await _start(services, user_agent, idp=idp, email=email.lower(), name=name)


async def _start(
    services: Services,
    user_agent: str,
    *,
    person_id: str | None = None,
    idp: str | None = None,
    email: str | None = None,
    name: str | None = None,
    credential_id: str | None = None,
) -> tuple[str, Session]:
    value = base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()
    now = services.clock.now_ms()
    session: Session = {
        "session_id": session_id_of(value),
        "family_id": "fam_" + secrets.token_urlsafe(16),
        "person_id": person_id,
        "created_at": now,
        "expires_at": now + ttl_seconds(services) * 1000,
        "last_seen_at": now,
        "user_agent": (user_agent or "")[:256],
        "revoked_at": None,
        "idp": idp,
        "email": email,
        "name": name,
        "credential_id": credential_id,
    }
    return value, await services.store.sessions.create(session)


async def end(services: Services, cookie_value: str) -> None:
    """Log out: revoke the family of the cookie's session (nothing if it is unknown or over)."""
    if not plausible(cookie_value):
        return
    now = services.clock.now_ms()
    session = await services.store.sessions.get(session_id_of(cookie_value), now)
    if session is not None:
        await services.store.sessions.revoke_family(session["family_id"], now)


async def _live_record(services: Services, cookie_value: str | None) -> Session | None:
    if cookie_value is None or not plausible(cookie_value):
        return None
    return await services.store.sessions.get(session_id_of(cookie_value), services.clock.now_ms())


async def _touch(services: Services, session: Session) -> None:
    now = services.clock.now_ms()
    if now - session["last_seen_at"] >= TOUCH_EVERY_MS:
        await services.store.sessions.touch(session["session_id"], now)


async def live(services: Services, cookie_value: str | None) -> tuple[Person, Session] | None:
    """The active person and live session a cookie names, or None (a guest session is None here)."""
    session = await _live_record(services, cookie_value)
    if session is None or session["person_id"] is None:
        return None
    person = await services.store.people.get(session["person_id"])
    if person is None or person["status"] != "active" or person["person_id"] != session["person_id"]:
        return None
    await _touch(services, session)
    return person, session


async def live_guest(services: Services, cookie_value: str | None) -> Session | None:
    """The live guest session (SP login) a cookie names, or None."""
    session = await _live_record(services, cookie_value)
    if (
        session is None
        or session["person_id"] is not None
        or not session.get("idp")
        or not session.get("email")
    ):
        return None
    await _touch(services, session)
    return session


# -- a person's own sessions (/account, /api/sessions) ---------------------------------------------
OWN_PAGE = 100  # sessions read per store call while listing one person's


def own_view(session: Session, current_session_id: str | None) -> dict[str, Any]:
    """What a person sees of one of their sessions; ``id`` is its family (what ends it)."""
    return {
        "id": session["family_id"],
        "created_at": session["created_at"],
        "expires_at": session["expires_at"],
        "last_seen_at": session["last_seen_at"],
        "user_agent": session["user_agent"],
        "credential_id": session.get("credential_id"),
        "current": session["session_id"] == current_session_id,
    }


async def own(services: Services, principal: Principal | None) -> list[Session]:
    """Every live session of the signed-in person, newest first."""
    me = policy.may_manage_own_sessions(principal)
    found: list[Session] = []
    cursor: Cursor | None = None
    while True:
        rows, more = await services.store.sessions.list(
            PageRequest(OWN_PAGE, cursor), me.id, services.clock.now_ms()
        )
        found.extend(rows)
        if not more or not rows:
            return found
        cursor = Cursor(rows[-1]["created_at"], rows[-1]["session_id"])


async def end_own(services: Services, principal: Principal | None, family_id: str) -> dict[str, Any]:
    """End one of the signed-in person's sessions (its family), this browser's or another's; 404 for
    one that is not theirs or no longer live."""
    family_id = check_identifier("id", family_id)
    me = policy.may_manage_own_sessions(principal)
    mine = [
        s for s in await own(services, me) if s["family_id"] == family_id and policy.may_end_session(me, s)
    ]
    if not mine:
        raise not_found("session not found")
    count = await services.store.sessions.revoke_family(family_id, services.clock.now_ms())
    return {"ended": family_id, "revoked": count}


class SessionCookie:
    """The authenticator of the session cookie (after the bearer ones in the chain). A request
    that presents a bearer is never authenticated by its cookie. An unknown, expired or revoked
    cookie proves nothing (None): the request is anonymous, and the web layer clears the cookie."""

    name = "session-cookie"

    async def authenticate(self, services: Services, credentials: Credentials) -> Principal | None:
        if credentials.bearer is not None or credentials.session is None:
            return None
        found = await live(services, credentials.session)
        if found is not None:
            return principals.for_person(found[0], services.admin_emails)
        guest = await live_guest(services, credentials.session)
        if guest is not None:
            return principals.guest(guest["family_id"], str(guest["email"]))
        return None
