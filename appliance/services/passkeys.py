"""Passkeys (WebAuthn, D8): the ceremonies behind /api/webauthn/*, with the ``webauthn`` library.

Rules kept here:

- **RP id and origin exact**: ``webauthn.rp_id`` (default: the issuer's host name) and
  ``webauthn.origin`` (default: the issuer's origin) are the only values a response may carry.
- **Challenges server-side** (``store.webauthn_challenges``): 32 random bytes per ceremony, bound to
  its purpose (register | login | add), the RP id, and to the registration URL (register) or the
  person (login by e-mail, add); valid 5 minutes; single use — the challenge a response names is
  taken (deleted) before anything is verified, so a failed attempt uses it up too. The client never
  chooses a challenge: one the server did not issue does not exist.
- **Registration URLs** are single use (``store.registrations.complete`` is the one transaction
  that redeems the URL, creates the person if need be and adds the passkey; one concurrent
  redeemer wins). The graft rule: a ``register`` URL cannot add a passkey to an account that already
  has one on this RP (409; the peer's takeover bug) — the person adds more from /account.
- **Sign counters** must grow unless both the stored and the new count are 0 (authenticators
  without counters); otherwise 401 "passkey counter went backwards (cloned authenticator?)", and
  ``store.credentials.use`` makes concurrent sign-ins with one count have one winner.
- **Discoverable login**: the response's user handle must be the credential owner's ``person_id``.
- **Disabled persons** get 403 on login (options and verify) and on registration.
- **Login by e-mail and enumeration**: an e-mail with no passkey on this RP is answered 404 "no
  passkey for this e-mail" (the specification's and the peer's behaviour, and what lets the login
  page tell a person to ask for a registration link), and a disabled one 403. So an anonymous
  caller can learn whether an e-mail has a passkey here; the per-address limit (D12,
  ``limits.passkey_per_address``) bounds how fast. Discoverable login (no e-mail) reveals nothing.
- **Bound to the browser** (D8, issue 19: login CSRF): a sign-in or registration challenge is kept
  (``grantd.services.flows``, kinds ``passkey-login`` and ``passkey-register``) bound to a random
  *binding* that only the browser which asked for the options holds, in the HttpOnly cookie
  ``grantd_passkey`` (path ``/api/webauthn/``, 5 minutes; the web layer sets it). Verification
  refuses a response to a challenge that another browser asked for: an attacker who signed
  fresh options with their own passkey cannot have a victim's browser redeem them, even through a
  route that accepted the request.
- **Adding a passkey** needs more than a session (issue 19): ``add/reauth`` asks for an assertion
  of one of the person's passkeys with user verification *required*; ``add/options`` verifies it
  (purpose ``reauth``, the person's own passkey, UV flag set, counter recorded) and only then
  issues the ``add`` challenge — so a fresh user-verified assertion precedes every new passkey by
  at most ``CHALLENGE_TTL_MS``. A person without a passkey here gets a registration link from an
  administrator instead (purpose ``add-device``).
- **Sessions remember their passkey**: a sign-in's session records the credential it used;
  deleting the passkey ends those sessions in the same store transaction.
- **Rate limits** (D12): login options, login verification and registration verification are
  counted per client address, each on its own counter, apart from the agents' counters (peer bug
  30: agents behind one address must not lock people out).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
from typing import TYPE_CHECKING, Any

from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import decode_credential_public_key, decoded_public_key_to_cryptography
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AttestationConveyancePreference,
    AuthenticatorSelectionCriteria,
    AuthenticatorTransport,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from grantd.core.errors import Problem, bad_request, forbidden, not_found, unauthorized
from grantd.core.fields import check_text
from grantd.core.principals import Kind, Principal, person_is_admin
from grantd.services import flows, sessions
from grantd.services.limits import Rule
from grantd.store import Conflict
from grantd.store.records import PasskeyCredential, Person, RegistrationUrl, Session, WebAuthnChallenge

if TYPE_CHECKING:
    from grantd.services.context import Services

CHALLENGE_TTL_MS = 300_000  # 5 minutes (D8)
REGISTRATION_GONE = "registration URL not found, expired or already used"
CHALLENGE_GONE = "passkey challenge unknown, expired or already used; start again"
COUNTER_BACKWARDS = "passkey counter went backwards (cloned authenticator?)"
REAUTH_NEEDED = (
    "response is required: an assertion of one of your passkeys, with user verification, "
    "answering POST /api/webauthn/credentials/add/reauth"
)
NO_PASSKEY_TO_CONFIRM = "you have no passkey to confirm with: ask an administrator for a registration link"
OTHER_BROWSER = (
    "this passkey ceremony was started in another browser (or this browser refused its cookie); start again"
)
BINDING_COOKIE = "grantd_passkey"
BINDING_PATH = "/api/webauthn/"
MAX_CREDENTIAL_ID = 1366  # base64url of the longest credential id WebAuthn allows (1023 bytes)
_TRANSPORTS = {t.value for t in AuthenticatorTransport}
_B64URL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def rp_id(services: Services) -> str:
    return str(services.config.webauthn.rp_id)


def origin(services: Services) -> str:
    return str(services.config.webauthn.origin)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(value: Any, what: str) -> bytes:
    if not isinstance(value, str) or not value or len(value) > 65_536:
        raise bad_request(f"malformed passkey response: {what} missing")
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise bad_request(f"malformed passkey response: {what} is not base64url") from None


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


# -- views ----------------------------------------------------------------------------------------
def person_view(services: Services, person: Person) -> dict[str, Any]:
    admin = person_is_admin(person, services.admin_emails)
    return {
        "id": person["person_id"],
        "email": person["email"],
        "name": person["name"],
        "admin": admin,
        "status": person["status"],
        "created_at": person["created_at"],
    }


def credential_view(credential: PasskeyCredential) -> dict[str, Any]:
    """What a person (or an administrator) sees of a passkey: never its public key."""
    return {
        "id": credential["credential_id"],
        "name": credential["name"],
        "rp_id": credential["rp_id"],
        "created_at": credential["created_at"],
        "last_used_at": credential["last_used_at"],
        "transports": credential["transports"],
        "backed_up": credential["backed_up"],
        "aaguid": credential["aaguid"],
    }


# -- rate limits (D12) ----------------------------------------------------------------------------
_STEPS = ("login-options", "login-verify", "register-verify")


async def limit(services: Services, address: str | None, step: str) -> None:
    """Count one passkey attempt of ``address`` at ``step`` (one of ``_STEPS``); 429 over the limit.
    Sign-in options count every attempt (they make a challenge, with or without an e-mail); the
    verifications count their failures only (D12: a valid passkey is never refused because of other
    callers' failures from the same address)."""
    assert step in _STEPS
    rule = Rule(
        f"passkey-{step}.address", services.config.limits.passkey_per_address, "too many passkey attempts"
    )
    await services.limits.hit(rule, address)


# -- helpers --------------------------------------------------------------------------------------
def _options(options: Any) -> dict[str, Any]:
    return json.loads(options_to_json(options))  # type: ignore[no-any-return]


def _descriptors(credentials: list[PasskeyCredential]) -> list[PublicKeyCredentialDescriptor]:
    return [
        PublicKeyCredentialDescriptor(
            id=_unb64url(c["credential_id"], "credential id"),
            transports=[AuthenticatorTransport(t) for t in c["transports"] if t in _TRANSPORTS] or None,
        )
        for c in credentials
    ]


async def _new_challenge(
    services: Services, purpose: str, *, person_id: str | None = None, registration_id: str | None = None
) -> bytes:
    raw = secrets.token_bytes(32)
    now = services.clock.now_ms()
    record: WebAuthnChallenge = {
        "challenge": _b64url(raw),
        "purpose": purpose,
        "rp_id": rp_id(services),
        "person_id": person_id,
        "registration_id": registration_id,
        "expires_at": now + CHALLENGE_TTL_MS,
    }
    await services.store.webauthn_challenges.create(record, now)
    return raw


def binding_of(cookie_value: str | None) -> str:
    """The browser's binding: the one its ``grantd_passkey`` cookie holds if it looks like ours (so
    ceremonies in two tabs of one browser both work), else a new one (the route sets the cookie)."""
    if cookie_value and 40 <= len(cookie_value) <= 64 and set(cookie_value) <= _B64URL_CHARS:
        return cookie_value
    return flows.new_secret()


async def _bind(services: Services, purpose: str, challenge: bytes, binding: str) -> None:
    await flows.keep(services, f"passkey-{purpose}", _b64url(challenge), binding, {})


async def _bound(services: Services, purpose: str, challenge: WebAuthnChallenge, binding: str | None) -> bool:
    """Whether ``binding`` is the one of the browser that asked for ``challenge`` (used up either way)."""
    try:
        await flows.take(services, f"passkey-{purpose}", challenge["challenge"], binding)
    except flows.FlowRefused:
        return False
    return True


def credential_of(body: dict[str, Any]) -> dict[str, Any]:
    """The PublicKeyCredential JSON a browser produced: ``{response: <credential>}`` or the
    credential itself as the body."""
    inner = body.get("response")
    if isinstance(inner, dict) and "clientDataJSON" in inner:
        return body
    if isinstance(inner, dict):
        return inner
    raise bad_request("response is required: the PublicKeyCredential the browser returned", field="response")


async def _take_challenge(
    services: Services, credential: dict[str, Any], purpose: str
) -> WebAuthnChallenge | None:
    """Take (use up) the challenge the response's clientDataJSON names, for ``purpose`` on our RP."""
    response = credential.get("response")
    if not isinstance(response, dict):
        raise bad_request("malformed passkey response: response missing")
    try:
        client_data = json.loads(_unb64url(response.get("clientDataJSON"), "clientDataJSON"))
    except (ValueError, UnicodeDecodeError):
        raise bad_request("malformed passkey response: clientDataJSON is not JSON") from None
    challenge = client_data.get("challenge") if isinstance(client_data, dict) else None
    if not isinstance(challenge, str) or not challenge or len(challenge) > 512:
        raise bad_request("malformed passkey response: clientDataJSON has no challenge")
    if (
        not set(challenge) <= _B64URL_CHARS
    ):  # ours are base64url; anything else (a lone surrogate) is looked up nowhere
        raise bad_request("malformed passkey response: the challenge is not base64url")
    taken = await services.store.webauthn_challenges.take(challenge, purpose, services.clock.now_ms())
    if taken is None or taken["rp_id"] != rp_id(services):
        return None
    return taken


def _credential_id(credential: dict[str, Any]) -> str:
    raw = credential.get("rawId", credential.get("id"))
    if isinstance(raw, str) and len(raw) > MAX_CREDENTIAL_ID:
        raise bad_request("malformed passkey response: credential id too long")
    return _b64url(_unb64url(raw, "credential id"))


def _name(services: Services, body: dict[str, Any], existing: int) -> str:
    value = body.get("name")
    if value is None:
        return f"Passkey {existing + 1}"
    if not isinstance(value, str) or not value.strip() or len(value) > 100:
        raise bad_request("name must be a non-empty string of at most 100 characters", field="name")
    return check_text("name", value.strip())


def _transports(credential: dict[str, Any]) -> list[str]:
    response = credential.get("response")
    found = response.get("transports") if isinstance(response, dict) else None
    if not isinstance(found, list):
        return []
    return [t for t in found if isinstance(t, str) and t in _TRANSPORTS][:8]


def _verify_registration(services: Services, credential: dict[str, Any], challenge: WebAuthnChallenge) -> Any:
    try:
        verified = verify_registration_response(
            credential=credential,
            expected_challenge=_unb64url(challenge["challenge"], "challenge"),
            expected_rp_id=rp_id(services),
            expected_origin=origin(services),
            require_user_verification=False,  # preferred, not required (D8)
        )
        # The library parses the COSE key but does not load it: a key that cannot verify anything
        # (an EC point off its curve) would make a passkey that never signs in.
        decoded_public_key_to_cryptography(decode_credential_public_key(verified.credential_public_key))
    except (WebAuthnException, ValueError, KeyError, TypeError) as exc:
        raise bad_request(f"passkey registration refused: {_reason(exc)}") from None
    return verified


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def _new_credential(
    services: Services, verified: Any, person_id: str, credential: dict[str, Any], name: str
) -> PasskeyCredential:
    return {
        "credential_id": _b64url(verified.credential_id),
        "person_id": person_id,
        "rp_id": rp_id(services),
        "public_key": _b64url(verified.credential_public_key),
        "sign_count": int(verified.sign_count),
        "transports": _transports(credential),
        "aaguid": str(verified.aaguid),
        "name": name,
        "backed_up": bool(verified.credential_backed_up),
        "created_at": services.clock.now_ms(),
        "last_used_at": None,
    }


async def _registration(services: Services, token: Any) -> RegistrationUrl:
    if not isinstance(token, str) or not token or len(token) > 256:
        raise bad_request("token is required: the token of the registration URL", field="token")
    registration = await services.store.registrations.get_by_token_hash(token_hash(token))
    now = services.clock.now_ms()
    if (
        registration is None
        or registration["used_at"] is not None
        or registration["expires_at"] <= now
        or registration["rp_id"] != rp_id(services)
    ):
        raise not_found(REGISTRATION_GONE)
    return registration


async def registration_usable(services: Services, token: str) -> bool:
    """Whether ``token`` names a registration URL that can still be used (the /register page says at
    once when it cannot, instead of after the click). Reads only; the ceremony checks again."""
    try:
        await _registration(services, token)
    except Problem:
        return False
    return True


def _active(person: Person) -> Person:
    if person["status"] != "active":
        raise forbidden("account disabled")
    return person


def _signed_in_person(principal: Principal | None) -> Principal:
    if principal is None:
        raise unauthorized()
    if principal.kind is not Kind.PERSON:
        raise forbidden("only a signed-in person has passkeys")
    return principal


# -- registration through a registration URL -----------------------------------------------------
def _creation_options(
    services: Services,
    email: str,
    person_id: str,
    display_name: str,
    challenge: bytes,
    existing: list[PasskeyCredential],
) -> dict[str, Any]:
    """Options for a new passkey, for a first registration and for one more alike: our RP, user
    verification and resident key preferred, no attestation, the person's passkeys excluded."""
    options = generate_registration_options(
        rp_id=rp_id(services),
        rp_name=str(services.config.webauthn.rp_name),
        user_name=email,
        user_id=person_id.encode(),
        user_display_name=display_name,
        challenge=challenge,
        timeout=CHALLENGE_TTL_MS,
        attestation=AttestationConveyancePreference.NONE,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.PREFERRED,
        ),
        exclude_credentials=_descriptors(existing),
    )
    return _options(options)


async def register_options(services: Services, token: Any, binding: str) -> dict[str, Any]:
    registration = await _registration(services, token)
    person = await services.store.people.get(registration["email"])
    existing: list[PasskeyCredential] = []
    if person is not None:
        _active(person)
        existing = [
            c
            for c in await services.store.credentials.list_for(person["person_id"])
            if c["rp_id"] == rp_id(services)
        ]
        if registration["purpose"] == "register" and existing:
            raise Problem(409, "this account already has a passkey: sign in and add one on your account page")
    person_id = person["person_id"] if person is not None else "usr_" + secrets.token_urlsafe(16)
    challenge = await _new_challenge(
        services, "register", person_id=person_id, registration_id=registration["id"]
    )
    await _bind(services, "register", challenge, binding)
    name = person["name"] if person is not None else registration["email"]
    return _creation_options(services, registration["email"], person_id, name, challenge, existing)


async def register_verify(
    services: Services, body: dict[str, Any], user_agent: str, binding: str | None
) -> tuple[Person, PasskeyCredential, str, Session]:
    """Redeem the registration URL with the new passkey; sign the person in."""
    token = body.get("token")
    registration = await _registration(services, token)
    credential = credential_of(body)
    challenge = await _take_challenge(services, credential, "register")
    if challenge is None or challenge["registration_id"] != registration["id"] or not challenge["person_id"]:
        raise bad_request(CHALLENGE_GONE)
    if not await _bound(services, "register", challenge, binding):
        raise bad_request(OTHER_BROWSER)
    verified = _verify_registration(services, credential, challenge)
    now = services.clock.now_ms()
    existing = await services.store.people.get(registration["email"])
    if existing is not None:
        _active(existing)
        if existing["person_id"] != challenge["person_id"]:
            # Most often a concurrent redeemer of this same URL created the person a moment ago:
            # then the URL is used, and the loser hears what the store would tell it (404).
            await _registration(services, token)
            raise Problem(409, "the account changed while registering; start again")
    email = registration["email"]
    person: Person = {
        "person_id": challenge["person_id"],
        "email": email,
        "name": _person_name(body, email),
        "admin": bool(registration["admin"]),
        "status": "active",
        "created_at": now,
        "updated_at": now,
    }
    count = (
        len(await services.store.credentials.list_for(challenge["person_id"])) if existing is not None else 0
    )
    new = _new_credential(
        services, verified, challenge["person_id"], credential, _name(services, body, count)
    )
    try:
        person, new = await services.store.registrations.complete(token_hash(token), person, new, now)  # type: ignore[arg-type]
    except Conflict as exc:
        if exc.field == "token":
            raise not_found(REGISTRATION_GONE) from None
        if exc.field == "credential":
            raise Problem(
                409, "this account already has a passkey: sign in and add one on your account page"
            ) from None
        if exc.field == "credential_id":
            raise Problem(409, "this passkey is already registered") from None
        raise Problem(409, f"registration refused: duplicate {exc.field}") from None
    _active(person)
    value, session = await sessions.start(services, person, user_agent, credential_id=new["credential_id"])
    return person, new, value, session


def _person_name(body: dict[str, Any], email: str) -> str:
    value = body.get("person_name")
    if isinstance(value, str) and value.strip() and len(value) <= 200:
        return check_text("person_name", value.strip())
    return email.split("@", 1)[0]


# -- sign-in --------------------------------------------------------------------------------------
async def login_options(services: Services, email: str | None, binding: str) -> dict[str, Any]:
    allow: list[PasskeyCredential] = []
    person_id = None
    if email is not None:
        person = await services.store.people.get(email)
        if person is not None:
            allow = [
                c
                for c in await services.store.credentials.list_for(person["person_id"])
                if c["rp_id"] == rp_id(services)
            ]
        if person is None or not allow:
            raise not_found("no passkey for this e-mail")
        _active(person)
        person_id = person["person_id"]
    challenge = await _new_challenge(services, "login", person_id=person_id)
    await _bind(services, "login", challenge, binding)
    options = generate_authentication_options(
        rp_id=rp_id(services),
        challenge=challenge,
        timeout=CHALLENGE_TTL_MS,
        allow_credentials=_descriptors(allow),
        user_verification=UserVerificationRequirement.PREFERRED,
    )
    return _options(options)


async def login_verify(
    services: Services, body: dict[str, Any], user_agent: str, binding: str | None
) -> tuple[Person, PasskeyCredential, str, Session]:
    credential = credential_of(body)
    credential_id = _credential_id(credential)
    challenge = await _take_challenge(services, credential, "login")
    if challenge is None:
        raise unauthorized(CHALLENGE_GONE)
    if not await _bound(services, "login", challenge, binding):
        raise unauthorized(OTHER_BROWSER)
    stored = await services.store.credentials.get(credential_id)
    if stored is None or stored["rp_id"] != rp_id(services):
        raise unauthorized("unknown passkey")
    if challenge["person_id"] is not None and challenge["person_id"] != stored["person_id"]:
        raise unauthorized("this passkey does not belong to that e-mail")
    response = credential.get("response")
    user_handle = response.get("userHandle") if isinstance(response, dict) else None
    if user_handle is not None and user_handle != "":
        if _unb64url(user_handle, "userHandle") != stored["person_id"].encode():
            raise unauthorized("the passkey's user handle does not match its owner")
    elif challenge["person_id"] is None:
        raise unauthorized("a passkey sign-in without an e-mail needs the passkey's user handle")
    person = await services.store.people.get(stored["person_id"])
    if person is None or person["person_id"] != stored["person_id"]:
        raise unauthorized("unknown passkey")
    _active(person)
    used = await _verified_assertion(services, credential, challenge, stored, user_verified=False)
    await services.limits.passkey_verified(person["person_id"])  # D12: per identity, once verified
    value, session = await sessions.start(services, person, user_agent, credential_id=used["credential_id"])
    return person, used, value, session


async def _verified_assertion(
    services: Services,
    credential: dict[str, Any],
    challenge: WebAuthnChallenge,
    stored: PasskeyCredential,
    *,
    user_verified: bool,
) -> PasskeyCredential:
    """Check an assertion of ``stored`` against ``challenge`` (``user_verified``: the authenticator
    must say it verified the user, by PIN or biometrics) and record its sign counter."""
    try:
        verified = verify_authentication_response(
            credential=credential,
            expected_challenge=_unb64url(challenge["challenge"], "challenge"),
            expected_rp_id=rp_id(services),
            expected_origin=origin(services),
            credential_public_key=_unb64url(stored["public_key"], "public key"),
            credential_current_sign_count=stored["sign_count"],
            require_user_verification=user_verified,
        )
    except (WebAuthnException, ValueError, KeyError, TypeError) as exc:
        if "sign count" in str(exc):
            raise unauthorized(COUNTER_BACKWARDS) from None
        raise unauthorized(f"passkey sign-in refused: {_reason(exc)}") from None
    used = await services.store.credentials.use(
        stored["credential_id"], int(verified.new_sign_count), services.clock.now_ms()
    )
    if used is None:
        raise unauthorized(COUNTER_BACKWARDS)
    return used


# -- a signed-in person's own passkeys ------------------------------------------------------------
async def list_own(services: Services, principal: Principal | None) -> list[PasskeyCredential]:
    me = _signed_in_person(principal)
    return await services.store.credentials.list_for(me.id)


async def _own_active(
    services: Services, principal: Principal | None
) -> tuple[Person, list[PasskeyCredential]]:
    me = _signed_in_person(principal)
    person = await services.store.people.get(me.id)
    if person is None or person["person_id"] != me.id:
        raise unauthorized()
    _active(person)
    return person, [
        c for c in await services.store.credentials.list_for(me.id) if c["rp_id"] == rp_id(services)
    ]


async def reauth_options(services: Services, principal: Principal | None) -> dict[str, Any]:
    """The first step of adding a passkey: request options for an assertion of one of the person's
    passkeys here, user verification **required** (issue 19: a session alone — a stolen cookie —
    must not be able to add a passkey of its own and so outlive every logout)."""
    person, existing = await _own_active(services, principal)
    if not existing:
        raise Problem(409, NO_PASSKEY_TO_CONFIRM)
    challenge = await _new_challenge(services, "reauth", person_id=person["person_id"])
    options = generate_authentication_options(
        rp_id=rp_id(services),
        challenge=challenge,
        timeout=CHALLENGE_TTL_MS,
        allow_credentials=_descriptors(existing),
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return _options(options)


async def add_options(
    services: Services, principal: Principal | None, body: dict[str, Any]
) -> dict[str, Any]:
    """Creation options for one more passkey, only against a fresh (``CHALLENGE_TTL_MS``),
    user-verified assertion (``body.response``) of one of the person's passkeys, answering the
    options of ``reauth_options``."""
    person, existing = await _own_active(services, principal)
    if "response" not in body:
        raise bad_request(REAUTH_NEEDED, field="response")
    assertion = credential_of(body)
    credential_id = _credential_id(assertion)
    challenge = await _take_challenge(services, assertion, "reauth")
    if challenge is None or challenge["person_id"] != person["person_id"]:
        raise unauthorized(CHALLENGE_GONE)
    stored = next((c for c in existing if c["credential_id"] == credential_id), None)
    if stored is None:
        raise unauthorized("confirm with one of your own passkeys")
    await _verified_assertion(services, assertion, challenge, stored, user_verified=True)
    challenge_bytes = await _new_challenge(services, "add", person_id=person["person_id"])
    return _creation_options(
        services, person["email"], person["person_id"], person["name"], challenge_bytes, existing
    )


async def add_verify(
    services: Services, principal: Principal | None, body: dict[str, Any]
) -> PasskeyCredential:
    me = _signed_in_person(principal)
    credential = credential_of(body)
    challenge = await _take_challenge(services, credential, "add")
    if challenge is None or challenge["person_id"] != me.id:
        raise bad_request(CHALLENGE_GONE)
    verified = _verify_registration(services, credential, challenge)
    count = len(await services.store.credentials.list_for(me.id))
    new = _new_credential(services, verified, me.id, credential, _name(services, body, count))
    try:
        return await services.store.credentials.add(new)
    except Conflict:
        raise Problem(409, "this passkey is already registered") from None


async def delete_own(
    services: Services, principal: Principal | None, credential_id: str
) -> PasskeyCredential:
    me = _signed_in_person(principal)
    found = await services.store.credentials.get(credential_id)
    if found is None or found["person_id"] != me.id:
        raise not_found("passkey not found")
    deleted = await services.store.credentials.delete(
        me.id, credential_id, services.clock.now_ms()
    )  # and its sessions
    if deleted is None:
        raise not_found("passkey not found")
    if deleted is False:
        raise bad_request("cannot delete your last passkey")
    return found
