"""grantd as the authorization server of MCP servers (D17; docs/mcp.md), over HTTP against an
in-process server: RFC 8414 metadata, RFC 8707 resources (invalid_target), RFC 9068 tokens that
grantd's own /api refuses, Client ID Metadata Documents fetched over https with ``[oauth]
ca_file``, and RFC 7662 introspection by the resource's credential."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from inproc import InProcessServer
from mcp_support import (
    CALLBACK,
    MCP_SECRET,
    OTHER_RESOURCE,
    OTHER_SECRET,
    RESOURCE,
    DocumentServer,
    mcp_config,
    prepare,
)
from oauth_support import Person, authorize_params, exchange, pkce, query_of


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InProcessServer, DocumentServer]]:
    directory = tmp_path_factory.mktemp("mcp")
    cert, key = prepare(directory)
    docs = DocumentServer(cert, key)
    srv = InProcessServer(directory, extra=mcp_config()).start()
    yield srv, docs
    srv.stop()
    docs.close()


@pytest.fixture
def srv(world: tuple[InProcessServer, DocumentServer]) -> InProcessServer:
    return world[0]


@pytest.fixture
def docs(world: tuple[InProcessServer, DocumentServer]) -> DocumentServer:
    return world[1]


_serial = iter(range(1, 10_000))


def new_client(docs: DocumentServer, **fields: Any) -> str:
    return docs.client(f"/clients/{next(_serial)}.json", **fields)


def resource_token(
    srv: InProcessServer, docs: DocumentServer, person: Person, scope: str = "tools:read", **extra: Any
) -> dict[str, Any]:
    client_id = new_client(docs)
    verifier, challenge = pkce()
    params = authorize_params(client_id, CALLBACK, challenge, scope=scope, resource=RESOURCE, nonce=None)
    code = person.code_for(params)
    answer = exchange(
        srv, code, verifier, client_id=client_id, redirect_uri=CALLBACK, resource=RESOURCE, **extra
    )
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def introspect(
    srv: InProcessServer, token: str, user: str = RESOURCE, password: str = MCP_SECRET
) -> httpx.Response:
    return httpx.post(f"{srv.url}/introspect", data={"token": token}, auth=(user, password), timeout=10)


def test_authorization_server_metadata_names_what_mcp_clients_need(srv: InProcessServer) -> None:
    doc = httpx.get(f"{srv.url}/.well-known/oauth-authorization-server", timeout=10).json()
    oidc = httpx.get(f"{srv.url}/.well-known/openid-configuration", timeout=10).json()
    assert doc["issuer"] == srv.url
    assert doc["client_id_metadata_document_supported"] is True
    assert doc["introspection_endpoint"] == f"{srv.url}/introspect"
    assert doc["code_challenge_methods_supported"] == ["S256"]
    assert "mcp_tool_call" in doc["authorization_details_types_supported"]
    assert {"tools:read", "other:read"} <= set(doc["scopes_supported"])
    assert "tools:deploy" not in doc["scopes_supported"]  # grant-gated: asked for when challenged
    # D17: the same members as the OpenID configuration, with the same values, plus its own
    assert all(doc[k] == v for k, v in oidc.items())
    assert set(doc) - set(oidc) == {
        "client_id_metadata_document_supported",
        "introspection_endpoint",
        "introspection_endpoint_auth_methods_supported",
    }
    # dynamic client registration is not offered (D17: off unless enabled; grantd has none)
    assert "registration_endpoint" not in doc
    # (/register is the page where people register: it takes no POST)
    assert (
        httpx.post(f"{srv.url}/register", json={"redirect_uris": [CALLBACK]}, timeout=10).status_code == 405
    )


def test_a_resource_token_is_an_at_jwt_for_that_resource_alone(
    srv: InProcessServer, docs: DocumentServer
) -> None:
    person = Person(srv)
    answer = resource_token(srv, docs, person)
    assert "refresh_token" not in answer and "id_token" not in answer
    token = answer["access_token"]
    assert jwt.get_unverified_header(token)["typ"] == "at+jwt"
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["aud"] == RESOURCE
    assert claims["scope"] == "tools:read"
    assert claims["sub"] == person.email
    assert claims["client_id"].startswith("https://localhost:")
    for name in ("iss", "iat", "exp", "jti", "auth_time"):
        assert name in claims
    # never a bearer on grantd's own API or /userinfo
    for path in ("/api/grants", "/api/account/consents"):
        refused = httpx.get(f"{srv.url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert refused.status_code == 401, (path, refused.text)
    refused = httpx.get(f"{srv.url}/userinfo", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert refused.status_code == 401


def test_an_unknown_resource_is_invalid_target_at_authorize_and_token(
    srv: InProcessServer, docs: DocumentServer
) -> None:
    person = Person(srv)
    client_id = new_client(docs)
    for resource in ("https://evil.example.com/mcp", RESOURCE + "/", RESOURCE + "#x", "not a url"):
        params = authorize_params(client_id, CALLBACK, scope="tools:read", resource=resource, nonce=None)
        answer = person.authorize(params)
        assert answer.status_code == 302, answer.text
        assert query_of(answer.headers["location"])["error"] == "invalid_target", resource
    # scheme and host compare lower-case
    verifier, challenge = pkce()
    params = authorize_params(
        client_id, CALLBACK, challenge, scope="tools:read", resource="HTTPS://MCP.example.COM/mcp", nonce=None
    )
    code = person.code_for(params)
    # a token request naming another (configured) resource than the code's
    wrong = exchange(srv, code, verifier, client_id=client_id, redirect_uri=CALLBACK, resource=OTHER_RESOURCE)
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_target"
    # a resource's scope without naming the resource is unknown
    params = authorize_params(client_id, CALLBACK, scope="tools:read", nonce=None)
    assert query_of(person.authorize(params).headers["location"])["error"] == "invalid_scope"
    # and a code for no resource cannot be turned into a resource token
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(client_id, CALLBACK, challenge, scope="openid", nonce=None))
    wrong = exchange(srv, code, verifier, client_id=client_id, redirect_uri=CALLBACK, resource=RESOURCE)
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_target"


def test_a_grant_gated_scope_is_never_granted_because_it_was_asked_for(
    srv: InProcessServer, docs: DocumentServer
) -> None:
    person = Person(srv)
    client_id = new_client(docs)
    verifier, challenge = pkce()
    # no scope: the resource's scopes without a grant behind them
    code = person.code_for(
        authorize_params(client_id, CALLBACK, challenge, resource=RESOURCE, nonce=None, scope=None)
    )
    answer = exchange(srv, code, verifier, client_id=client_id, redirect_uri=CALLBACK, resource=RESOURCE)
    assert answer.status_code == 200, answer.text
    assert answer.json()["scope"] == "tools:read"


def test_a_metadata_document_whose_client_id_is_not_its_url_is_invalid_client(
    srv: InProcessServer, docs: DocumentServer
) -> None:
    honest = new_client(docs)
    liar = new_client(docs)
    docs.documents[liar.split(str(docs.port))[1]]["client_id"] = honest
    person = Person(srv)
    page = person.authorize(
        authorize_params(liar, CALLBACK, scope="tools:read", resource=RESOURCE, nonce=None)
    )
    assert page.status_code == 400 and "differs from the client_id" in page.text
    refused = exchange(srv, "x" * 43, "v" * 43, client_id=liar, redirect_uri=CALLBACK, resource=RESOURCE)
    assert refused.status_code == 401 and refused.json()["error"] == "invalid_client"


def test_metadata_documents_need_https_and_the_configured_ca(tmp_path: Path, docs: DocumentServer) -> None:
    """Without ``[oauth] ca_file`` the test CA's certificate is not trusted: the client is unknown."""
    prepare(tmp_path)
    srv = InProcessServer(tmp_path, extra=mcp_config().replace('ca_file = "ca.pem"', "")).start()
    try:
        client_id = new_client(docs)
        page = Person(srv).authorize(
            authorize_params(client_id, CALLBACK, scope="tools:read", resource=RESOURCE, nonce=None)
        )
        assert page.status_code == 400 and "Unknown client" in page.text
        assert "cannot fetch metadata" in page.text
        # an http URL is no client_id at all (only https URLs are Client ID Metadata Documents)
        plain = Person(srv).authorize(
            authorize_params(client_id.replace("https:", "http:"), CALLBACK, resource=RESOURCE, nonce=None)
        )
        assert plain.status_code == 400 and "Unknown client" in plain.text
    finally:
        srv.stop()


def test_cimd_allowed_domains_closes_the_door_to_other_hosts(tmp_path: Path, docs: DocumentServer) -> None:
    prepare(tmp_path)
    srv = InProcessServer(
        tmp_path, extra=mcp_config('\n[mcp]\ncimd_allowed_domains = ["example.org"]\n')
    ).start()
    try:
        client_id = new_client(docs)
        page = Person(srv).authorize(
            authorize_params(client_id, CALLBACK, scope="tools:read", resource=RESOURCE, nonce=None)
        )
        assert page.status_code == 400 and "Unknown client" in page.text
        assert docs.hits.get(client_id.split(str(docs.port))[1], 0) == 0  # never fetched
    finally:
        srv.stop()


THIRD_RESOURCE = "https://third.example.com/mcp"


def test_a_remembered_consent_covers_only_the_resource_it_was_given_for(tmp_path: Path) -> None:
    """D17: a resource's tokens are for it alone, and the consent page named that one resource: a
    second resource that reuses the scope's name asks again, while the first does not."""
    cert, key = prepare(tmp_path)
    docs = DocumentServer(cert, key)
    third = f"""
[[mcp.resources]]
resource = "{THIRD_RESOURCE}"
name = "Third tools"
scopes = ["tools:read"]
credential = "file:other-secret"
"""
    srv = InProcessServer(tmp_path, extra=mcp_config(third)).start()
    try:
        person, client_id = Person(srv), new_client(docs)

        def ask(resource: str) -> httpx.Response:
            return person.authorize(
                authorize_params(client_id, CALLBACK, scope="tools:read", resource=resource, nonce=None)
            )

        person.code_for(
            authorize_params(client_id, CALLBACK, scope="tools:read", resource=RESOURCE, nonce=None)
        )
        assert ask(RESOURCE).status_code == 302  # remembered for RESOURCE
        elsewhere = ask(THIRD_RESOURCE)
        assert elsewhere.status_code == 200 and "data-consent" in elsewhere.text
        assert THIRD_RESOURCE in elsewhere.text
    finally:
        srv.stop()
        docs.close()


@pytest.mark.slow
def test_a_slow_metadata_host_meets_the_overall_deadline(tmp_path: Path) -> None:
    """A document host that answers slowly is cut off by the 5 s deadline of every outbound fetch
    (its own server: the failure is remembered for the host's whole domain)."""
    import time

    cert, key = prepare(tmp_path)
    docs = DocumentServer(cert, key)
    srv = InProcessServer(tmp_path, extra=mcp_config()).start()
    try:
        client_id = new_client(docs)
        docs.drip = True  # one byte a second: no single read times out
        started = time.monotonic()
        page = Person(srv).authorize(
            authorize_params(client_id, CALLBACK, scope="tools:read", resource=RESOURCE, nonce=None)
        )
        took = time.monotonic() - started
        assert page.status_code == 400 and "Unknown client" in page.text
        assert "no complete answer within 5 s" in page.text
        assert took < 7.0, took
    finally:
        docs.drip = False
        srv.stop()
        docs.close()


def test_introspection_answers_the_resource_about_its_own_live_tokens(
    srv: InProcessServer, docs: DocumentServer
) -> None:
    person = Person(srv)
    token = resource_token(srv, docs, person)["access_token"]
    answer = introspect(srv, token)
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert found["active"] is True
    assert found["aud"] == RESOURCE and found["sub"] == person.email and found["scope"] == "tools:read"
    assert found["act"] == "human"
    # another resource learns nothing about it; an unknown token is inactive
    assert introspect(srv, token, OTHER_RESOURCE, OTHER_SECRET).json() == {"active": False}
    assert introspect(srv, "a.b.c").json() == {"active": False}
    # the resource must authenticate
    for user, password in (
        (RESOURCE, "wrong"),
        (OTHER_RESOURCE, MCP_SECRET),
        ("https://x.example/mcp", MCP_SECRET),
    ):
        refused = introspect(srv, token, user, password)
        assert refused.status_code == 401 and refused.json()["error"] == "invalid_client"
        assert refused.headers["www-authenticate"].startswith("Basic")
    assert httpx.post(f"{srv.url}/introspect", data={"token": token}, timeout=10).status_code == 401
    # inactive once its family ends (revoked by the client)
    revoked = httpx.post(
        f"{srv.url}/revoke", data={"token": token, "client_id": found["client_id"]}, timeout=10
    )
    assert revoked.status_code == 200
    assert introspect(srv, token).json() == {"active": False}


def test_introspection_is_inactive_once_the_person_is_disabled(
    srv: InProcessServer, docs: DocumentServer
) -> None:
    person = Person(srv)
    token = resource_token(srv, docs, person)["access_token"]
    assert introspect(srv, token).json()["active"] is True
    with srv.admin() as http:
        assert http.patch(f"/api/admin/users/{person.email}", json={"status": "disabled"}).status_code == 200
    assert introspect(srv, token).json() == {"active": False}


def test_basic_credentials_are_form_decoded(srv: InProcessServer, docs: DocumentServer) -> None:
    token = resource_token(srv, docs, Person(srv))["access_token"]
    from urllib.parse import quote

    raw = base64.b64encode(f"{quote(RESOURCE, safe='')}:{quote(MCP_SECRET, safe='')}".encode()).decode()
    answer = httpx.post(
        f"{srv.url}/introspect", data={"token": token}, headers={"Authorization": f"Basic {raw}"}, timeout=10
    )
    assert answer.json()["active"] is True


def test_malformed_basic_credentials_are_invalid_client(srv: InProcessServer) -> None:
    for header in (
        "Basic !!!",
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "Basic " + base64.b64encode(b"\xff\xfe:x").decode(),
        "Bearer x",
    ):
        answer = httpx.post(
            f"{srv.url}/introspect", data={"token": "a.b.c"}, headers={"Authorization": header}, timeout=10
        )
        assert answer.status_code == 401 and answer.json()["error"] == "invalid_client", header


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('resource = "ftp://x.example/mcp"\nname = "x"\nscopes = ["a"]', "mcp.resources[0].resource"),
        ('resource = "https://x.example/mcp/"\nname = "x"\nscopes = ["a"]', "mcp.resources[0].resource"),
        ('resource = "https://x.example/mcp#f"\nname = "x"\nscopes = ["a"]', "mcp.resources[0].resource"),
        ('resource = "https://x.example/mcp"\nname = "x"\nscopes = ["a b"]', "mcp.resources[0].scopes"),
        (
            'resource = "https://x.example/mcp"\nname = "x"\nscopes = ["openid"]',
            "grantd's own (OpenID) scope",
        ),
        (
            'resource = "https://x.example/mcp"\nname = "x"\nscopes = ["a"]\nsecret = "x"',
            "mcp.resources[0].secret: unknown key",
        ),
        (
            'resource = "https://x.example/mcp"\nname = "x"\nscopes = ["a"]\ncredential = "file:nope"',
            "cannot read secret file",
        ),
        (
            'resource = "https://x.example/mcp"\nname = "x"\nscopes = ["a"]\n[mcp.resources.grant_scopes]\n"b" = { grant_type = "once" }',
            "mcp.resources[0].grant_scopes.b: not one of this resource's scopes",
        ),
        (
            'resource = "https://x.example/mcp"\nname = "x"\nscopes = ["a"]\n[mcp.resources.grant_scopes]\n"a" = { policy = "nope" }',
            "mcp.resources[0].grant_scopes.a.policy: 'nope' is not the id of a [[policies]] entry",
        ),
        (
            'resource = "https://x.example/mcp"\nname = "x"\nscopes = ["a"]\n[mcp.resources.grant_scopes]\n"a" = { grant_type = "forever" }',
            "grant_type: must be one of once, timed, always",
        ),
    ],
)
def test_mcp_resources_are_checked_at_start_up(tmp_path: Path, table: str, problem: str) -> None:
    from grantd.config import ConfigError, load

    from conftest import toml_config

    (tmp_path / "management-token").write_text("x" * 32 + "\n")
    (tmp_path / "management-token").chmod(0o600)
    path = tmp_path / "grantd.toml"
    path.write_text(toml_config(8080, extra="\n[[mcp.resources]]\n" + table + "\n"))
    with pytest.raises(ConfigError) as raised:
        load(path)
    assert problem in str(raised.value), str(raised.value)


def test_oauth_ca_file_must_exist(tmp_path: Path) -> None:
    from grantd.config import ConfigError, load

    from conftest import toml_config

    (tmp_path / "management-token").write_text("x" * 32 + "\n")
    (tmp_path / "management-token").chmod(0o600)
    path = tmp_path / "grantd.toml"
    path.write_text(toml_config(8080, extra='\n[oauth]\nca_file = "missing.pem"\n'))
    with pytest.raises(ConfigError) as raised:
        load(path)
    assert "oauth.ca_file" in str(raised.value)


def test_the_consent_page_shows_the_redirect_host_the_resource_and_warns_for_loopback(
    srv: InProcessServer, docs: DocumentServer
) -> None:
    client_id = new_client(docs, client_name="Evil <b>Tool</b>\u202e")
    page = Person(srv).authorize(
        authorize_params(client_id, CALLBACK, scope="tools:read tools:deploy", resource=RESOURCE, nonce=None)
    )
    assert page.status_code == 200
    assert '<strong class="big"><code data-redirect-host>127.0.0.1:7777</code></strong>' in page.text
    assert f"<code data-resource>{RESOURCE}</code>" in page.text
    assert "data-loopback-warning" in page.text and "data-grant-scopes" in page.text
    assert "<b>Tool</b>" not in page.text and "\u202e" not in page.text
    # a client answered at a public host gets no loopback warning
    public = new_client(docs, redirect_uri="https://app.example.com/cb")
    page = Person(srv).authorize(
        authorize_params(
            public, "https://app.example.com/cb", scope="tools:read", resource=RESOURCE, nonce=None
        )
    )
    assert page.status_code == 200 and "data-loopback-warning" not in page.text
    assert "data-grant-scopes" not in page.text


def test_other_grants_never_yield_a_resource_token(srv: InProcessServer) -> None:
    # (client credentials give an agent its own resource token: tests/server/test_mcp_ciba.py)
    for grant in ("refresh_token", "urn:ietf:params:oauth:grant-type:device_code"):
        answer = httpx.post(
            f"{srv.url}/token",
            data={"grant_type": grant, "resource": RESOURCE, "client_id": "grantd-cli", "refresh_token": "x"},
            timeout=10,
        )
        assert answer.status_code == 400 and answer.json()["error"] == "invalid_target", (grant, answer.text)
