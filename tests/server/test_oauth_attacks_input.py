"""Attacks on grantd's OAuth inputs (issue 19): the SSRF guard of client metadata, a domain client's metadata on the consent page, odd input (never a 5xx or a secret), forged bearers. Shared fixtures: test_oauth_attacks."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from inproc import InProcessServer
from oauth_support import (
    DrippingServer,
    MetadataServer,
    Person,
    authorize_params,
    exchange,
    login,
    pkce,
    query_of,
    ticket_of,
    token_post,
)
from people_support import SESSION_COOKIE, new_public_key

from grantd.services import clients as oauth_clients

from server import test_oauth_attacks, test_oauth_attacks_tokens

# fixtures and helpers shared with the other parts (pytest finds a fixture by its module-level name)
SECRET = test_oauth_attacks.SECRET
_b64 = test_oauth_attacks_tokens._b64
bearer = test_oauth_attacks.bearer
claims_of = test_oauth_attacks.claims_of
guest = test_oauth_attacks_tokens.guest
no_redirect_page = test_oauth_attacks.no_redirect_page
person = test_oauth_attacks.person
srv = test_oauth_attacks.srv


# -- SSRF guard of the client metadata fetch --------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "255.255.255.255",
        "224.0.0.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd00:ec2::254",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "::127.0.0.1",
        "2002:7f00:1::",
        "2002:a9fe:a9fe::",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",
        "64:ff9b::7f00:1",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b:1::a00:1",
        "ff02::1",
        "fe80::1%eth0",
        "198.18.0.1",
        "192.0.0.170",
        "240.0.0.1",
        "100::1",
        "2001:db8::1",
    ],
)
def test_non_public_addresses_in_every_form_are_refused(address: str) -> None:
    assert oauth_clients.public_address(address) is False


def test_a_domain_client_resolving_to_a_private_address_is_never_fetched(srv: InProcessServer) -> None:
    import asyncio

    from grantd.services.clients import MetadataError, fetch_metadata

    tried: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        tried.append(host)
        return ["93.184.216.34", "127.0.0.1"]  # one public, one loopback: refused as a whole

    with pytest.raises(MetadataError, match="non-public"):
        asyncio.run(fetch_metadata("sp.example.com", allow_private=False, resolver=resolver))
    assert tried == ["sp.example.com"]


@pytest.mark.parametrize(
    "client_id",
    [
        "2130706433",
        "0x7f000001",
        "[::1]",
        "127.0.0.1:80@evil.com",
        "evil.com/x",
        "evil.com#",
        "evil.com?x",
        "EVIL.com",
        "evil.com.",
        "user@evil.com",
        "evil.com:99999x",
        "evil.com:80:80",
        "-evil.com",
        "evil..com",
    ],
)
def test_odd_client_ids_are_not_domain_clients(client_id: str) -> None:
    assert not oauth_clients.is_domain_client_id(client_id)


# -- a domain client's metadata on the consent page ---------------------------------------------------


def test_metadata_cannot_inject_markup_or_script_links(srv: InProcessServer, person: Person) -> None:
    sp = MetadataServer()
    try:
        sp.document = {
            **sp.document,
            "client_name": '<script>alert(1)</script>"><img src=x onerror=alert(2)>',
            "client_uri": "javascript:alert(3)//http://x",
        }
        page = person.authorize(authorize_params(sp.client_id, sp.redirect_uri))
        assert page.status_code == 200, page.text[:400]
        assert "<script>alert" not in page.text and "<img" not in page.text
        assert "javascript:" not in page.text
    finally:
        sp.close()


def test_metadata_redirect_uris_must_be_http_urls(srv: InProcessServer, person: Person) -> None:
    sp = MetadataServer()
    try:
        sp.document = {**sp.document, "redirect_uris": ["javascript:alert(1)//", sp.redirect_uri]}
        no_redirect_page(person.authorize(authorize_params(sp.client_id, "javascript:alert(1)//")))
    finally:
        sp.close()


# -- odd input: never a 5xx, never a secret in an answer ----------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "client_id=%ff%fe&redirect_uri=%c0%af",
        "client_id=apes-cli&redirect_uri=" + "x" * 20000,
        "client_id=" + "a." * 130 + "com",
        "&".join(["scope=openid"] * 500),
        "client_id=apes-cli&redirect_uri=http%3A%2F%2Flocalhost%3A9876%2Fcallback&response_type=code&state=%00%ff",
        "client_id=apes-cli&redirect_uri=http%3A%2F%2Flocalhost%3A9876%2Fcallback&response_type=code&code_challenge_method=S256"
        "&code_challenge=" + "A" * 43 + "&nonce=%ed%a0%80&login_hint=%ed%a0%80",
        "client_id=%00",
        "client_id=a%0d%0aSet-Cookie:%20x=y",
        "%ff=%ff",
        "client_id",
    ],
    ids=lambda q: q[:40],
)
def test_odd_authorize_queries_never_5xx(srv: InProcessServer, person: Person, query: str) -> None:
    with person.http() as http:
        answer = http.get("/authorize?" + query)
    assert answer.status_code < 500, answer.text[:300]
    if answer.status_code in (413, 414):  # refused by the HTTP server before any route: nothing to cache
        return
    assert "set-cookie" not in {k.lower() for k in answer.headers if answer.headers[k].startswith("x=")}
    assert answer.headers.get("cache-control", "").startswith("no-store")


@pytest.mark.parametrize("path", ["/token", "/revoke", "/userinfo", "/device_authorization"])
@pytest.mark.parametrize(
    "content, ctype",
    [
        (b"\xff\xfe=\xff", "application/x-www-form-urlencoded"),
        (b"grant_type=authorization_code&" + b"a=b&" * 2000, "application/x-www-form-urlencoded"),
        (b'{"grant_type": {"x": 1}}', "application/json"),
        (b'{"grant_type": 1e999}', "application/json"),
        (b'{"client_id": "\\ud800"}', "application/json"),
        (b"[" * 100000, "application/json"),
        (
            b'{"grant_type": "refresh_token", "refresh_token": "'
            + b"a" * 100000
            + b'", "client_id": "apes-cli"}',
            "application/json",
        ),
        (
            b"grant_type=client_credentials&client_assertion=a.b.c&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3A"
            b"client-assertion-type%3Ajwt-bearer",
            "application/x-www-form-urlencoded",
        ),
        (
            b"grant_type=client_credentials&client_assertion=eyJhbGciOiJFZERTQSJ9.eyJpc3MiOlsxXX0.AA&client_assertion_type=urn"
            b"%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer",
            "application/x-www-form-urlencoded",
        ),
        (
            b"grant_type=client_credentials&client_assertion=eyJhbGciOiJFZERTQSJ9.eyJpc3MiOnsiYSI6MX0sInN1YiI6eyJhIjoxfX0.AA"
            b"&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer",
            "application/x-www-form-urlencoded",
        ),
        (b"token=a.b.c&client_id=%ff", "application/x-www-form-urlencoded"),
        (b"client_id=grantd-cli&scope=" + b"openid%20" * 400, "application/x-www-form-urlencoded"),
        (
            b"grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&client_id=grantd-cli&device_code=%ed%a0%80",
            "application/x-www-form-urlencoded",
        ),
    ],
    ids=lambda v: repr(v[:30]) if isinstance(v, bytes) else v,
)
def test_odd_bodies_never_5xx_and_are_never_cached(
    srv: InProcessServer, path: str, content: bytes, ctype: str
) -> None:
    with httpx.Client(base_url=srv.url, timeout=20) as http:
        answer = http.post(path, content=content, headers={"Content-Type": ctype})
    assert answer.status_code < 500, answer.text[:300]
    assert answer.headers.get("cache-control", "").startswith("no-store"), dict(answer.headers)


@pytest.mark.parametrize(
    "header",
    [
        "Basic " + base64.b64encode(b"\xff\xfe:\xff").decode(),
        "Basic " + base64.b64encode(b"wiki").decode(),
        "Basic ===",
        "Basic " + base64.b64encode(b"wiki:%ff%fe").decode(),
        "Basic " + base64.b64encode(b"%00:x").decode(),
        "Basic " + base64.b64encode(("a" * 5000 + ":b").encode()).decode(),
    ],
)
def test_odd_basic_credentials_never_5xx(srv: InProcessServer, header: str) -> None:
    with httpx.Client(base_url=srv.url, timeout=10) as http:
        answer = http.post(
            "/token",
            data={"grant_type": "authorization_code", "code": "x"},
            headers={"Authorization": header},
        )
    assert answer.status_code == 401, answer.text
    assert "www-authenticate" in answer.headers


def test_errors_never_echo_a_secret(srv: InProcessServer, person: Person) -> None:
    wrong = "wrong-secret-" + uuid.uuid4().hex
    answers = [
        token_post(
            srv,
            {"grant_type": "authorization_code", "code": "x", "client_id": "wiki", "client_secret": wrong},
        ),
        token_post(srv, {"grant_type": "refresh_token", "refresh_token": wrong, "client_id": "apes-cli"}),
        token_post(srv, {"grant_type": "authorization_code", "code": wrong, "client_id": "apes-cli"}),
        token_post(
            srv,
            {"grant_type": "authorization_code", "code": "x"},
            headers={"Authorization": "Basic " + base64.b64encode(f"wiki:{wrong}".encode()).decode()},
        ),
    ]
    with httpx.Client(base_url=srv.url) as http:
        answers.append(http.get("/userinfo", headers={"Authorization": f"Bearer {wrong}.{wrong}.{wrong}"}))
    for answer in answers:
        assert wrong not in answer.text and wrong not in str(answer.headers), answer.text
        assert SECRET not in answer.text


def test_token_answers_are_never_cached(srv: InProcessServer, person: Person) -> None:
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    answers = [exchange(srv, code, verifier), exchange(srv, code, verifier)]
    with httpx.Client(base_url=srv.url) as http:
        answers.append(http.post("/device_authorization", data={"client_id": "grantd-cli"}))
        answers.append(http.post("/revoke", data={"token": "x"}))
        answers.append(
            http.get("/userinfo", headers={"Authorization": f"Bearer {answers[0].json()['access_token']}"})
        )
    for answer in answers:
        assert answer.headers["cache-control"] == "no-store" and answer.headers["pragma"] == "no-cache", (
            answer.headers
        )
    assert person.authorize(authorize_params()).headers["cache-control"] == "no-store"


def test_state_is_returned_verbatim_and_cannot_split_headers(srv: InProcessServer, person: Person) -> None:
    for state in ("a&code=injected", "x\r\nSet-Cookie: a=b", "é%20/?#", "<script>"):
        params = authorize_params(state=state, scope="openid email profile offline_access")
        answer = person.authorize(params)
        if answer.status_code == 200:  # consent first: answer it (on the page of this very request)
            location = person.consent(urlencode(params), ticket=ticket_of(answer.text)).json()["location"]
        else:
            location = answer.headers["location"]
        found = query_of(location)
        assert "set-cookie" not in {k.lower() for k in answer.headers}
        if "\r" in state:
            assert found.get("error") == "invalid_request"
        else:
            assert found["state"] == state and found.get("code", "").count("injected") == 0


def test_an_id_token_for_a_domain_client_cannot_become_an_api_bearer_by_client_id(
    srv: InProcessServer, person: Person
) -> None:
    # a domain client named like the API audience would get ID tokens with aud = the API audience
    assert not oauth_clients.is_domain_client_id(
        srv.services.tokens.agent_audience
    ) or srv.services.tokens.agent_audience in ("apes-cli",)
    tokens = login(srv, person)
    assert claims_of(tokens["id_token"])["aud"] == "apes-cli"
    assert bearer(srv, tokens["id_token"]).status_code == 401


# -- forged bearers -------------------------------------------------------------------------------------


def _forge(header: dict[str, Any], claims: dict[str, Any], key: bytes | None = None) -> str:
    head = _b64(json.dumps(header).encode())
    body = _b64(json.dumps(claims).encode())
    mac = hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest() if key is not None else b""
    return f"{head}.{body}.{_b64(mac)}"


def test_forged_access_tokens_are_refused(srv: InProcessServer, person: Person) -> None:
    real = login(srv, person)
    claims = claims_of(real["access_token"])
    kid = jwt.get_unverified_header(real["access_token"])["kid"]
    with httpx.Client(base_url=srv.url) as http:
        jwks = http.get("/.well-known/jwks.json").json()["keys"]
    secrets_to_try = (
        [kid.encode(), b""]
        + [json.dumps(k).encode() for k in jwks]
        + [base64.urlsafe_b64decode(k["x"] + "==") for k in jwks if "x" in k]
    )
    forged = [_forge({"alg": "none", "kid": kid, "typ": "JWT"}, claims), _forge({"alg": "none"}, claims)]
    forged += [_forge({"alg": "HS256", "kid": kid, "typ": "JWT"}, claims, s) for s in secrets_to_try]
    attacker = Ed25519PrivateKey.generate()
    raw = attacker.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    embedded = {"kty": "OKP", "crv": "Ed25519", "x": _b64(raw)}
    forged.append(jwt.encode(claims, attacker, algorithm="EdDSA", headers={"kid": kid, "jwk": embedded}))
    forged.append(
        jwt.encode(
            claims, attacker, algorithm="EdDSA", headers={"kid": "attacker", "jku": "https://evil.example/j"}
        )
    )
    other_kids = [k["kid"] for k in jwks if k.get("kty") != "OKP"]
    for other in other_kids:
        forged.append(_forge({"alg": "RS256", "kid": other}, claims, b"x"))
    head, body, signature = real["access_token"].split(".")
    forged.append(f"{head}.{body}.{signature}=")  # another spelling of the same token
    forged.append(f"{head}.{body}.{signature[:-2]}")
    for token in forged:
        assert bearer(srv, token).status_code == 401, token
        assert bearer(srv, token, "/userinfo").status_code == 401, token


def test_an_expired_access_token_is_refused_everywhere(tmp_path: Path) -> None:
    server = InProcessServer(tmp_path, extra="[limits]\nfailed_bearer_per_address = 0\n").start()
    try:
        person = Person(server)
        tokens = login(server, person)
        assert bearer(server, tokens["access_token"]).status_code == 200
        server.clock.advance(tokens["expires_in"] + 1)
        assert bearer(server, tokens["access_token"]).status_code == 401
        assert bearer(server, tokens["access_token"], "/userinfo").status_code == 401
    finally:
        server.stop()


def test_a_bearer_plus_a_junk_cookie_cannot_approve_a_terminal(srv: InProcessServer, person: Person) -> None:
    apes = login(srv, person)
    started = httpx.post(f"{srv.url}/device_authorization", data={"client_id": "grantd-cli"}).json()
    for cookie in ("junk", person.cookie):
        with httpx.Client(base_url=srv.url, cookies={SESSION_COOKIE: cookie}) as http:
            answer = http.post(
                "/api/device/decide",
                json={"user_code": started["user_code"], "approve": True},
                headers={"Authorization": f"Bearer {apes['access_token']}"},
            )
        assert answer.status_code == 403, answer.text


def test_a_guest_is_never_an_administrator(srv: InProcessServer, guest: httpx.Client) -> None:
    with guest as http:
        assert http.get("/api/admin/users").status_code == 403
        assert (
            http.post(
                "/api/agent/enroll",
                json={"email": "agent+g@example.com", "name": "g", "publicKey": new_public_key()[1]},
                headers={"Origin": srv.url},
            ).status_code
            == 403
        )
        assert http.get("/api/grants").status_code == 403


@pytest.mark.parametrize(
    "body", [b"[" * 100000, b'{"a":' * 50000 + b"1" + b"}" * 50000], ids=["array", "object"]
)
def test_deep_json_at_the_consent_and_device_routes_is_a_4xx(
    srv: InProcessServer, person: Person, body: bytes
) -> None:
    with person.http() as http:
        for path in ("/authorize/consent", "/api/device/decide"):
            answer = http.post(
                path, content=body, headers={"Content-Type": "application/json", "Origin": srv.url}
            )
            assert 400 <= answer.status_code < 500, (path, answer.status_code)


def test_metadata_fetches_for_made_up_client_ids_are_limited_per_address(tmp_path: Path) -> None:
    """Wildcard DNS gives an attacker endless client_ids: each unknown one costs grantd a DNS lookup
    and an HTTPS request. They count against the address (``limits.sp_login_per_address``, the
    limit of the other "a DNS lookup and a request" route) at /authorize and /revoke. (Each under
    its own registrable domain here: names under one failed domain are not fetched at all, see
    test_a_failing_domain_is_not_fetched_again_under_any_name.)"""
    server = InProcessServer(tmp_path, extra="[limits]\nsp_login_per_address = 5\n").start()
    try:
        resolved: list[str] = []

        async def resolver(host: str, port: int) -> list[str]:
            resolved.append(host)
            raise oauth_clients.MetadataError(f"cannot resolve {host}")

        server.services.oauth_clients.resolver = resolver
        statuses = []
        with httpx.Client(base_url=server.url, timeout=10) as http:
            for n in range(8):
                statuses.append(
                    http.get(
                        "/authorize",
                        params={"client_id": f"x{n}.attacker{n}.example", "redirect_uri": "https://x/cb"},
                    ).status_code
                )
            for n in range(8):
                statuses.append(
                    http.post(
                        "/revoke", data={"client_id": f"r{n}.attacker-r{n}.example", "token": "t"}
                    ).status_code
                )
            for n in range(4):
                basic = base64.b64encode(f"b{n}.attacker-b{n}.example:s".encode()).decode()
                statuses.append(
                    http.post(
                        "/revoke", data={"token": "t"}, headers={"Authorization": f"Basic {basic}"}
                    ).status_code
                )
                statuses.append(
                    http.post(
                        "/token",
                        data={
                            "grant_type": "refresh_token",
                            "refresh_token": "t",
                            "client_id": f"t{n}.attacker-t{n}.example",
                        },
                    ).status_code
                )
            # a client already known (cached, even negatively) costs nothing: no count
            again = http.get(
                "/authorize", params={"client_id": "x0.attacker0.example", "redirect_uri": "https://x/cb"}
            )
        assert len(resolved) <= 5, resolved
        assert statuses.count(429) >= 19 and again.status_code == 400
    finally:
        server.stop()


@pytest.mark.parametrize("path", ["/token", "/revoke", "/device_authorization"])
def test_a_json_member_given_twice_is_refused_like_a_repeated_form_parameter(
    srv: InProcessServer, path: str
) -> None:
    """RFC 6749 §3.2: a parameter given twice is refused; a JSON body must not let the last one win."""
    body = b'{"grant_type": "refresh_token", "client_id": "grantd-cli", "client_id": "wiki", "token": "t", "refresh_token": "t"}'
    with httpx.Client(base_url=srv.url) as http:
        answer = http.post(path, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_request", answer.text


# -- slow client metadata (issue 19 item 5; D12): one deadline, a bound, failures per domain ------------


@pytest.mark.slow
def test_a_dripping_metadata_server_is_cut_off_at_one_overall_deadline(
    srv: InProcessServer, person: Person
) -> None:
    """One byte a second never trips a 3 s read timeout; the whole fetch still ends at 5 s, the
    unauthenticated /authorize answers with a clear page, and grantd hangs up on the server."""
    import time

    drip = DrippingServer(every=1.0)
    try:
        client_id = f"127.0.0.1:{drip.port}"
        started = time.monotonic()
        with httpx.Client(base_url=srv.url, timeout=20) as http:
            answer = http.get("/authorize", params=authorize_params(client_id, f"http://{client_id}/cb"))
        took = time.monotonic() - started
        assert answer.status_code == 400 and "within 5 s" in answer.text, answer.text[-600:]
        assert 4.5 <= took < 9, took
        deadline = time.monotonic() + 5
        while drip.open and time.monotonic() < deadline:
            time.sleep(0.1)
        assert drip.open == 0, "grantd still holds the connection"
        # remembered: asking again fetches nothing and answers at once
        started = time.monotonic()
        with httpx.Client(base_url=srv.url, timeout=20) as http:
            again = http.get("/authorize", params=authorize_params(client_id, f"http://{client_id}/cb"))
        assert again.status_code == 400 and time.monotonic() - started < 2 and drip.connections == 1
    finally:
        drip.close()


def _registry(config_text: str, directory: Path, resolver: Any) -> tuple[Any, Any]:
    from grantd.config import load
    from grantd.core.clock import ManualClock

    path = directory / "grantd.toml"
    path.write_text(
        f'version = 1\n[server]\nissuer = "http://127.0.0.1:1"\n[admin]\nmanagement_token = "{"m" * 32}"\n'
        f"[oauth]\nallow_private_metadata_hosts = true\n{config_text}"
    )
    clock = ManualClock()
    return oauth_clients.ClientRegistry(load(path), clock, resolver=resolver), clock


def test_a_failing_domain_is_not_fetched_again_under_any_name(tmp_path: Path) -> None:
    """Wildcard DNS: every name under evil.example resolves (here to a real local server that fails).
    The first failure keeps the whole registrable domain from being fetched for
    ``oauth.metadata_failure_ttl``; then it is asked again. Other domains are not affected."""
    import asyncio

    sp = MetadataServer()
    sp.mode = "status"
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    try:
        registry, clock = _registry("metadata_failure_ttl = 60\n", tmp_path, resolver)

        async def scenario() -> None:
            assert await registry.get(f"a.evil.example:{sp.port}") is None
            assert sp.hits == 1
            for name in ("b.evil.example", "c.d.evil.example", "evil.example", "x.EVIL.example".lower()):
                assert await registry.get(f"{name}:{sp.port}") is None
                assert "failed recently" in registry.why_unknown(f"{name}:{sp.port}")
                assert not registry.would_fetch(f"{name}:{sp.port}")
            assert sp.hits == 1 and asked == ["a.evil.example"]
            sp.mode = "ok"
            sp.document = {**sp.document, "client_id": f"good.other.example:{sp.port}"}
            assert await registry.get(f"good.other.example:{sp.port}") is not None  # another domain
            clock.advance(61)
            sp.document = {**sp.document, "client_id": f"b.evil.example:{sp.port}"}
            assert await registry.get(f"b.evil.example:{sp.port}") is not None  # asked again after the ttl

        asyncio.run(scenario())
        assert sp.hits == 3
    finally:
        sp.close()


@pytest.mark.slow
def test_fetches_over_the_bound_are_refused_at_once_not_queued(tmp_path: Path) -> None:
    """``oauth.fetches_at_once``: with the bound taken by dripping fetches, one more client is
    refused at once (a clear reason), and it is not remembered as the domain's failure."""
    import asyncio
    import time

    drip = DrippingServer(every=0.5)

    async def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    try:
        registry, _ = _registry("fetches_at_once = 2\n", tmp_path, resolver)

        async def scenario() -> None:
            slow = [asyncio.create_task(registry.get(f"s{n}.slow{n}.example:{drip.port}")) for n in range(2)]
            while drip.open < 2:
                await asyncio.sleep(0.05)
            started = time.monotonic()
            assert await registry.get(f"one.more.example:{drip.port}") is None
            assert time.monotonic() - started < 1
            assert "too many fetches at once" in registry.why_unknown(f"one.more.example:{drip.port}")
            assert registry.fetches.failed("more.example") is None
            assert await asyncio.gather(*slow) == [None, None]  # the deadline ended them
            assert registry.fetches.running == 0

        asyncio.run(scenario())
    finally:
        drip.close()


@pytest.mark.parametrize(
    "host, expected",
    [
        ("a.b.example.com", "example.com"),
        ("example.com", "example.com"),
        ("x.example.co.uk", "example.co.uk"),
        ("deep.x.example.com.au", "example.com.au"),
        ("127.0.0.1", "127.0.0.1:8443"),
        ("localhost", "localhost:8443"),
        ("EXAMPLE.com.", "example.com"),
    ],
)
def test_failures_are_remembered_per_registrable_domain(host: str, expected: str) -> None:
    from grantd.services.outbound import registrable_domain

    assert registrable_domain(host, 8443 if expected.endswith(":8443") else None) == expected
