"""Passkeys over HTTP (D8, peer §3.9, bugs 9/10/17/18): registration through a single-use URL, the
graft rule, sign-in by e-mail and discoverable, exact RP id and origin, server-side single-use
challenges that expire after 5 minutes, sign counters, one's own credentials — each rule tried by
an attacker with a software authenticator against a real in-process server (ManualClock)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest
from inproc import InProcessServer
from support.soft_webauthn import PasskeyBrowser, SoftAuthenticator, make_registration

from conftest import problem

LIMITS_OFF = "[limits]\npasskey_per_address = 0\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    srv = InProcessServer(tmp_path_factory.mktemp("passkeys"), extra=LIMITS_OFF).start()
    yield srv
    srv.stop()


_counter = iter(range(10**6))


def fresh_email(prefix: str = "p") -> str:
    return f"{prefix}{next(_counter)}@example.com"


def browser(server: InProcessServer, authenticator: SoftAuthenticator | None = None) -> PasskeyBrowser:
    return PasskeyBrowser(server.url, server.url, authenticator)


def registered(
    server: InProcessServer, email: str | None = None, **kw: object
) -> tuple[PasskeyBrowser, dict]:
    b = browser(server)
    answer = b.register(make_registration(server, email or fresh_email(), **kw))  # type: ignore[arg-type]
    assert answer.status_code == 200, answer.text
    return b, answer.json()


def options(b: PasskeyBrowser, path: str, body: dict) -> dict:
    answer = b.request("POST", path, json_body=body)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


# -- registration ---------------------------------------------------------------------------------
def test_register_through_a_url_signs_the_person_in(server: InProcessServer) -> None:
    email = fresh_email("reg")
    b = browser(server)
    token = make_registration(server, email, admin=True)
    opts = options(b, "/api/webauthn/register/options", {"token": token})
    assert opts["rp"]["id"] == "127.0.0.1" and opts["user"]["name"] == email
    assert opts["attestation"] == "none" and opts["timeout"] == 300_000
    assert opts["authenticatorSelection"]["userVerification"] == "preferred"
    assert opts["authenticatorSelection"]["residentKey"] == "preferred"
    answer = b.request(
        "POST",
        "/api/webauthn/register/verify",
        json_body={"token": token, "response": b.authenticator.create(opts, server.url), "name": "Laptop"},
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (
        body["person"]["email"] == email
        and body["person"]["admin"] is True
        and body["person"]["id"].startswith("usr_")
    )
    assert body["credential"]["name"] == "Laptop" and "public_key" not in body["credential"]
    assert b.cookie and len(b.cookie) == 43
    me = b.me()
    assert me.status_code == 200, me.text
    assert me.json() == {
        "sub": email,
        "email": email,
        "name": email.split("@")[0],
        "act": "human",
        "kind": "person",
        "id": body["person"]["id"],
        "admin": True,
    }


def test_the_store_keeps_only_hashes_of_url_tokens_and_cookies(server: InProcessServer) -> None:
    b, body = registered(server)
    services = server.services
    assert (
        server.call(services.store.sessions.get(b.cookie, services.clock.now_ms())) is None
    )  # not by the secret


@pytest.mark.parametrize("token", ["", "x" * 300, 5, None, "no-such-token"])
def test_register_options_with_a_bad_token(server: InProcessServer, token: object) -> None:
    answer = httpx.post(server.url + "/api/webauthn/register/options", json={"token": token})
    assert answer.status_code in (400, 404)
    if token == "no-such-token":
        assert problem(answer)["detail"] == "registration URL not found, expired or already used"


def test_a_registration_url_is_single_use(server: InProcessServer) -> None:
    token = make_registration(server, fresh_email())
    b = browser(server)
    assert b.register(token).status_code == 200
    again = browser(server)
    answer = again.request("POST", "/api/webauthn/register/options", json_body={"token": token})
    assert answer.status_code == 404


def test_two_concurrent_verifies_of_one_url_have_one_winner(server: InProcessServer) -> None:
    for _ in range(3):
        token = make_registration(server, fresh_email("race"))
        browsers = [browser(server) for _ in range(2)]
        prepared = []
        for b in browsers:  # both fetch options (two challenges) before either verifies
            opts = options(b, "/api/webauthn/register/options", {"token": token})
            prepared.append((b, b.authenticator.create(opts, server.url)))
        results: list[int] = []
        barrier = threading.Barrier(2)

        def verify(b: PasskeyBrowser, response: dict) -> None:
            barrier.wait()
            answer = b.request(
                "POST", "/api/webauthn/register/verify", json_body={"token": token, "response": response}
            )
            results.append(answer.status_code)

        threads = [threading.Thread(target=verify, args=item) for item in prepared]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [200, 404], results


def test_graft_a_register_url_cannot_add_a_passkey_to_an_account_that_has_one(
    server: InProcessServer,
) -> None:
    email = fresh_email("graft")
    victim, _ = registered(server, email)
    attacker = browser(server)
    # Options for a second URL are refused at once ...
    answer = attacker.request(
        "POST", "/api/webauthn/register/options", json_body={"token": make_registration(server, email)}
    )
    assert answer.status_code == 409 and "already has a passkey" in problem(answer)["detail"]
    # ... and a URL whose options were fetched before the first passkey existed is refused at verify.
    email2 = fresh_email("graft")
    first, second = make_registration(server, email2), make_registration(server, email2)
    early = browser(server)
    opts = options(early, "/api/webauthn/register/options", {"token": second})
    assert browser(server).register(first).status_code == 200
    answer = early.request(
        "POST",
        "/api/webauthn/register/verify",
        json_body={"token": second, "response": early.authenticator.create(opts, server.url)},
    )
    assert answer.status_code == 409, answer.text
    assert early.cookie is None
    # An add-device URL is the way to put one more passkey on an account (and it is single use too).
    added = browser(server).register(make_registration(server, email, purpose="add-device"))
    assert added.status_code == 200, added.text
    assert len(victim.request("GET", "/api/webauthn/credentials").json()["data"]) == 2


def test_an_expired_url_and_an_expired_challenge(server: InProcessServer) -> None:
    token = make_registration(server, fresh_email(), ttl=600)
    server.clock.advance(601)
    assert (
        browser(server)
        .request("POST", "/api/webauthn/register/options", json_body={"token": token})
        .status_code
        == 404
    )

    token = make_registration(server, fresh_email())
    b = browser(server)
    opts = options(b, "/api/webauthn/register/options", {"token": token})
    response = b.authenticator.create(opts, server.url)
    server.clock.advance(301)  # challenges live 5 minutes
    answer = b.request(
        "POST", "/api/webauthn/register/verify", json_body={"token": token, "response": response}
    )
    assert answer.status_code == 400 and "challenge" in problem(answer)["detail"]
    # the URL itself is still good: a fresh ceremony within 5 minutes works
    assert b.register(token).status_code == 200

    signer, _ = registered(server)
    opts = options(signer, "/api/webauthn/login/options", {})
    assertion = signer.authenticator.get(opts, server.url)
    server.clock.advance(299)
    assert (
        signer.request("POST", "/api/webauthn/login/verify", json_body={"response": assertion}).status_code
        == 200
    )
    opts = options(signer, "/api/webauthn/login/options", {})
    assertion = signer.authenticator.get(opts, server.url)
    server.clock.advance(301)
    answer = signer.request("POST", "/api/webauthn/login/verify", json_body={"response": assertion})
    assert answer.status_code == 401 and "challenge" in problem(answer)["detail"]


def test_a_challenge_is_single_use_and_bound_to_its_purpose(server: InProcessServer) -> None:
    b, _ = registered(server)
    opts = options(b, "/api/webauthn/login/options", {})
    assertion = b.authenticator.get(opts, server.url)
    assert (
        b.request("POST", "/api/webauthn/login/verify", json_body={"response": assertion}).status_code == 200
    )
    replay = b.request("POST", "/api/webauthn/login/verify", json_body={"response": assertion})
    assert replay.status_code == 401 and "challenge" in problem(replay)["detail"]

    # A login challenge cannot finish a registration, nor a registration challenge a login.
    token = make_registration(server, fresh_email())
    other = browser(server)
    login_opts = options(other, "/api/webauthn/login/options", {})
    reg_opts = options(other, "/api/webauthn/register/options", {"token": token})
    made = other.authenticator.create({**reg_opts, "challenge": login_opts["challenge"]}, server.url)
    answer = other.request(
        "POST", "/api/webauthn/register/verify", json_body={"token": token, "response": made}
    )
    assert answer.status_code == 400 and "challenge" in problem(answer)["detail"]
    # A challenge the server never issued does not exist (the client cannot choose one).
    made = other.authenticator.create({**reg_opts, "challenge": "A" * 43}, server.url)
    answer = other.request(
        "POST", "/api/webauthn/register/verify", json_body={"token": token, "response": made}
    )
    assert answer.status_code == 400
    # A registration challenge belongs to its URL: it cannot redeem another one.
    token2 = make_registration(server, fresh_email())
    made = other.authenticator.create(
        options(other, "/api/webauthn/register/options", {"token": token}), server.url
    )
    answer = other.request(
        "POST", "/api/webauthn/register/verify", json_body={"token": token2, "response": made}
    )
    assert answer.status_code == 400
    assert other.register(token2).status_code == 200


@pytest.mark.parametrize(
    "bad_origin",
    [
        "http://evil.example",
        "http://127.0.0.1",
        "https://127.0.0.1:{port}",
        "http://127.0.0.1:{port}/",
        "http://localhost:{port}",
    ],
)
def test_registration_and_login_need_the_exact_origin(server: InProcessServer, bad_origin: str) -> None:
    bad_origin = bad_origin.format(port=server.port)
    token = make_registration(server, fresh_email())
    b = browser(server)
    opts = options(b, "/api/webauthn/register/options", {"token": token})
    answer = b.request(
        "POST",
        "/api/webauthn/register/verify",
        json_body={"token": token, "response": b.authenticator.create(opts, bad_origin)},
    )
    assert answer.status_code == 400 and "origin" in problem(answer)["detail"].lower()

    signer, _ = registered(server)
    opts = options(signer, "/api/webauthn/login/options", {})
    answer = signer.request(
        "POST",
        "/api/webauthn/login/verify",
        json_body={"response": signer.authenticator.get(opts, bad_origin)},
    )
    assert answer.status_code == 401 and "origin" in problem(answer)["detail"].lower()


def test_registration_and_login_need_the_exact_rp_id(server: InProcessServer) -> None:
    token = make_registration(server, fresh_email())
    b = browser(server)
    opts = options(b, "/api/webauthn/register/options", {"token": token})
    answer = b.request(
        "POST",
        "/api/webauthn/register/verify",
        json_body={
            "token": token,
            "response": b.authenticator.create(opts, server.url, rp_id="evil.example"),
        },
    )
    assert answer.status_code == 400 and "rp id" in problem(answer)["detail"].lower()

    signer, _ = registered(server)
    opts = options(signer, "/api/webauthn/login/options", {})
    credential = signer.authenticator.credentials[-1]
    forged = signer.authenticator.get(opts, server.url, rp_id="127.0.0.2", credential=credential)
    answer = signer.request("POST", "/api/webauthn/login/verify", json_body={"response": forged})
    assert answer.status_code == 401 and "rp id" in problem(answer)["detail"].lower()
    # A registration URL minted for another RP id is not redeemable here.
    other_rp = make_registration(server, fresh_email(), rp_id="other.example")
    assert (
        browser(server)
        .request("POST", "/api/webauthn/register/options", json_body={"token": other_rp})
        .status_code
        == 404
    )


# -- sign-in --------------------------------------------------------------------------------------
def test_login_by_email_and_discoverable(server: InProcessServer) -> None:
    email = fresh_email("login")
    b, body = registered(server, email)
    fresh = PasskeyBrowser(server.url, server.url, b.authenticator)  # same authenticator, no cookie
    opts = options(fresh, "/api/webauthn/login/options", {"email": email.upper()})
    assert [c["id"] for c in opts["allowCredentials"]] == [body["credential"]["id"]]
    assert opts["rpId"] == "127.0.0.1" and opts["userVerification"] == "preferred"
    answer = fresh.request(
        "POST",
        "/api/webauthn/login/verify",
        json_body={"response": fresh.authenticator.get(opts, server.url)},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["person"]["email"] == email and fresh.cookie and fresh.cookie != b.cookie
    assert fresh.me().json()["email"] == email

    discoverable = PasskeyBrowser(server.url, server.url, b.authenticator)
    opts = options(discoverable, "/api/webauthn/login/options", {})
    assert opts.get("allowCredentials", []) == []
    answer = discoverable.login()
    assert answer.status_code == 200, answer.text
    assert discoverable.me().json()["id"] == body["person"]["id"]
    # The credential's last use and counter were recorded.
    listed = discoverable.request("GET", "/api/webauthn/credentials").json()["data"]
    assert listed[0]["last_used_at"] is not None


def test_login_options_for_unknown_and_disabled_emails(server: InProcessServer) -> None:
    answer = httpx.post(server.url + "/api/webauthn/login/options", json={"email": "nobody@example.com"})
    assert answer.status_code == 404 and problem(answer)["detail"] == "no passkey for this e-mail"
    assert (
        httpx.post(server.url + "/api/webauthn/login/options", json={"email": "not an e-mail"}).status_code
        == 400
    )
    assert (
        httpx.post(
            server.url + "/api/webauthn/login/options", json={"email": "x\u202e@example.com"}
        ).status_code
        == 400
    )


def test_a_disabled_person_cannot_sign_in_and_loses_their_session(server: InProcessServer) -> None:
    email = fresh_email("disabled")
    b, body = registered(server, email)
    fresh = PasskeyBrowser(server.url, server.url, b.authenticator)
    opts_before = options(fresh, "/api/webauthn/login/options", {})
    services = server.services
    server.call(
        services.store.people.update(
            body["person"]["id"], {"status": "disabled", "updated_at": services.clock.now_ms()}
        )
    )
    assert b.me().status_code == 401  # the session ends at once
    answer = httpx.post(server.url + "/api/webauthn/login/options", json={"email": email})
    assert answer.status_code == 403 and problem(answer)["detail"] == "account disabled"
    # discoverable: the options were fetched before the person was disabled; verify still refuses
    answer = fresh.request(
        "POST",
        "/api/webauthn/login/verify",
        json_body={"response": fresh.authenticator.get(opts_before, server.url)},
    )
    assert answer.status_code == 403 and fresh.cookie is None
    # nor can a registration URL bring the account back
    add = make_registration(server, email, purpose="add-device")
    assert (
        browser(server)
        .request("POST", "/api/webauthn/register/options", json_body={"token": add})
        .status_code
        == 403
    )


def test_a_passkey_cannot_sign_in_as_someone_else(server: InProcessServer) -> None:
    alice_email = fresh_email("alice")
    alice, alice_body = registered(server, alice_email)
    mallory, mallory_body = registered(server)
    # Mallory asks for options by Alice's e-mail and answers with her own passkey.
    opts = options(mallory, "/api/webauthn/login/options", {"email": alice_email})
    forged = mallory.authenticator.get(opts, server.url, credential=mallory.authenticator.credentials[-1])
    answer = mallory.request("POST", "/api/webauthn/login/verify", json_body={"response": forged})
    assert answer.status_code == 401
    # Discoverable: her passkey with Alice's user handle.
    opts = options(mallory, "/api/webauthn/login/options", {})
    forged = mallory.authenticator.get(opts, server.url, user_handle=alice_body["person"]["id"].encode())
    answer = mallory.request("POST", "/api/webauthn/login/verify", json_body={"response": forged})
    assert answer.status_code == 401 and "user handle" in problem(answer)["detail"]
    # Discoverable without a user handle is refused too.
    opts = options(mallory, "/api/webauthn/login/options", {})
    forged = mallory.authenticator.get(opts, server.url)
    forged["response"].pop("userHandle")
    assert (
        mallory.request("POST", "/api/webauthn/login/verify", json_body={"response": forged}).status_code
        == 401
    )
    # Alice's credential id with Mallory's key: the signature does not verify.
    opts = options(mallory, "/api/webauthn/login/options", {"email": alice_email})
    forged = mallory.authenticator.get(
        opts,
        server.url,
        credential=mallory.authenticator.credentials[-1],
        user_handle=alice_body["person"]["id"].encode(),
    )
    forged["id"] = forged["rawId"] = alice_body["credential"]["id"]
    answer = mallory.request("POST", "/api/webauthn/login/verify", json_body={"response": forged})
    assert answer.status_code == 401 and mallory.me().json()["email"] != alice_email
    assert mallory_body["person"]["id"] != alice_body["person"]["id"]


def test_the_sign_counter_must_grow(server: InProcessServer) -> None:
    b, _ = registered(server)
    assert b.login().status_code == 200
    assert b.login().status_code == 200
    credential = b.authenticator.credentials[-1]
    credential.sign_count -= 2  # a clone that lags behind the original
    answer = b.login()
    assert (
        answer.status_code == 401
        and problem(answer)["detail"] == "passkey counter went backwards (cloned authenticator?)"
    )
    credential.sign_count += 5
    assert b.login().status_code == 200


def test_an_authenticator_without_a_counter_signs_in_again_and_again(server: InProcessServer) -> None:
    b = browser(server, SoftAuthenticator(counter=False))
    assert b.register(make_registration(server, fresh_email())).status_code == 200
    for _ in range(3):
        assert b.login().status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"response": "x"},
        {"response": {}},
        {"response": {"response": {"clientDataJSON": "%%%"}}},
        {"response": {"id": "abc", "response": {"clientDataJSON": "bm90IGpzb24"}}},
        {"response": {"id": "abc", "response": {"clientDataJSON": "e30"}}},
    ],
)
def test_malformed_login_responses_are_400_not_500(server: InProcessServer, body: dict) -> None:
    answer = httpx.post(server.url + "/api/webauthn/login/verify", json=body)
    assert answer.status_code in (400, 401), answer.text
    problem(answer)


def test_a_mangled_but_well_formed_response_is_refused(server: InProcessServer) -> None:
    b, _ = registered(server)
    opts = options(b, "/api/webauthn/login/options", {})
    assertion = b.authenticator.get(opts, server.url)
    assertion["response"]["signature"] = assertion["response"]["signature"][:-4] + "AAAA"
    answer = b.request("POST", "/api/webauthn/login/verify", json_body={"response": assertion})
    assert answer.status_code == 401


# -- one's own passkeys ---------------------------------------------------------------------------
def test_add_list_and_delete_own_passkeys_never_the_last(server: InProcessServer) -> None:
    b, body = registered(server)
    first = body["credential"]["id"]
    phone = SoftAuthenticator()
    server.clock.advance(1)  # listed oldest first
    added = b.add_passkey(phone, name="Phone")
    assert added.status_code == 201, added.text
    second = added.json()["credential"]["id"]
    listed = b.request("GET", "/api/webauthn/credentials").json()["data"]
    assert [c["id"] for c in listed] == [first, second] and listed[1]["name"] == "Phone"
    # the new passkey signs in
    assert PasskeyBrowser(server.url, server.url, phone).login().status_code == 200
    # adding again with an authenticator that already holds one is excluded by the options
    opts = b.confirm().json()
    assert {c["id"] for c in opts["excludeCredentials"]} == {first, second}

    other, other_body = registered(server)
    assert other.request("DELETE", f"/api/webauthn/credentials/{first}").status_code == 404  # someone else's
    assert other.request("DELETE", "/api/webauthn/credentials/nope").status_code == 404
    answer = other.request("DELETE", f"/api/webauthn/credentials/{other_body['credential']['id']}")
    assert answer.status_code == 400 and problem(answer)["detail"] == "cannot delete your last passkey"

    assert b.request("DELETE", f"/api/webauthn/credentials/{first}").status_code == 200
    assert b.me().status_code == 401  # this session was started with that passkey: it ended with it
    on_phone = PasskeyBrowser(server.url, server.url, phone)
    assert on_phone.login().status_code == 200
    answer = on_phone.request("DELETE", f"/api/webauthn/credentials/{second}")
    assert answer.status_code == 400 and problem(answer)["detail"] == "cannot delete your last passkey"
    assert [c["id"] for c in on_phone.request("GET", "/api/webauthn/credentials").json()["data"]] == [second]
    # the deleted passkey no longer signs in
    gone = PasskeyBrowser(server.url, server.url, b.authenticator)
    opts = options(gone, "/api/webauthn/login/options", {})
    answer = gone.request(
        "POST",
        "/api/webauthn/login/verify",
        json_body={
            "response": gone.authenticator.get(opts, server.url, credential=b.authenticator.credentials[0])
        },
    )
    assert answer.status_code == 401


def test_an_add_challenge_is_bound_to_the_person(server: InProcessServer) -> None:
    alice, _ = registered(server)
    mallory, _ = registered(server)
    opts = alice.confirm().json()
    made = SoftAuthenticator().create(opts, server.url)
    answer = mallory.request("POST", "/api/webauthn/credentials/add/verify", json_body={"response": made})
    assert answer.status_code == 400
    assert len(mallory.request("GET", "/api/webauthn/credentials").json()["data"]) == 1


def test_own_credential_routes_need_a_signed_in_person(server: InProcessServer) -> None:
    anonymous = PasskeyBrowser(server.url, server.url)
    assert anonymous.request("GET", "/api/webauthn/credentials").status_code == 401
    assert anonymous.request("POST", "/api/webauthn/credentials/add/options", json_body={}).status_code == 401
    assert anonymous.request("DELETE", "/api/webauthn/credentials/x").status_code == 401
    management = httpx.get(
        server.url + "/api/webauthn/credentials", headers={"Authorization": f"Bearer {server.token}"}
    )
    assert management.status_code == 403


# -- limits ---------------------------------------------------------------------------------------
def test_passkey_attempts_are_rate_limited_per_address(tmp_path) -> None:  # type: ignore[no-untyped-def]
    srv = InProcessServer(tmp_path / "limited", extra="[limits]\npasskey_per_address = 3\n").start()
    try:
        for _ in range(3):
            assert httpx.post(srv.url + "/api/webauthn/login/options", json={}).status_code == 200
        answer = httpx.post(srv.url + "/api/webauthn/login/options", json={})
        assert answer.status_code == 429 and int(answer.headers["retry-after"]) >= 1
        # each step has its own counter, and agents' sign-in counters are apart
        assert httpx.post(srv.url + "/api/webauthn/login/verify", json={"response": {}}).status_code == 400
        for _ in range(3):
            httpx.post(srv.url + "/api/webauthn/register/verify", json={"token": "x", "response": {}})
        assert (
            httpx.post(
                srv.url + "/api/webauthn/register/verify", json={"token": "x", "response": {}}
            ).status_code
            == 429
        )
        assert (
            httpx.post(srv.url + "/api/agent/challenge", json={"agent_id": "a@example.com"}).status_code
            == 404
        )
        srv.clock.advance(60)
        assert httpx.post(srv.url + "/api/webauthn/login/options", json={}).status_code == 200
    finally:
        srv.stop()


def _mutations(value: object) -> Iterator[object]:
    """Broken versions of one JSON value: wrong types, truncations, flipped bytes."""
    yield from (None, 0, [], {}, "", "!!!")
    if isinstance(value, str) and value:
        yield value[: len(value) // 2]
        yield value[:-1] + ("A" if value[-1] != "A" else "B")
        yield "A" * len(value)
        yield value + "AAAA"


def _breakages(response: dict) -> list[tuple[tuple[str, ...], object]]:
    """(key path, bad value) for every field of a PublicKeyCredential JSON."""
    found: list[tuple[tuple[str, ...], object]] = [
        ((key,), bad) for key in response for bad in _mutations(response[key])
    ]
    found += [
        (("response", key), bad)
        for key in response["response"]
        for bad in _mutations(response["response"][key])
    ]
    return found


def _apply(response: dict, path: tuple[str, ...], bad: object) -> dict:
    import copy

    broken = copy.deepcopy(response)
    (broken if len(path) == 1 else broken["response"])[path[-1]] = bad
    return broken


def _same_bytes(template: dict, path: tuple[str, ...], bad: object) -> bool:
    """A base64url value re-spelt (the last character's unused bits) still names the same bytes."""
    from support.soft_webauthn import unb64url

    original = (template if len(path) == 1 else template["response"])[path[-1]]
    try:
        return (
            isinstance(bad, str)
            and isinstance(original, str)
            and bad != original
            and unb64url(bad) == unb64url(original)
        )
    except ValueError:
        return False


HARMLESS = {"clientExtensionResults", "authenticatorAttachment", "transports"}  # what the server may ignore


def test_broken_passkey_responses_never_cause_a_5xx_nor_sign_anyone_in(server: InProcessServer) -> None:
    b, _ = registered(server)
    with httpx.Client(base_url=server.url, timeout=10) as http:
        count = len(
            _breakages(b.authenticator.get(options(b, "/api/webauthn/login/options", {}), server.url))
        )
        for i in range(count):  # each breakage applied to a fresh, otherwise good response
            fresh = b.authenticator.get(http.post("/api/webauthn/login/options", json={}).json(), server.url)
            path, bad = _breakages(fresh)[i]
            answer = http.post("/api/webauthn/login/verify", json={"response": _apply(fresh, path, bad)})
            if path[-1] in HARMLESS or _same_bytes(fresh, path, bad):
                assert answer.status_code in (200, 400, 401), (path, bad, answer.text)
                continue
            assert answer.status_code in (400, 401, 403), (path, bad, answer.text)
            assert "set-cookie" not in answer.headers
        token = make_registration(server, fresh_email("fuzz"))
        count = len(
            _breakages(
                SoftAuthenticator().create(
                    http.post("/api/webauthn/register/options", json={"token": token}).json(), server.url
                )
            )
        )
        for i in range(count):
            fresh = SoftAuthenticator().create(
                http.post("/api/webauthn/register/options", json={"token": token}).json(), server.url
            )
            path, bad = _breakages(fresh)[i]
            answer = http.post(
                "/api/webauthn/register/verify", json={"token": token, "response": _apply(fresh, path, bad)}
            )
            trailing = path[-1] == "attestationObject" and isinstance(bad, str) and bad.endswith("AAAA")
            if (
                path[-1] in HARMLESS or trailing or _same_bytes(fresh, path, bad)
            ) and answer.status_code == 200:
                token = make_registration(server, fresh_email("fuzz"))  # bytes after the CBOR are ignored
                continue
            assert answer.status_code in (400, 401, 404), (path, bad, answer.text)
        # the URL survived every broken attempt
        assert browser(server).register(token).status_code == 200
