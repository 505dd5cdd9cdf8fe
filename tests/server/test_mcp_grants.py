"""Grant-gated scopes of MCP resources (D17; beyond.md §5): authorising one creates a grant with
``mcp_tool_call`` authorization details routed by the policies; an eligible person's consent is
their vote (``via: "consent"``), otherwise the consent answers ``{pending, grant_id, poll}`` and the
poll URL answers until the redirect is ready; the token carries the grant, and a ``once`` grant is
consumed by the resource with that token at ``POST /api/grants/:id/consume``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import pytest
from inproc import InProcessServer
from mcp_support import CALLBACK, MCP_SECRET, RESOURCE, DocumentServer, mcp_config, prepare
from oauth_support import Person, authorize_params, exchange, pkce, query_of, ticket_of


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InProcessServer, DocumentServer]]:
    directory = tmp_path_factory.mktemp("mcpgrants")
    cert, key = prepare(directory)
    docs = DocumentServer(cert, key)
    srv = InProcessServer(directory, extra=mcp_config()).start()
    yield srv, docs
    srv.stop()
    docs.close()


_serial = iter(range(1, 10_000))


def consent(
    srv: InProcessServer, docs: DocumentServer, person: Person, scope: str
) -> tuple[dict[str, Any], str, dict[str, str], str]:
    """Authorize with ``scope`` for RESOURCE and allow on the consent page: (its JSON answer, the
    PKCE verifier, the request's parameters, the client_id)."""
    client_id = docs.client(f"/g/{next(_serial)}.json")
    verifier, challenge = pkce()
    params = authorize_params(client_id, CALLBACK, challenge, scope=scope, resource=RESOURCE, nonce=None)
    page = person.authorize(params)
    assert page.status_code == 200 and "data-consent" in page.text, page.text[:300]
    assert "data-grant-scopes" in page.text
    answer = person.consent(urlencode(params), ticket=ticket_of(page.text))
    assert answer.status_code == 200, answer.text
    return answer.json(), verifier, params, client_id


def token_for(srv: InProcessServer, location: str, verifier: str, client_id: str) -> dict[str, Any]:
    code = query_of(location)["code"]
    answer = exchange(srv, code, verifier, client_id=client_id, redirect_uri=CALLBACK, resource=RESOURCE)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def poll(person: Person, url: str) -> httpx.Response:
    with person.http() as http:
        return http.get(url)


def consume(srv: InProcessServer, grant_id: str, token: str) -> httpx.Response:
    return httpx.post(
        f"{srv.url}/api/grants/{grant_id}/consume", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )


def introspect(srv: InProcessServer, token: str) -> dict[str, Any]:
    answer = httpx.post(
        f"{srv.url}/introspect", data={"token": token}, auth=(RESOURCE, MCP_SECRET), timeout=10
    )
    return answer.json()  # type: ignore[no-any-return]


def test_a_person_who_may_not_approve_waits_for_an_approver(
    world: tuple[InProcessServer, DocumentServer],
) -> None:
    srv, docs = world
    person = Person(srv)
    answer, verifier, _, client_id = consent(srv, docs, person, "tools:read tools:deploy")
    assert answer["pending"] is True and answer["poll"].startswith(f"{srv.url}/authorize/poll/")
    grant_id = answer["grant_id"]
    with srv.admin() as http:
        grant = http.get(f"/api/grants/{grant_id}").json()
    assert grant["status"] == "pending" and grant["requester"] == person.email
    details = grant["request"]["authorization_details"]
    assert details[0]["type"] == "mcp_tool_call" and details[0]["locations"] == [RESOURCE]
    assert details[0]["scope"] == "tools:deploy" and details[0]["client_id"] == client_id
    assert grant["request"]["grant_type"] == "once"
    assert poll(person, answer["poll"]).json()["status"] == "pending"
    # another person cannot read someone else's poll
    assert poll(Person(srv), answer["poll"]).status_code == 404
    assert poll(person, answer["poll"]).json()["status"] == "pending"  # (and it is still there)
    with srv.admin() as http:
        assert http.post(f"/api/grants/{grant_id}/approve", json={}).status_code == 200
    ready = poll(person, answer["poll"]).json()
    assert ready["status"] == "approved"
    assert poll(person, answer["poll"]).status_code == 404  # the redirect is handed out once
    token = token_for(srv, ready["location"], verifier, client_id)
    assert token["scope"] == "tools:read tools:deploy"
    claims = jwt.decode(token["access_token"], options={"verify_signature": False})
    assert claims["grant_id"] == grant_id
    assert claims["authorization_details"][0]["type"] == "mcp_tool_call"
    found = introspect(srv, token["access_token"])
    assert found["active"] is True and found["grant_id"] == grant_id
    assert found["authorization_details"] == claims["authorization_details"]
    # a once grant: the resource consumes it with the token, once
    first = consume(srv, grant_id, token["access_token"])
    assert first.status_code == 200 and first.json()["status"] == "consumed", first.text
    again = consume(srv, grant_id, token["access_token"]).json()
    assert "error" in again and again["status"] == "consumed"
    assert introspect(srv, token["access_token"]) == {"active": False}


def test_a_denied_grant_sends_access_denied(world: tuple[InProcessServer, DocumentServer]) -> None:
    srv, docs = world
    person = Person(srv)
    answer, *_ = consent(srv, docs, person, "tools:deploy")
    with srv.admin() as http:
        assert http.post(f"/api/grants/{answer['grant_id']}/deny", json={}).status_code == 200
    done = poll(person, answer["poll"]).json()
    assert done["status"] == "denied" and query_of(done["location"])["error"] == "access_denied"


def test_an_eligible_persons_consent_is_their_vote(world: tuple[InProcessServer, DocumentServer]) -> None:
    srv, docs = world
    admin = Person(srv, admin=True)
    answer, verifier, params, client_id = consent(srv, docs, admin, "tools:read tools:deploy")
    assert "location" in answer and "pending" not in answer, answer
    token = token_for(srv, answer["location"], verifier, client_id)
    grant_id = jwt.decode(token["access_token"], options={"verify_signature": False})["grant_id"]
    with srv.admin() as http:
        grant = http.get(f"/api/grants/{grant_id}").json()
    assert grant["status"] == "approved" and grant["decided_by"] == admin.email
    votes = [a for a in grant["approvals"] if a["sub"] == admin.email]
    assert votes and votes[0]["via"] == "consent", grant["review"]
    # the grant-gated scope was not remembered: the next authorization asks (and grants) again
    page = admin.authorize({**params, "state": "again"})
    assert page.status_code == 200 and "data-grant-scopes" in page.text
    # while the non-gated scope alone is remembered
    verifier, challenge = pkce()
    plain = admin.authorize({**params, "scope": "tools:read", "code_challenge": challenge, "state": "plain"})
    assert plain.status_code == 302 and "code" in query_of(plain.headers["location"])


def test_a_resource_token_consumes_only_its_own_grant(world: tuple[InProcessServer, DocumentServer]) -> None:
    srv, docs = world
    admin = Person(srv, admin=True)
    first, verifier, _, client_id = consent(srv, docs, admin, "tools:deploy")
    token = token_for(srv, first["location"], verifier, client_id)["access_token"]
    grant_id = jwt.decode(token, options={"verify_signature": False})["grant_id"]
    second, verifier2, _, client2 = consent(srv, docs, admin, "tools:deploy")
    token2 = token_for(srv, second["location"], verifier2, client2)["access_token"]
    other_id = jwt.decode(token2, options={"verify_signature": False})["grant_id"]
    assert other_id != grant_id
    refused = consume(srv, other_id, token)  # a grant the token does not carry (D2: 403)
    assert refused.status_code == 403, refused.text
    # a token without a grant (tools:read only) consumes nothing
    plain_client = docs.client(f"/g/{next(_serial)}.json")
    v3, c3 = pkce()
    code = admin.code_for(
        authorize_params(plain_client, CALLBACK, c3, scope="tools:read", resource=RESOURCE, nonce=None)
    )
    plain = exchange(srv, code, v3, client_id=plain_client, redirect_uri=CALLBACK, resource=RESOURCE).json()
    assert consume(srv, grant_id, plain["access_token"]).status_code == 403
    # a resource token is still no bearer anywhere else at grantd
    elsewhere = httpx.get(
        f"{srv.url}/api/grants/{grant_id}", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    assert elsewhere.status_code == 401
    assert consume(srv, grant_id, token).json()["status"] == "consumed"
    assert consume(srv, other_id, token2).json()["status"] == "consumed"


def test_a_token_whose_family_ended_consumes_nothing(world: tuple[InProcessServer, DocumentServer]) -> None:
    """A replayed code ends the token's family (RFC 6749 §4.1.2): /introspect calls the token
    inactive, and consume with it is refused the same way, so the gated tool does not run."""
    srv, docs = world
    admin = Person(srv, admin=True)
    answer, verifier, _, client_id = consent(srv, docs, admin, "tools:deploy")
    code = query_of(answer["location"])["code"]
    first = exchange(srv, code, verifier, client_id=client_id, redirect_uri=CALLBACK, resource=RESOURCE)
    token = first.json()["access_token"]
    grant_id = jwt.decode(token, options={"verify_signature": False})["grant_id"]
    assert introspect(srv, token)["active"] is True
    replay = exchange(srv, code, verifier, client_id=client_id, redirect_uri=CALLBACK, resource=RESOURCE)
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    assert introspect(srv, token) == {"active": False}
    refused = consume(srv, grant_id, token)
    assert refused.status_code == 401 and "revoked" in refused.json()["detail"], refused.text
    with srv.admin() as http:
        assert http.get(f"/api/grants/{grant_id}").json()["status"] == "approved"  # not consumed


POLICY = """
[[groups]]
id = "deployers"
members = ["deployer@example.com"]

[[policies]]
id = "prod-deploy"
match.target_host = ["nothing-here-*"]
[[policies.require]]
id = "deployers"
groups = ["deployers"]
approve = 1
"""


def test_a_grant_scope_naming_a_policy_is_reviewed_by_it(tmp_path: Any) -> None:
    """The named policy reviews the grant although its match would not pick it: an administrator
    outside its group may not decide, a member may."""
    cert, key = prepare(tmp_path)
    docs = DocumentServer(cert, key)
    config = mcp_config(POLICY).replace(
        '"tools:deploy" = { grant_type = "once" }',
        '"tools:deploy" = { grant_type = "once", policy = "prod-deploy" }',
    )
    srv = InProcessServer(tmp_path, extra=config).start()
    try:
        deployer = Person(srv, "deployer@example.com")
        person = Person(srv)
        answer, verifier, _, client_id = consent(srv, docs, person, "tools:deploy")
        assert answer["pending"] is True
        grant_id = answer["grant_id"]
        admin = Person(srv, admin=True)
        with admin.http() as http:
            refused = http.post(f"/api/grants/{grant_id}/approve", json={}, headers={"Origin": srv.url})
            assert refused.status_code in (403, 404), refused.text
            review = http.get(f"/api/grants/{grant_id}").json()
        assert review["review"]["policy_ids"] == ["prod-deploy"], review["review"]
        with deployer.http() as http:
            ok = http.post(f"/api/grants/{grant_id}/approve", json={}, headers={"Origin": srv.url})
        assert ok.status_code == 200, ok.text
        ready = poll(person, answer["poll"]).json()
        assert ready["status"] == "approved"
        assert token_for(srv, ready["location"], verifier, client_id)["scope"] == "tools:deploy"
    finally:
        srv.stop()
        docs.close()
