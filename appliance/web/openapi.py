"""The OpenAPI 3.1 description of grantd's HTTP interface, served at ``GET /openapi.json``.

The document is built from one table, ``OPERATIONS``: one ``Op`` per route (method + path), with
its request (path, query and header parameters, JSON body schema), its success answers and the
error statuses it may give beyond those every operation of its kind gives. Adding a route is one
``Op(...)`` line (and, for a new shape, a schema in ``SCHEMAS``); tests/server/test_openapi.py fails while
a route of the app is missing here (browser pages are exempt there, /api/ routes never are), and
tests/system/test_schemathesis.py drives the document against a real server.

Errors follow D2: ``application/problem+json`` ``{type, title, status, detail}`` plus extras
(``field`` naming a bad field, ``grant_status`` for a grant in the wrong state). The statuses each
operation documents are derived from its kind, so they stay consistent:

- every /api/ operation: 400 (malformed JSON, a bad field, a path value with control characters);
- an operation with a JSON body: 413 (body too large) and, for cookie sessions, 415 (not JSON);
- an authenticated one: 401 (no or a bad credential, with ``WWW-Authenticate``), 403 (a
  credential without the right; also a cross-site cookie request) and 429 (an address that had too
  many bearers refused, D12);
- an operation with a path identifier: 404.

Request bodies are JSON Schema 2020-12 (OpenAPI 3.1); they describe what a client should send, not
every spelling the server tolerates (aliases such as ``public_key`` are listed where documented).
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

import grantd
from grantd.services.sessions import SESSION_COOKIE
from grantd.web.api.common import services_of
from grantd.web.openapi_model import (  # noqa: F401 - Op, Ok and the helpers: this module's API as before the split
    FORM,
    HEADERS,
    JSON,
    METRICS,
    NONE,
    PARAMETERS,
    PROBLEM_JSON,
    SECURITY,
    STRING,
    Ok,
    Op,
    Schema,
    array,
    nullable,
    obj,
    page_of,
    ref,
)
from grantd.web.openapi_operations import OPERATIONS
from grantd.web.openapi_schemas import SCHEMAS

bp = Blueprint("openapi")


# -- building the document ------------------------------------------------------------------------

REASONS = {
    304: "Not Modified",
    400: "Bad request: malformed JSON, a bad field (`field` names it) or a grant in the wrong state (`grant_status`)",
    401: "No credential, or an invalid or expired one",
    403: "The credential does not allow this (or a cross-site cookie request)",
    404: "No such record (or not visible to the caller)",
    409: "Conflict with an existing record",
    413: "Request body too large",
    415: "A cookie-authenticated request whose body is not application/json",
    429: "Too many attempts: retry after `Retry-After` seconds (D12)",
    503: "Unavailable (database unreachable, or too many open streams): retry later",
}
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def error_statuses(op: Op) -> set[int]:
    """The problem statuses of ``op``: those of its kind (module docstring) and its own."""
    statuses = set(op.errors)
    if op.path.startswith("/api/"):
        statuses.add(400)
    if op.body is not None:
        statuses.add(413)
    if op.method in UNSAFE and op.path.startswith("/api/"):
        statuses.update({403, 415})  # a cookie session's state change: cross-site, or not JSON (D8)
    if op.auth == METRICS:
        statuses.add(401)
    elif op.auth != NONE:
        statuses.update({401, 403, 429})
    if op.path_params:
        statuses.add(404)
    return statuses


def _problem_response(status: int, shape: str = "Problem") -> Schema:
    media = (
        PROBLEM_JSON if shape == "Problem" else JSON
    )  # OAuth errors are plain JSON {error, error_description}
    answer: Schema = {"description": REASONS.get(status, "Error"), "content": {media: {"schema": ref(shape)}}}
    headers = {401: ["WWW-Authenticate"], 429: ["Retry-After"]}.get(status, [])
    if headers:
        answer["headers"] = {name: HEADERS[name] for name in headers}
    return answer


def _operation(op: Op) -> Schema:
    parameters: list[Schema] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
        }
        for name in op.path_params
    ]
    parameters += [PARAMETERS[name] for name in (*op.query, *op.headers)]
    responses: dict[str, Schema] = {}
    for status, ok in sorted(op.ok.items()):
        answer: Schema = {"description": ok.description}
        if ok.schema is not None:
            answer["content"] = {ok.media: {"schema": ok.schema}}
        if ok.headers:
            answer["headers"] = {name: HEADERS[name] for name in ok.headers}
        responses[str(status)] = answer
    for status in sorted(error_statuses(op)):
        responses[str(status)] = (
            _problem_response(status, op.error_shape)
            if op.error_media == PROBLEM_JSON
            else {
                "description": REASONS.get(status, "Error"),
                "content": {op.error_media: {"schema": STRING}},
            }
        )
    operation: Schema = {
        "operationId": op.name,
        "summary": op.summary,
        "tags": [op.tag] if op.tag else [],
        "security": SECURITY[op.auth],
        "responses": responses,
    }
    if parameters:
        operation["parameters"] = parameters
    if op.body is not None:
        content = {JSON: {"schema": ref(op.body)}}
        if op.form:
            content[FORM] = {"schema": ref(op.body)}
        operation["requestBody"] = {"required": op.body_required, "content": content}
    return operation


def build_document(issuer: str, operations: tuple[Op, ...] = OPERATIONS) -> dict[str, Any]:
    """The whole OpenAPI 3.1 document for a server whose issuer is ``issuer``."""
    paths: dict[str, dict[str, Schema]] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op)
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "grantd",
            "version": grantd.__version__,
            "summary": "Identity provider and human-in-the-loop grant service for AI agents",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "servers": [{"url": issuer}],
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "managementToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the management token (`[admin] management_token`)",
                },
                "agentToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "an agent identity token from /api/agent/authenticate (EdDSA JWT)",
                },
                "authzJwt": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "a grant's AuthZ-JWT (from approve or /api/grants/{id}/token)",
                },
                "accessToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "an OAuth access token of a person (from /token)",
                },
                "metricsToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the `[metrics] token` a scrape sends, when one is set",
                },
                "session": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": SESSION_COOKIE,
                    "description": "a person's browser session (signed in with a passkey)",
                },
            },
        },
    }


_DOCUMENTS: dict[str, dict[str, Any]] = {}


@bp.get("/openapi.json", name="document")
async def document(request: Request) -> HTTPResponse:
    """No credential needed: the interface is public, the data behind it is not."""
    issuer = services_of(request).issuer
    if issuer not in _DOCUMENTS:
        _DOCUMENTS[issuer] = build_document(issuer)
    return json(_DOCUMENTS[issuer], headers={"Cache-Control": "public, max-age=300"})
