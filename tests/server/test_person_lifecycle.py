"""Issue 19 ("The people half under attack"), items 1, 2, 11 and the trailing-dot e-mail: each test
replays the attack against a real in-process server on a real store.

1. A disabled or deleted person kept their own approved grants (verify valid, consume valid, root
   for up to 30 days), their sessions, refresh families, delegations and event streams.
2. A person re-created with a deleted person's e-mail (by an administrator, or by federation's
   ``create_unknown``) approved the old owner's agents' grants and was auto-approved by the
   delegations that named the old person.
11. A plain person enrolled any number of agents, each naming anyone (the first administrator
   included) as approver, each with 100 pending grants.
12. ``alice@example.com.`` was taken as an identifier next to ``alice@example.com``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from inproc import InProcessServer
from people_support import (
    SESSION_COOKIE,
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

from grantd.core.fields import is_email
from grantd.hookspecs import FederatedIdentity, FederationError
from grantd.plugin_manager import FederationProvider
from grantd.services import federation

from authz_world import NO_LIMITS
from conftest import problem

COMMAND = {
    "target_host": "web-1",
    "audience": "escapes",
    "command": ["bash"],
    "grant_type": "timed",
    "duration": 2_592_000,
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    server = InProcessServer(tmp_path_factory.mktemp("person-lifecycle"), extra=NO_LIMITS).start()
    try:
        yield server
    finally:
        server.stop()


def _admin(srv: InProcessServer, method: str, path: str, **kwargs: Any) -> httpx.Response:
    with srv.admin() as http:
        return http.request(method, path, **kwargs)


def _approve(srv: InProcessServer, grant_id: str) -> str:
    r = _admin(srv, "POST", f"/api/grants/{grant_id}/approve", json={})
    assert r.status_code == 200, r.text
    return str(r.json()["authz_jwt"])


def _verify(srv: InProcessServer, token: str) -> dict[str, Any]:
    with srv.client() as http:
        r = http.post("/api/grants/verify", json={"token": token})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def _consume(srv: InProcessServer, grant_id: str, token: str) -> dict[str, Any]:
    with srv.client(token) as http:
        r = http.post(f"/api/grants/{grant_id}/consume")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def _retire(srv: InProcessServer, person: dict[str, Any], how: str) -> None:
    if how == "disable":
        r = _admin(srv, "PATCH", f"/api/admin/users/{person['email']}", json={"status": "disabled"})
    else:
        r = _admin(srv, "DELETE", f"/api/admin/users/{person['email']}")
    assert r.status_code == 200, r.text


class CookieStream:
    """GET /api/grants/events with a session cookie, followed in a thread until the server ends it."""

    def __init__(self, srv: InProcessServer, cookie: str):
        self.opened = threading.Event()
        self.status: int | None = None
        self._thread = threading.Thread(target=self._run, args=(srv.url, cookie), daemon=True)
        self._thread.start()
        assert self.opened.wait(15), "the event stream did not open"

    def _run(self, url: str, cookie: str) -> None:
        try:
            with (
                httpx.Client(
                    base_url=url, cookies={SESSION_COOKIE: cookie}, timeout=httpx.Timeout(10, read=30)
                ) as http,
                http.stream("GET", "/api/grants/events") as response,
            ):
                self.status = response.status_code
                self.opened.set()
                for _ in response.iter_lines():
                    pass
        except httpx.HTTPError:
            pass
        finally:
            self.opened.set()

    def ended_within(self, seconds: float) -> bool:
        self._thread.join(seconds)
        return not self._thread.is_alive()


# -- item 1: a disabled or deleted person keeps nothing ---------------------------------------------


@pytest.mark.parametrize("how", ["disable", "delete"])
def test_a_retired_persons_own_root_grant_sessions_delegations_and_streams_end(
    srv: InProcessServer, how: str
) -> None:
    person = create_person(srv)
    cookie = start_session(srv, person["email"])
    with cookie_client(srv, cookie) as http:
        r = http.post("/api/grants", json=COMMAND)
        assert r.status_code == 201, r.text
        approved_id = r.json()["id"]
        r = http.post("/api/grants", json={**COMMAND, "command": ["id"], "grant_type": "once"})
        pending_id = r.json()["id"]
    authz = _approve(srv, approved_id)
    assert _verify(srv, authz)["valid"] is True
    # the delegations they made (for their own agent) and one that names them as delegate
    bot, _ = enrol_agent(srv, owner=person["email"])
    with cookie_client(srv, cookie) as http:
        made = http.post("/api/delegations", json={"delegate": bot["email"], "audience": "escapes"})
    assert made.status_code == 201, made.text
    named = _admin(srv, "POST", "/api/delegations", json={"delegate": person["email"], "audience": "escapes"})
    assert named.status_code == 201, named.text
    # a refresh family of theirs (OAuth), as the token endpoint stores it
    family = f"rtf_{how}"
    now = srv.clock.now_ms()
    srv.call(
        srv.services.store.refresh_tokens.create(
            {
                "token_hash": f"{how}-{person['person_id']}",
                "family_id": family,
                "client_id": "apes-cli",
                "person_id": person["person_id"],
                "scope": "openid",
                "auth_time": now // 1000,
                "created_at": now,
                "expires_at": now + 86_400_000,
                "used_at": None,
                "revoked_at": None,
            }
        )
    )
    record = srv.call(srv.services.store.people.get(person["person_id"]))
    access = srv.call(
        srv.services.tokens.mint_access(
            record, client_id="apes-cli", api_access=True, scope="openid", sid=family, ttl=3600
        )
    )
    with srv.client(access) as bearer:
        assert bearer.get("/api/me").status_code == 200
    stream = CookieStream(srv, cookie)
    assert stream.status == 200
    seq = srv.call(srv.services.store.grants.last_event_seq())

    _retire(srv, person, how)

    verdict = _verify(srv, authz)
    assert verdict["valid"] is False and verdict["error"] == "revoked", verdict
    assert _consume(srv, approved_id, authz) == {"error": "revoked", "status": "revoked"}
    for gid in (approved_id, pending_id):
        grant = _admin(srv, "GET", f"/api/grants/{gid}").json()
        assert grant["status"] == "revoked" and grant["revoked_by"] == "admin@example.com", grant
    events = srv.call(srv.services.store.grants.events_after(seq, 100))
    assert {(e["event"], e["grant_id"]) for e in events} >= {
        ("grant.revoked", approved_id),
        ("grant.revoked", pending_id),
    }
    for delegation in (made.json(), named.json()):
        ended = srv.call(srv.services.store.delegations.get(delegation["id"]))
        assert (ended["status"], ended["revoked_by"]) == ("revoked", "admin@example.com"), ended
    assert not srv.call(srv.services.store.refresh_tokens.family_live(family, srv.clock.now_ms()))
    with srv.client(access) as bearer:
        assert bearer.get("/api/me").status_code == 401
    assert stream.ended_within(5), "the retired person's event stream stayed open"
    with cookie_client(srv, cookie) as dead:
        assert dead.get("/api/me").status_code == 401
        assert dead.post("/api/grants", json=COMMAND).status_code == 401


def test_re_enabling_a_person_brings_no_grant_back(srv: InProcessServer) -> None:
    person, http = signed_in_person(srv)
    with http:
        grant_id = http.post("/api/grants", json=COMMAND).json()["id"]
    authz = _approve(srv, grant_id)
    _retire(srv, person, "disable")
    r = _admin(srv, "PATCH", f"/api/admin/users/{person['email']}", json={"status": "active"})
    assert r.status_code == 200 and r.json()["status"] == "active"
    assert _verify(srv, authz)["valid"] is False


# -- item 2: a recycled e-mail inherits nothing ------------------------------------------------------


def test_a_person_recreated_with_a_deleted_owners_email_decides_nothing(srv: InProcessServer) -> None:
    owner = create_person(srv)
    bot, bot_token = enrol_agent(srv, owner=owner["email"])
    before = request_grant(srv, bot_token)
    assert _admin(srv, "DELETE", f"/api/admin/users/{owner['email']}").status_code == 200
    # the agent is shown to administrators as ownerless, its grants wait for them
    shown = _admin(srv, "GET", f"/api/admin/agents/{bot['agent_id']}").json()
    assert (shown["owner_state"], shown["approver_state"], shown["ownerless"]) == ("deleted", "deleted", True)
    listed = _admin(srv, "GET", "/api/admin/agents", params={"limit": 100}).json()["data"]
    assert next(a for a in listed if a["agent_id"] == bot["agent_id"])["ownerless"] is True
    _, admin_page = signed_in_person(srv, admin=True)
    with admin_page:
        html = admin_page.get("/admin").text
    row = html[html.index(f'data-agent="{bot["agent_id"]}"') :]
    row = row[: row.index("</tr>")]
    assert ">deleted</span>" in row and ">ownerless</span>" in row

    newcomer, http = signed_in_person(srv, owner["email"])  # an administrator re-creates the address
    assert newcomer["person_id"] != owner["person_id"]
    after = request_grant(srv, bot_token)
    with http:
        for grant in (before, after):
            r = http.post(f"/api/grants/{grant['id']}/approve", json={})
            assert r.status_code in (403, 404), r.text
            assert http.get(f"/api/grants/{grant['id']}").status_code == 404
        assert http.get("/api/grants", params={"limit": 100}).json()["data"] == []
        r = http.post("/api/delegations", json={"delegate": bot["email"], "audience": "*"})
        assert r.status_code == 403, r.text
    assert _admin(srv, "GET", f"/api/grants/{after['id']}").json()["status"] == "pending"
    assert _admin(srv, "POST", f"/api/grants/{after['id']}/approve", json={}).status_code == 200


def test_delegations_of_and_to_a_deleted_person_never_approve_for_a_newcomer(srv: InProcessServer) -> None:
    owner, owner_http = signed_in_person(srv)
    bot, bot_token = enrol_agent(srv, owner=owner["email"])
    with owner_http:
        made = owner_http.post(
            "/api/delegations", json={"delegate": bot["email"], "audience": "*", "approval": "always"}
        )
    assert made.status_code == 201
    delegate = create_person(srv)
    named = _admin(
        srv,
        "POST",
        "/api/delegations",
        json={"delegate": delegate["email"], "audience": "*", "approval": "always"},
    )
    assert named.status_code == 201
    # today both approve at once
    assert request_grant(srv, bot_token, audience="before")["status"] == "approved"
    for person in (owner, delegate):
        assert _admin(srv, "DELETE", f"/api/admin/users/{person['email']}").status_code == 200
    srv.clock.advance(1)  # the newcomers come later than the delegations (the test's clock stands still)
    create_person(srv, owner["email"])
    _, newcomer = signed_in_person(srv, delegate["email"])
    assert request_grant(srv, bot_token, audience="after")["status"] == "pending"
    with newcomer:
        r = newcomer.post("/api/grants", json={**COMMAND, "audience": "after"})
        assert r.status_code == 201 and r.json()["status"] == "pending", r.text
        # nor do they see, validate or delete them: they inherit nothing (D11)
        assert newcomer.get("/api/delegations").json()["data"] == []
        validated = newcomer.post(
            f"/api/delegations/{named.json()['id']}/validate",
            json={"delegate": delegate["email"], "audience": "x"},
        )
        assert validated.status_code == 404, validated.text
    with cookie_client(srv, start_session(srv, owner["email"])) as again:
        assert again.get("/api/delegations").json()["data"] == []
        assert again.delete(f"/api/delegations/{made.json()['id']}").status_code == 404


class _Provider:
    create_unknown = True
    allowed_domains: tuple[str, ...] = ()


def _federated(srv: InProcessServer, email: str) -> dict[str, Any]:
    entry = FederationProvider(id="corp", type="oidc", name="Corp", provider=_Provider())
    identity = FederatedIdentity(subject="sub-" + email, email=email, email_verified=True, name="Someone")
    return srv.call(federation.person_for(srv.services, entry, identity))  # type: ignore[no-any-return]


def test_federation_never_creates_a_person_whose_email_still_names_an_owner_approver_or_delegate(
    srv: InProcessServer,
) -> None:
    owner = create_person(srv)
    approver = fresh("approver")
    bot, _ = enrol_agent(srv, owner=owner["email"], approver=approver)
    delegate = fresh("delegate")
    assert (
        _admin(srv, "POST", "/api/delegations", json={"delegate": delegate, "audience": "*"}).status_code
        == 201
    )
    assert _admin(srv, "DELETE", f"/api/admin/users/{owner['email']}").status_code == 200
    for email in (owner["email"], approver, delegate):
        with pytest.raises(FederationError) as refused:
            _federated(srv, email)
        assert refused.value.status == 403 and "administrator" in str(refused.value)
        assert srv.call(srv.services.store.people.get(email)) is None
    # an address nothing names is created as before
    assert _federated(srv, fresh("newcomer"))["status"] == "active"
    with pytest.raises(FederationError):
        _federated(srv, "someone@example.com.")


# -- item 11: approval floods ------------------------------------------------------------------------


CAPS = """
[limits]
enroll_per_address = 0
grants_per_agent = 0
pending_per_agent = 0
authenticate_per_agent = 0
authenticate_per_address = 0
agents_per_person = 2
pending_per_owner = 3
"""


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    server = InProcessServer(tmp_path_factory.mktemp("person-caps"), extra=CAPS).start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Mine:
    agent_id: str
    token: str


def _enrol_mine(srv: InProcessServer, http: httpx.Client, name: str) -> httpx.Response:
    _, public = new_public_key()
    return http.post("/api/agent/enroll", json={"name": name, "publicKey": public})


def test_a_person_enrols_at_most_agents_per_person_and_floods_nobody(capped: InProcessServer) -> None:
    person, http = signed_in_person(capped)
    first_admin = create_person(capped, admin=True)
    with http:
        r = http.post(
            "/api/agent/enroll",
            json={"name": "flood", "publicKey": new_public_key()[1], "approver": first_admin["email"]},
        )
        assert r.status_code == 403 and "approver" in problem(r)["detail"], r.text
        for i in range(2):
            assert _enrol_mine(capped, http, f"bot{i}").status_code == 201
        r = _enrol_mine(capped, http, "bot2")
        assert r.status_code == 429 and "agents_per_person" in problem(r)["detail"], r.text
        assert int(r.headers["Retry-After"]) > 0
    # deleting one frees a place
    mine = [
        a
        for a in _admin(capped, "GET", "/api/admin/agents", params={"limit": 100}).json()["data"]
        if a["owner"] == person["email"]
    ]
    assert len(mine) == 2
    assert _admin(capped, "DELETE", f"/api/admin/agents/{mine[0]['agent_id']}").status_code == 200
    with cookie_client(capped, start_session(capped, person["email"])) as again:
        assert _enrol_mine(capped, again, "bot3").status_code == 201


def test_pending_grants_across_one_owners_agents_are_bounded(capped: InProcessServer) -> None:
    person = create_person(capped)
    agents = []
    for _ in range(2):
        key, public = new_public_key()
        body = {"email": fresh("agent+cap"), "name": "cap", "publicKey": public, "owner": person["email"]}
        r = _admin(capped, "POST", "/api/agent/enroll", json=body)
        assert r.status_code == 201, r.text
        agents.append(Mine(r.json()["agent_id"], agent_token(capped, r.json()["agent_id"], key)))
    body = {"target_host": "web-1", "audience": "escapes", "grant_type": "once"}
    ids = []
    for i in range(3):
        with capped.client(agents[i % 2].token) as http:
            r = http.post("/api/grants", json={**body, "command": ["echo", str(i)]})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    for agent in agents:  # the fourth is refused, whichever of the owner's agents asks
        with capped.client(agent.token) as http:
            r = http.post("/api/grants", json={**body, "command": ["echo", "4"]})
        assert r.status_code == 429 and "pending" in problem(r)["detail"], r.text
        assert int(r.headers["Retry-After"]) > 0
    # another owner's agent is not held back; a decision frees a place
    _, other_token = enrol_agent(capped, owner=create_person(capped)["email"])
    assert request_grant(capped, other_token)["status"] == "pending"
    assert _admin(capped, "POST", f"/api/grants/{ids[0]}/deny", json={}).status_code == 200
    with capped.client(agents[1].token) as http:
        assert http.post("/api/grants", json={**body, "command": ["echo", "5"]}).status_code == 201


# -- item 12 (part): a trailing dot is not an e-mail -------------------------------------------------


def test_an_email_with_a_trailing_dot_is_refused_everywhere(srv: InProcessServer) -> None:
    assert is_email("alice@example.com") and not is_email("alice@example.com.") and not is_email("alice@.")
    person = create_person(srv)
    dotted = person["email"] + "."
    r = _admin(srv, "POST", "/api/admin/users", json={"email": dotted})
    assert r.status_code == 400 and problem(r)["field"] == "email", r.text
    r = _admin(srv, "POST", "/api/admin/registration-urls", json={"email": dotted})
    assert r.status_code == 400 and problem(r)["field"] == "email", r.text
    _, public = new_public_key()
    for field, value in (("email", "agent+x@example.com."), ("owner", dotted), ("approver", dotted)):
        body = {
            "email": fresh("agent+dot"),
            "name": "dot",
            "publicKey": public,
            "owner": person["email"],
            field: value,
        }
        r = _admin(srv, "POST", "/api/agent/enroll", json=body)
        assert r.status_code == 400 and problem(r)["field"] == field, r.text
    bot, _ = enrol_agent(srv, owner=person["email"])
    r = _admin(srv, "PUT", f"/api/admin/agents/{bot['agent_id']}", json={"owner": dotted})
    assert r.status_code == 400 and problem(r)["field"] == "owner", r.text
    for field, value in (("delegate", bot["email"] + "."), ("delegator", dotted)):
        body = {"delegate": bot["email"], "delegator": person["email"], "audience": "*", field: value}
        r = _admin(srv, "POST", "/api/delegations", json=body)
        assert r.status_code == 400 and problem(r)["field"] == field, r.text
    r = _admin(srv, "POST", "/api/grants", json={**COMMAND, "requester": bot["email"] + "."})
    assert r.status_code == 400 and problem(r)["field"] == "requester", r.text
