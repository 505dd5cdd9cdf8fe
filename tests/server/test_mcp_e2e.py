"""The whole MCP story with real parts (D17; issue 26): a real MCP server (the official SDK's
``MCPServer``, FastMCP's successor, on uvicorn) protected by ``grantd.resource_server``; the SDK's
own, unmodified ``OAuthClientProvider`` with a Client ID Metadata Document served over https by
the test; a person registered and signed in by passkey (a software authenticator); grantd in
process. The client discovers grantd from the MCP server's 401, runs code + PKCE, calls a tool."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from inproc import InProcessServer
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp_support import DocumentServer, mcp_config, prepare
from oauth_support import ticket_of
from support.soft_webauthn import PasskeyBrowser

from grantd.resource_server import ResourceServer

from conftest import free_port

CALLBACK = "http://127.0.0.1:7777/callback"


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class McpApp:
    """An MCP server on 127.0.0.1 (uvicorn in a thread): ``hello`` needs tools:read, ``deploy``
    the grant-gated tools:deploy."""

    def __init__(self, issuer: str) -> None:
        import uvicorn

        self.port = free_port()
        self.resource = f"http://127.0.0.1:{self.port}/mcp"
        self.deployed: list[str] = []
        self.rs = ResourceServer(
            issuer, self.resource, scopes=["tools:read", "tools:deploy"], grant_scopes=["tools:deploy"]
        )
        tools = {"deploy": "tools:deploy"}
        server = MCPServer(
            "Deploy tools",
            token_verifier=self.rs.token_verifier(),
            auth=self.rs.auth_settings(),
            middleware=[self.rs.grant_middleware(tools)],  # the grant is used as the tool runs
        )

        @server.tool()
        def hello(name: str) -> str:
            return f"hello {name}"

        @server.tool()
        def deploy(service: str) -> str:
            self.deployed.append(service)
            return f"deployed {service}"

        app = self.rs.tool_guard(server.streamable_http_app(), tools)
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert time.monotonic() < deadline, "the MCP server did not start"
            time.sleep(0.05)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def resource_config(resource: str) -> str:
    return mcp_config().replace("https://mcp.example.com/mcp", resource)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    cert, key = prepare(tmp_path)
    docs = DocumentServer(cert, key)
    port = free_port()
    # the MCP server needs grantd's URL and grantd the MCP server's: the resource is fixed first
    app = None
    srv = None
    try:
        srv_dir = tmp_path
        placeholder = f"http://127.0.0.1:{port}/mcp"
        srv = InProcessServer(srv_dir, extra=resource_config(placeholder))
        app = McpApp(srv.url)
        srv.config_path.write_text(srv.config_path.read_text().replace(placeholder, app.resource))
        srv.start()
        yield {"srv": srv, "docs": docs, "app": app, "dir": tmp_path}
    finally:
        if srv is not None:
            srv.stop()
        if app is not None:
            app.close()
        docs.close()


def passkey_person(srv: InProcessServer) -> PasskeyBrowser:
    """A person registered with a passkey and signed in with it (a new session from login/verify)."""
    with srv.admin() as http:
        created = http.post(
            "/api/admin/registration-urls", json={"email": f"mcp-{time.monotonic_ns()}@example.com"}
        )
    assert created.status_code == 201, created.text
    browser = PasskeyBrowser(srv.url, srv.url)
    assert browser.register(created.json()["token"]).status_code == 200
    browser.cookie = None
    signed_in = browser.login()
    assert signed_in.status_code == 200, signed_in.text
    assert browser.cookie
    return browser


class PersonAtBrowser:
    """The SDK's redirect and callback handlers: the person's browser opens the authorization URL,
    approves on the consent page (its JSON POST, as the page's script does), and the redirect's
    query comes back to the client."""

    def __init__(self, browser: PasskeyBrowser, srv: InProcessServer | None = None) -> None:
        self.browser = browser
        self.srv = srv
        self.location: str | None = None
        self.authorize_urls: list[str] = []
        self.consent_pages: list[str] = []
        self.grants: list[str] = []
        self.decisions: list[str] = []  # what an administrator answers each pending grant, in order

    def _open(self, url: str) -> None:
        parts = urlsplit(url)
        answer = self.browser.request("GET", f"{parts.path}?{parts.query}", follow_redirects=False)
        if answer.status_code == 200 and "data-consent" in answer.text:
            self.consent_pages.append(answer.text)
            answer = self.browser.request(
                "POST",
                "/authorize/consent",
                json_body={"request": parts.query, "approve": True, "ticket": ticket_of(answer.text)},
            )
            assert answer.status_code == 200, answer.text
            found = answer.json()
            if found.get("pending"):  # a grant-gated scope: an approver decides, the page polls
                self.grants.append(found["grant_id"])
                poll = urlsplit(found["poll"]).path
                assert self.browser.request("GET", poll).json()["status"] == "pending"
                assert self.srv is not None
                with self.srv.admin() as http:
                    decided = http.post(f"/api/grants/{found['grant_id']}/{self.decisions.pop(0)}", json={})
                assert decided.status_code == 200, decided.text
                found = self.browser.request("GET", poll).json()
            self.location = found["location"]
        else:
            assert answer.status_code in (302, 303), (answer.status_code, answer.text[:300])
            self.location = answer.headers["location"]

    async def redirect(self, url: str) -> None:
        self.authorize_urls.append(url)
        await asyncio.to_thread(self._open, url)

    async def callback(self) -> AuthorizationCodeResult:
        assert self.location is not None
        query = {k: v[0] for k, v in parse_qs(urlsplit(self.location).query).items()}
        return AuthorizationCodeResult(
            code=query.get("code", ""), state=query.get("state"), iss=query.get("iss")
        )


def test_the_official_sdk_client_discovers_grantd_signs_in_by_passkey_and_calls_a_tool(
    world: dict[str, Any],
) -> None:
    srv, docs, app = world["srv"], world["docs"], world["app"]
    client_id = docs.client("/mcp-client.json", client_name="An MCP client", redirect_uri=CALLBACK)
    person = PersonAtBrowser(passkey_person(srv))
    storage = MemoryStorage()
    provider = OAuthClientProvider(
        server_url=app.resource,
        client_metadata=OAuthClientMetadata(
            client_name="An MCP client", redirect_uris=[CALLBACK], token_endpoint_auth_method="none"
        ),
        storage=storage,
        redirect_handler=person.redirect,
        callback_handler=person.callback,
        client_metadata_url=client_id,
    )

    async def run() -> str:
        import httpx2

        async with httpx2.AsyncClient(auth=provider, timeout=30) as http:
            async with streamable_http_client(app.resource, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    result = await session.call_tool("hello", {"name": "grantd"})
                    return str(result.content[0].text)  # type: ignore[union-attr]

    assert asyncio.run(run()) == "hello grantd"
    # what happened on the way: the client found grantd from the 401, used its metadata document
    # as client_id, asked for the resource and only its non-gated scope, and got an at+jwt for it
    (url,) = person.authorize_urls
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    assert url.startswith(f"{srv.url}/authorize?")
    assert query["client_id"] == client_id and query["resource"] == app.resource
    # (the SDK adds offline_access when grantd lists it; a resource token carries only the
    # resource's scopes, and never the grant-gated one the client did not ask for)
    assert set(query["scope"].split()) - {"offline_access"} == {"tools:read"}
    assert query["code_challenge_method"] == "S256"
    assert docs.hits["/mcp-client.json"] >= 1
    assert storage.tokens is not None and storage.tokens.scope == "tools:read"
    assert "127.0.0.1" in person.consent_pages[0]  # the redirect host is shown
    import jwt

    claims = jwt.decode(storage.tokens.access_token, options={"verify_signature": False})
    assert claims["aud"] == app.resource and claims["client_id"] == client_id
    # the same token is no bearer at grantd's own API
    refused = httpx.get(
        f"{srv.url}/api/grants",
        headers={"Authorization": f"Bearer {storage.tokens.access_token}"},
        timeout=10,
    )
    assert refused.status_code == 401


def test_a_grant_gated_tool_needs_a_persons_grant_and_a_once_grant_works_once(world: dict[str, Any]) -> None:
    """deploy: 403 insufficient_scope -> the SDK re-authorises with tools:deploy -> grantd makes a
    grant (mcp_tool_call) -> an administrator approves -> the call works; the next deploy needs a
    new grant (the once grant was consumed by the MCP server), which is denied here."""
    srv, docs, app = world["srv"], world["docs"], world["app"]
    client_id = docs.client("/mcp-client.json", client_name="An MCP client", redirect_uri=CALLBACK)
    person = PersonAtBrowser(passkey_person(srv), srv)
    person.decisions = ["approve", "deny"]
    provider = OAuthClientProvider(
        server_url=app.resource,
        client_metadata=OAuthClientMetadata(
            client_name="An MCP client", redirect_uris=[CALLBACK], token_endpoint_auth_method="none"
        ),
        storage=MemoryStorage(),
        redirect_handler=person.redirect,
        callback_handler=person.callback,
        client_metadata_url=client_id,
    )
    outcomes: list[str] = []

    async def run() -> None:
        import httpx2

        async with httpx2.AsyncClient(auth=provider, timeout=30) as http:
            async with streamable_http_client(app.resource, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    assert (await session.call_tool("hello", {"name": "x"})).content[0].text == "hello x"  # type: ignore[union-attr]
                    first = await session.call_tool("deploy", {"service": "web"})
                    outcomes.append(str(first.content[0].text))  # type: ignore[union-attr]
                    await session.call_tool("deploy", {"service": "db"})
                    outcomes.append("second deploy ran")

    # the denied grant ends the SDK's flow with an error (no code: access_denied), out of the session
    with pytest.raises(BaseException) as raised:  # noqa: PT011 - an ExceptionGroup around OAuthFlowError
        asyncio.run(run())
    leaves = list(_leaves(raised.value))
    assert any(isinstance(e, OAuthFlowError) and "No authorization code" in str(e) for e in leaves), leaves
    outcomes.append("refused")
    assert outcomes[0] == "deployed web"
    assert outcomes[1].startswith("refused"), outcomes
    assert app.deployed == ["web"]
    assert len(person.grants) == 2
    with srv.admin() as http:
        first, second = (http.get(f"/api/grants/{g}").json() for g in person.grants)
    assert first["status"] == "consumed" and second["status"] == "denied"
    assert first["request"]["authorization_details"][0]["type"] == "mcp_tool_call"
    assert first["request"]["authorization_details"][0]["locations"] == [app.resource]
    # the step-up asked for the gated scope by name, and the first sign-in did not
    scopes = [set(parse_qs(urlsplit(u).query)["scope"][0].split()) for u in person.authorize_urls]
    assert "tools:deploy" not in scopes[0] and "tools:deploy" in scopes[1]
