"""The shapes of grantd's OpenAPI document (``grantd.web.openapi``): small schema helpers and
``SCHEMAS``, the named JSON Schemas (2020-12) of request bodies and answers that the operations
table refers to with ``ref(name)``. Split from the operations so each file reads as one table."""

from __future__ import annotations

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

SCHEMAS: dict[str, Schema] = {
    "Problem": obj(
        {
            "type": STRING,
            "title": STRING,
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "detail": STRING,
            "field": {"type": "string", "description": "the request field (or header) at fault"},
            "grant_status": {**GRANT_STATUS, "description": "the grant's state, when that is why"},
        },
        ("type", "title", "status", "detail"),
        description="RFC 9457 problem details (D2); `detail` carries the specification's message",
    ),
    "Pagination": obj(
        {
            "cursor": nullable({"type": "string", "description": "pass back as `cursor` for the next page"}),
            "has_more": BOOL,
        },
        ("cursor", "has_more"),
    ),
    "Status": obj({"status": STRING}, ("status",)),
    # agents (D5)
    "Agent": obj(
        {
            "agent_id": STRING,
            "email": STRING,
            "name": STRING,
            "owner": STRING,
            "approver": STRING,
            "status": {"type": "string", "enum": ["active", "disabled"]},
        },
        ("agent_id", "email", "name", "owner", "approver", "status"),
    ),
    "AgentAdmin": {
        "allOf": [
            ref("Agent"),
            obj(
                {
                    "publicKey": STRING,
                    "key_fingerprint": STRING,
                    "key_generation": INT,
                    "created_at": MS,
                    "updated_at": MS,
                    "owner_id": nullable(
                        {"type": "string", "description": "the person_id the owner is bound to (D11)"}
                    ),
                    "approver_id": nullable(
                        {"type": "string", "description": "the person_id the approver is bound to"}
                    ),
                    "owner_state": PARTY_STATE,
                    "approver_state": PARTY_STATE,
                    "ownerless": {
                        "type": "boolean",
                        "description": "neither owner nor approver can decide: its grants wait for an administrator",
                    },
                },
                (
                    "publicKey",
                    "key_fingerprint",
                    "key_generation",
                    "created_at",
                    "updated_at",
                    "owner_id",
                    "approver_id",
                    "owner_state",
                    "approver_state",
                    "ownerless",
                ),
            ),
        ]
    },
    "Enrolment": obj(
        {
            "email": EMAIL,
            "name": TEXT,
            "publicKey": {"type": "string", "description": "OpenSSH `ssh-ed25519 AAAA... comment`"},
            "public_key": {"type": "string", "description": "alias of publicKey"},
            "owner": EMAIL,
            "approver": EMAIL,
        },
        ("email", "name", "publicKey"),
    ),
    "AgentUpdate": obj(
        {
            "name": TEXT,
            "owner": EMAIL,
            "approver": EMAIL,
            "status": {"type": "string", "enum": ["active", "disabled"]},
            "isActive": BOOL,
            "publicKey": STRING,
            "public_key": STRING,
        },
        additionalProperties=False,
        description="only these fields; null leaves a field as it is",
    ),
    "AgentDeleted": obj({"deleted": {"const": True}, "agent": ref("Agent")}, ("deleted", "agent")),
    "AgentIdent": obj(
        {
            "agent_id": {"type": "string", "description": "the agent_id or the agent's e-mail"},
            "id": {"type": "string", "description": "alias of agent_id"},
        },
    ),
    "Challenge": obj({"challenge": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}, ("challenge",)),
    "Authenticate": obj(
        {
            "agent_id": STRING,
            "id": STRING,
            "challenge": STRING,
            "signature": {
                "type": "string",
                "description": "raw Ed25519 signature in base64, or an `ssh-keygen -Y sign -n grantd` signature",
            },
        },
        ("challenge", "signature"),
    ),
    "IdentityToken": obj(
        {
            "token": JWT,
            "agent_id": STRING,
            "email": STRING,
            "name": STRING,
            "expires_in": {"type": "integer", "description": "seconds"},
        },
        ("token", "agent_id", "email", "name", "expires_in"),
    ),
    "Me": obj(
        {
            "sub": STRING,
            "email": STRING,
            "name": STRING,
            "act": {"type": "string", "enum": ["agent", "management", "human", "person", "client"]},
            "kind": {"type": "string", "enum": ["agent", "person", "management", "client", "guest"]},
            "id": STRING,
            "agent_id": nullable(STRING),
            "admin": BOOL,
            "idp": nullable({"type": "string", "description": "a guest's IdP (SP login, D9)"}),
        },
        ("sub", "email", "act", "kind", "id", "admin"),
    ),
    # grants (D6)
    "GrantRequest": obj(
        {
            "requester": STRING,
            "target_host": STRING,
            "audience": STRING,
            "grant_type": GRANT_TYPE,
            "command": array(STRING),
            "cmd_hash": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
            "permissions": array(STRING),
            "duration": {"type": "integer", "description": "seconds"},
            "reason": STRING,
            "run_as": STRING,
            "authorization_details": array(ANY_OBJECT),
            "execution_context": ANY_OBJECT,
        },
        ("requester", "target_host", "audience", "grant_type"),
    ),
    "Grant": obj(
        {
            "id": STRING,
            "type": {"type": "string", "enum": ["command", "permissions"]},
            "requester": STRING,
            "request": ref("GrantRequest"),
            "status": GRANT_STATUS,
            "created_at": MS,
            "decided_by": nullable(STRING),
            "decided_at": nullable(MS),
            "expires_at": nullable(MS),
            "used_at": nullable(MS),
            "decision_reason": nullable(STRING),
            "delegation_id": nullable(STRING),
            "revoked_by": nullable(STRING),
            "revoked_at": nullable(MS),
            "review": ref("GrantReview"),
            "approvals": array(ref("Approval")),
        },
        (
            "id",
            "type",
            "requester",
            "request",
            "status",
            "created_at",
            "decided_by",
            "decided_at",
            "expires_at",
        ),
        description="`review` and `approvals` (D13) in the answers about one grant (get, create, votes) and in list items (GET /api/grants); not in the event stream",
    ),
    "GrantReview": obj(
        {
            "policy_ids": array(STRING),
            "policy_hash": STRING,
            "requirements": array(
                obj(
                    {
                        "id": STRING,
                        "approve": {"type": "integer"},
                        "deny": {"type": "integer"},
                        "approvals": array(STRING),
                        "denials": array(STRING),
                    },
                    ("id", "approve", "deny", "approvals", "denials"),
                )
            ),
            "escalation_level": {"type": "integer"},
            "next_escalation_at": nullable(MS),
            "approvals": array(ref("Approval")),
        },
        ("policy_ids", "policy_hash", "requirements", "escalation_level", "next_escalation_at"),
        description="what the grant needs under the policies it was pinned to (D13); default: one vote",
    ),
    "Approval": obj(
        {
            "sub": STRING,
            "at": nullable(MS),
            "via": {"type": "string", "enum": ["api", "web", "tui", "delegation", "rule"]},
            "requirement": nullable(STRING),
            "kind": {"const": "rule"},
            "rule": STRING,
            "reason": nullable(STRING),
        },
        ("via",),
    ),
    "GrantCreated": {
        "allOf": [
            ref("Grant"),
            obj(
                {
                    "reused": {
                        "const": True,
                        "description": "an approved timed/always grant returned again (200)",
                    },
                    "approved_automatically": {"const": True},
                    "auto_approval_kind": {"type": "string", "enum": ["delegation", "rule"]},
                    "authz_jwt": {**JWT, "description": "when an approve rule approved it at once (D13)"},
                }
            ),
        ]
    },
    "GrantRequestBody": obj(
        {
            "target_host": {"type": "string", "pattern": r"^[^\s/]{1,255}$"},
            "audience": TEXT,
            "grant_type": GRANT_TYPE,
            "command": array({"type": "string", "maxLength": 4096}, minItems=1, maxItems=256),
            "permissions": array(TEXT, minItems=1, maxItems=100),
            "duration": {"type": "integer", "minimum": 1, "description": "seconds; required for timed"},
            "reason": {"type": "string", "maxLength": 1000},
            "run_as": {"type": "string", "pattern": r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\$?$"},
            "requester": {**EMAIL, "description": "management token only: whom the request is for"},
            "authorization_details": array(ANY_OBJECT),
            "execution_context": ANY_OBJECT,
        },
        ("target_host", "audience"),
        description="needs `command` or `permissions`",
    ),
    "DecisionBody": obj(
        {
            "grant_type": GRANT_TYPE,
            "duration": {"type": "integer", "minimum": 1},
            "reason": {"type": "string", "maxLength": 1000},
            "via": {
                "type": "string",
                "enum": ["api", "tui"],
                "description": "a bearer caller's client (the TUI says tui)",
            },
        },
        description="approve may override grant_type and duration; deny and revoke take a reason",
    ),
    "Reviewers": obj(
        {
            "grant_id": STRING,
            "status": GRANT_STATUS,
            "requirements": array(
                obj(
                    {
                        "id": STRING,
                        "approve": {"type": "integer"},
                        "deny": {"type": "integer"},
                        "approvals": array(STRING),
                        "denials": array(STRING),
                        "missing": {"type": "integer"},
                        "eligible": array(obj({"email": STRING, "name": STRING}, ("email", "name"))),
                    },
                    ("id", "approve", "deny", "approvals", "denials", "missing", "eligible"),
                )
            ),
            "escalation_level": {"type": "integer"},
            "next_escalation_at": nullable(MS),
        },
        ("requirements", "escalation_level", "next_escalation_at"),
    ),
    "PolicyEvaluateBody": {
        "allOf": [
            ref("GrantRequestBody"),
            obj(
                {
                    "requester": {
                        "type": "string",
                        "description": "the agent's e-mail or id (or a person's e-mail)",
                    }
                },
                ("requester",),
            ),
        ],
    },
    "PolicyEvaluation": obj(
        {
            "outcome": {"type": "string", "enum": ["auto_approve", "auto_deny", "needs_review"]},
            "rules_matched": array(STRING),
            "policies_matched": array(STRING),
            "reason": nullable(STRING),
            "policy_hash": STRING,
            "requirements": array(
                obj(
                    {
                        "id": STRING,
                        "approve": {"type": "integer"},
                        "deny": {"type": "integer"},
                        "groups": array(STRING),
                    }
                )
            ),
            "eligible_approvers": array(
                obj({"requirement": STRING, "eligible": array(obj({"email": STRING, "name": STRING}))})
            ),
        },
        ("outcome", "rules_matched", "policies_matched", "reason", "requirements", "eligible_approvers"),
    ),
    "ReviewBody": obj(
        {
            "decision": {"type": "string", "enum": ["approve", "deny"]},
            "grant_type": GRANT_TYPE,
            "duration": {"type": "integer", "minimum": 1},
            "reason": {"type": "string", "maxLength": 1000},
            "via": {"type": "string", "enum": ["api", "tui"]},
        },
        ("decision",),
        description="one vote (D13); under a quorum the most restrictive override wins",
    ),
    "Decision": obj(
        {"grant": ref("Grant"), "review": ref("GrantReview"), "authz_jwt": JWT},
        ("grant",),
        description="`authz_jwt` when this vote approved the grant",
    ),
    "GrantToken": obj(
        {"authz_jwt": JWT, "grant": obj({"id": STRING, "status": GRANT_STATUS}, ("id", "status"))},
        ("authz_jwt", "grant"),
    ),
    "Consumed": obj(
        {
            "status": {
                "type": "string",
                "description": "consumed or valid; else the grant's state with `error`",
            },
            "error": {
                "type": "string",
                "enum": ["already_consumed", "revoked", "denied", "expired", "not_approved"],
            },
            "grant": ref("Grant"),
        },
        ("status",),
        description="200 `{status: consumed|valid, grant}`, or 200 `{error, status}` for a grant that cannot be used (D2)",
    ),
    "VerifyBody": obj({"token": JWT}),
    "Verified": obj(
        {"valid": BOOL, "claims": ANY_OBJECT, "grant": ref("Grant"), "error": STRING, "status": STRING},
        ("valid",),
    ),
    "BatchBody": obj(
        {
            "operations": array(
                obj(
                    {
                        "id": {"type": "string", "minLength": 1},
                        "action": {"type": "string", "enum": ["approve", "deny", "revoke"]},
                        "grant_type": GRANT_TYPE,
                        "duration": {"type": "integer", "minimum": 1},
                        "reason": STRING,
                    },
                    ("id", "action"),
                ),
                minItems=1,
                maxItems=100,
            )
        },
        ("operations",),
    ),
    "BatchResult": obj(
        {
            "results": array(
                obj(
                    {
                        "id": nullable(STRING),
                        "action": nullable(STRING),
                        "status": nullable(STRING),
                        "success": BOOL,
                        "error": ref("Problem"),
                        "authz_jwt": JWT,
                    },
                    ("id", "action", "status", "success"),
                )
            )
        },
        ("results",),
    ),
    # delegations (D7)
    "AuditEntries": obj(
        {
            "entries": {
                "type": "array",
                "maxItems": 1000,
                "items": obj(
                    {
                        "index": {"type": "integer", "minimum": 0},
                        "leaf": {"type": "string", "description": "the exact leaf that was hashed"},
                        "leaf_hash": {"type": "string", "description": "base64 SHA-256(0x00 || leaf)"},
                    },
                    ("index", "leaf", "leaf_hash"),
                ),
            }
        },
        ("entries",),
    ),
    "InclusionProof": obj(
        {
            "leaf_index": {"type": "integer"},
            "tree_size": {"type": "integer"},
            "hashes": {"type": "array", "items": STRING},
        },
        ("leaf_index", "tree_size", "hashes"),
    ),
    "ConsistencyProof": obj({"hashes": {"type": "array", "items": STRING}}, ("hashes",)),
    "GrantAudit": obj(
        {
            "grant_id": STRING,
            "checkpoint": {"type": "string", "description": "the signed note the proofs are against"},
            "entries": {
                "type": "array",
                "items": obj(
                    {"index": {"type": "integer"}, "leaf": STRING, "proof": ref("InclusionProof")},
                    ("index", "leaf", "proof"),
                ),
            },
        },
        ("grant_id", "checkpoint", "entries"),
    ),
    "HostBody": obj(
        {
            "host": {"type": "string", "maxLength": 253},
            "publicKey": {"type": "string", "description": "an OpenSSH ssh-ed25519 line"},
        },
        ("host", "publicKey"),
    ),
    "Host": obj(
        {"host": STRING, "publicKey": STRING, "created_at": {"type": "integer"}},
        ("host", "publicKey", "created_at"),
    ),
    "ReceiptBody": obj(
        {"receipt": {"type": "string", "description": "a grantd-receipt+jwt compact JWS (EdDSA)"}},
        ("receipt",),
    ),
    "ReceiptResult": obj(
        {"grant_id": STRING, "host": STRING, "result": STRING, "new": {"type": "boolean"}},
        ("grant_id", "host", "result", "new"),
    ),
    "Delegation": obj(
        {
            "id": STRING,
            "delegator": STRING,
            "delegate": STRING,
            "audience": STRING,
            "scopes": array(STRING),
            "approval": GRANT_TYPE,
            "grant_type": GRANT_TYPE,
            "created_at": MS,
            "expires_at": nullable(MS),
            "status": STRING,
            "revoked_at": nullable(MS),
            "revoked_by": nullable(STRING),
        },
        (
            "id",
            "delegator",
            "delegate",
            "audience",
            "scopes",
            "approval",
            "created_at",
            "expires_at",
            "status",
        ),
    ),
    "DelegationBody": obj(
        {
            "delegate": EMAIL,
            "audience": TEXT,
            "scopes": array(TEXT, maxItems=100),
            "approval": GRANT_TYPE,
            "grant_type": {**GRANT_TYPE, "description": "alias of approval"},
            "duration": {"type": "integer", "minimum": 1, "description": "seconds"},
            "expires_at": {
                "type": ["integer", "string"],
                "description": "ms since the epoch or an ISO-8601 time",
            },
            "delegator": {**EMAIL, "description": "management token only"},
        },
        ("delegate", "audience"),
    ),
    "DelegationCheck": obj({"delegate": STRING, "audience": STRING, "scope": STRING}),
    "DelegationValidity": obj({"valid": BOOL, "delegation": ref("Delegation"), "error": STRING}, ("valid",)),
    # people (D8)
    "Person": obj(
        {
            "person_id": STRING,
            "email": STRING,
            "name": STRING,
            "admin": BOOL,
            "admin_by_config": BOOL,
            "status": {"type": "string", "enum": ["active", "disabled"]},
            "isActive": BOOL,
            "created_at": MS,
            "createdAt": MS,
            "updated_at": MS,
        },
        ("person_id", "email", "name", "admin", "status", "isActive", "created_at"),
    ),
    "PersonCreated": {"allOf": [ref("Person"), obj({"registration": ref("RegistrationCreated")})]},
    "PersonBody": obj(
        {
            "email": EMAIL,
            "name": TEXT,
            "admin": BOOL,
            "registration": {"type": "boolean", "description": "also create a registration URL"},
        },
        ("email",),
    ),
    "PersonUpdate": obj(
        {
            "name": TEXT,
            "admin": BOOL,
            "status": {"type": "string", "enum": ["active", "disabled"]},
            "isActive": BOOL,
        },
        additionalProperties=False,
    ),
    "PersonDeleted": obj({"ok": BOOL, "deleted": BOOL, "user": ref("Person")}, ("deleted", "user")),
    "AdminCredential": obj(
        {
            "credential_id": STRING,
            "credentialId": STRING,
            "name": STRING,
            "rp_id": STRING,
            "transports": array(STRING),
            "aaguid": nullable(STRING),
            "backed_up": BOOL,
            "backedUp": BOOL,
            "sign_count": INT,
            "created_at": MS,
            "createdAt": MS,
            "last_used_at": nullable(MS),
        },
        ("credential_id", "name", "created_at"),
    ),
    "Session": obj(
        {
            "family_id": STRING,
            "familyId": STRING,
            "person_id": nullable(STRING),
            "email": nullable(STRING),
            "created_at": MS,
            "expires_at": MS,
            "last_seen_at": nullable(MS),
            "user_agent": nullable(STRING),
            "idp": nullable(
                {"type": "string", "description": "a guest's IdP (SP login, D9); person_id is then null"}
            ),
        },
        ("family_id", "person_id", "created_at", "expires_at"),
    ),
    "OwnSession": obj(
        {
            "id": {
                "type": "string",
                "description": "the session's family: what DELETE /api/sessions/{session_id} ends",
            },
            "created_at": MS,
            "expires_at": MS,
            "last_seen_at": nullable(MS),
            "user_agent": STRING,
            "credential_id": nullable({"type": "string", "description": "the passkey it was started with"}),
            "current": {"type": "boolean", "description": "the session of the browser asking"},
        },
        ("id", "created_at", "expires_at", "current"),
    ),
    "SessionsRevoked": obj(
        {
            "status": {"const": "revoked"},
            "familyId": STRING,
            "email": STRING,
            "person_id": STRING,
            "revoked": INT,
        },
        ("status", "revoked"),
    ),
    "RegistrationUrl": obj(
        {
            "id": STRING,
            "email": STRING,
            "admin": BOOL,
            "purpose": {"type": "string", "enum": ["register", "add-device"]},
            "rp_id": nullable(STRING),
            "created_by": nullable(STRING),
            "created_at": MS,
            "expires_at": MS,
            "used_at": nullable(MS),
            "status": {"type": "string", "enum": ["pending", "used", "expired"]},
        },
        ("id", "email", "purpose", "created_at", "expires_at", "status"),
    ),
    "RegistrationCreated": {
        "allOf": [
            ref("RegistrationUrl"),
            obj(
                {
                    "url": STRING,
                    "registrationUrl": STRING,
                    "token": STRING,
                    "expiresInHours": {"type": "number"},
                },
                ("url", "token"),
            ),
        ]
    },
    "RegistrationBody": obj(
        {
            "email": EMAIL,
            "name": TEXT,
            "admin": BOOL,
            "purpose": {"type": "string", "enum": ["register", "add-device"]},
            "expires_in": {"type": "integer", "minimum": 1, "description": "seconds"},
            "expiresInHours": {"type": "integer", "minimum": 1},
        },
        ("email",),
    ),
    "Deleted": obj({"deleted": {"const": True}, "id": STRING}, ("deleted", "id")),
    # passkeys (D8)
    "PasskeyPerson": obj(
        {"id": STRING, "email": STRING, "name": STRING, "admin": BOOL, "status": STRING, "created_at": MS},
        ("id", "email", "name", "admin", "status"),
    ),
    "PasskeyCredential": obj(
        {
            "id": STRING,
            "name": STRING,
            "rp_id": STRING,
            "created_at": MS,
            "last_used_at": nullable(MS),
            "transports": array(STRING),
            "backed_up": BOOL,
            "aaguid": nullable(STRING),
        },
        ("id", "name", "created_at"),
        description="never the public key",
    ),
    "SignedIn": obj(
        {"person": ref("PasskeyPerson"), "credential": ref("PasskeyCredential")}, ("person", "credential")
    ),
    "WebAuthnOptions": {
        "type": "object",
        "description": "PublicKeyCredentialCreationOptions / RequestOptions as JSON (base64url fields)",
    },
    "PasskeyResponse": obj(
        {
            "response": {
                "type": "object",
                "description": "the PublicKeyCredential JSON the browser produced",
            },
            "token": STRING,
            "email": EMAIL,
            "name": STRING,
            "person_name": STRING,
        },
    ),
    "Ok": obj({"ok": {"const": True}}, ("ok",)),
    # the device grant (RFC 8628, docs/device.md)
    "DeviceAuthorization": obj(
        {
            "device_code": STRING,
            "user_code": {
                "type": "string",
                "pattern": "^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$",
            },
            "verification_uri": STRING,
            "verification_uri_complete": STRING,
            "expires_in": INT,
            "interval": INT,
        },
        (
            "device_code",
            "user_code",
            "verification_uri",
            "verification_uri_complete",
            "expires_in",
            "interval",
        ),
    ),
    "DeviceAuthorizationRequest": obj(
        {
            "client_id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
                "description": "grantd-cli (built in)",
            },
            "scope": {
                "type": "string",
                "description": "space-separated, of: openid email profile offline_access admin (admin: administrator rights, "
                "only if an administrator approves; never by default)",
            },
        },
        ("client_id",),
    ),
    "DeviceDecision": obj(
        {
            "user_code": {
                "type": "string",
                "maxLength": 64,
                "description": "as typed: case, spaces and dashes do not matter",
            },
            "approve": BOOL,
        },
        ("user_code", "approve"),
    ),
    "DeviceDecided": obj(
        {
            "status": {"type": "string", "enum": ["approved", "denied"]},
            "client_id": STRING,
            "client_name": STRING,
            "scope": STRING,
        },
        ("status", "client_id", "client_name", "scope"),
    ),
    # SP login (D9)
    "SpLogin": obj(
        {"email": EMAIL, "returnTo": {"type": "string", "description": "a local path to land on afterwards"}},
        ("email",),
    ),
    "ClientMetadata": obj(
        {
            "client_id": STRING,
            "client_name": STRING,
            "redirect_uris": array(STRING),
            "client_uri": STRING,
            "contacts": array(STRING),
            "token_endpoint_auth_method": STRING,
            "grant_types": array(STRING),
            "response_types": array(STRING),
        },
        ("client_id", "client_name", "redirect_uris"),
    ),
    "ServiceManifest": obj(
        {
            "version": STRING,
            "service": ANY_OBJECT,
            "auth": obj(
                {"ddisa_domain": STRING, "supported_methods": array(STRING)},
                ("ddisa_domain", "supported_methods"),
            ),
            "endpoints": ANY_OBJECT,
        },
        ("version", "service", "auth", "endpoints"),
    ),
    # discovery
    "Jwks": obj(
        {
            "keys": array(
                obj(
                    {"kty": STRING, "crv": STRING, "x": STRING, "kid": STRING, "alg": STRING, "use": STRING},
                    ("kty", "kid"),
                )
            )
        },
        ("keys",),
    ),
    "OpenIdConfiguration": obj({"issuer": STRING, "jwks_uri": STRING}, ("issuer", "jwks_uri")),
    # OAuth 2.0 / OIDC (D9, docs/oauth.md)
    "OAuthError": obj(
        {"error": STRING, "error_description": STRING},
        ("error", "error_description"),
        description="RFC 6749 §5.2 / RFC 6750 §3.1 error (D2)",
    ),
    "TokenRequest": obj(
        {
            "grant_type": {
                "type": "string",
                "enum": [
                    "authorization_code",
                    "refresh_token",
                    "client_credentials",
                    "urn:ietf:params:oauth:grant-type:device_code",
                ],
            },
            "code": STRING,
            "code_verifier": STRING,
            "redirect_uri": STRING,
            "client_id": STRING,
            "client_secret": STRING,
            "refresh_token": STRING,
            "scope": STRING,
            "device_code": STRING,
            "client_assertion_type": {"const": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
            "client_assertion": JWT,
        },
        ("grant_type",),
        description="form-encoded or JSON (D9); confidential clients may use HTTP Basic instead of client_secret",
    ),
    "TokenResponse": obj(
        {
            "access_token": STRING,
            "token_type": {"const": "Bearer"},
            "expires_in": INT,
            "scope": STRING,
            "id_token": JWT,
            "assertion": {**JWT, "description": "the id_token again (the peer SP reads it)"},
            "refresh_token": STRING,
            "agent_id": STRING,
        },
        ("access_token", "token_type", "expires_in"),
    ),
    "RevokeRequest": obj(
        {
            "token": STRING,
            "token_type_hint": {"type": "string", "enum": ["refresh_token", "access_token"]},
            "client_id": STRING,
            "client_secret": STRING,
        },
        ("token",),
    ),
    "UserInfoRequest": obj({"access_token": STRING}),
    "UserInfo": obj({"sub": STRING, "email": STRING, "email_verified": BOOL, "name": STRING}, ("sub",)),
    "ConsentDecision": obj(
        {
            "request": {
                "type": "string",
                "description": "the authorization request's query string, as the consent page got it",
            },
            "approve": BOOL,
            "ticket": {
                "type": "string",
                "description": "the consent page's one-time ticket (data-ticket): required to "
                "approve a client that is asked every time (a public client with API access, such as apes-cli)",
            },
        },
        ("request", "approve"),
    ),
    "Location": obj(
        {
            "location": {
                "type": "string",
                "description": "where the browser goes next (the client's redirect URI)",
            }
        },
        ("location",),
    ),
    "Consent": obj(
        {"client_id": STRING, "client_name": STRING, "scope": STRING, "created_at": MS, "updated_at": MS},
        ("client_id", "client_name", "scope", "created_at", "updated_at"),
    ),
    "ConsentWithdrawn": obj({"withdrawn": {"const": True}, "client_id": STRING}, ("withdrawn", "client_id")),
    "FederationProviders": obj(
        {"providers": array(obj({"id": STRING, "type": STRING, "name": STRING}, ("id", "type", "name")))},
        ("providers",),
    ),
}
