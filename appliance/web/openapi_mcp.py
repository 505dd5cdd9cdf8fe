"""The OpenAPI operations and schemas of grantd as the authorization server of MCP servers (D17;
docs/mcp.md), merged into ``openapi_operations.OPERATIONS`` and ``openapi_schemas.SCHEMAS``."""

from __future__ import annotations

from grantd.web.openapi_model import (
    ANY_OBJECT,
    BOOL,
    INT,
    NONE,
    PERSON,
    STRING,
    Ok,
    Op,
    Schema,
    array,
    obj,
    ref,
)

MCP_OPERATIONS: tuple[Op, ...] = (
    Op(
        "GET",
        "/.well-known/oauth-authorization-server",
        "mcp.authorization_server_metadata",
        "RFC 8414 metadata: the OpenID configuration plus what MCP clients look for",
        ok={200: Ok(ref("AuthorizationServerMetadata"), headers=("Cache-Control",))},
        tag="discovery",
    ),
    Op(
        "GET",
        "/authorize/poll/{secret}",
        "mcp.authorize_poll",
        "A pending grant-gated authorization: its status until decided, then once the redirect",
        PERSON,
        ok={200: Ok(ref("AuthorizationPoll"))},
        tag="oauth",
    ),
    Op(
        "POST",
        "/introspect",
        "mcp.introspect",
        "RFC 7662 introspection for a configured resource (HTTP Basic: its URI and credential)",
        NONE,
        "IntrospectionRequest",
        ok={200: Ok(ref("Introspection"), headers=("Cache-Control",))},
        errors=(400, 401),
        tag="oauth",
        form=True,
        error_shape="OAuthError",
    ),
)

MCP_SCHEMAS: dict[str, Schema] = {
    "AuthorizationServerMetadata": obj(
        {
            "issuer": STRING,
            "authorization_endpoint": STRING,
            "token_endpoint": STRING,
            "jwks_uri": STRING,
            "introspection_endpoint": STRING,
            "client_id_metadata_document_supported": BOOL,
            "code_challenge_methods_supported": array(STRING),
            "scopes_supported": array(STRING),
            "authorization_details_types_supported": array(STRING),
        },
        ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri", "introspection_endpoint"),
    ),
    "AuthorizationPoll": obj(
        {
            "status": {"type": "string", "enum": ["pending", "approved", "denied"]},
            "grant_id": STRING,
            "location": {
                "type": "string",
                "description": "the client's redirect URI with a code or an error",
            },
        },
        ("status",),
    ),
    "ConsentPending": obj(
        {"pending": {"const": True}, "grant_id": STRING, "poll": STRING},
        ("pending", "grant_id", "poll"),
        description="a grant-gated scope waits for an approver (D17); GET poll until it answers a location",
    ),
    "IntrospectionRequest": obj(
        {"token": STRING, "token_type_hint": STRING},
        ("token",),
    ),
    "Introspection": obj(
        {
            "active": BOOL,
            "iss": STRING,
            "sub": STRING,
            "aud": STRING,
            "client_id": STRING,
            "scope": STRING,
            "iat": INT,
            "exp": INT,
            "jti": STRING,
            "auth_time": INT,
            "act": STRING,
            "grant_id": STRING,
            "authorization_details": array(ANY_OBJECT),
            "token_type": STRING,
            "username": STRING,
        },
        ("active",),
    ),
}
