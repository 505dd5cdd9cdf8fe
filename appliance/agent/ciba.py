"""`grantd run --protocol ciba` (D16): the same grant through OpenID CIBA instead of grantd's own
grant API, so the project uses what third-party clients use. The agent authenticates every call
with ``private_key_jwt`` (a JWT its enrolled Ed25519 key signs), asks ``POST /bc-authorize`` for
one ``grantd_command``, polls ``/token`` (``authorization_pending``, ``slow_down`` adds 5 s) until a
person decides, and hands the AuthZ-JWT of the answer to ``grantd elevate`` like ``grantd run``
does. With DPoP (the default; GRANTD_AGENT_DPOP=off opts out) the grant is bound to the key."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from grantd.agent.api import Api, dpop_proof, expect_json, wants_dpop
from grantd.agent.errors import CliError
from grantd.agent.state import load_private_key

GRANT_TYPE = "urn:openid:params:grant-type:ciba"
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def client_assertion(api: Api, audience: str) -> dict[str, str]:
    """``private_key_jwt`` (RFC 7523): iss = sub = the agent's e-mail, 60 s, a fresh jti."""
    from grantd.dpop import b64url

    assert api.state is not None
    now = int(time.time())
    claims = {"iss": api.state.email, "sub": api.state.email, "aud": audience, "iat": now, "exp": now + 60}
    claims["jti"] = str(uuid.uuid4())
    header = b64url(json.dumps({"alg": "EdDSA", "typ": "JWT"}, separators=(",", ":")).encode())
    payload = b64url(json.dumps(claims, separators=(",", ":")).encode())
    signature = b64url(load_private_key(api.key_path()).sign(f"{header}.{payload}".encode("ascii")))
    return {"client_assertion_type": JWT_BEARER, "client_assertion": f"{header}.{payload}.{signature}"}


def _oauth_error(response: Any) -> tuple[str, str]:
    try:
        body = response.json()
    except ValueError:
        return "http", f"HTTP {response.status_code}"
    return str(body.get("error", "http")), str(body.get("error_description", ""))


def request(api: Api, body: dict[str, Any], message: str | None) -> dict[str, Any]:
    """POST /bc-authorize: the grant body as one grantd_command detail; the acknowledgement."""
    detail: dict[str, Any] = {
        "type": "grantd_command",
        "locations": [body["target_host"]],
        "actions": ["execute"],
        "command": body["command"],
        "audience": body["audience"],
        "grant_type": body["grant_type"],
    }
    for name in ("run_as", "duration", "reason"):
        if body.get(name):
            detail[name] = body[name]
    form = {
        "scope": "openid",
        "login_hint": "policy",
        "authorization_details": json.dumps([detail]),
        **client_assertion(api, f"{api.issuer}/bc-authorize"),
    }
    if message:
        form["binding_message"] = message
    url = f"{api.issuer}/bc-authorize"
    headers = {"DPoP": dpop_proof(api.key_path(), "POST", url, None, api.nonce)} if wants_dpop() else {}
    response = api.raw("POST", "/bc-authorize", data=form, headers=headers)
    if headers and api.took_nonce(response):  # the server wants its DPoP nonce: once more, with it
        form.update(client_assertion(api, url))
        headers = {"DPoP": dpop_proof(api.key_path(), "POST", url, None, api.nonce)}
        response = api.raw("POST", "/bc-authorize", data=form, headers=headers)
    if response.status_code != 200:
        error, description = _oauth_error(response)
        raise CliError(
            f"the CIBA request was refused: {error}: {description}", kind="http", status=response.status_code
        )
    return dict(expect_json(response, what="bc-authorize"))


def poll(api: Api, ack: dict[str, Any], progress: Any) -> dict[str, Any]:
    """Poll /token until the grant is decided; the token answer."""
    interval = max(1, int(ack.get("interval") or 5))
    deadline = time.monotonic() + int(ack.get("expires_in") or 600)
    while True:
        time.sleep(interval)
        form = {
            "grant_type": GRANT_TYPE,
            "auth_req_id": ack["auth_req_id"],
            **client_assertion(api, f"{api.issuer}/token"),
        }
        response = api.raw("POST", "/token", data=form)
        if response.status_code == 200:
            return dict(expect_json(response, what="token"))
        error, description = _oauth_error(response)
        if error == "authorization_pending" and time.monotonic() < deadline:
            progress("waiting for a person to decide (CIBA)")
            continue
        if error == "slow_down":
            interval += 5
            continue
        kind = "denied" if error == "access_denied" else "http"
        raise CliError(
            f"the CIBA request ended: {error}: {description}", kind=kind, status=response.status_code
        )


__all__ = ["client_assertion", "poll", "request"]
