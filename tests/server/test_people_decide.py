"""People decide (issue 10, D7, D8, D11): a signed-in person enrols their own agents, an agent's
owner or approver decides its grants (decided_by = the person), other people cannot, administrators
(admin.emails or the admin flag) decide all; people create, list and revoke delegations, and a
covered request is approved at once with decided_by = the delegator.

Sessions are started on the in-process server's loop (grantd.services.sessions.start) and sent as
the grantd_session cookie; no WebAuthn is needed here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from inproc import InProcessServer
from people_support import (
    agent_token,
    cookie_client,
    create_person,
    enrol_agent,
    fresh,
    new_public_key,
    request_grant,
    signed_in_person,
    start_session,
)

from conftest import problem


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    server = InProcessServer(tmp_path_factory.mktemp("people-decide")).start()
    try:
        yield server
    finally:
        server.stop()


def enrol_as(http: httpx.Client, **body: Any) -> httpx.Response:
    key, public = new_public_key()
    http.key = key  # type: ignore[attr-defined]
    return http.post("/api/agent/enroll", json={"publicKey": public, **body})


# -- enrolment by people (D8) -------------------------------------------------------------------------


def test_a_person_enrols_their_own_agent_with_a_default_email_and_it_signs_in(srv: InProcessServer) -> None:
    """What the /enroll page sends for the peer CLI's /enroll?name=&key=: only a name and a key."""
    domain = fresh("corp", "example").replace("@", ".")  # a domain of this test's own
    person, http = signed_in_person(srv, f"owner@{domain}")
    with http:
        r = enrol_as(http, name="Deploy Bot #1")
        assert r.status_code == 201, r.text
        agent = r.json()
        assert agent["email"] == f"agent+deploy-bot-1@{domain}"
        assert agent["owner"] == person["email"] and agent["approver"] == person["email"]
        token = agent_token(srv, agent["email"], http.key)  # type: ignore[attr-defined]
        r = enrol_as(http, name="deploy bot 1")  # the same slug: taken
        assert r.status_code == 409
    with srv.client(token) as bot:
        assert bot.get("/api/me").json()["email"] == f"agent+deploy-bot-1@{domain}"


def test_a_person_may_name_the_email_within_their_own_agent_namespace(srv: InProcessServer) -> None:
    person, http = signed_in_person(srv)
    domain = person["email"].rpartition("@")[2]
    with http:
        r = enrol_as(http, name="x", email=f"AGENT+Chosen-{person['person_id'][-6:]}@{domain}")
        assert r.status_code == 201 and r.json()["email"].startswith("agent+chosen-")
        for email in (f"someone-else@{domain}", "agent+x@other.example", f"agent+@{domain}", person["email"]):
            r = enrol_as(http, name="x", email=email)
            assert r.status_code == 403, (email, r.text)
            assert "agent+NAME@" in problem(r)["detail"]


def test_a_persons_agent_is_always_their_own(srv: InProcessServer) -> None:
    person, http = signed_in_person(srv)
    other = create_person(srv)
    with http:
        r = enrol_as(http, name="mine", owner=other["email"])
        assert r.status_code == 403 and "owner" in problem(r)["detail"]
        r = enrol_as(http, name="mine-too", owner=person["email"].upper())
        assert r.status_code == 201 and r.json()["owner"] == person["email"]


def test_a_person_names_only_themselves_as_approver(srv: InProcessServer) -> None:
    """D11 (issue 19, item 11): a plain person may not make anyone else (the first administrator
    included) the approver of their agents, so they cannot flood another person with requests."""
    me, http = signed_in_person(srv)
    approver = create_person(srv)
    owner_of_bots = create_person(srv)
    bot, _ = enrol_agent(srv, owner=owner_of_bots["email"])
    with http:
        for who in (approver["email"], "nobody-registered@example.com", bot["email"], "admin@example.com"):
            r = enrol_as(http, name="refused", approver=who)
            assert r.status_code == 403 and "approver" in problem(r)["detail"], r.text
        r = enrol_as(http, name=f"mine-{approver['person_id'][-6:]}", approver=me["email"].upper())
        assert r.status_code == 201 and r.json()["approver"] == me["email"]
        r = enrol_as(http, name=f"default-{approver['person_id'][-6:]}")
        assert r.status_code == 201 and r.json()["approver"] == me["email"]


def test_bad_enrolment_fields_from_a_person_are_400_naming_the_field(srv: InProcessServer) -> None:
    _, http = signed_in_person(srv)
    with http:
        assert problem(enrol_as(http))["field"] == "name"
        assert problem(enrol_as(http, name="!!!"))["field"] == "name"  # nothing to make an e-mail of
        r = http.post("/api/agent/enroll", json={"name": "nokey"})
        assert r.status_code == 400 and problem(r)["field"] == "publicKey"
        assert problem(enrol_as(http, name="x", email="not-an-email"))["field"] == "email"


def test_administrators_keep_todays_enrolment(srv: InProcessServer) -> None:
    owner = create_person(srv)
    _, admin = signed_in_person(srv, admin=True)
    with admin:
        r = enrol_as(
            admin, name="x", email=fresh("any-address"), owner=owner["email"], approver="carol@example.com"
        )
        assert (
            r.status_code == 201
            and r.json()["owner"] == owner["email"]
            and r.json()["approver"] == "carol@example.com"
        )
    with srv.admin() as http:
        r = http.post("/api/agent/enroll", json={"name": "x", "publicKey": new_public_key()[1]})
        assert r.status_code == 400 and problem(r)["field"] == "email"  # the token names the e-mail


def test_agents_and_strangers_cannot_enrol(srv: InProcessServer) -> None:
    owner = create_person(srv)
    _, token = enrol_agent(srv, owner=owner["email"])
    with srv.client(token) as http:
        assert enrol_as(http, name="x", email=fresh("agent+y")).status_code == 403
    with srv.client() as http:
        r = enrol_as(http, name="x", email=fresh("agent+y"))
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    with cookie_client(srv, "A" * 43) as http:  # a cookie that names no session
        assert enrol_as(http, name="x").status_code == 401


def test_enrolment_by_people_is_rate_limited_per_address(tmp_path: Path) -> None:
    server = InProcessServer(tmp_path / "limited", extra="[limits]\nenroll_per_address = 2\n").start()
    try:
        _, http = signed_in_person(server)
        with http:
            codes = [enrol_as(http, name=f"bot{i}").status_code for i in range(3)]
            assert codes == [201, 201, 429]
            assert enrol_as(http, name="bot9").headers["retry-after"]
    finally:
        server.stop()


# -- deciding -------------------------------------------------------------------------------------------


def decide(http: httpx.Client, grant_id: str, verb: str, **body: Any) -> httpx.Response:
    return http.post(f"/api/grants/{grant_id}/{verb}", json=body)


def test_the_owner_approves_with_a_session_and_is_named_the_decider(srv: InProcessServer) -> None:
    owner, http = signed_in_person(srv)
    _, token = enrol_agent(srv, owner=owner["email"], approver=create_person(srv)["email"])
    grant = request_grant(srv, token)
    with http:
        listed = http.get("/api/grants", params={"status": "pending"}).json()["data"]
        assert grant["id"] in [g["id"] for g in listed]  # the owner's inbox
        assert http.get(f"/api/grants/{grant['id']}").status_code == 200
        r = decide(http, grant["id"], "approve")
        assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["grant"]["status"] == "approved" and answer["grant"]["decided_by"] == owner["email"]
    claims = jwt.decode(answer["authz_jwt"], options={"verify_signature": False})
    assert owner["email"] in (claims.get("decided_by"), claims.get("approver"))


def test_the_approver_denies_with_a_reason(srv: InProcessServer) -> None:
    approver, http = signed_in_person(srv)
    _, token = enrol_agent(srv, owner=create_person(srv)["email"], approver=approver["email"])
    grant = request_grant(srv, token)
    with http:
        r = decide(http, grant["id"], "deny", reason="not today")
        assert r.status_code == 200, r.text
        assert (
            r.json()["grant"]["status"] == "denied" and r.json()["grant"]["decided_by"] == approver["email"]
        )
        r = decide(http, grant["id"], "approve")
        assert r.status_code == 400 and problem(r)["detail"] == "grant already decided"


def test_other_people_cannot_see_or_decide(srv: InProcessServer) -> None:
    owner = create_person(srv)
    _, token = enrol_agent(srv, owner=owner["email"])
    grant = request_grant(srv, token)
    _, stranger = signed_in_person(srv)
    with stranger:
        for verb in ("approve", "deny", "revoke"):
            r = decide(stranger, grant["id"], verb)
            assert r.status_code == 404 and problem(r)["detail"] == "grant not found", r.text
        assert stranger.get(f"/api/grants/{grant['id']}").status_code == 404
        assert grant["id"] not in [g["id"] for g in stranger.get("/api/grants").json()["data"]]
        r = stranger.post(
            "/api/grants/batch", json={"operations": [{"id": grant["id"], "action": "approve"}]}
        )
        assert r.status_code == 200 and r.json()["results"][0]["success"] is False
    with srv.client(token) as agent:  # and the requesting agent itself never decides (D11)
        assert decide(agent, grant["id"], "approve").status_code == 403
    with srv.admin() as http:
        assert http.get(f"/api/grants/{grant['id']}").json()["status"] == "pending"


def test_administrators_by_flag_or_config_decide_every_grant(srv: InProcessServer) -> None:
    _, token = enrol_agent(srv, owner=create_person(srv)["email"])
    first, second = request_grant(srv, token), request_grant(srv, token, command=["uptime"])
    _, flagged = signed_in_person(srv, admin=True)
    with flagged:
        r = decide(flagged, first["id"], "approve")
        assert r.status_code == 200 and r.json()["grant"]["decided_by"].startswith("person-")
    root = srv.call(srv.services.store.people.get("root@example.com")) or create_person(
        srv, "root@example.com"
    )
    with cookie_client(srv, start_session(srv, root["email"])) as by_config:
        r = decide(by_config, second["id"], "deny")
        assert r.status_code == 200 and r.json()["grant"]["decided_by"] == "root@example.com"


def test_a_revoked_session_decides_nothing_on_the_next_request(srv: InProcessServer) -> None:
    owner, http = signed_in_person(srv)
    _, token = enrol_agent(srv, owner=owner["email"])
    grant = request_grant(srv, token)
    with srv.admin() as admin:
        assert admin.delete(f"/api/admin/sessions/user/{owner['email']}").status_code == 200
    with http:
        assert decide(http, grant["id"], "approve").status_code == 401


# -- delegations ------------------------------------------------------------------------------------------


def test_people_create_list_and_revoke_delegations_and_covered_requests_are_approved(
    srv: InProcessServer,
) -> None:
    owner, http = signed_in_person(srv)
    agent, token = enrol_agent(srv, owner=owner["email"])
    with http:
        r = http.post(
            "/api/delegations",
            json={"delegate": agent["email"], "audience": "escapes", "approval": "once", "duration": 3600},
        )
        assert r.status_code == 201, r.text
        delegation = r.json()
        assert delegation["delegator"] == owner["email"] and delegation["delegate"] == agent["email"]
        grant = request_grant(srv, token)
        assert grant["status"] == "approved" and grant["decided_by"] == owner["email"]
        assert grant.get("delegation_id") == delegation["id"]
        listed = http.get("/api/delegations").json()["data"]
        assert [d["id"] for d in listed] == [delegation["id"]]
        r = http.delete(f"/api/delegations/{delegation['id']}")
        assert r.status_code == 200 and r.json()["status"] == "revoked"
    assert request_grant(srv, token, command=["id"])["status"] == "pending"


def test_a_person_cannot_delegate_an_agent_they_may_not_decide_nor_revoke_others_delegations(
    srv: InProcessServer,
) -> None:
    owner, owner_http = signed_in_person(srv)
    agent, _ = enrol_agent(srv, owner=owner["email"])
    _, stranger = signed_in_person(srv)
    with stranger, owner_http:
        r = stranger.post("/api/delegations", json={"delegate": agent["email"], "audience": "escapes"})
        assert r.status_code == 403
        d = owner_http.post("/api/delegations", json={"delegate": agent["email"], "audience": "x"}).json()
        assert stranger.delete(f"/api/delegations/{d['id']}").status_code == 404
        assert stranger.get("/api/delegations").json()["data"] == []
        # naming someone else as delegator is only for the management token
        r = stranger.post(
            "/api/delegations",
            json={"delegate": agent["email"], "audience": "x", "delegator": owner["email"]},
        )
        assert r.status_code == 403


def test_an_agents_token_never_creates_a_delegation(srv: InProcessServer) -> None:
    owner = create_person(srv)
    agent, token = enrol_agent(srv, owner=owner["email"])
    other, _ = enrol_agent(srv, owner=owner["email"])
    with srv.client(token) as http:
        r = http.post("/api/delegations", json={"delegate": other["email"], "audience": "escapes"})
        assert r.status_code == 403
