"""``grantd.resource_server`` (D17) against a real grantd: RFC 9728 metadata, the 401/403
challenges, and what ``verify`` refuses (another resource's token, grantd's own tokens, a missing
scope, an expired token, a grant-gated scope without a grant), plus the SDK ``TokenVerifier``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from inproc import InProcessServer
from mcp_support import CALLBACK, OTHER_RESOURCE, RESOURCE, DocumentServer, mcp_config, prepare
from oauth_support import Person, authorize_params, exchange, login, pkce

from grantd.resource_server import Refused, ResourceServer


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InProcessServer, DocumentServer]]:
    directory = tmp_path_factory.mktemp("rs")
    cert, key = prepare(directory)
    docs = DocumentServer(cert, key)
    srv = InProcessServer(directory, extra=mcp_config()).start()
    yield srv, docs
    srv.stop()
    docs.close()


_serial = iter(range(1, 10_000))


def token(
    srv: InProcessServer, docs: DocumentServer, resource: str = RESOURCE, scope: str = "tools:read"
) -> str:
    client_id = docs.client(f"/rs/{next(_serial)}.json")
    verifier, challenge = pkce()
    code = Person(srv).code_for(
        authorize_params(client_id, CALLBACK, challenge, scope=scope, resource=resource, nonce=None)
    )
    answer = exchange(srv, code, verifier, client_id=client_id, redirect_uri=CALLBACK, resource=resource)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


def rs_for(srv: InProcessServer) -> ResourceServer:
    return ResourceServer(
        srv.url, RESOURCE, scopes=["tools:read", "tools:deploy"], grant_scopes=["tools:deploy"]
    )


def refused(rs: ResourceServer, presented: str, **kwargs: Any) -> Refused:
    with pytest.raises(Refused) as raised:
        asyncio.run(rs.verify(presented, **kwargs))
    return raised.value


def test_metadata_and_challenges(world: tuple[InProcessServer, DocumentServer]) -> None:
    rs = rs_for(world[0])
    doc = rs.metadata()
    assert doc["resource"] == RESOURCE and doc["authorization_servers"] == [world[0].url]
    assert doc["scopes_supported"] == ["tools:read"]  # a grant-gated scope is asked for when challenged
    assert doc["bearer_methods_supported"] == ["header"]
    assert rs.metadata_url == "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
    assert rs.challenge() == (
        'Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", '
        'scope="tools:read"'
    )
    forbidden = rs.challenge("insufficient_scope", "tools:read tools:deploy", 'a "quoted"\nthing')
    assert 'error="insufficient_scope"' in forbidden and 'scope="tools:read tools:deploy"' in forbidden
    assert 'error_description="a quotedthing"' in forbidden  # quotes and control characters dropped


def test_verify_takes_only_this_resources_live_tokens(world: tuple[InProcessServer, DocumentServer]) -> None:
    srv, docs = world
    rs = rs_for(srv)
    claims = asyncio.run(rs.verify(token(srv, docs), scopes=["tools:read"]))
    assert claims["aud"] == RESOURCE and claims["scope"] == "tools:read"
    assert refused(rs, token(srv, docs, OTHER_RESOURCE, "other:read")).error == "invalid_token"
    # grantd's own tokens: an API access token (at+jwt, another audience) and an ID token
    person = Person(srv)
    own = login(srv, person)
    assert refused(rs, own["access_token"]).error == "invalid_token"
    assert refused(rs, own["id_token"]).error == "invalid_token"
    assert refused(rs, "not.a.token").error == "invalid_token"
    # a scope the token lacks: 403 insufficient_scope naming what to ask for
    lacking = refused(rs, token(srv, docs), scopes=["tools:deploy"])
    assert lacking.status == 403 and lacking.error == "insufficient_scope"
    assert lacking.scope == "tools:deploy tools:read"
    # another issuer's metadata: the same token is refused
    elsewhere = ResourceServer(srv.url + "/x", RESOURCE, scopes=["tools:read"])
    assert refused(elsewhere, token(srv, docs)).error == "invalid_token"


def test_an_expired_token_is_refused(world: tuple[InProcessServer, DocumentServer]) -> None:
    srv, docs = world
    srv.clock.advance(-3 * 3600)  # minted three hours ago (access_token_ttl 600)
    try:
        old = token(srv, docs)
    finally:
        srv.clock.advance(3 * 3600)
    assert "expired" in refused(rs_for(srv), old).description


def test_the_sdk_token_verifier(world: tuple[InProcessServer, DocumentServer]) -> None:
    srv, docs = world
    verifier = rs_for(srv).token_verifier()
    presented = token(srv, docs)
    access = asyncio.run(verifier.verify_token(presented))
    assert access is not None
    assert access.resource == RESOURCE and access.scopes == ["tools:read"]
    assert access.client_id.startswith("https://localhost:") and access.expires_at > time.time()
    assert asyncio.run(verifier.verify_token("garbage")) is None
    assert asyncio.run(verifier.verify_token(token(srv, docs, OTHER_RESOURCE, "other:read"))) is None


def test_a_dpop_bound_token_needs_a_fresh_proof_of_its_key(
    world: tuple[InProcessServer, DocumentServer],
) -> None:
    """A token with ``cnf.jkt`` (minted here straight by grantd's token service: /token binding
    resource tokens is issue 25's) is good only with a DPoP proof by that key, for this request,
    once."""
    import uuid

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from grantd.dpop import make_proof, thumbprint_of_raw

    srv = world[0]
    person = srv.call(srv.services.store.people.get(Person(srv).email))
    key, stranger = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    bound = srv.call(
        srv.services.tokens.mint_resource_access(
            person,
            resource=RESOURCE,
            claims={
                "client_id": "c",
                "scope": "tools:read",
                "sid": "",
                "auth_time": 1,
                "cnf": {"jkt": thumbprint_of_raw(raw)},
            },
            ttl=600,
        )
    )
    rs = rs_for(srv)

    def proof(signer: Any = key, url: str = RESOURCE, method: str = "POST") -> str:
        return make_proof(
            signer, method=method, url=url, iat=int(time.time()), jti=str(uuid.uuid4()), access_token=bound
        )

    assert "DPoP" in refused(rs, bound).description  # no proof at all
    assert "DPoP" in refused(rs, bound, dpop=proof(stranger)).description
    assert "DPoP" in refused(rs, bound, dpop=proof(url="https://elsewhere.example/mcp")).description
    assert "DPoP" in refused(rs, bound, dpop=proof(method="GET")).description
    good = proof()
    assert asyncio.run(rs.verify(bound, dpop=good))["cnf"]["jkt"] == thumbprint_of_raw(raw)
    assert "DPoP" in refused(rs, bound, dpop=good).description  # a proof counts once
    # the SDK's verifier sees no proof: a bound token is refused there
    assert asyncio.run(rs.token_verifier().verify_token(bound)) is None


def test_the_sdk_auth_settings_keep_the_issuer_as_grantd_names_it(
    world: tuple[InProcessServer, DocumentServer],
) -> None:
    """RFC 8414 compares issuers as strings: a trailing slash added to a path-less issuer makes the
    SDK client refuse grantd's metadata."""
    settings = rs_for(world[0]).auth_settings()
    assert str(settings.issuer_url) == world[0].url
    assert str(settings.resource_server_url) == RESOURCE
    assert settings.required_scopes == ["tools:read"] and settings.validate_token_resource is True


def test_tool_guard_lets_through_only_calls_with_their_scope(
    world: tuple[InProcessServer, DocumentServer],
) -> None:
    """The ASGI guard on its own (a tiny app behind it): a listed tool needs its scope (401 without a
    token, 403 insufficient_scope without the scope, naming it), anything else passes untouched,
    with its body."""
    import json

    srv, docs = world
    rs = rs_for(srv)
    seen: list[bytes] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        message = await receive()
        seen.append(message["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    guarded = rs.tool_guard(app, {"deploy": "tools:deploy", "hello": "tools:read"})

    def call(body: bytes, token: str | None = None) -> tuple[int, dict[str, str]]:
        headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
        sent: list[dict[str, Any]] = []
        chunks = [body[: len(body) // 2], body[len(body) // 2 :]]

        async def receive() -> dict[str, Any]:
            part = chunks.pop(0)
            return {"type": "http.request", "body": part, "more_body": bool(chunks)}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
        asyncio.run(guarded(scope, receive, send))
        start = sent[0]
        return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}

    def rpc(name: str) -> bytes:
        return json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name}}
        ).encode()

    read_token = token(srv, docs)
    status, headers = call(rpc("deploy"))
    assert status == 401 and 'resource_metadata="' in headers["www-authenticate"]
    status, headers = call(rpc("deploy"), read_token)
    assert status == 403
    assert 'error="insufficient_scope"' in headers["www-authenticate"]
    assert 'scope="tools:deploy tools:read"' in headers["www-authenticate"]
    batch = b"[" + rpc("hello") + b"," + rpc("deploy") + b"]"
    assert call(batch, read_token)[0] == 403  # a batch is judged call by call
    assert call(rpc("hello"), read_token)[0] == 200
    assert call(rpc("unlisted"))[0] == 200  # not listed: the app's own auth decides
    assert seen == [rpc("hello"), rpc("unlisted")]  # the app got the bodies whole
