"""CIBA backchannel authentication requests (OpenID CIBA Core 1.0 with RFC 9396 Rich Authorization
Requests, D16): parsing `/bc-authorize` after client authentication, turning its one
`grantd_command` into the grant-create body grantd.services.grant_requests.parse_request accepts, and the
rule for ping notification endpoints. Wired by grantd.oauth.ciba_flow (/bc-authorize, the /token grant)
and grantd.oauth.ciba_ping (docs/protocols.md).

Every refusal is an OAuthError with CIBA's or RFC 6749's code and a description:
`invalid_request`, `invalid_scope`, `invalid_binding_message`, `invalid_authorization_details`
(RFC 9396 §5), `unknown_user_id` is the wiring's (who may decide is the store's answer).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from grantd.core.display import is_hidden
from grantd.core.errors import Problem
from grantd.core.fields import is_email
from grantd.oauth.errors import OAuthError, invalid_request
from grantd.services.ciba_pings import notification_allowed
from grantd.services.clients import public_address

if TYPE_CHECKING:
    from grantd.core.principals import Principal
    from grantd.services.context import Services

GRANT_TYPE = "urn:openid:params:grant-type:ciba"
DETAIL_TYPE = "grantd_command"
MAX_BINDING_MESSAGE = 64
MAX_HINT = 255
MAX_REQUESTED_EXPIRY = 3600
MAX_DETAILS_BYTES = 16 * 1024
# The members of a grantd_command detail (RFC 9396 common members and ours); anything else is refused.
DETAIL_MEMBERS = frozenset(
    {"type", "locations", "actions", "command", "run_as", "audience", "grant_type", "duration", "reason"}
)
_SINGLE = (
    "scope",
    "client_notification_token",
    "acr_values",
    "login_hint_token",
    "id_token_hint",
    "login_hint",
    "binding_message",
    "user_code",
    "requested_expiry",
    "authorization_details",
    "request",
)


def invalid_details(description: str) -> OAuthError:
    return OAuthError("invalid_authorization_details", description)


@dataclass(frozen=True)
class LoginHint:
    """Who is asked: a person (`email`), a group (`group`, its id) or the approval policies (`policy`)."""

    kind: str  # "email" | "group" | "policy" | "login_hint_token" | "id_token_hint"
    value: str


@dataclass(frozen=True)
class CibaRequest:
    scopes: frozenset[str]
    hint: LoginHint
    binding_message: str | None
    requested_expiry: int | None
    client_notification_token: str | None
    grant_body: dict[str, Any]  # the grant-create body (grantd.services.grant_requests.parse_request's input)
    details: list[dict[str, Any]] = field(default_factory=list)  # as requested, for the token answer
    policy_id: str | None = None  # the policy that reviews it (an MCP resource's grant scope names one)


def _one(params: Mapping[str, Any], name: str) -> str | None:
    value = params.get(name)
    if name == "authorization_details" and (
        isinstance(value, dict) or (isinstance(value, list) and not all(isinstance(v, str) for v in value))
    ):
        return json.dumps(value)  # a JSON body carries it as JSON already (a form: one string)
    if isinstance(value, list):
        if len(value) != 1:
            raise invalid_request(f"{name} must be given once")
        value = value[0]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise invalid_request(f"{name} must be a string")
    return str(value)


def _hint(params: Mapping[str, Any]) -> LoginHint:
    given = [(name, _one(params, name)) for name in ("login_hint", "login_hint_token", "id_token_hint")]
    present = [(name, value) for name, value in given if value is not None]
    if len(present) != 1:
        raise invalid_request(
            "exactly one of login_hint, login_hint_token and id_token_hint is required"
            + (f" ({len(present)} given)" if present else "")
        )
    name, value = present[0]
    if not value or len(value) > (MAX_HINT if name == "login_hint" else 8192) or not value.isprintable():
        raise invalid_request(f"{name} must be a non-empty printable string")
    if name != "login_hint":
        return LoginHint(name, value)
    if value == "policy":
        return LoginHint("policy", "policy")
    if value.startswith("group:"):
        group = value.removeprefix("group:")
        if not group or any(c.isspace() for c in group):
            raise invalid_request("login_hint group:<id> needs a group id")
        return LoginHint("group", group)
    if is_email(value):
        return LoginHint("email", value)
    raise invalid_request("login_hint must be a person's e-mail, group:<id> or policy")


def check_binding_message(value: str | None) -> str | None:
    """At most 64 characters, each shown as itself: no control, format, default-ignorable or
    invisible characters (grantd.core.display's tables, the rule the pages and TUI show text by)."""
    if value is None:
        return None
    if not value.strip():
        raise OAuthError("invalid_binding_message", "binding_message must not be empty")
    if len(value) > MAX_BINDING_MESSAGE:
        raise OAuthError(
            "invalid_binding_message", f"binding_message is longer than {MAX_BINDING_MESSAGE} characters"
        )
    hidden = next((c for c in value if is_hidden(c)), None)
    if hidden is not None:
        raise OAuthError(
            "invalid_binding_message",
            f"binding_message holds a character that does not show as itself (U+{ord(hidden):04X})",
        )
    return value


def _expiry(params: Mapping[str, Any]) -> int | None:
    raw = _one(params, "requested_expiry")
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 6:
        raise invalid_request("requested_expiry must be a positive integer (seconds)")
    seconds = int(raw)
    if not 1 <= seconds <= MAX_REQUESTED_EXPIRY:
        raise invalid_request(f"requested_expiry must be between 1 and {MAX_REQUESTED_EXPIRY} seconds")
    return seconds


def _details(params: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    raw = _one(params, "authorization_details")
    if raw is None:
        raise invalid_details("authorization_details with one grantd_command is required")
    if len(raw) > MAX_DETAILS_BYTES:
        raise invalid_details("authorization_details is larger than 16 KiB")
    try:
        details = json.loads(raw)
    except ValueError:
        raise invalid_details("authorization_details is not JSON") from None
    if not isinstance(details, list) or not details or not all(isinstance(d, dict) for d in details):
        raise invalid_details("authorization_details must be a JSON array of objects")
    if any(not isinstance(d.get("type"), str) for d in details):
        raise invalid_details("every authorization detail needs a type")
    unknown = sorted({d["type"] for d in details} - {DETAIL_TYPE})
    if unknown:
        raise invalid_details(
            f"unknown authorization detail type {unknown[0][:60]!r} (grantd knows {DETAIL_TYPE})"
        )
    if len(details) != 1:
        raise invalid_details(f"exactly one {DETAIL_TYPE} per request")
    detail = details[0]
    extra = sorted(set(detail) - DETAIL_MEMBERS)
    if extra:
        raise invalid_details(f"{DETAIL_TYPE} has unknown members: {', '.join(extra)[:100]}")
    locations = detail.get("locations")
    if not isinstance(locations, list) or len(locations) != 1 or not isinstance(locations[0], str):
        raise invalid_details(f"{DETAIL_TYPE}.locations must be [host]: one target host")
    if detail.get("actions") != ["execute"]:
        raise invalid_details(f'{DETAIL_TYPE}.actions must be ["execute"]')
    if "command" not in detail:
        raise invalid_details(f"{DETAIL_TYPE}.command is required")
    for name in ("audience", "grant_type"):
        if name not in detail:
            raise invalid_details(f"{DETAIL_TYPE}.{name} is required")
    body: dict[str, Any] = {"target_host": locations[0]}
    for name in ("command", "run_as", "audience", "grant_type", "duration", "reason"):
        if name in detail:
            body[name] = detail[
                name
            ]  # validated by grantd.services.grant_requests.parse_request, the one rule
    return details, body


DetailsParser = Callable[[Mapping[str, Any], frozenset[str]], tuple[list[dict[str, Any]], dict[str, Any]]]


def parse_bc_authorize(
    params: Mapping[str, Any], *, ping: bool = False, details: DetailsParser | None = None
) -> CibaRequest:
    """The `/bc-authorize` parameters (form or JSON) of an authenticated client. ``ping``: the client
    is registered for ping mode (then `client_notification_token` is required). ``details``: reads
    the authorization details and scopes into (details, grant body); default one grantd_command."""
    if not isinstance(params, Mapping):
        raise invalid_request("the request must be a form or a JSON object")
    for name in _SINGLE:
        _one(params, name)
    if _one(params, "request") is not None:
        raise OAuthError(
            "request_not_supported", "signed authentication requests (request) are not supported"
        )
    scope = _one(params, "scope")
    scopes = frozenset((scope or "").split())
    if "openid" not in scopes:
        raise OAuthError("invalid_scope", "scope must hold openid")
    hint = _hint(params)
    if _one(params, "user_code") is not None:
        raise invalid_request("user_code is not supported")
    token = _one(params, "client_notification_token")
    if ping and not token:
        raise invalid_request("client_notification_token is required in ping mode")
    if token is not None and (
        not token or len(token) > 1024 or not token.isascii() or not token.isprintable() or " " in token
    ):
        raise invalid_request(
            "client_notification_token must be a bearer token (at most 1024 ASCII characters)"
        )
    binding = check_binding_message(_one(params, "binding_message"))
    expiry = _expiry(params)
    details_, body = details(params, scopes) if details is not None else _details(params)
    if binding is not None:
        body["binding_message"] = binding
    return CibaRequest(
        scopes=scopes,
        hint=hint,
        binding_message=binding,
        requested_expiry=expiry,
        client_notification_token=token if ping else None,
        grant_body=body,
        details=details_,
    )


async def grant_request(
    services: Services, principal: Principal, request: CibaRequest
) -> tuple[dict[str, Any], str]:
    """The stored grant request (and its requester id) of a CIBA request: through
    grantd.services.grant_requests.parse_request, the one validation of grants; its field errors become
    `invalid_authorization_details` naming the member."""
    from grantd.services.grant_requests import parse_request

    body = {k: v for k, v in request.grant_body.items() if k != "binding_message"}
    try:
        stored, requester_id = await parse_request(services, principal, body)
    except Problem as problem:
        if problem.status != 400:
            raise
        name = problem.extra.get("field")
        where = {"target_host": "locations"}.get(str(name), name)
        raise invalid_details(
            f"{DETAIL_TYPE}.{where}: {problem.detail}" if where else problem.detail
        ) from None
    if request.binding_message is not None:
        stored["binding_message"] = request.binding_message
    return stored, requester_id


# -- ping notification endpoints ------------------------------------------------------------------------


def check_notification_endpoint(url: object, allow: Sequence[str] = ()) -> str:
    """A ping endpoint: https to a public address, unless `[ciba] notification_allow` (CIDRs or URL
    prefixes, which also allow http) covers it. A host name passes here and is checked again at every
    delivery by the SSRF guard (its addresses, pinned); an address literal is judged now by the
    guard's own rule (grantd.services.clients.public_address). ValueError says why not."""
    if (
        not isinstance(url, str)
        or not url
        or len(url) > 2048
        or not url.isascii()
        or not url.isprintable()
        or " " in url
    ):
        raise ValueError("notification_endpoint must be an absolute URL")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http") or not parts.hostname:
        raise ValueError("notification_endpoint must be an absolute https URL")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError("notification_endpoint must not carry a user name or password")
    if parts.fragment or "#" in url:
        raise ValueError("notification_endpoint must not carry a fragment")
    try:
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError:
        raise ValueError("notification_endpoint has a bad port") from None
    host = parts.hostname.lower().rstrip(".")
    if notification_allowed(url, host, allow):
        return url
    if scheme != "https":
        raise ValueError("notification_endpoint must use https (or be under [ciba] notification_allow)")
    try:
        ipaddress.ip_address(host)
        literal = True
    except ValueError:
        literal = False
    if literal and not public_address(host):
        raise ValueError("notification_endpoint is not a public address (or under [ciba] notification_allow)")
    if not literal and all(re.fullmatch(r"0x[0-9a-f]*|[0-9]+", label) for label in host.split(".")):
        raise ValueError("notification_endpoint names an address in a non-canonical form")
    if not literal and (
        host == "localhost"
        or host.endswith((".localhost", ".local", ".internal", ".arpa"))
        or "." not in host
    ):
        raise ValueError(
            "notification_endpoint names a local host (or is not under [ciba] notification_allow)"
        )
    return url


__all__ = [
    "DETAIL_TYPE",
    "GRANT_TYPE",
    "CibaRequest",
    "LoginHint",
    "check_binding_message",
    "check_notification_endpoint",
    "grant_request",
    "invalid_details",
    "parse_bc_authorize",
]
