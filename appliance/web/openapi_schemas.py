"""The named JSON Schemas (2020-12) of grantd's OpenAPI document, first half: agents, grants (the
second half, delegations to OAuth, is ``openapi_schemas_more``); operations refer to them with
``ref(name)``."""

from __future__ import annotations

from grantd.web.openapi_mcp import MCP_SCHEMAS
from grantd.web.openapi_model import (  # noqa: F401 - the vocabulary the table is written in
    ANY_OBJECT,
    BOOL,
    EMAIL,
    GRANT_STATUS,
    GRANT_TYPE,
    INT,
    JWT,
    MS,
    PARTY_STATE,
    STRING,
    TEXT,
    Schema,
    array,
    nullable,
    obj,
    ref,
)
from grantd.web.openapi_notify import NOTIFY_SCHEMAS
from grantd.web.openapi_protocols import PROTOCOL_SCHEMAS
from grantd.web.openapi_schemas_more import MORE_SCHEMAS

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
                    "ciba": obj(
                        {
                            "mode": {"type": "string", "enum": ["poll", "ping"]},
                            "notification_endpoint": {"type": "string", "format": "uri"},
                        },
                        ("mode",),
                        description="its CIBA delivery (D16), in GET and PUT /api/admin/agents/:id",
                    ),
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
            "ciba": nullable(
                obj(
                    {
                        "mode": {"type": "string", "enum": ["poll", "ping"]},
                        "notification_endpoint": {"type": "string", "format": "uri"},
                    },
                    ("mode",),
                    description="CIBA delivery (D16): ping needs an https endpoint at a public address "
                    "unless [ciba] notification_allow covers it; poll or null: poll",
                )
            ),
        },
        additionalProperties=False,
        description="only these fields; null leaves a field as it is (ciba: null means poll)",
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
            "token_type": {"const": "DPoP", "description": "only when the token is DPoP-bound (D16)"},
        },
        ("token", "agent_id", "email", "name", "expires_in"),
    ),
    "Me": obj(
        {
            "sub": STRING,
            "email": STRING,
            "name": STRING,
            "act": {
                "oneOf": [
                    {"type": "string", "enum": ["agent", "management", "human", "person", "client"]},
                    {
                        "type": "object",
                        "required": ["sub"],
                        "properties": {"sub": STRING, "act": {"type": "object"}},
                        "description": "an exchanged token's actor chain (RFC 8693, D16)",
                    },
                ]
            },
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
            "act": {**ANY_OBJECT, "description": "requested with an exchanged token: its actor chain (D16)"},
            "delegation": {
                **ANY_OBJECT,
                "description": "requested with an exchanged token: {id, delegator} of its delegation (D16)",
            },
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
            "via": {"type": "string", "enum": ["api", "web", "tui", "delegation", "consent", "rule"]},
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
    **MORE_SCHEMAS,
    **NOTIFY_SCHEMAS,
    **MCP_SCHEMAS,
    **PROTOCOL_SCHEMAS,
}
