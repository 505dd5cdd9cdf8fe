"""The named JSON Schemas of grantd's OpenAPI document, second half: delegations, people, passkeys,
the device grant, SP login, discovery, OAuth (merged into ``openapi_schemas.SCHEMAS``)."""

from __future__ import annotations

from grantd.web.openapi_model import (  # noqa: F401 - the vocabulary the table is written in
    ANY_OBJECT,
    BOOL,
    EMAIL,
    GRANT_TYPE,
    INT,
    JWT,
    MS,
    STRING,
    TEXT,
    Schema,
    array,
    nullable,
    obj,
    ref,
)

MORE_SCHEMAS: dict[str, Schema] = {
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
    "DelegationCheck": obj(
        {
            "delegate": {"type": "string", "description": "its e-mail, or an agent's agent_id (D1)"},
            "audience": STRING,
            "scope": STRING,
        },
        ("delegate", "audience"),
    ),
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
                    "urn:openid:params:grant-type:ciba",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                ],
            },
            "auth_req_id": STRING,
            "subject_token": JWT,
            "subject_token_type": {"const": "urn:ietf:params:oauth:token-type:jwt"},
            "requested_token_type": STRING,
            "resource": STRING,
            "audience": STRING,
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
            "token_type": {"type": "string", "enum": ["Bearer", "DPoP"]},
            "expires_in": INT,
            "scope": STRING,
            "id_token": JWT,
            "assertion": {**JWT, "description": "the id_token again (the peer SP reads it)"},
            "refresh_token": STRING,
            "agent_id": STRING,
            "authorization_details": array(ANY_OBJECT),
            "grant_id": STRING,
            "issued_token_type": STRING,
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
