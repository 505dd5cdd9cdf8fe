"""The OpenAPI 3.1 description of grantd's HTTP interface, served at ``GET /openapi.json``.

The document is built from one table, ``OPERATIONS``: one ``Op`` per route (method + path), with
its request (path, query and header parameters, JSON body schema), its success answers and the
error statuses it may give beyond those every operation of its kind gives. Adding a route is one
``Op(...)`` line (and, for a new shape, a schema in ``SCHEMAS``); tests/test_openapi.py fails while
a route of the app is missing here (browser pages are exempt there, /api/ routes never are), and
tests/test_schemathesis.py drives the document against a real server.

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

import re
from dataclasses import dataclass, field
from typing import Any

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

import grantd
from grantd.services.sessions import SESSION_COOKIE
from grantd.web.api.common import services_of
from grantd.web.openapi_schemas import (  # noqa: F401 - FORM: part of this module's API, as before the split
    ANY_OBJECT,
    EMAIL,
    FORM,
    GRANT_STATUS,
    INT,
    JSON,
    PROBLEM_JSON,
    SCHEMAS,
    STRING,
    Schema,
    array,
    nullable,
    obj,
    page_of,
    ref,
)

bp = Blueprint("openapi")

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

OPERATIONS: tuple[Op, ...] = (
    # health and discovery
    Op(
        "GET", "/healthz", "health.healthz", "The process is alive", ok={200: Ok(ref("Status"))}, tag="health"
    ),
    Op(
        "GET",
        "/readyz",
        "health.readyz",
        "The database answers",
        ok={200: Ok(ref("Status"))},
        errors=(503,),
        tag="health",
    ),
    Op(
        "GET",
        "/openapi.json",
        "openapi.document",
        "This document",
        ok={200: Ok(ANY_OBJECT, headers=("Cache-Control",))},
        tag="discovery",
    ),
    Op(
        "GET",
        "/metrics",
        "metrics.metrics",
        "Prometheus metrics (404 unless [metrics] enabled)",
        METRICS,
        ok={200: Ok({"type": "string"}, "Prometheus text exposition format", media="text/plain")},
        errors=(404,),
        tag="health",
    ),
    Op(
        "GET",
        "/.well-known/jwks.json",
        "wellknown.jwks",
        "Public keys that verify grantd's JWTs",
        ok={200: Ok(ref("Jwks"), headers=("Cache-Control",))},
        tag="discovery",
    ),
    Op(
        "GET",
        "/.well-known/openid-configuration",
        "wellknown.openid_configuration",
        "OpenID discovery (with DDISA members)",
        ok={200: Ok(ref("OpenIdConfiguration"))},
        tag="discovery",
    ),
    Op(
        "GET",
        "/api/federation/providers",
        "federation.providers",
        "Upstream identity providers (no secrets)",
        ok={200: Ok(ref("FederationProviders"))},
        tag="discovery",
    ),
    # federated sign-in (docs/federation.md): browser redirects; failures are HTML pages for the person
    Op(
        "GET",
        "/auth/federated/{provider_id}",
        "federation.start",
        "Start signing in through an upstream provider",
        query=("next",),
        ok={
            302: Ok(
                None,
                "To the upstream's sign-in page (and the browser-binding cookie)",
                headers=("Location", "Set-Cookie"),
            )
        },
        errors=(429, 503),
        error_media="text/html",
        tag="federation",
    ),
    Op(
        "GET",
        "/auth/federated/{provider_id}/callback",
        "federation.callback",
        "The upstream's redirect back: verifies its answer, signs the person in, 303 to next",
        query=("sp_code", "sp_state", "sp_error", "sp_error_description"),
        ok={303: Ok(None, "Signed in: to the page asked for", headers=("Location", "Set-Cookie"))},
        errors=(400, 403, 503),
        error_media="text/html",
        tag="federation",
    ),
    # agents
    Op(
        "POST",
        "/api/agent/enroll",
        "agents.enroll",
        "Enrol an agent (admin, or a person for themselves)",
        BEARER,
        "Enrolment",
        ok={201: Ok(ref("Agent"), "Created")},
        errors=(409,),
        tag="agents",
    ),
    Op(
        "POST",
        "/api/auth/enroll",
        "agents.enroll_alias",
        "Alias of /api/agent/enroll",
        BEARER,
        "Enrolment",
        ok={201: Ok(ref("Agent"), "Created")},
        errors=(409,),
        tag="agents",
    ),
    Op(
        "POST",
        "/api/agent/challenge",
        "agents.challenge",
        "A 64-hex challenge (60 s, single use)",
        NONE,
        "AgentIdent",
        ok={200: Ok(ref("Challenge"))},
        errors=(403, 404, 429),
        tag="agents",
    ),
    Op(
        "POST",
        "/api/auth/challenge",
        "agents.challenge_alias",
        "Alias of /api/agent/challenge",
        NONE,
        "AgentIdent",
        ok={200: Ok(ref("Challenge"))},
        errors=(403, 404, 429),
        tag="agents",
    ),
    Op(
        "POST",
        "/api/agent/authenticate",
        "agents.authenticate",
        "Trade a signed challenge for an identity token",
        NONE,
        "Authenticate",
        ok={200: Ok(ref("IdentityToken"))},
        errors=(401, 403, 404, 429),
        tag="agents",
    ),
    Op(
        "POST",
        "/api/auth/authenticate",
        "agents.authenticate_alias",
        "Alias of /api/agent/authenticate",
        NONE,
        "Authenticate",
        ok={200: Ok(ref("IdentityToken"))},
        errors=(401, 403, 404, 429),
        tag="agents",
    ),
    Op("GET", "/api/me", "agents.me", "Who the credential is", BEARER, ok={200: Ok(ref("Me"))}, tag="agents"),
    Op(
        "GET",
        "/api/admin/agents",
        "admin.list_agents",
        "List agents",
        BEARER,
        query=PAGE,
        ok={200: Ok(page_of("AgentAdmin"))},
        tag="admin",
    ),
    Op(
        "POST",
        "/api/admin/agents",
        "admin.create_agent",
        "Create an agent",
        BEARER,
        "Enrolment",
        ok={201: Ok(ref("AgentAdmin"), "Created")},
        errors=(409,),
        tag="admin",
    ),
    Op(
        "GET",
        "/api/admin/agents/{ident}",
        "admin.get_agent",
        "One agent (agent_id or e-mail)",
        BEARER,
        ok={200: Ok(ref("AgentAdmin"))},
        tag="admin",
    ),
    Op(
        "PUT",
        "/api/admin/agents/{ident}",
        "admin.update_agent",
        "Change an agent",
        BEARER,
        "AgentUpdate",
        ok={200: Ok(ref("AgentAdmin"))},
        errors=(409,),
        tag="admin",
    ),
    Op(
        "DELETE",
        "/api/admin/agents/{ident}",
        "admin.delete_agent",
        "Delete an agent (revokes its grants)",
        BEARER,
        ok={200: Ok(ref("AgentDeleted"))},
        tag="admin",
    ),
    # people (admin API)
    Op(
        "GET",
        "/api/admin/users",
        "people_admin.list_users",
        "List people",
        BEARER,
        query=PAGE,
        ok={200: Ok(page_of("Person"))},
        tag="people",
    ),
    Op(
        "POST",
        "/api/admin/users",
        "people_admin.create_user",
        "Create a person",
        BEARER,
        "PersonBody",
        ok={201: Ok(ref("PersonCreated"), "Created")},
        errors=(409,),
        tag="people",
    ),
    Op(
        "GET",
        "/api/admin/users/{ident}",
        "people_admin.get_user",
        "One person (person_id or e-mail)",
        BEARER,
        ok={200: Ok(ref("Person"))},
        tag="people",
    ),
    Op(
        "PATCH",
        "/api/admin/users/{ident}",
        "people_admin.update_user",
        "Change a person",
        BEARER,
        "PersonUpdate",
        ok={200: Ok(ref("Person"))},
        errors=(409,),
        tag="people",
    ),
    Op(
        "DELETE",
        "/api/admin/users/{ident}",
        "people_admin.delete_user",
        "Delete a person",
        BEARER,
        ok={200: Ok(ref("PersonDeleted"))},
        errors=(409,),
        tag="people",
    ),
    Op(
        "GET",
        "/api/admin/users/{ident}/credentials",
        "people_admin.user_credentials",
        "A person's passkeys",
        BEARER,
        ok={200: Ok(obj({"data": array(ref("AdminCredential"))}, ("data",)))},
        tag="people",
    ),
    Op(
        "GET",
        "/api/admin/sessions",
        "people_admin.list_sessions",
        "List sessions",
        BEARER,
        query=PAGE,
        ok={200: Ok(page_of("Session"))},
        tag="people",
    ),
    Op(
        "DELETE",
        "/api/admin/sessions/{family_id}",
        "people_admin.revoke_family",
        "End a session family",
        BEARER,
        ok={200: Ok(ref("SessionsRevoked"))},
        tag="people",
    ),
    Op(
        "DELETE",
        "/api/admin/sessions/user/{ident}",
        "people_admin.revoke_user_sessions",
        "End a person's sessions",
        BEARER,
        ok={200: Ok(ref("SessionsRevoked"))},
        tag="people",
    ),
    Op(
        "GET",
        "/api/admin/registration-urls",
        "people_admin.list_registration_urls",
        "List registration URLs",
        BEARER,
        query=PAGE,
        ok={200: Ok(page_of("RegistrationUrl"))},
        tag="people",
    ),
    Op(
        "POST",
        "/api/admin/registration-urls",
        "people_admin.create_registration_url",
        "Create a registration URL",
        BEARER,
        "RegistrationBody",
        ok={201: Ok(ref("RegistrationCreated"), "Created")},
        errors=(409,),
        tag="people",
    ),
    Op(
        "DELETE",
        "/api/admin/registration-urls/{ident}",
        "people_admin.delete_registration_url",
        "Delete a registration URL (id or token)",
        BEARER,
        ok={200: Ok(ref("Deleted"))},
        tag="people",
    ),
    # grants
    Op(
        "POST",
        "/api/grants",
        "grants.create",
        "Ask for a grant",
        OPTIONAL,
        "GrantRequestBody",
        ok={
            201: Ok(ref("GrantCreated"), "Created"),
            200: Ok(ref("GrantCreated"), "An approved timed/always grant reused"),
        },
        errors=(404,),
        tag="grants",
    ),
    Op(
        "GET",
        "/api/grants",
        "grants.list_grants",
        "List grants, newest first",
        BEARER,
        query=("status", "requester", *PAGE),
        ok={200: Ok(page_of("Grant"))},
        tag="grants",
    ),
    Op(
        "GET",
        "/api/grants/events",
        "grants.events",
        "Server-Sent Events of grant changes",
        BEARER,
        query=("last_event_id",),
        headers=("Last-Event-ID",),
        ok={
            200: Ok(
                {
                    "type": "string",
                    "description": "`id:`, `event:` (grant.created|approved|denied|revoked|consumed|"
                    "expired, or reset) and `data:` lines",
                },
                "An event stream",
                media="text/event-stream",
            )
        },
        errors=(503,),
        tag="grants",
    ),
    Op(
        "GET",
        GRANT_ID,
        "grants.get_grant",
        "One grant (ETag; If-None-Match gives 304)",
        BEARER,
        headers=("If-None-Match",),
        ok={200: Ok(ref("Grant"), headers=("ETag",)), 304: Ok(None, "Not Modified", headers=("ETag",))},
        tag="grants",
    ),
    Op(
        "POST",
        GRANT_ID + "/approve",
        "grants.approve",
        "Approve a pending grant (a vote: D13)",
        BEARER,
        "DecisionBody",
        False,
        ok={200: Ok(ref("Decision"))},
        errors=(409,),
        tag="grants",
    ),
    Op(
        "POST",
        GRANT_ID + "/deny",
        "grants.deny",
        "Deny a pending grant (a vote: D13)",
        BEARER,
        "DecisionBody",
        False,
        ok={200: Ok(ref("Decision"))},
        errors=(409,),
        tag="grants",
    ),
    Op(
        "GET",
        GRANT_ID + "/reviewers",
        "grants.reviewers",
        "Who may still approve a grant, per requirement (D13)",
        BEARER,
        ok={200: Ok(ref("Reviewers"))},
        tag="grants",
    ),
    Op(
        "POST",
        "/api/policies/evaluate",
        "grants.evaluate_policies",
        "What the approval policies would do with a grant request; creates nothing (administrators)",
        BEARER,
        "PolicyEvaluateBody",
        ok={200: Ok(ref("PolicyEvaluation"))},
        tag="grants",
    ),
    Op(
        "POST",
        GRANT_ID + "/review",
        "grants.review",
        "Vote on a pending grant (approve or deny; D13)",
        BEARER,
        "ReviewBody",
        ok={200: Ok(ref("Decision"))},
        errors=(409,),
        tag="grants",
    ),
    Op(
        "POST",
        GRANT_ID + "/revoke",
        "grants.revoke",
        "Revoke an approved grant or withdraw a pending one",
        BEARER,
        "DecisionBody",
        False,
        ok={200: Ok(ref("Decision"))},
        tag="grants",
    ),
    Op(
        "POST",
        GRANT_ID + "/token",
        "grants.token",
        "A fresh AuthZ-JWT for an approved grant (the requester)",
        BEARER,
        "DecisionBody",
        False,
        ok={200: Ok(ref("GrantToken"))},
        tag="grants",
    ),
    Op(
        "POST",
        GRANT_ID + "/consume",
        "grants.consume",
        "Use the grant (the target host, with its AuthZ-JWT)",
        AUTHZ,
        "DecisionBody",
        False,
        ok={200: Ok(ref("Consumed"))},
        tag="grants",
    ),
    Op(
        "POST",
        "/api/grants/verify",
        "grants.verify",
        "Check an AuthZ-JWT without side effects",
        NONE,
        "VerifyBody",
        ok={200: Ok(ref("Verified"))},
        errors=(429,),
        tag="grants",
    ),  # D2: the body is required
    Op(
        "POST",
        "/api/grants/batch",
        "grants.batch",
        "Approve, deny or revoke many grants",
        BEARER,
        "BatchBody",
        ok={200: Ok(ref("BatchResult"))},
        tag="grants",
    ),
    # the decision log (D14)
    Op(
        "GET",
        "/api/audit/checkpoint",
        "audit.checkpoint",
        "The newest signed checkpoint (C2SP tlog-checkpoint note)",
        NONE,
        ok={200: Ok({"type": "string"}, "A signed note", media="text/plain")},
        errors=(503,),
        tag="audit",
    ),
    Op(
        "GET",
        "/api/audit/key",
        "audit.key",
        "The log's verifier keys (vkeys), old ones too",
        NONE,
        ok={200: Ok({"type": "string"}, "One vkey per line", media="text/plain")},
        tag="audit",
    ),
    Op(
        "GET",
        "/api/audit/entries",
        "audit.entries",
        "Leaves start..end (administrators, auditors)",
        BEARER,
        query=("start", "end"),
        ok={200: Ok(ref("AuditEntries"))},
        tag="audit",
    ),
    Op(
        "GET",
        "/api/audit/proof/inclusion",
        "audit.inclusion",
        "RFC 9162 inclusion proof",
        BEARER,
        query=("index", "size"),
        ok={200: Ok(ref("InclusionProof"))},
        tag="audit",
    ),
    Op(
        "GET",
        "/api/audit/proof/consistency",
        "audit.consistency",
        "RFC 9162 consistency proof",
        BEARER,
        query=("from", "to"),
        ok={200: Ok(ref("ConsistencyProof"))},
        tag="audit",
    ),
    Op(
        "GET",
        "/api/audit/grants/{grant_id}",
        "audit.grant",
        "A grant's leaves with proofs (an agent: its own)",
        BEARER,
        ok={200: Ok(ref("GrantAudit"))},
        tag="audit",
    ),
    Op(
        "POST",
        "/api/audit/receipts",
        "audit.receipts",
        "A target host's signed receipt (once)",
        NONE,
        "ReceiptBody",
        ok={
            201: Ok(ref("ReceiptResult"), "Created"),
            200: Ok(ref("ReceiptResult"), "A repeat: nothing added"),
        },
        errors=(401, 403),
        tag="audit",
    ),
    Op(
        "POST",
        "/api/hosts",
        "audit.hosts",
        "Enrol a target host's receipt key (administrators)",
        BEARER,
        "HostBody",
        ok={201: Ok(ref("Host"), "Created")},
        errors=(409,),
        tag="audit",
    ),
    # delegations
    Op(
        "POST",
        "/api/delegations",
        "delegations.create",
        "Pre-approve a delegate's requests (people only)",
        BEARER,
        "DelegationBody",
        ok={201: Ok(ref("Delegation"), "Created")},
        errors=(409,),
        tag="delegations",
    ),
    Op(
        "GET",
        "/api/delegations",
        "delegations.list_delegations",
        "The caller's delegations",
        BEARER,
        query=PAGE,
        ok={200: Ok(page_of("Delegation"))},
        tag="delegations",
    ),
    Op(
        "DELETE",
        "/api/delegations/{delegation_id}",
        "delegations.delete",
        "Revoke a delegation",
        BEARER,
        ok={200: Ok(ref("Delegation"))},
        tag="delegations",
    ),
    Op(
        "POST",
        "/api/delegations/{delegation_id}/validate",
        "delegations.validate",
        "Does a delegation cover this?",
        BEARER,
        "DelegationCheck",
        False,
        ok={200: Ok(ref("DelegationValidity"))},
        tag="delegations",
    ),
    # people: passkeys and sessions
    Op(
        "POST",
        "/api/webauthn/register/options",
        "webauthn.register_options",
        "Creation options for a registration URL",
        NONE,
        "PasskeyResponse",
        ok={200: Ok(ref("WebAuthnOptions"), headers=("Set-Cookie",))},
        errors=(403, 404, 409),
        tag="passkeys",
    ),
    Op(
        "POST",
        "/api/webauthn/register/verify",
        "webauthn.register_verify",
        "Register the first passkey; signs in",
        NONE,
        "PasskeyResponse",
        ok={200: Ok(ref("SignedIn"), headers=("Set-Cookie",))},
        errors=(403, 404, 409, 429),
        tag="passkeys",
    ),
    Op(
        "POST",
        "/api/webauthn/login/options",
        "webauthn.login_options",
        "Request options (by e-mail or discoverable)",
        NONE,
        "PasskeyResponse",
        False,
        ok={200: Ok(ref("WebAuthnOptions"), headers=("Set-Cookie",))},
        errors=(403, 404, 429),
        tag="passkeys",
    ),
    Op(
        "POST",
        "/api/webauthn/login/verify",
        "webauthn.login_verify",
        "Sign in with a passkey",
        NONE,
        "PasskeyResponse",
        ok={200: Ok(ref("SignedIn"), headers=("Set-Cookie",))},
        errors=(401, 403, 429),
        tag="passkeys",
    ),
    Op(
        "GET",
        "/api/webauthn/credentials",
        "webauthn.list_credentials",
        "The signed-in person's passkeys",
        PERSON,
        ok={200: Ok(obj({"data": array(ref("PasskeyCredential"))}, ("data",)))},
        tag="passkeys",
    ),
    Op(
        "POST",
        "/api/webauthn/credentials/add/reauth",
        "webauthn.add_reauth",
        "Request options (user verification required) to confirm with one of your passkeys before adding one",
        PERSON,
        ok={200: Ok(ref("WebAuthnOptions"))},
        errors=(409,),
        tag="passkeys",
    ),
    Op(
        "POST",
        "/api/webauthn/credentials/add/options",
        "webauthn.add_options",
        "Creation options for another passkey, for a fresh user-verified assertion (`response`) of add/reauth's options",
        PERSON,
        "PasskeyResponse",
        ok={200: Ok(ref("WebAuthnOptions"))},
        tag="passkeys",
    ),
    Op(
        "POST",
        "/api/webauthn/credentials/add/verify",
        "webauthn.add_verify",
        "Add another passkey",
        PERSON,
        "PasskeyResponse",
        ok={201: Ok(obj({"credential": ref("PasskeyCredential")}, ("credential",)), "Created")},
        errors=(409,),
        tag="passkeys",
    ),
    Op(
        "DELETE",
        "/api/webauthn/credentials/{credential_id}",
        "webauthn.delete_credential",
        "Delete one of your passkeys",
        PERSON,
        ok={200: Ok(obj({"deleted": ref("PasskeyCredential")}, ("deleted",)))},
        tag="passkeys",
    ),
    # OAuth 2.0 / OpenID Connect (D9, docs/oauth.md)
    Op(
        "GET",
        "/authorize",
        "oauth.authorize",
        "Authorization endpoint (code + PKCE S256)",
        NONE,
        query=(
            "response_type",
            "client_id",
            "redirect_uri",
            "scope",
            "state",
            "nonce",
            "code_challenge",
            "code_challenge_method",
            "prompt",
            "login_hint",
        ),
        ok={
            200: Ok(STRING, "The consent page", media="text/html"),
            302: Ok(None, "Back to the client's redirect URI with `code` or `error`, `state` and `iss`"),
            303: Ok(None, "Nobody signed in: to /login?next= (and back)"),
            400: Ok(
                STRING,
                "client_id or redirect_uri unusable: an error page, never a redirect",
                media="text/html",
            ),
        },
        errors=(413,),
        tag="oauth",
    ),
    Op(
        "POST",
        "/authorize/consent",
        "oauth.consent",
        "The consent page's answer (JSON; CSRF-safe, D8)",
        PERSON,
        "ConsentDecision",
        ok={200: Ok(ref("Location"))},
        errors=(400, 415),
        tag="oauth",
    ),
    Op(
        "POST",
        "/token",
        "oauth.token",
        "Token endpoint (authorization_code, refresh_token, client_credentials, device_code)",
        NONE,
        "TokenRequest",
        ok={200: Ok(ref("TokenResponse"), headers=("Cache-Control",))},
        errors=(400, 401),
        tag="oauth",
        form=True,
        error_shape="OAuthError",
    ),
    Op(
        "POST",
        "/revoke",
        "oauth.revoke",
        "Token revocation (RFC 7009): 200 for unknown tokens too",
        NONE,
        "RevokeRequest",
        ok={200: Ok(obj({}))},
        errors=(400, 401),
        tag="oauth",
        form=True,
        error_shape="OAuthError",
    ),
    Op(
        "GET",
        "/userinfo",
        "oauth.userinfo",
        "OIDC UserInfo (an access token of any client)",
        ACCESS,
        ok={200: Ok(ref("UserInfo"))},
        tag="oauth",
        error_shape="OAuthError",
    ),
    Op(
        "POST",
        "/userinfo",
        "oauth.userinfo_post",
        "OIDC UserInfo (POST; the token may be in the form body)",
        ACCESS,
        "UserInfoRequest",
        False,
        ok={200: Ok(ref("UserInfo"))},
        tag="oauth",
        form=True,
        error_shape="OAuthError",
    ),
    *(
        Op(
            "OPTIONS",
            path,
            f"oauth.{name}_preflight",
            "CORS preflight (any origin, no credentials)",
            ok={200: Ok(obj({}), headers=("Access-Control-Allow-Origin",))},
            tag="oauth",
        )
        for path, name in (("/token", "token"), ("/revoke", "revoke"), ("/userinfo", "userinfo"))
    ),
    Op(
        "GET",
        "/api/account/consents",
        "oauth.list_consents",
        "The signed-in person's remembered consents",
        PERSON,
        ok={200: Ok(obj({"data": array(ref("Consent"))}, ("data",)))},
        tag="oauth",
    ),
    Op(
        "DELETE",
        "/api/account/consents/{client_id}",
        "oauth.withdraw_consent",
        "Withdraw a consent (ends that client's refresh tokens of the person)",
        PERSON,
        ok={200: Ok(ref("ConsentWithdrawn"))},
        tag="oauth",
    ),
    Op(
        "GET",
        "/api/sessions",
        "webauthn.list_own_sessions",
        "The signed-in person's live sessions, newest first",
        PERSON,
        ok={200: Ok(obj({"data": array(ref("OwnSession"))}, ("data",)))},
        tag="passkeys",
    ),
    Op(
        "DELETE",
        "/api/sessions/{session_id}",
        "webauthn.end_own_session",
        "End one of your sessions (`id` from the list; this browser's or another's)",
        PERSON,
        ok={200: Ok(obj({"ended": STRING, "revoked": INT}, ("ended", "revoked")))},
        tag="passkeys",
    ),
    Op(
        "POST",
        "/api/logout",
        "webauthn.logout",
        "End the browser session",
        NONE,
        ok={200: Ok(ref("Ok"), headers=("Set-Cookie",))},
        tag="passkeys",
    ),
    # SP login (D9, docs/sp.md): 404 unless [sp] enabled
    Op(
        "POST",
        "/api/login",
        "sp.login",
        "Start SP login at the IdP the e-mail's domain names (DDISA)",
        NONE,
        "SpLogin",
        ok={200: Ok(obj({"redirectUrl": STRING}, ("redirectUrl",)), headers=("Set-Cookie",))},
        errors=(403, 404, 429, 503),
        tag="sp",
    ),
    Op(
        "GET",
        "/api/callback",
        "sp.callback",
        "The IdP's redirect back: signs a guest in, then 303 to the page (failures: 303 to /?error=)",
        NONE,
        query=("sp_code", "sp_state", "sp_error", "sp_error_description"),
        ok={
            303: Ok(
                None,
                "To the page the login started from, or /?error=<code> (a fixed code; the page shows its fixed message)",
                headers=("Set-Cookie",),
            )
        },
        errors=(404,),
        tag="sp",
    ),
    Op(
        "GET",
        "/.well-known/oauth-client-metadata",
        "sp.client_metadata_document",
        "This SP's OAuth client metadata",
        ok={200: Ok(ref("ClientMetadata"))},
        errors=(404,),
        tag="sp",
    ),
    Op(
        "GET",
        "/.well-known/auth.md",
        "sp.auth_md",
        "How to log in to this SP (Markdown)",
        ok={200: Ok(STRING, media="text/markdown")},
        errors=(404,),
        tag="sp",
    ),
    Op(
        "GET",
        "/.well-known/grantd.json",
        "sp.service_manifest",
        "The service manifest",
        ok={200: Ok(ref("ServiceManifest"))},
        errors=(404,),
        tag="sp",
    ),
    Op(
        "GET",
        "/.well-known/service.json",
        "sp.service_json",
        "The service manifest (the specification's name)",
        ok={200: Ok(ref("ServiceManifest"))},
        errors=(404,),
        tag="sp",
    ),
    # the device grant (RFC 8628; docs/device.md)
    Op(
        "POST",
        "/device_authorization",
        "device.device_authorization",
        "Start a device sign-in: a device code and the user code a person enters on /device (form or JSON body; "
        "errors are {error, error_description})",
        NONE,
        "DeviceAuthorizationRequest",
        ok={200: Ok(ref("DeviceAuthorization"), headers=("Cache-Control",))},
        errors=(400, 401, 429),
        tag="device",
        form=True,
        error_shape="OAuthError",
    ),
    Op(
        "GET",
        "/device",
        "device.device_page",
        "The page where a signed-in person enters and approves a user code "
        "(HTML; without a session: 303 to /login)",
        NONE,
        query=("user_code",),
        ok={
            200: Ok(STRING, "The page", media="text/html"),
            303: Ok(None, "To /login?next=", headers=("Location",)),
        },
        errors=(429,),
        error_media="text/html",
        tag="device",
    ),
    Op(
        "POST",
        "/api/device/decide",
        "device.decide",
        "Approve or deny a terminal's sign-in (a person's browser session only)",
        PERSON,
        "DeviceDecision",
        ok={200: Ok(ref("DeviceDecided"))},
        errors=(404, 409, 429),
        tag="device",
    ),
)

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
