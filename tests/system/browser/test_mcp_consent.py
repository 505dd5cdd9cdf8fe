"""A grant-gated MCP scope in Chromium (D17): the person allows on the consent page, the page waits
for an approver ("Waiting for an approver…", polling), an administrator approves, and the page
goes on to the client with a code for a token that carries the grant."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import jwt
import pytest
from mcp_support import RESOURCE, DocumentServer, mcp_config, prepare
from oauth_support import MetadataServer, authorize_params, exchange, pkce, query_of
from playwright.sync_api import expect

from conftest import Server
from system.browser.conftest import localhost_server, registration_url, shoot


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Server, DocumentServer, MetadataServer]]:
    directory = tmp_path_factory.mktemp("mcp-browser")
    cert, key = prepare(directory)
    docs = DocumentServer(cert, key)
    client = MetadataServer()  # its /api/callback is the MCP client's redirect URI
    server = localhost_server(directory, extra=mcp_config()).start()
    yield server, docs, client
    server.stop()
    client.close()
    docs.close()


def test_the_consent_page_waits_for_the_grant_and_goes_on_when_approved(world: Any, new_person: Any) -> None:
    server, docs, client = world
    client_id = docs.client(
        "/browser-client.json", client_name="An MCP client", redirect_uri=client.redirect_uri
    )
    person = new_person(server)
    person.register(registration_url(server, person.email, name="Pat Example"))
    verifier, challenge = pkce()
    params = authorize_params(
        client_id,
        client.redirect_uri,
        challenge,
        scope="tools:read tools:deploy",
        resource=RESOURCE,
        nonce=None,
    )
    person.goto("/authorize?" + urlencode(params))
    expect(
        person.page.get_by_role("heading", name="An MCP client wants to use Deploy tools for you")
    ).to_be_visible()
    expect(person.page.locator("[data-grant-scopes]")).to_contain_text("tools:deploy")
    expect(person.page.locator("[data-redirect-host]")).to_have_text(re.compile(r"127\.0\.0\.1:\d+"))
    expect(person.page.locator("[data-loopback-warning]")).to_be_visible()
    person.page.get_by_role("button", name="Allow").click()
    expect(person.page.locator("[data-grant-status]")).to_contain_text("Waiting for an approver")
    shoot(person, "mcp-consent-waiting")
    assert client.callbacks == []
    with server.admin() as http:
        pending = [
            g
            for g in http.get("/api/grants", params={"status": "pending"}).json()["data"]
            if g["requester"] == person.email
        ]
        assert len(pending) == 1, pending
        assert http.post(f"/api/grants/{pending[0]['id']}/approve", json={}).status_code == 200
    expect(person.page).to_have_url(re.compile(re.escape(client.redirect_uri) + r"\?code="), timeout=15_000)
    found = query_of(client.callbacks[-1])
    answer = exchange(
        server,
        found["code"],
        verifier,
        client_id=client_id,
        redirect_uri=client.redirect_uri,
        resource=RESOURCE,
    )
    assert answer.status_code == 200, answer.text
    claims = jwt.decode(answer.json()["access_token"], options={"verify_signature": False})
    assert claims["grant_id"] == pending[0]["id"] and claims["aud"] == RESOURCE
