"""Stolen sessions must not become persistent (issue 19 item 10, D8), tried against a real
in-process server (ManualClock) by a thief who holds a victim's session cookie and nothing else.

- Adding a passkey needs a fresh, user-verified assertion of one of the person's own passkeys
  (``add/reauth`` then ``add/options {response}``): the cookie alone gets no creation options.
- Deleting a passkey ends the sessions started with it.
- A person lists their sessions and ends any of them (``GET/DELETE /api/sessions``).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from inproc import InProcessServer
from support.soft_webauthn import PasskeyBrowser, SoftAuthenticator, make_registration

from conftest import problem

LIMITS_OFF = "[limits]\npasskey_per_address = 0\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    srv = InProcessServer(tmp_path_factory.mktemp("stolen"), extra=LIMITS_OFF).start()
    yield srv
    srv.stop()


_n = iter(range(10**6))


def registered(server: InProcessServer, authenticator: SoftAuthenticator | None = None) -> PasskeyBrowser:
    b = PasskeyBrowser(server.url, server.url, authenticator)
    answer = b.register(make_registration(server, f"victim{next(_n)}@example.com"))
    assert answer.status_code == 200, answer.text
    return b


def thief_of(victim: PasskeyBrowser) -> PasskeyBrowser:
    """Another machine with a copy of the victim's session cookie and an authenticator of its own."""
    thief = PasskeyBrowser(victim.base_url, victim.origin)
    thief.cookie = victim.cookie
    assert thief.me().status_code == 200
    return thief


def passkeys_of(b: PasskeyBrowser) -> list[str]:
    return [c["id"] for c in b.request("GET", "/api/webauthn/credentials").json()["data"]]


# -- adding a passkey ----------------------------------------------------------------------------


def test_a_stolen_session_alone_gets_no_creation_options(server: InProcessServer) -> None:
    victim = registered(server)
    thief = thief_of(victim)
    answer = thief.request("POST", "/api/webauthn/credentials/add/options", json_body={})
    assert answer.status_code == 400 and problem(answer).get("field") == "response"
    # the reauth options are no secret, but only the victim's passkey answers them
    reauth = thief.request("POST", "/api/webauthn/credentials/add/reauth", json_body={})
    assert reauth.status_code == 200 and reauth.json()["userVerification"] == "required"
    assert [c["id"] for c in reauth.json()["allowCredentials"]] == passkeys_of(victim)
    thiefs_key = registered(server, thief.authenticator)  # the thief's own account and passkey here
    forged = thief.authenticator.get(
        reauth.json(), server.url, credential=thiefs_key.authenticator.credentials[0]
    )
    answer = thief.request("POST", "/api/webauthn/credentials/add/options", json_body={"response": forged})
    assert answer.status_code == 401
    assert passkeys_of(victim) == passkeys_of(thief) and len(passkeys_of(victim)) == 1


def test_the_assertion_must_be_user_verified(server: InProcessServer) -> None:
    """A passkey touched without PIN or biometrics (an unlocked laptop, a stolen security key) is
    not enough to add another."""
    victim = registered(server, SoftAuthenticator(user_verified=False))
    answer = victim.confirm()
    assert answer.status_code == 401 and "verif" in problem(answer)["detail"].lower()
    victim.authenticator.user_verified = True
    assert victim.confirm().status_code == 200


def test_the_assertion_must_be_fresh_and_answer_a_reauth_challenge(server: InProcessServer) -> None:
    victim = registered(server)
    reauth = victim.request("POST", "/api/webauthn/credentials/add/reauth", json_body={}).json()
    server.clock.advance(301)  # more than 5 minutes: the reauth challenge is gone
    late = victim.request(
        "POST",
        "/api/webauthn/credentials/add/options",
        json_body={"response": victim.authenticator.get(reauth, server.url)},
    )
    assert late.status_code == 401 and "challenge" in problem(late)["detail"]
    # a sign-in challenge (another purpose) does not stand in for one
    login = victim.request("POST", "/api/webauthn/login/options", json_body={}).json()
    answer = victim.request(
        "POST",
        "/api/webauthn/credentials/add/options",
        json_body={"response": victim.authenticator.get(login, server.url)},
    )
    assert answer.status_code == 401
    # and one reauth challenge serves one add: it is used up
    reauth = victim.request("POST", "/api/webauthn/credentials/add/reauth", json_body={}).json()
    assertion = victim.authenticator.get(reauth, server.url)
    assert (
        victim.request(
            "POST", "/api/webauthn/credentials/add/options", json_body={"response": assertion}
        ).status_code
        == 200
    )
    again = victim.request("POST", "/api/webauthn/credentials/add/options", json_body={"response": assertion})
    assert again.status_code == 401


def test_another_persons_reauth_does_not_count(server: InProcessServer) -> None:
    alice, mallory = registered(server), registered(server)
    reauth = alice.request("POST", "/api/webauthn/credentials/add/reauth", json_body={}).json()
    # mallory answers alice's challenge with her own passkey, in her own session: refused
    answer = mallory.request(
        "POST",
        "/api/webauthn/credentials/add/options",
        json_body={
            "response": mallory.authenticator.get(
                reauth, server.url, credential=mallory.authenticator.credentials[0]
            )
        },
    )
    assert answer.status_code == 401


def test_a_person_without_a_passkey_cannot_add_one_with_a_session(server: InProcessServer) -> None:
    from people_support import signed_in_person

    _, http = signed_in_person(server)  # signed in some other way (federation): no passkey here
    with http:
        answer = http.post("/api/webauthn/credentials/add/reauth", json={})
    assert answer.status_code == 409 and "registration link" in problem(answer)["detail"]


# -- deleting a passkey ends its sessions --------------------------------------------------------


def test_deleting_a_passkey_ends_the_sessions_it_started(server: InProcessServer) -> None:
    laptop = registered(server)  # session 1: started with the laptop's passkey (registration)
    phone_key = SoftAuthenticator()
    server.clock.advance(1)  # passkeys are listed oldest first
    assert laptop.add_passkey(phone_key, name="Phone").status_code == 201
    phone = PasskeyBrowser(server.url, server.url, phone_key)
    assert phone.login().status_code == 200  # session 2: the phone's passkey
    thief = thief_of(laptop)  # a copy of session 1
    laptop_key = passkeys_of(phone)[0]
    assert phone.request("DELETE", f"/api/webauthn/credentials/{laptop_key}").status_code == 200
    assert laptop.me().status_code == 401 and thief.me().status_code == 401  # session 1 ended
    assert phone.me().status_code == 200  # session 2 did not start with it


# -- one's own sessions --------------------------------------------------------------------------


def test_a_person_lists_their_sessions_and_ends_another(server: InProcessServer) -> None:
    here = registered(server)
    there = PasskeyBrowser(server.url, server.url, here.authenticator)
    server.clock.advance(1)  # sessions are listed newest first
    assert there.login().status_code == 200
    thief = thief_of(there)
    listed = here.request("GET", "/api/sessions")
    assert listed.status_code == 200
    rows = listed.json()["data"]
    assert len(rows) == 2 and [r["current"] for r in rows] == [False, True]  # newest first: there, here
    assert {"id", "created_at", "expires_at", "last_seen_at", "user_agent", "credential_id"} <= set(rows[0])
    assert rows[0]["credential_id"] == passkeys_of(here)[0]
    other = rows[0]["id"]
    ended = here.request("DELETE", f"/api/sessions/{other}")
    assert ended.status_code == 200 and ended.json() == {"ended": other, "revoked": 1}
    assert there.me().status_code == 401 and thief.me().status_code == 401 and here.me().status_code == 200
    assert [r["current"] for r in here.request("GET", "/api/sessions").json()["data"]] == [True]
    assert here.request("DELETE", f"/api/sessions/{other}").status_code == 404  # already over


def test_nobody_ends_or_sees_someone_elses_sessions(server: InProcessServer) -> None:
    alice, bob = registered(server), registered(server)
    alices = alice.request("GET", "/api/sessions").json()["data"][0]["id"]
    assert all(r["id"] != alices for r in bob.request("GET", "/api/sessions").json()["data"])
    assert bob.request("DELETE", f"/api/sessions/{alices}").status_code == 404
    assert alice.me().status_code == 200
    anonymous = httpx.get(server.url + "/api/sessions", timeout=10)
    assert anonymous.status_code == 401
    management = httpx.delete(
        server.url + f"/api/sessions/{alices}",
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=10,
    )
    assert management.status_code == 403 and alice.me().status_code == 200
    for bad in ("x" * 300, "fam\u202e", "%00"):
        assert alice.request("DELETE", f"/api/sessions/{bad}").status_code in (400, 404)


BAD_BODIES = [
    b"",
    b"{",
    b"[]",
    b"null",
    b'{"response": 1}',
    b'{"response": {}}',
    b'{"response": {"response": {}}}',
    b'{"response": {"id": "x", "response": {"clientDataJSON": "!!"}}}',
    b'{"response": {"id": "' + b"A" * 5000 + b'", "response": {"clientDataJSON": "e30"}}}',
    b'{"response": {"rawId": 5, "response": {"clientDataJSON": "eyJjaGFsbGVuZ2UiOiAxfQ"}}}',
    b'{"response": {"id": "AAAA", "response": {"clientDataJSON": "eyJjaGFsbGVuZ2UiOiAiXHVkODAwIn0"}}}',
    b'{"a": NaN}',
    b"\xff\xfe",
]


def test_bad_input_to_the_new_routes_is_a_clear_4xx(server: InProcessServer) -> None:
    """As a signed-in person (the no-5xx sweep drives these routes with bearers only)."""
    person = registered(server)
    for body in BAD_BODIES:
        for path in ("/api/webauthn/credentials/add/options", "/api/webauthn/credentials/add/reauth"):
            answer = person.request("POST", path, content=body, headers={"Content-Type": "application/json"})
            assert 400 <= answer.status_code < 500 or (
                answer.status_code == 200 and path.endswith("reauth")
            ), (path, body)
            if answer.status_code >= 400:
                problem(answer)
    for ident in ("x" * 300, "%00", "%ED%A0%80", "..%2f..", "fam_%1b%5b31m", "%", "\u202e"):
        answer = person.request("DELETE", f"/api/sessions/{ident}")
        assert 400 <= answer.status_code < 500, ident
        problem(answer)
    # a lone surrogate as the challenge reached the store (500) on every verify route before
    surrogate = BAD_BODIES[10]
    for path in (
        "/api/webauthn/login/verify",
        "/api/webauthn/register/verify",
        "/api/webauthn/credentials/add/verify",
    ):
        answer = person.request(
            "POST",
            path,
            content=surrogate.replace(b"{", b'{"token": "t", ', 1),
            headers={"Content-Type": "application/json"},
        )
        assert answer.status_code == 400 or (answer.status_code == 404 and "register" in path), (
            path,
            answer.text,
        )
    assert person.request("GET", "/api/sessions", params={"limit": "x", "cursor": "\x00"}).status_code == 200
    assert person.me().status_code == 200
