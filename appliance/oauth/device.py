"""The device authorization grant (RFC 8628): a terminal (``grantd tui``, ``grantd login``) asks for a
code pair, a person approves the user code on ``/device`` in a browser where they are signed in,
and the terminal, polling ``/token``, receives the person's tokens.

- ``start``: ``POST /device_authorization``. The device code is ``secrets.token_urlsafe(32)``, stored
  only as its SHA-256 hex; the user code is 8 letters of ``BCDFGHJKLMNPQRSTVWXZ`` (no vowels, so
  no words; no digits, so nothing reads as a letter), 20^8 ≈ 2.6e10 codes, shown ``XXXX-XXXX``.
- ``lookup``/``decide``: the ``/device`` page and ``POST /api/device/decide`` (a signed-in person;
  the web layer rate-limits every user-code attempt per client address, RFC 8628 §5.1).
- ``exchange``: ``grant_type=urn:ietf:params:oauth:grant-type:device_code`` at ``/token``:
  ``authorization_pending`` until decided, ``slow_down`` when polled faster than the interval (the
  interval grows by 5 s, RFC 8628 §3.5), ``access_denied``, ``expired_token``, ``invalid_grant`` for
  an unknown code or another client's; an approved code is taken once (the store's single winner),
  then the tokens are issued for the person who approved it.

Administrator rights (D12, issue 19 item 7): a device token carries them only when the device asked
for the ``admin`` scope at ``/device_authorization`` — the /device page then says so, in the words
of what the device may do for the person approving — and the approving person is an administrator
(``grantd.core.principals.for_access_token``). Without it, an administrator who approves a phished
user code hands out a token that acts as them but cannot reach an admin route.
"""

from __future__ import annotations

import re
import secrets
from typing import TYPE_CHECKING, Any

from grantd.core import principals
from grantd.oauth.errors import OAuthError
from grantd.oauth.issue import issue_tokens, secret_hash
from grantd.store import Conflict
from grantd.store.records import DeviceCode

if TYPE_CHECKING:
    from grantd.services.context import Services

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:device_code"
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
USER_CODE_LENGTH = 8
SLOW_DOWN_STEP = 5  # seconds added to the interval on each slow_down (RFC 8628 §3.5)
ADMIN_SCOPE = principals.ADMIN_SCOPE  # D12: administrator rights, only when asked for and shown on /device
SUPPORTED_SCOPES = frozenset({"openid", "email", "profile", "offline_access", ADMIN_SCOPE})
DEFAULT_SCOPE = "openid email profile offline_access"  # never admin: a device asks for it explicitly
MAX_SCOPE_LENGTH = 1000
_DRAWS = 8  # user codes drawn before giving up on a collision (each one is ~1 in 2.6e10)
_SEPARATORS = re.compile(r"[\s\-‐-―−]+")


def new_user_code() -> str:
    return "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(USER_CODE_LENGTH))


def display_user_code(code: str) -> str:
    """``BCDFGHJK`` -> ``BCDF-GHJK`` (how people read and type it)."""
    half = USER_CODE_LENGTH // 2
    return f"{code[:half]}-{code[half:]}"


def normalize_user_code(typed: object) -> str | None:
    """What a person typed, as stored (8 upper-case letters of the alphabet), or None if it cannot
    be a user code: case, spaces and dashes do not matter."""
    if not isinstance(typed, str) or len(typed) > 64:
        return None
    code = _SEPARATORS.sub("", typed).upper()
    if len(code) != USER_CODE_LENGTH or any(c not in USER_CODE_ALPHABET for c in code):
        return None
    return code


def allows_device_grant(client: Any) -> bool:
    return GRANT_TYPE in tuple(getattr(client, "grant_types", ()) or ())


def requested_scope(scope: object) -> str:
    """The scope asked for (default: ``DEFAULT_SCOPE``); ``invalid_scope`` for anything grantd does not offer."""
    if scope is None or scope == "":
        return DEFAULT_SCOPE
    if not isinstance(scope, str) or len(scope) > MAX_SCOPE_LENGTH:
        raise OAuthError("invalid_scope", "scope must be a space-separated string")
    wanted = [s for s in scope.split(" ") if s]
    unknown = sorted(set(wanted) - SUPPORTED_SCOPES)
    if unknown:
        raise OAuthError("invalid_scope", f"unsupported scope: {' '.join(unknown)[:200]}")
    ordered = list(dict.fromkeys(wanted))
    return " ".join(ordered) if ordered else DEFAULT_SCOPE


def ttl_seconds(services: Services) -> int:
    return int(services.config.oauth.device_code_ttl)


def poll_interval(services: Services) -> int:
    return int(services.config.oauth.device_poll_interval)


async def start(services: Services, client: Any, scope: object, client_address: str | None) -> dict[str, Any]:
    """``POST /device_authorization`` for a known client: a new code pair (RFC 8628 §3.2). The
    client address is kept with the request: the /device page shows where it came from."""
    if not allows_device_grant(client):
        raise OAuthError("unauthorized_client", "this client may not use the device authorization grant")
    granted = requested_scope(scope)
    now = services.clock.now_ms()
    ttl = ttl_seconds(services)
    interval = poll_interval(services)
    device_code = secrets.token_urlsafe(32)
    for _ in range(_DRAWS):
        user_code = new_user_code()
        record = DeviceCode(
            device_code_hash=secret_hash(device_code),
            user_code=user_code,
            client_id=client.client_id,
            scope=granted,
            created_at=now,
            expires_at=now + ttl * 1000,
            interval=interval,
            last_polled_at=None,
            status="pending",
            person_id=None,
            decided_at=None,
            client_address=client_address,
        )
        try:
            await services.store.device_codes.create(record)
            break
        except Conflict as exc:
            if exc.field != "user_code":
                raise
    else:  # pragma: no cover - eight collisions in a space of 2.6e10
        raise OAuthError("slow_down", "no free user code; try again", status=503)
    shown = display_user_code(user_code)
    base = services.issuer.rstrip("/")
    return {
        "device_code": device_code,
        "user_code": shown,
        "verification_uri": f"{base}/device",
        "verification_uri_complete": f"{base}/device?user_code={shown}",
        "expires_in": ttl,
        "interval": interval,
    }


async def lookup(services: Services, typed: object) -> DeviceCode | None:
    """The unexpired request of a typed user code (any status), or None (malformed, unknown, expired)."""
    code = normalize_user_code(typed)
    if code is None:
        return None
    return await services.store.device_codes.get_by_user_code(code, services.clock.now_ms())


async def decide(services: Services, user_code: str, person_id: str, approved: bool) -> DeviceCode | None:
    """Approve or deny a pending request for ``person_id``; None if it is not pending (or expired)."""
    return await services.store.device_codes.decide(user_code, person_id, approved, services.clock.now_ms())


async def _slow_down(services: Services, record: DeviceCode, now: int) -> int:
    """Grow the request's stored interval by ``SLOW_DOWN_STEP``: every later poll must wait that long."""
    interval = int(record["interval"]) + SLOW_DOWN_STEP
    await services.store.device_codes.slow_down(record["device_code_hash"], interval, now)
    return interval


async def exchange(services: Services, client: Any, params: dict[str, str]) -> dict[str, Any]:
    """The device_code grant at ``/token`` (RFC 8628 §3.4–3.5); the token answer on approval."""
    if not allows_device_grant(client):
        raise OAuthError("unauthorized_client", "this client may not use the device authorization grant")
    device_code = params.get("device_code")
    if not isinstance(device_code, str) or not device_code or len(device_code) > 200:
        raise OAuthError("invalid_request", "device_code is required")
    now = services.clock.now_ms()
    key = secret_hash(device_code)
    record = await services.store.device_codes.poll(key, now)
    # Another client's code is answered like an unknown one: the client learns nothing about it.
    if record is None or not secrets.compare_digest(record["client_id"], client.client_id):
        raise OAuthError("invalid_grant", "unknown device_code")
    if record["expires_at"] <= now:
        raise OAuthError("expired_token", "the device code has expired; start again")
    if record["status"] == "denied":
        raise OAuthError("access_denied", "the person denied the request")
    last = record["last_polled_at"]
    if last is not None and now - last < int(record["interval"]) * 1000:
        interval = await _slow_down(services, record, now)
        raise OAuthError("slow_down", f"polling too fast; wait {interval} s between requests")
    if record["status"] != "approved":
        raise OAuthError("authorization_pending", "the person has not decided yet")
    taken = await services.store.device_codes.take(key, now)
    if taken is None or taken["person_id"] is None:
        raise OAuthError("invalid_grant", "the device code was already used")
    person = await services.store.people.get(taken["person_id"])
    if person is None or person.get("status", "active") != "active":
        raise OAuthError("invalid_grant", "the person who approved the request is no longer active")

    auth_time = int((taken["decided_at"] or now) // 1000)
    return await issue_tokens(services, client, person, scope=taken["scope"], nonce=None, auth_time=auth_time)
