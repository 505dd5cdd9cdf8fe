"""The vocabulary of grantd's OpenAPI document (``grantd.web.openapi``): schema helpers and common
shapes, the kinds of credential, ``Ok`` (a success answer) and ``Op`` (one route), and the
parameters and headers operations name. The schemas (``openapi_schemas*``) and the operations
(``openapi_operations*``) are tables written in it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

PROBLEM_JSON = "application/problem+json"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"

# -- schema helpers -------------------------------------------------------------------------------

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: dict[str, Schema], required: tuple[str, ...] = (), **extra: Any) -> Schema:
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    schema.update(extra)
    return schema


def nullable(schema: Schema) -> Schema:
    """``schema`` or null (JSON Schema 2020-12: a type list, or anyOf for a $ref)."""
    if "$ref" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    kind = schema["type"]
    return {**schema, "type": [*(kind if isinstance(kind, list) else [kind]), "null"]}


PARTY_STATE: Schema = {
    "type": "string",
    "enum": ["person", "disabled", "deleted", "administrator", "unregistered"],
    "description": "what the owner/approver e-mail stands for now (D11)",
}


def array(items: Schema, **extra: Any) -> Schema:
    return {"type": "array", "items": items, **extra}


def page_of(item: str) -> Schema:
    return obj({"data": array(ref(item)), "pagination": ref("Pagination")}, ("data", "pagination"))


STRING: Schema = {"type": "string"}
TEXT: Schema = {"type": "string", "minLength": 1, "maxLength": 255}
EMAIL: Schema = {"type": "string", "format": "email", "maxLength": 254}
MS: Schema = {"type": "integer", "description": "milliseconds since the Unix epoch"}
BOOL: Schema = {"type": "boolean"}
INT: Schema = {"type": "integer"}
GRANT_TYPE: Schema = {"type": "string", "enum": ["once", "timed", "always"]}
GRANT_STATUS: Schema = {
    "type": "string",
    "enum": ["pending", "approved", "denied", "revoked", "consumed", "expired"],
}
JWT: Schema = {"type": "string", "pattern": r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$"}
ANY_OBJECT: Schema = {"type": "object"}


# -- the operations -------------------------------------------------------------------------------

NONE, OPTIONAL, BEARER, AUTHZ, PERSON, METRICS = "none", "optional", "bearer", "authz", "person", "metrics"
ACCESS = "access"  # an OAuth access token of a person (/userinfo)
SECURITY: dict[str, list[dict[str, list[str]]]] = {
    NONE: [],
    METRICS: [{}, {"metricsToken": []}],  # the [metrics] token, when one is set
    OPTIONAL: [{}, {"managementToken": []}, {"agentToken": []}, {"session": []}],
    BEARER: [{"managementToken": []}, {"agentToken": []}, {"session": []}],
    AUTHZ: [{"authzJwt": []}],
    PERSON: [{"session": []}],
    ACCESS: [{"accessToken": []}],
}


@dataclass(frozen=True)
class Ok:
    """A success answer: its schema (None: no body) and media type."""

    schema: Schema | None
    description: str = "OK"
    media: str = JSON
    headers: tuple[str, ...] = ()  # names in HEADERS


@dataclass(frozen=True)
class Op:
    method: str
    path: str  # OpenAPI form: /api/grants/{grant_id}
    name: str  # the Sanic route name without the app prefix, e.g. "grants.create" (the operationId)
    summary: str
    auth: str = NONE
    body: str | None = None  # a schema name in SCHEMAS
    body_required: bool = True
    query: tuple[str, ...] = ()  # names in PARAMETERS
    headers: tuple[str, ...] = ()  # names in PARAMETERS
    ok: dict[int, Ok] = field(default_factory=dict)
    errors: tuple[int, ...] = ()  # beyond those derived from the operation's kind (module docstring)
    error_media: str = PROBLEM_JSON  # browser redirects (federated sign-in) answer errors as HTML pages
    tag: str = ""
    form: bool = False  # the body may also be application/x-www-form-urlencoded (OAuth endpoints, D9)
    error_shape: str = (
        "Problem"  # the schema of JSON errors: "OAuthError" for /token, /revoke, /userinfo (D2)
    )

    @property
    def path_params(self) -> list[str]:
        return re.findall(r"{(\w+)}", self.path)


PARAMETERS: dict[str, Schema] = {
    "limit": {
        "name": "limit",
        "in": "query",
        "description": "page size (default 20, larger values are clamped to 100)",
        "schema": {"type": "integer", "minimum": 1, "maximum": 100},
    },
    "cursor": {
        "name": "cursor",
        "in": "query",
        "description": "from `pagination.cursor` of the previous page",
        "schema": {"type": "string", "maxLength": 160},
    },
    "status": {
        "name": "status",
        "in": "query",
        "description": "grant state (`used` = consumed)",
        "schema": {"type": "string", "enum": [*GRANT_STATUS["enum"], "used"]},
    },
    "requester": {"name": "requester", "in": "query", "description": "requester's e-mail", "schema": EMAIL},
    "last_event_id": {
        "name": "last_event_id",
        "in": "query",
        "description": "as the Last-Event-ID header",
        "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"},
    },
    "sp_code": {
        "name": "code",
        "in": "query",
        "description": "the IdP's authorization code",
        "schema": STRING,
    },
    "sp_state": {"name": "state", "in": "query", "description": "the login's state", "schema": STRING},
    "sp_error": {
        "name": "error",
        "in": "query",
        "description": "the IdP's refusal (RFC 6749 §4.1.2.1)",
        "schema": STRING,
    },
    "sp_error_description": {"name": "error_description", "in": "query", "schema": STRING},
    "next": {
        "name": "next",
        "in": "query",
        "description": "a local path to land on afterwards (anything else: /grants)",
        "schema": STRING,
    },
    "user_code": {
        "name": "user_code",
        "in": "query",
        "description": "a device grant's user code, as typed (BCDF-GHJK)",
        "schema": {"type": "string", "maxLength": 64},
    },
    **{
        name: {
            "name": name,
            "in": "query",
            "description": text,
            "schema": {"type": "string", "maxLength": 2000},
        }
        for name, text in (
            ("response_type", "`code` (the only one)"),
            ("client_id", "the client (apes-cli, a configured client, or an SP's host[:port])"),
            ("redirect_uri", "exactly one of the client's registered URIs"),
            ("scope", "openid email profile offline_access"),
            ("state", "returned as it was"),
            ("nonce", "copied into the id_token"),
            ("code_challenge", "PKCE: base64url(SHA-256(code_verifier))"),
            ("code_challenge_method", "`S256` only"),
            ("prompt", "none, login or consent"),
            ("login_hint", "the e-mail of the person expected"),
        )
    },
    "If-None-Match": {
        "name": "If-None-Match",
        "in": "header",
        "description": "an ETag from an earlier answer: 304 if unchanged",
        "schema": STRING,
    },
    **{
        name: {
            "name": name,
            "in": "query",
            "required": name not in ("end",),
            "description": text,
            "schema": {"type": "string", "pattern": "^[0-9]{1,15}$"},
        }
        for name, text in (
            ("start", "first index (inclusive)"),
            ("end", "last index (exclusive; at most start + 1000)"),
            ("index", "the leaf's index"),
            ("size", "the tree size (at most the newest checkpoint's)"),
            ("from", "the older tree size"),
            ("to", "the newer tree size (at most the newest checkpoint's)"),
        )
    },
    "Last-Event-ID": {
        "name": "Last-Event-ID",
        "in": "header",
        "description": "resume after this event id (0: from the start)",
        "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"},
    },
}
HEADERS: dict[str, Schema] = {
    "ETag": {
        "description": "strong validator of the grant; changes on every change",
        "required": True,
        "schema": STRING,
    },
    "Retry-After": {
        "description": "seconds",
        "required": True,
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    },
    "WWW-Authenticate": {"description": "Bearer challenge", "required": True, "schema": STRING},
    "Set-Cookie": {
        "description": "the `grantd_session` cookie (HttpOnly, SameSite=Lax); passkey options also set "
        "`grantd_passkey` (HttpOnly, SameSite=Strict), the challenge's binding to this browser",
        "schema": STRING,
    },
    "Location": {"description": "where the browser goes next", "required": True, "schema": STRING},
    "Cache-Control": {"description": "caching", "schema": STRING},
    "Access-Control-Allow-Origin": {
        "description": "`*`: any web origin may call it (without credentials)",
        "schema": STRING,
    },
}

PAGE = ("limit", "cursor")
GRANT_ID = "/api/grants/{grant_id}"
