"""People (issue "People", D8, D11): persons and the registration URLs through which they add passkeys.

- A person is created by an administrator (the admin API, ``grantd users add``) or at first start
  for the development config's first admin; their e-mail is unique across persons and agents, and
  may not be the management identity (D11).
- Disabling or deleting a person (D11, issue 19) is one store call (``store.people.retire``): the
  grants they requested are revoked, their sessions, refresh families (and so their access tokens)
  and every delegation they made or that names them end; deleting also removes their passkeys and
  unused registration URLs. Their event streams in this process end at once (other processes' at
  their next credential check). Agents they own or approve stay bound to their id: a person created
  later with the e-mail inherits nothing, and those agents wait for an administrator.
- A registration URL is ``{issuer}/register?token=T``: T is 32 random bytes (base64url), the store
  keeps only its SHA-256 (hex); it is single use and expires (``people.registration_ttl``, 24 h by
  default). ``register`` URLs are for an account's first passkey (the store refuses one for an
  account that already has a passkey on the URL's RP: the peer's takeover bug); ``add-device``
  URLs add one more passkey to an existing person, bound to the RP they were made for.

Views never carry token hashes or session ids (the hashes of cookie secrets).
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any
from urllib.parse import urlsplit

from grantd.core import policy
from grantd.core.errors import Problem, bad_request, conflict, forbidden, not_found
from grantd.core.fields import check_identifier, email_field, field_error, identifier_field
from grantd.core.paging import page, page_request
from grantd.core.principals import Principal, person_is_admin
from grantd.services.context import Services
from grantd.store import Conflict
from grantd.store.records import PasskeyCredential, Person, RegistrationUrl, Session

PURPOSES = ("register", "add-device")
PERSON_STATUSES = ("active", "disabled")
MAX_REGISTRATION_TTL = 30 * 86_400
MAX_SEARCH = 254
UPDATABLE = {"name", "admin", "status", "isActive"}


def new_person_id() -> str:
    return "usr_" + secrets.token_urlsafe(16)[:22]


def new_registration_id() -> str:
    return "reg_" + secrets.token_urlsafe(16)[:22]


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


# -- views ---------------------------------------------------------------------------------------


def person_view(person: Person, admin_emails: frozenset[str]) -> dict[str, Any]:
    """A person as the admin API shows it (the peer CLI reads email, name, isActive, createdAt)."""
    by_config = person["email"] in admin_emails
    return {
        "person_id": person["person_id"],
        "email": person["email"],
        "name": person["name"],
        "admin": person_is_admin(person, admin_emails),
        "admin_by_config": by_config,
        "status": person["status"],
        "isActive": person["status"] == "active",
        "created_at": person["created_at"],
        "createdAt": person["created_at"],
        "updated_at": person["updated_at"],
    }


def credential_view(credential: PasskeyCredential) -> dict[str, Any]:
    return {
        "credential_id": credential["credential_id"],
        "credentialId": credential["credential_id"],
        "name": credential["name"],
        "rp_id": credential["rp_id"],
        "transports": list(credential["transports"]),
        "aaguid": credential["aaguid"],
        "backed_up": credential["backed_up"],
        "backedUp": credential["backed_up"],
        "sign_count": credential["sign_count"],
        "created_at": credential["created_at"],
        "createdAt": credential["created_at"],
        "last_used_at": credential["last_used_at"],
    }


def registration_status(registration: RegistrationUrl, now: int) -> str:
    if registration["used_at"] is not None:
        return "used"
    return "expired" if registration["expires_at"] <= now else "pending"


def registration_view(registration: RegistrationUrl, now: int) -> dict[str, Any]:
    return {
        "id": registration["id"],
        "email": registration["email"],
        "admin": registration["admin"],
        "purpose": registration["purpose"],
        "rp_id": registration["rp_id"],
        "created_by": registration["created_by"],
        "created_at": registration["created_at"],
        "expires_at": registration["expires_at"],
        "used_at": registration["used_at"],
        "status": registration_status(registration, now),
    }


def session_view(session: Session, email: str | None) -> dict[str, Any]:
    return {
        "family_id": session["family_id"],
        "familyId": session["family_id"],
        "person_id": session["person_id"],
        "email": email,
        "created_at": session["created_at"],
        "expires_at": session["expires_at"],
        "last_seen_at": session["last_seen_at"],
        "user_agent": session["user_agent"],
        "idp": session.get("idp"),  # a guest's IdP (SP login), else None
    }


# -- persons -------------------------------------------------------------------------------------


def _email_conflict() -> Problem:
    return conflict("this email already belongs to an agent or a person")


def check_new_email(services: Services, email: str) -> None:
    if email == services.config.admin.management_identity.lower():
        raise conflict("this email is the management identity (admin.management_identity)")


async def create_person(
    services: Services, email: str, *, name: str | None = None, admin: bool = False, unnamed: bool = False
) -> Person:
    """A new person (409 if a person or an agent has the e-mail, D11). ``unnamed`` (federation):
    refused too while an agent or a live delegation names the e-mail (``Conflict("named")``)."""
    check_new_email(services, email)
    now = services.clock.now_ms()
    person: Person = {
        "person_id": new_person_id(),
        "email": email,
        "name": (name or email.partition("@")[0]).strip(),
        "admin": admin,
        "status": "active",
        "created_at": now,
        "updated_at": now,
    }
    try:
        return await services.store.people.create(person, unnamed=unnamed)
    except Conflict as exc:
        if exc.field == "named":
            raise Problem(
                409,
                "this e-mail still names an agent's owner or approver or a delegation's party; "
                "an administrator must create this person",
                extra={"field": "email", "named": True},
            ) from None
        raise _email_conflict() from None


async def create_person_from(services: Services, body: dict[str, Any]) -> Person:
    """``POST /api/admin/users`` ``{email, name?, admin?}``."""
    email = email_field(body, "email")
    name = identifier_field(body, "name", required=False)
    admin = _bool_field(body, "admin")
    assert email is not None
    return await create_person(services, email, name=name, admin=bool(admin))


async def create_user(services: Services, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
    """POST /api/admin/users: a person from the body and, with ``"registration": true``, their first
    registration URL made by ``principal`` (the caller the route checked with policy)."""
    registration = body.get("registration")
    if registration is not None and not isinstance(registration, bool):
        raise bad_request("registration must be true or false", field="registration")
    person = await create_person_from(services, body)
    answer = person_view(person, services.admin_emails)
    if registration:
        url, record = await create_registration_url(
            services,
            person["email"],
            admin=person["admin"],
            purpose="register",
            created_by=creator(principal),
        )
        answer["registration"] = registration_answer(services, url, record)
    return answer


def _bool_field(body: dict[str, Any], name: str) -> bool | None:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise field_error(name, f"{name} must be true or false")
    return value


def _ident(ident: str) -> str:
    ident = check_identifier("email", ident).strip()
    if not ident or len(ident) > 254:
        raise not_found("user not found")
    return ident.lower() if "@" in ident else ident


async def get_person(services: Services, ident: str) -> Person:
    """By ``person_id`` or e-mail; 404 ``user not found``."""
    person = await services.store.people.get(_ident(ident))
    if person is None:
        raise not_found("user not found")
    return person


async def find_person(services: Services, ident: str) -> Person | None:
    return await services.store.people.get(_ident(ident))


async def list_people(services: Services, args: Any) -> dict[str, Any]:
    """``{data, pagination}``, newest first; ``search`` is a substring of the e-mail or the name."""
    search = args.get("search")
    if search is not None:
        if len(search) > MAX_SEARCH:
            raise field_error("search", f"search is longer than {MAX_SEARCH} characters")
        search = check_identifier("search", search).strip() or None
    rows, has_more = await services.store.people.list(page_request(args), search)
    return page(rows, has_more, lambda p: person_view(p, services.admin_emails), id_key="person_id")


async def delete_person(services: Services, principal: Principal | None, ident: str) -> Person:
    """Delete a person with their passkeys, sessions and unused registration URLs (one store call).
    ``principal`` None is the operator's CLI (``grantd users delete``)."""
    person = await get_person(services, ident)
    if principal is not None:
        policy.may_delete_person(principal, person["person_id"])
    deleted = await retire(
        services,
        principal.email if principal else "grantd users delete",
        person,
        delete=True,
        reason="person deleted",
    )
    if deleted is None:
        raise not_found("user not found")
    return deleted


async def retire(services: Services, by: str, person: Person, *, delete: bool, reason: str) -> Person | None:
    """D11: a person disabled or deleted loses everything they could still use (one store call),
    then their event streams end. None if the person is gone."""
    retired = await services.store.people.retire(
        person["person_id"],
        delete=delete,
        by=by,
        reason=reason,
        now=services.clock.now_ms(),
        lapse=services.grant_lapse(),
    )
    services.events.changed()
    services.events.end_streams_of(person["person_id"])
    return retired[0] if retired is not None else None


async def update_person(services: Services, principal: Principal, ident: str, body: dict[str, Any]) -> Person:
    """``PATCH /api/admin/users/:email`` ``{name?, admin?, status?|isActive?}``. Disabling ends the
    person's sessions at once (peer bug 17)."""
    person = await get_person(services, ident)
    unknown = set(body) - UPDATABLE
    if unknown:
        first = sorted(unknown)[0]
        raise bad_request(f"unknown field: {first}", field=first)
    changes: dict[str, Any] = {}
    if body.get("name") is not None:
        changes["name"] = str(identifier_field(body, "name")).strip()
    admin = _bool_field(body, "admin")
    if admin is not None:
        changes["admin"] = admin
    status = body.get("status")
    if status is not None and status not in PERSON_STATUSES:
        raise field_error("status", f"status must be one of {', '.join(PERSON_STATUSES)}")
    active = _bool_field(body, "isActive")
    if active is not None:
        status = "active" if active else "disabled"
    if status is not None:
        changes["status"] = status
    if principal.id == person["person_id"] and (
        changes.get("admin") is False or changes.get("status") == "disabled"
    ):
        raise forbidden("you cannot take away your own administrator rights or disable yourself")
    if not changes:
        return person
    now = services.clock.now_ms()
    changes["updated_at"] = now
    disabling = changes.get("status") == "disabled"
    if disabling:
        changes.pop("status")  # disabling is retire (D11): the status changes with everything it ends
    updated = await services.store.people.update(person["person_id"], changes)
    if updated is None:
        raise not_found("user not found")
    if disabling:
        if await retire(services, principal.email, updated, delete=False, reason="person disabled") is None:
            raise not_found("user not found")
        updated["status"] = "disabled"
    return updated


async def credentials_of(services: Services, ident: str) -> list[dict[str, Any]]:
    person = await get_person(services, ident)
    return [credential_view(c) for c in await services.store.credentials.list_for(person["person_id"])]


async def has_passkey(services: Services, person: Person) -> bool:
    return bool(await services.store.credentials.list_for(person["person_id"]))


# -- sessions (administration) -------------------------------------------------------------------


async def list_sessions(services: Services, args: Any) -> dict[str, Any]:
    """Live sessions, newest first; ``user`` (e-mail or person id) narrows them to one person."""
    person_id = None
    user = args.get("user")
    if user:
        person = await find_person(services, user)
        if person is None:
            raise not_found("user not found")
        person_id = person["person_id"]
    rows, has_more = await services.store.sessions.list(
        page_request(args), person_id, services.clock.now_ms()
    )
    emails: dict[str, str | None] = {}
    for row in rows:
        if row["person_id"] is not None and row["person_id"] not in emails:
            owner = await services.store.people.get(row["person_id"])
            emails[row["person_id"]] = owner["email"] if owner else None
    # a guest session of SP login has no person: its e-mail is the one its IdP asserted (D9)
    return page(
        rows,
        has_more,
        lambda s: session_view(s, emails[s["person_id"]] if s["person_id"] else s.get("email")),
        id_key="session_id",
    )


async def revoke_session_family(services: Services, family_id: str) -> dict[str, Any]:
    """Idempotent (as the peer): an unknown or already ended family answers ``revoked: 0``."""
    family_id = check_identifier("familyId", family_id)
    count = await services.store.sessions.revoke_family(family_id, services.clock.now_ms())
    return {"status": "revoked", "familyId": family_id, "revoked": count}


async def revoke_person_sessions(services: Services, ident: str) -> dict[str, Any]:
    person = await get_person(services, ident)
    count = await services.store.sessions.revoke_person(person["person_id"], services.clock.now_ms())
    return {"status": "revoked", "email": person["email"], "person_id": person["person_id"], "revoked": count}


# -- registration URLs ---------------------------------------------------------------------------


def rp_id_of(services: Services) -> str:
    """The WebAuthn RP id: ``webauthn.rp_id`` when configured, else the issuer's host (D8)."""
    webauthn = getattr(services.config, "webauthn", None)
    configured = getattr(webauthn, "rp_id", None) if webauthn is not None else None
    if configured:
        return str(configured)
    return urlsplit(services.issuer).hostname or "localhost"


def registration_link(services: Services, token: str) -> str:
    return f"{services.issuer}/register?token={token}"


async def create_registration_url(
    services: Services,
    email: str,
    *,
    admin: bool = False,
    purpose: str = "register",
    created_by: str,
    ttl: int | None = None,
) -> tuple[str, RegistrationUrl]:
    """A single-use registration URL for ``email`` and its record (the token is in the URL only).

    ``register``: for a person without a passkey on this RP (409 otherwise: use ``add-device``);
    ``add-device``: one more passkey for an existing person (404 if unknown). An e-mail of an
    agent or the management identity is a 409 (D11)."""
    if purpose not in PURPOSES:
        raise field_error("purpose", f"purpose must be one of {', '.join(PURPOSES)}")
    if ttl is not None and not 0 < ttl <= MAX_REGISTRATION_TTL:
        raise field_error("expires_in", f"expires_in must be between 1 and {MAX_REGISTRATION_TTL} seconds")
    rp_id = rp_id_of(services)
    person = await services.store.people.get(email)
    if person is None:
        if purpose == "add-device":
            raise not_found("user not found")
        check_new_email(services, email)
        if await services.store.agents.get(email) is not None:
            raise _email_conflict()
    elif purpose == "register":
        credentials = await services.store.credentials.list_for(person["person_id"])
        if any(c["rp_id"] == rp_id for c in credentials):
            raise conflict("this user already has a passkey; make an add-device link instead")
    now = services.clock.now_ms()
    token = secrets.token_urlsafe(32)
    registration: RegistrationUrl = {
        "id": new_registration_id(),
        "token_hash": token_hash(token),
        "email": email,
        "admin": admin,
        "purpose": purpose,
        "rp_id": rp_id,
        "created_by": created_by,
        "created_at": now,
        "expires_at": now + (ttl or services.config.people.registration_ttl) * 1000,
        "used_at": None,
    }
    stored = await services.store.registrations.create(registration)
    return registration_link(services, token), stored


def _ttl_of(body: dict[str, Any]) -> int | None:
    """``expires_in`` (seconds) or the peer's ``expiresInHours``."""
    for name, unit in (("expires_in", 1), ("expiresInHours", 3600)):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise field_error(name, f"{name} must be a positive whole number")
        if value * unit > MAX_REGISTRATION_TTL:
            raise field_error(name, f"{name} must be at most {MAX_REGISTRATION_TTL // unit}")
        return value * unit
    return None


def creator(principal: Principal) -> str:
    return principal.email


async def create_registration_from(
    services: Services, principal: Principal, body: dict[str, Any]
) -> dict[str, Any]:
    """``POST /api/admin/registration-urls`` ``{email, name?, admin?, purpose?, expires_in?|expiresInHours?}``:
    creates the person first when needed (so the name is kept), then the URL."""
    email = email_field(body, "email")
    assert email is not None
    name = identifier_field(body, "name", required=False)
    admin = bool(_bool_field(body, "admin"))
    purpose = body.get("purpose", "register")
    if purpose is None:
        purpose = "register"
    if not isinstance(purpose, str) or purpose not in PURPOSES:
        raise field_error("purpose", f"purpose must be one of {', '.join(PURPOSES)}")
    ttl = _ttl_of(body)
    created = False
    if purpose == "register" and await services.store.people.get(email) is None:
        await create_person(services, email, name=name, admin=admin)
        created = True
    try:
        url, registration = await create_registration_url(
            services, email, admin=admin, purpose=purpose, created_by=creator(principal), ttl=ttl
        )
    except Problem:
        if created:  # do not leave a person behind for a link that was refused
            person = await services.store.people.get(email)
            if person is not None:
                await services.store.people.delete(person["person_id"], services.clock.now_ms())
        raise
    return registration_answer(services, url, registration)


def registration_answer(services: Services, url: str, registration: RegistrationUrl) -> dict[str, Any]:
    """The creation answer: the record's view plus the URL (and the peer's names for it). The URL
    is shown this once; lists never show it again."""
    view = registration_view(registration, services.clock.now_ms())
    token = url.rpartition("token=")[2]
    return {
        **view,
        "url": url,
        "registrationUrl": url,
        "token": token,
        "expiresInHours": round((registration["expires_at"] - registration["created_at"]) / 3_600_000, 2),
    }


async def list_registration_urls(services: Services, args: Any) -> dict[str, Any]:
    rows, has_more = await services.store.registrations.list(page_request(args))
    now = services.clock.now_ms()
    return page(rows, has_more, lambda r: registration_view(r, now))


async def delete_registration_url(services: Services, ident: str) -> dict[str, Any]:
    """By the URL's id or by its token; 404 if neither names one."""
    ident = check_identifier("id", ident).strip()
    if not ident or len(ident) > 200:
        raise not_found("registration URL not found")
    if ident.startswith("reg_") and await services.store.registrations.delete(ident):
        return {"deleted": True, "id": ident}
    found = await services.store.registrations.get_by_token_hash(token_hash(ident))
    if found is None or not await services.store.registrations.delete(found["id"]):
        raise not_found("registration URL not found")
    return {"deleted": True, "id": found["id"]}


# -- the first administrator (grantd serve) ------------------------------------------------------

FIRST_ADMIN_CREATOR = "grantd serve (people.first_admin)"


async def first_admin_link(services: Services, email: str) -> str | None:
    """At start: make sure the first administrator exists; while they have no passkey, a fresh
    registration URL for them (the previous unused ones ``grantd serve`` made are deleted, so one
    link is live at a time). None once they have a passkey."""
    email = email.strip().lower()
    person = await services.store.people.get(email)
    if person is None:
        person = await create_person(services, email, admin=True)
    elif not person["admin"]:
        person = (
            await services.store.people.update(
                person["person_id"], {"admin": True, "updated_at": services.clock.now_ms()}
            )
            or person
        )
    if await has_passkey(services, person):
        return None
    await _drop_links_made_by(services, email, FIRST_ADMIN_CREATOR)
    url, _ = await create_registration_url(
        services, email, admin=True, purpose="register", created_by=FIRST_ADMIN_CREATOR
    )
    return url


async def _drop_links_made_by(services: Services, email: str, created_by: str) -> None:
    now = services.clock.now_ms()
    request = page_request({"limit": "100"})
    while True:
        rows, has_more = await services.store.registrations.list(request)
        for row in rows:
            if (
                row["email"] == email
                and row["created_by"] == created_by
                and registration_status(row, now) == "pending"
            ):
                await services.store.registrations.delete(row["id"])
        if not has_more or not rows:
            return
        request = page_request({"limit": "100", "cursor": f"{rows[-1]['created_at']}_{rows[-1]['id']}"})
