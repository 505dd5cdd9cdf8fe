"""The admin API for people (docs/api.md): users, their passkeys, sessions and registration URLs,
over real HTTP against an in-process server (its ManualClock moves time), with every failure a
caller can provoke: 400 naming the field, 401, 403, 404, 409 and 429."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from inproc import InProcessServer
from people_support import (
    add_passkey,
    cookie_client,
    create_person,
    enrol_agent,
    fresh,
    signed_in_person,
    start_session,
)
from support.postgres import database_bytes

from conftest import problem

TOKEN_URL = re.compile(r"^(?P<issuer>http://127\.0\.0\.1:\d+)/register\?token=(?P<token>[A-Za-z0-9_-]{43})$")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    server = InProcessServer(tmp_path_factory.mktemp("people-admin")).start()
    try:
        yield server
    finally:
        server.stop()


def admin_call(srv: InProcessServer, method: str, path: str, **kwargs: Any) -> httpx.Response:
    with srv.admin() as http:
        return http.request(method, path, **kwargs)


def root(srv: InProcessServer) -> dict[str, Any]:
    """The person of admin.emails (root@example.com), created once per server."""
    found = srv.call(srv.services.store.people.get("root@example.com"))
    return found or create_person(srv, "root@example.com")  # type: ignore[no-any-return]


def field_of(r: httpx.Response, status: int = 400) -> str | None:
    assert r.status_code == status, r.text
    return problem(r).get("field")


# -- users --------------------------------------------------------------------------------------------


def test_create_get_and_delete_a_user(srv: InProcessServer) -> None:
    email = fresh("Alice")
    r = admin_call(srv, "POST", "/api/admin/users", json={"email": email.upper(), "name": "Alice A."})
    assert r.status_code == 201, r.text
    user = r.json()
    assert user["email"] == email.lower() and user["name"] == "Alice A." and user["admin"] is False
    assert user["status"] == "active" and user["isActive"] is True and user["createdAt"] == user["created_at"]
    assert re.fullmatch(r"usr_[A-Za-z0-9_-]{22}", user["person_id"])
    for ident in (email.lower(), email.upper(), user["person_id"]):
        got = admin_call(srv, "GET", f"/api/admin/users/{ident}")
        assert got.status_code == 200 and got.json()["person_id"] == user["person_id"]
    r = admin_call(srv, "DELETE", f"/api/admin/users/{user['person_id']}")
    assert r.status_code == 200 and r.json()["deleted"] is True and r.json()["user"]["email"] == email.lower()
    for method in ("GET", "DELETE"):
        r = admin_call(srv, method, f"/api/admin/users/{email}")
        assert r.status_code == 404 and problem(r)["detail"] == "user not found"


def test_a_name_defaults_to_the_local_part_and_admin_from_config_shows(srv: InProcessServer) -> None:
    root(srv)
    user = admin_call(
        srv, "GET", "/api/admin/users/root@example.com"
    ).json()  # in admin.emails of the test config
    assert user["admin"] is True and user["admin_by_config"] is True and user["name"] == "root"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "email"),
        ({"email": "not-an-address"}, "email"),
        ({"email": 42}, "email"),
        ({"email": "x\u202e@example.com"}, "email"),
        ({"email": "ok@example.com", "name": "bad\x00name"}, "name"),
        ({"email": "ok@example.com", "admin": "yes"}, "admin"),
        ({"email": "ok@example.com", "registration": 1}, "registration"),
    ],
)
def test_bad_user_fields_are_400_naming_the_field(
    srv: InProcessServer, body: dict[str, Any], field: str
) -> None:
    assert field_of(admin_call(srv, "POST", "/api/admin/users", json=body)) == field


def test_malformed_or_missing_bodies_are_400(srv: InProcessServer) -> None:
    assert admin_call(srv, "POST", "/api/admin/users", content=b"{broken").status_code == 400
    assert admin_call(srv, "POST", "/api/admin/users").status_code == 400
    assert admin_call(srv, "POST", "/api/admin/users", json=["a"]).status_code == 400


def test_an_email_is_unique_across_persons_agents_and_the_management_identity(srv: InProcessServer) -> None:
    person = create_person(srv)
    r = admin_call(srv, "POST", "/api/admin/users", json={"email": person["email"]})
    assert r.status_code == 409 and "already belongs" in problem(r)["detail"]
    agent, _ = enrol_agent(srv, owner=person["email"])
    r = admin_call(srv, "POST", "/api/admin/users", json={"email": agent["email"]})
    assert r.status_code == 409
    r = admin_call(
        srv, "POST", "/api/admin/users", json={"email": "ADMIN@example.com"}
    )  # management identity
    assert r.status_code == 409 and "management identity" in problem(r)["detail"]
    # and the other way round: an agent cannot take a person's e-mail
    with srv.admin() as http:
        from people_support import new_public_key

        r = http.post(
            "/api/agent/enroll",
            json={"email": person["email"], "name": "x", "publicKey": new_public_key()[1]},
        )
    assert r.status_code == 409


def test_list_pages_with_a_cursor_and_searches_literally(srv: InProcessServer) -> None:
    marker = fresh("pg").split("@")[0]
    emails = {create_person(srv, f"{marker}.{i}@example.com")["email"] for i in range(5)}
    create_person(srv, fresh("unrelated"), name=f"Named {marker}")  # the name matches too
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"limit": "2", "search": marker.upper(), **({"cursor": cursor} if cursor else {})}
        body = admin_call(srv, "GET", "/api/admin/users", params=params).json()
        pages += 1
        assert len(body["data"]) <= 2
        seen += [u["email"] for u in body["data"]]
        if not body["pagination"]["has_more"]:
            assert body["pagination"]["cursor"] is None
            break
        cursor = body["pagination"]["cursor"]
    assert pages == 3 and len(seen) == 6 and len(set(seen)) == 6 and emails <= set(seen)
    created = [admin_call(srv, "GET", f"/api/admin/users/{e}").json()["created_at"] for e in seen]
    assert created == sorted(created, reverse=True), "newest first"
    # % and _ are not wildcards
    assert admin_call(srv, "GET", "/api/admin/users", params={"search": "%"}).json()["data"] == []
    assert admin_call(srv, "GET", "/api/admin/users", params={"search": "p_-"}).json()["data"] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "many"}, "limit"),
        ({"cursor": "nonsense"}, "cursor"),
        ({"search": "a\x07b"}, "search"),
        ({"search": "x" * 300}, "search"),
    ],
)
def test_bad_list_parameters_are_400_naming_the_field(
    srv: InProcessServer, params: dict[str, str], field: str
) -> None:
    assert field_of(admin_call(srv, "GET", "/api/admin/users", params=params)) == field


def test_deleting_a_person_ends_their_sessions_and_passkeys_at_once(srv: InProcessServer) -> None:
    person, http = signed_in_person(srv)
    add_passkey(srv, person["person_id"])
    with http:
        assert http.get("/api/me").json()["email"] == person["email"]
        creds = admin_call(srv, "GET", f"/api/admin/users/{person['email']}/credentials").json()["data"]
        assert len(creds) == 1 and "public_key" not in creds[0]
        assert admin_call(srv, "DELETE", f"/api/admin/users/{person['email']}").status_code == 200
        assert http.get("/api/me").status_code == 401  # the next request: signed out
    assert srv.call(srv.services.store.credentials.list_for(person["person_id"])) == []
    assert admin_call(srv, "GET", f"/api/admin/users/{person['email']}/credentials").status_code == 404


def test_credentials_list_shows_passkeys_without_keys(srv: InProcessServer) -> None:
    person = create_person(srv)
    first = add_passkey(srv, person["person_id"])
    srv.clock.advance(
        1
    )  # a later created_at: at the same instant the order falls to the random credential ids
    add_passkey(srv, person["person_id"])
    body = admin_call(srv, "GET", f"/api/admin/users/{person['person_id']}/credentials").json()
    assert [c["credential_id"] for c in body["data"]][0] == first["credential_id"]  # oldest first
    assert set(body["data"][0]) >= {
        "credential_id",
        "credentialId",
        "name",
        "rp_id",
        "transports",
        "backedUp",
        "created_at",
        "last_used_at",
        "sign_count",
    }
    assert all("public_key" not in c for c in body["data"])


def test_an_admin_cannot_delete_or_demote_themselves(srv: InProcessServer) -> None:
    me, http = signed_in_person(srv, admin=True)
    with http:
        r = http.delete(f"/api/admin/users/{me['email']}")
        assert r.status_code == 400 and "yourself" in problem(r)["detail"]
        r = http.patch(f"/api/admin/users/{me['email']}", json={"admin": False})
        assert r.status_code == 403
        other = create_person(srv)
        assert http.delete(f"/api/admin/users/{other['email']}").status_code == 200


def test_make_admin_and_disable_a_person(srv: InProcessServer) -> None:
    person, http = signed_in_person(srv)
    with http:
        assert http.get("/api/admin/users").status_code == 403
        r = admin_call(
            srv, "PATCH", f"/api/admin/users/{person['email']}", json={"admin": True, "name": "Boss"}
        )
        assert r.status_code == 200 and r.json()["admin"] is True and r.json()["name"] == "Boss"
        assert http.get("/api/admin/users").status_code == 200  # the next request sees it
        r = admin_call(srv, "PATCH", f"/api/admin/users/{person['email']}", json={"isActive": False})
        assert r.status_code == 200 and r.json()["status"] == "disabled"
        assert http.get("/api/me").status_code == 401
    assert (
        field_of(admin_call(srv, "PATCH", f"/api/admin/users/{person['email']}", json={"status": "gone"}))
        == "status"
    )
    assert (
        field_of(admin_call(srv, "PATCH", f"/api/admin/users/{person['email']}", json={"email": "x@y"}))
        == "email"
    )


# -- sessions ---------------------------------------------------------------------------------------


def test_sessions_list_and_revoke_by_family_and_by_user(srv: InProcessServer) -> None:
    person = create_person(srv)
    cookies = [start_session(srv, person["email"]) for _ in range(3)]
    body = admin_call(srv, "GET", "/api/admin/sessions", params={"user": person["email"]}).json()
    assert len(body["data"]) == 3 and all(s["email"] == person["email"] for s in body["data"])
    assert all("session_id" not in s for s in body["data"]), "session ids are hashes of cookie secrets"
    assert all(c not in str(body) for c in cookies)
    # paging
    first = admin_call(
        srv, "GET", "/api/admin/sessions", params={"user": person["email"], "limit": "2"}
    ).json()
    assert len(first["data"]) == 2 and first["pagination"]["has_more"]
    rest = admin_call(
        srv,
        "GET",
        "/api/admin/sessions",
        params={"user": person["email"], "cursor": first["pagination"]["cursor"]},
    ).json()
    assert {s["family_id"] for s in first["data"] + rest["data"]} == {s["family_id"] for s in body["data"]}
    # by family: that session ends, the others live
    family = body["data"][0]["family_id"]
    r = admin_call(srv, "DELETE", f"/api/admin/sessions/{family}")
    assert r.status_code == 200 and r.json() == {"status": "revoked", "familyId": family, "revoked": 1}
    alive = [cookie_client(srv, c).get("/api/me").status_code for c in cookies]
    assert sorted(alive) == [200, 200, 401]
    again = admin_call(srv, "DELETE", f"/api/admin/sessions/{family}")
    assert again.status_code == 200 and again.json()["revoked"] == 0  # idempotent
    # all of the user's
    r = admin_call(srv, "DELETE", f"/api/admin/sessions/user/{person['email']}")
    assert r.status_code == 200 and r.json()["revoked"] == 2
    assert [cookie_client(srv, c).get("/api/me").status_code for c in cookies] == [401, 401, 401]
    assert (
        admin_call(srv, "GET", "/api/admin/sessions", params={"user": person["email"]}).json()["data"] == []
    )


def test_session_routes_404_for_unknown_users(srv: InProcessServer) -> None:
    assert (
        admin_call(srv, "GET", "/api/admin/sessions", params={"user": "nobody@example.com"}).status_code
        == 404
    )
    assert admin_call(srv, "DELETE", "/api/admin/sessions/user/nobody@example.com").status_code == 404
    assert field_of(admin_call(srv, "GET", "/api/admin/sessions", params={"limit": "-x"})) == "limit"


# -- registration URLs --------------------------------------------------------------------------------


def test_a_user_created_with_registration_gets_a_single_use_unguessable_url(srv: InProcessServer) -> None:
    email = fresh("newcomer")
    r = admin_call(
        srv, "POST", "/api/admin/users", json={"email": email, "admin": True, "registration": True}
    )
    assert r.status_code == 201, r.text
    reg = r.json()["registration"]
    match = TOKEN_URL.fullmatch(reg["url"])
    assert (
        match
        and match["issuer"] == srv.url
        and reg["registrationUrl"] == reg["url"]
        and reg["token"] == match["token"]
    )
    assert (
        reg["email"] == email
        and reg["admin"] is True
        and reg["purpose"] == "register"
        and reg["status"] == "pending"
    )
    assert reg["rp_id"] == "127.0.0.1" and reg["expires_at"] - reg["created_at"] == 86_400_000
    assert reg["expiresInHours"] == 24 and "token_hash" not in reg
    token = match["token"]
    stored = srv.call(
        srv.services.store.registrations.get_by_token_hash(hashlib.sha256(token.encode()).hexdigest())
    )
    assert stored is not None and stored["id"] == reg["id"]
    listed = admin_call(srv, "GET", "/api/admin/registration-urls", params={"limit": "100"}).json()["data"]
    mine = [x for x in listed if x["id"] == reg["id"]]
    assert mine and "token" not in mine[0] and "token_hash" not in mine[0] and "url" not in mine[0]
    assert token not in str(listed)


def test_the_token_is_not_in_the_database(srv: InProcessServer) -> None:
    reg = admin_call(srv, "POST", "/api/admin/registration-urls", json={"email": fresh("dbcheck")}).json()
    raw = database_bytes(Path(srv.directory))  # SQLite's files, or every PostgreSQL row
    assert raw and reg["token"].encode() not in raw


def test_registration_urls_create_with_expiry_list_expire_and_delete(srv: InProcessServer) -> None:
    email = fresh("reg")
    r = admin_call(
        srv, "POST", "/api/admin/registration-urls", json={"email": email, "name": "Reg", "expiresInHours": 2}
    )
    assert r.status_code == 201, r.text
    reg = r.json()
    assert reg["expires_at"] - reg["created_at"] == 2 * 3_600_000 and reg["created_by"] == "admin@example.com"
    assert (
        admin_call(srv, "GET", f"/api/admin/users/{email}").json()["name"] == "Reg"
    )  # the person exists now
    r = admin_call(srv, "POST", "/api/admin/registration-urls", json={"email": email, "expires_in": 60})
    short = r.json()
    srv.clock.advance(61)
    listed = {
        x["id"]: x
        for x in admin_call(srv, "GET", "/api/admin/registration-urls", params={"limit": "100"}).json()[
            "data"
        ]
    }
    assert listed[short["id"]]["status"] == "expired" and listed[reg["id"]]["status"] == "pending"
    # delete by token, then by id; twice is 404
    assert admin_call(srv, "DELETE", f"/api/admin/registration-urls/{reg['token']}").json() == {
        "deleted": True,
        "id": reg["id"],
    }
    assert admin_call(srv, "DELETE", f"/api/admin/registration-urls/{reg['token']}").status_code == 404
    assert admin_call(srv, "DELETE", f"/api/admin/registration-urls/{short['id']}").status_code == 200
    assert admin_call(srv, "DELETE", f"/api/admin/registration-urls/{short['id']}").status_code == 404
    r = admin_call(srv, "DELETE", "/api/admin/registration-urls/reg_doesnotexist")
    assert r.status_code == 404 and problem(r)["detail"] == "registration URL not found"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "email"),
        ({"email": "x@example.com", "purpose": "steal"}, "purpose"),
        ({"email": "x@example.com", "expires_in": 0}, "expires_in"),
        ({"email": "x@example.com", "expires_in": 10**9}, "expires_in"),
        ({"email": "x@example.com", "expiresInHours": "24"}, "expiresInHours"),
        ({"email": "x@example.com", "admin": "true"}, "admin"),
    ],
)
def test_bad_registration_fields_are_400_naming_the_field(
    srv: InProcessServer, body: dict[str, Any], field: str
) -> None:
    assert field_of(admin_call(srv, "POST", "/api/admin/registration-urls", json=body)) == field


def test_register_urls_never_graft_a_passkey_onto_an_account_that_has_one(srv: InProcessServer) -> None:
    """The peer's takeover bug (9, 10): a `register` link for an account with a passkey is refused;
    an add-device link is for existing persons only, bound to this RP."""
    person = create_person(srv)
    assert (
        admin_call(srv, "POST", "/api/admin/registration-urls", json={"email": person["email"]}).status_code
        == 201
    )
    add_passkey(srv, person["person_id"], rp_id="127.0.0.1")
    r = admin_call(srv, "POST", "/api/admin/registration-urls", json={"email": person["email"]})
    assert r.status_code == 409 and "add-device" in problem(r)["detail"]
    r = admin_call(
        srv, "POST", "/api/admin/registration-urls", json={"email": person["email"], "purpose": "add-device"}
    )
    assert r.status_code == 201 and r.json()["purpose"] == "add-device" and r.json()["rp_id"] == "127.0.0.1"
    r = admin_call(
        srv, "POST", "/api/admin/registration-urls", json={"email": fresh("ghost"), "purpose": "add-device"}
    )
    assert r.status_code == 404
    # a passkey on another RP does not count against this one (peer bug 10)
    other = create_person(srv)
    add_passkey(srv, other["person_id"], rp_id="elsewhere.example")
    assert (
        admin_call(srv, "POST", "/api/admin/registration-urls", json={"email": other["email"]}).status_code
        == 201
    )


def test_no_registration_url_for_an_agents_or_the_management_email(srv: InProcessServer) -> None:
    owner = create_person(srv)
    agent, _ = enrol_agent(srv, owner=owner["email"])
    for email in (agent["email"], "admin@example.com"):
        r = admin_call(srv, "POST", "/api/admin/registration-urls", json={"email": email})
        assert r.status_code == 409, r.text
    assert (
        admin_call(srv, "GET", f"/api/admin/users/{agent['email']}").status_code == 404
    )  # nothing left behind


def test_deleting_a_person_drops_their_unused_registration_urls(srv: InProcessServer) -> None:
    reg = admin_call(srv, "POST", "/api/admin/registration-urls", json={"email": fresh("gone")}).json()
    assert admin_call(srv, "DELETE", f"/api/admin/users/{reg['email']}").status_code == 200
    assert admin_call(srv, "DELETE", f"/api/admin/registration-urls/{reg['id']}").status_code == 404


# -- who may call them ----------------------------------------------------------------------------------

ROUTES = [
    ("GET", "/api/admin/users", None),
    ("POST", "/api/admin/users", {"email": "who@example.com"}),
    ("GET", "/api/admin/users/{email}", None),
    ("PATCH", "/api/admin/users/{email}", {"name": "n"}),
    ("DELETE", "/api/admin/users/{email}", None),
    ("GET", "/api/admin/users/{email}/credentials", None),
    ("GET", "/api/admin/sessions", None),
    ("DELETE", "/api/admin/sessions/fam_x", None),
    ("DELETE", "/api/admin/sessions/user/{email}", None),
    ("GET", "/api/admin/registration-urls", None),
    ("POST", "/api/admin/registration-urls", {"email": "who2@example.com"}),
    ("DELETE", "/api/admin/registration-urls/reg_x", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_only_administrators_may_call_the_admin_api(
    srv: InProcessServer, method: str, path: str, body: dict[str, Any] | None
) -> None:
    victim = create_person(srv)
    url = path.format(email=victim["email"])
    with srv.client() as http:
        r = http.request(method, url, json=body)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), r.text
    with srv.client("not-a-token") as http:
        assert http.request(method, url, json=body).status_code == 401
    _, token = enrol_agent(srv, owner=victim["email"])
    with srv.client(token) as http:
        r = http.request(method, url, json=body)
        assert r.status_code == 403 and problem(r)["detail"] == "administrator rights required"
    _, person = signed_in_person(srv)
    with person:
        assert person.request(method, url, json=body).status_code == 403
    # an owner of agents is not an administrator either
    with cookie_client(srv, start_session(srv, victim["email"])) as owner:
        assert owner.request(method, url, json=body).status_code == 403
    assert admin_call(srv, "GET", f"/api/admin/users/{victim['email']}").status_code == 200  # untouched


def test_an_admin_by_flag_and_an_admin_by_config_may(srv: InProcessServer) -> None:
    _, flagged = signed_in_person(srv, admin=True)
    with flagged:
        r = flagged.post("/api/admin/users", json={"email": fresh("made-by-admin")})
        assert r.status_code == 201
        assert flagged.get("/api/admin/registration-urls").status_code == 200
    with cookie_client(srv, start_session(srv, root(srv)["email"])) as by_config:
        assert by_config.get("/api/admin/users").status_code == 200
        r = by_config.post("/api/admin/registration-urls", json={"email": fresh("by-root")})
        assert r.status_code == 201 and r.json()["created_by"] == "root@example.com"


def test_refused_bearers_on_the_admin_api_are_rate_limited(tmp_path: Path) -> None:
    server = InProcessServer(tmp_path / "limited", extra="[limits]\nfailed_bearer_per_address = 3\n").start()
    try:
        with server.client("guess") as http:
            codes = [http.get("/api/admin/users").status_code for _ in range(4)]
        assert codes == [401, 401, 401, 429]
        with server.client("guess-again") as http:
            r = http.get("/api/admin/users")
            assert r.status_code == 429 and r.headers["retry-after"]  # every wrong bearer, this minute
        with (
            server.admin() as http
        ):  # D12: a valid bearer is never refused for others' failures (slowed, not locked)
            assert http.get("/api/admin/users").status_code == 200
        server.clock.advance(61)
        with server.client("guess-again") as http:
            assert http.get("/api/admin/users").status_code == 401
    finally:
        server.stop()
