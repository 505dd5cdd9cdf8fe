"""The OpenAPI entries of issue 25 (D16): CIBA's /bc-authorize and its schemas (merged into
``openapi_operations.OPERATIONS`` and ``openapi_schemas.SCHEMAS``)."""

from __future__ import annotations

from grantd.web.openapi_model import INT, JWT, NONE, STRING, Ok, Op, Schema, array, obj, ref

PROTOCOL_OPERATIONS: tuple[Op, ...] = (
    Op(
        "POST",
        "/bc-authorize",
        "ciba.bc_authorize",
        "CIBA backchannel authentication (D16): an agent (private_key_jwt with its enrolled key) asks for "
        "one grantd_command, or (with resource) a grant-gated scope of an MCP resource (D17); answers an auth_req_id to poll /token with (form or JSON body; errors are "
        "{error, error_description})",
        NONE,
        "BackchannelAuthenticationRequest",
        ok={200: Ok(ref("BackchannelAuthentication"), headers=("Cache-Control",))},
        errors=(400, 401, 403, 429),
        tag="oauth",
        form=True,
        error_shape="OAuthError",
    ),
    Op(
        "OPTIONS",
        "/bc-authorize",
        "ciba.bc_authorize_preflight",
        "CORS preflight (any origin, no credentials)",
        ok={200: Ok(obj({}), headers=("Access-Control-Allow-Origin",))},
        tag="oauth",
    ),
)

GRANTD_COMMAND: Schema = obj(
    {
        "type": {"const": "grantd_command"},
        "locations": {**array(STRING), "minItems": 1, "maxItems": 1, "description": "[target host]"},
        "actions": {**array({"const": "execute"}), "minItems": 1, "maxItems": 1},
        "command": array(STRING),
        "run_as": STRING,
        "audience": STRING,
        "grant_type": {"type": "string", "enum": ["once", "timed", "always"]},
        "duration": INT,
        "reason": STRING,
    },
    ("type", "locations", "actions", "command", "audience", "grant_type"),
)

MCP_TOOL_CALL: Schema = obj(
    {
        "type": {"const": "mcp_tool_call"},
        "locations": {**array(STRING), "minItems": 1, "maxItems": 1, "description": "[resource]"},
        "actions": {**array({"const": "tools/call"}), "minItems": 1, "maxItems": 1},
        "scope": {"type": "string", "description": "a grant-gated scope of the resource"},
        "tool": {"type": "string", "maxLength": 128, "description": "the tool, shown to the approver"},
    },
    ("type", "scope"),
)

PROTOCOL_SCHEMAS: dict[str, Schema] = {
    "BackchannelAuthenticationRequest": obj(
        {
            "scope": {
                "type": "string",
                "description": "must hold openid; with resource also that resource's scopes, one grant-gated",
            },
            "resource": {
                "type": "string",
                "format": "uri",
                "description": "RFC 8707: a configured MCP resource (D17); then the token is an at+jwt for it",
            },
            "login_hint": {"type": "string", "description": "a person's e-mail, group:<id> or policy"},
            "login_hint_token": STRING,
            "id_token_hint": JWT,
            "binding_message": {"type": "string", "maxLength": 64},
            "requested_expiry": {"type": "string", "pattern": "^[0-9]{1,4}$"},
            "client_notification_token": {"type": "string", "maxLength": 1024},
            "authorization_details": {
                "description": "a JSON array (a string in a form): one grantd_command; with resource, "
                "optional mcp_tool_call details instead",
                "oneOf": [
                    {"type": "string"},
                    {**array(GRANTD_COMMAND), "minItems": 1, "maxItems": 1},
                    {**array(MCP_TOOL_CALL), "minItems": 1},
                ],
            },
            "client_id": STRING,
            "client_assertion_type": {"const": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
            "client_assertion": JWT,
        },
        ("scope", "client_assertion_type", "client_assertion"),
        description="form-encoded or JSON; exactly one of login_hint, login_hint_token, id_token_hint; "
        "authorization_details is required unless resource names an MCP resource (issue 26)",
    ),
    "DelegationCreated": {
        "allOf": [
            ref("Delegation"),
            obj(
                {
                    "delegation_token": {
                        **JWT,
                        "description": "the RFC 8693 subject token the delegate exchanges at /token (D16)",
                    }
                },
                ("delegation_token",),
            ),
        ]
    },
    "BackchannelAuthentication": obj(
        {"auth_req_id": STRING, "expires_in": INT, "interval": INT},
        ("auth_req_id", "expires_in", "interval"),
    ),
}

__all__ = ["PROTOCOL_OPERATIONS", "PROTOCOL_SCHEMAS"]
