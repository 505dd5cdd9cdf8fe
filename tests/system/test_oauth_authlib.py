"""An OIDC relying party nobody here wrote (authlib's ``AsyncOAuth2Client`` over httpx) signs a person
in against a real grantd with code + PKCE, validates the id_token against the JWKS with
``authlib.jose`` and ``CodeIDToken`` (EdDSA by default; ES256 and RS256 for clients asking for them),
and refreshes with rotation. Also: SPs as domain clients whose metadata a tiny real HTTP server in
the test serves, and the SSRF guard of that fetch."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.jose import JsonWebKey, JsonWebToken
from authlib.oidc.core import CodeIDToken
from inproc import InProcessServer
from oauth_support import (
    MetadataServer,
    Person,
    authorize_params,
    exchange,
    pkce,
    query_of,
    start_with_secrets,
    ticket_of,
)

SECRET = "authlib-rp-secret-0123456789"
# what about half of `openssl rand -base64 32` secrets look like: "+" and "/"; and a "%" that is or is
# not the start of a percent-escape
ODD_SECRET = "Zm9v+YmFy/YmF6%2B+cXV4%zz0123456789="
CLIENTS = """
[[oauth.clients]]
client_id = "rp-odd"
name = "RP with an odd secret"
redirect_uris = ["https://rp.example.com/callback"]
client_secret = "file:rp-odd-secret"

[[oauth.clients]]
client_id = "rp-eddsa"
name = "RP (EdDSA)"
redirect_uris = ["https://rp.example.com/callback"]
client_secret = "file:rp-secret"

[[oauth.clients]]
client_id = "rp-es256"
name = "RP (ES256)"
redirect_uris = ["https://rp.example.com/callback"]
client_secret = "file:rp-secret"
id_token_signed_response_alg = "ES256"

[[oauth.clients]]
client_id = "rp-rs256"
name = "RP (RS256)"
redirect_uris = ["https://rp.example.com/callback"]
id_token_signed_response_alg = "RS256"
"""
REDIRECT = "https://rp.example.com/callback"


def start(directory: Path, extra: str) -> InProcessServer:
    return start_with_secrets(directory, extra, {"rp-secret": SECRET, "rp-odd-secret": ODD_SECRET})  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    server = start(
        tmp_path_factory.mktemp("authlib"),
        "[oauth]\nallow_private_metadata_hosts = true\nmetadata_cache_ttl = 60\n" + CLIENTS,
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    """A server with the SSRF guard as in production (no private metadata hosts)."""
    server = start(tmp_path_factory.mktemp("guarded"), "")
    yield server
    server.stop()


def discovery(srv: InProcessServer) -> dict[str, Any]:
    return httpx.get(f"{srv.url}/.well-known/openid-configuration").json()  # type: ignore[no-any-return]


def browser_part(person: Person, url: str) -> str:
    """What a browser does between the RP's redirect and its callback: GET /authorize with the
    session cookie, approve on the consent page (its script's JSON POST). Returns the callback URL."""
    with person.http() as http:
        answer = http.get(url)
        if answer.status_code == 302:
            return answer.headers["location"]
        assert answer.status_code == 200 and "data-consent" in answer.text, answer.text[:300]
        query = url.split("?", 1)[1]
        approved = http.post(
            "/authorize/consent",
            json={"request": query, "approve": True, "ticket": ticket_of(answer.text)},
            headers={"Origin": person.srv.url},
        )
        assert approved.status_code == 200, approved.text
        return approved.json()["location"]  # type: ignore[no-any-return]


async def rp_login(
    srv: InProcessServer,
    person: Person,
    client_id: str,
    *,
    secret: str | None = SECRET,
    redirect_uri: str = REDIRECT,
    auth_method: str = "client_secret_basic",
) -> tuple[dict[str, Any], Any, str]:
    """authlib as the RP: (token, claims of the validated id_token, nonce)."""
    meta = discovery(srv)
    nonce = generate_token(20)
    verifier = generate_token(48)
    async with AsyncOAuth2Client(
        client_id=client_id,
        client_secret=secret,
        redirect_uri=redirect_uri,
        scope="openid email profile offline_access",
        code_challenge_method="S256",
        token_endpoint_auth_method=auth_method if secret else "none",
    ) as rp:
        url, state = rp.create_authorization_url(
            meta["authorization_endpoint"], code_verifier=verifier, nonce=nonce
        )
        callback = await asyncio.to_thread(browser_part, person, url)
        assert query_of(callback)["state"] == state and query_of(callback)["iss"] == meta["issuer"]
        token = await rp.fetch_token(
            meta["token_endpoint"], authorization_response=callback, code_verifier=verifier
        )
    claims = validate_id_token(srv, token["id_token"], client_id, nonce)
    return dict(token), claims, nonce


def validate_id_token(srv: InProcessServer, id_token: str, client_id: str, nonce: str | None) -> Any:
    meta = discovery(srv)
    keys = JsonWebKey.import_key_set(httpx.get(meta["jwks_uri"]).json())
    decoder = JsonWebToken(["EdDSA", "ES256", "RS256"])
    claims = decoder.decode(
        id_token,
        keys,
        claims_cls=CodeIDToken,
        claims_options={"iss": {"essential": True, "value": meta["issuer"]}},
        claims_params={"nonce": nonce, "client_id": client_id},
    )
    claims.validate(leeway=5)
    return claims


@pytest.mark.parametrize("client_id, alg", [("rp-eddsa", "EdDSA"), ("rp-es256", "ES256")])
def test_authlib_completes_code_and_pkce_and_validates_the_id_token(
    srv: InProcessServer, client_id: str, alg: str
) -> None:
    person = Person(srv)
    token, claims, nonce = asyncio.run(rp_login(srv, person, client_id))
    assert claims.header["alg"] == alg
    assert claims["sub"] == person.email and claims["aud"] == client_id and claims["nonce"] == nonce
    assert claims["email"] == person.email and claims["email_verified"] is True and claims["name"]
    assert claims["exp"] - claims["iat"] == 300 and isinstance(claims["auth_time"], int)
    assert token["token_type"].lower() == "bearer" and token["refresh_token"]


def test_rs256_for_a_public_client_with_client_secret_post_absent(srv: InProcessServer) -> None:
    person = Person(srv)
    _, claims, _ = asyncio.run(rp_login(srv, person, "rp-rs256", secret=None))
    assert claims.header["alg"] == "RS256"
    jwks = httpx.get(f"{srv.url}/.well-known/jwks.json").json()["keys"]
    kinds = {k["kty"]: k for k in jwks}
    assert {"OKP", "EC", "RSA"} <= set(kinds)
    assert set(kinds["RSA"]) == {"kty", "n", "e", "kid", "alg", "use"} and kinds["RSA"]["alg"] == "RS256"
    assert set(kinds["EC"]) == {"kty", "crv", "x", "y", "kid", "alg", "use"} and kinds["EC"]["crv"] == "P-256"


def test_authlib_refreshes_with_rotation_and_reuse_kills_the_family(srv: InProcessServer) -> None:
    person = Person(srv)

    async def scenario() -> None:
        token, _, _ = await rp_login(srv, person, "rp-eddsa", auth_method="client_secret_post")
        meta = discovery(srv)
        async with AsyncOAuth2Client(
            client_id="rp-eddsa", client_secret=SECRET, token_endpoint_auth_method="client_secret_post"
        ) as rp:
            second = await rp.refresh_token(meta["token_endpoint"], refresh_token=token["refresh_token"])
            assert second["refresh_token"] != token["refresh_token"]
            validate_id_token(srv, second["id_token"], "rp-eddsa", None)
            info = await rp.get(
                meta["userinfo_endpoint"], headers={"Authorization": f"Bearer {second['access_token']}"}
            )
            assert info.json()["sub"] == person.email
            with pytest.raises(Exception, match="invalid_grant"):
                await rp.refresh_token(meta["token_endpoint"], refresh_token=token["refresh_token"])
            with pytest.raises(Exception, match="invalid_grant"):
                await rp.refresh_token(meta["token_endpoint"], refresh_token=second["refresh_token"])
            gone = await rp.get(
                meta["userinfo_endpoint"], headers={"Authorization": f"Bearer {second['access_token']}"}
            )
            assert gone.status_code == 401

    asyncio.run(scenario())


# -- client secrets with "+", "/" and "%" ----------------------------------------------------------------


@pytest.mark.parametrize("auth_method", ["client_secret_basic", "client_secret_post"])
def test_authlib_default_client_authentication_with_plus_slash_and_percent(
    srv: InProcessServer, auth_method: str
) -> None:
    """authlib's client_secret_basic (its default) puts the secret into Basic credentials as it is,
    without the form-encoding RFC 6749 §2.3.1 asks for: a server decoding as the RFC says saw "+" as
    a space and refused the client (before: invalid_client). grantd accepts the form-decoded and the
    raw form; client_secret_post is form-encoded by the body itself."""
    person = Person(srv)

    async def scenario() -> None:
        token, claims, _ = await rp_login(srv, person, "rp-odd", secret=ODD_SECRET, auth_method=auth_method)
        assert claims["aud"] == "rp-odd" and token["refresh_token"]
        async with AsyncOAuth2Client(
            client_id="rp-odd", client_secret=ODD_SECRET, token_endpoint_auth_method=auth_method
        ) as rp:
            renewed = await rp.refresh_token(
                discovery(srv)["token_endpoint"], refresh_token=token["refresh_token"]
            )
        assert renewed["refresh_token"] != token["refresh_token"]

    asyncio.run(scenario())


def _basic_header(client_id: str, secret: str) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()


def test_basic_credentials_count_encoded_or_raw_but_only_for_the_exact_secret(srv: InProcessServer) -> None:
    """Both forms of the one secret pass; nothing else does: not the secret's "+" read as a space,
    not a near miss in either form, not the raw secret under another client's id."""
    from urllib.parse import quote

    def refresh_with(authorization: str) -> httpx.Response:
        # an unknown refresh token: client authentication is judged first (401), then the token (400)
        return httpx.post(
            f"{srv.url}/token",
            data={"grant_type": "refresh_token", "refresh_token": "unknown"},
            headers={"Authorization": authorization},
        )

    encoded = quote(ODD_SECRET, safe="")
    for good in (ODD_SECRET, encoded, encoded.replace("%2B", "%2b")):
        answer = refresh_with(_basic_header("rp-odd", good))
        assert answer.status_code == 400 and answer.json()["error"] == "invalid_grant", (good, answer.text)
    for bad in (
        ODD_SECRET.replace("+", " "),
        ODD_SECRET.replace("+", "%20"),
        ODD_SECRET[:-1],
        ODD_SECRET + "x",
        encoded.replace("%2F", "%2E"),
        ODD_SECRET.replace("%2B", "+"),
        "",
    ):
        answer = refresh_with(_basic_header("rp-odd", bad))
        assert answer.status_code == 401 and answer.json()["error"] == "invalid_client", (bad, answer.text)
    assert refresh_with(_basic_header("rp-eddsa", ODD_SECRET)).status_code == 401
    assert refresh_with(_basic_header("rp-odd", SECRET)).status_code == 401
    # client_id in the body must name the Basic client, in either form
    answer = httpx.post(
        f"{srv.url}/token",
        data={"grant_type": "refresh_token", "refresh_token": "unknown", "client_id": "rp-eddsa"},
        headers={"Authorization": _basic_header("rp-odd", ODD_SECRET)},
    )
    assert answer.status_code == 401


# -- domain clients: metadata served by a tiny HTTP server -----------------------------------------------


@pytest.fixture
def sp() -> Iterator[MetadataServer]:
    server = MetadataServer()
    yield server
    server.close()


def test_a_domain_client_signs_a_person_in_with_authlib(srv: InProcessServer, sp: MetadataServer) -> None:
    person = Person(srv)
    token, claims, _ = asyncio.run(
        rp_login(srv, person, sp.client_id, secret=None, redirect_uri=sp.redirect_uri)
    )
    assert claims["aud"] == sp.client_id and claims.header["alg"] == "EdDSA"
    assert (
        sp.hosts[0] == sp.client_id
    )  # Host names the client, though the connection went to the checked address
    # an SP's access token is for /userinfo only, never grantd's API (peer bug 27)
    assert (
        httpx.get(
            f"{srv.url}/api/me", headers={"Authorization": f"Bearer {token['access_token']}"}
        ).status_code
        == 401
    )


@pytest.fixture
def clock_back(srv: InProcessServer) -> Iterator[None]:
    """Time moved by a test comes back after it (authlib checks iat against the real clock)."""
    started = srv.clock.now_ms()
    yield
    srv.clock.set_ms(started)


def test_domain_client_metadata_is_cached_positively_and_negatively(
    srv: InProcessServer, sp: MetadataServer, clock_back: None
) -> None:
    person = Person(srv)
    person.authorize(authorize_params(sp.client_id, sp.redirect_uri))
    person.authorize(authorize_params(sp.client_id, sp.redirect_uri))
    assert sp.hits == 1
    sp.document = {**sp.document, "redirect_uris": ["http://127.0.0.1:1/other"]}
    assert (
        person.authorize(authorize_params(sp.client_id, sp.redirect_uri)).status_code == 200
    )  # still cached
    srv.clock.advance(61)
    refused = person.authorize(authorize_params(sp.client_id, sp.redirect_uri))
    assert refused.status_code == 400 and "not registered" in refused.text and sp.hits == 2
    sp.mode = "status"
    srv.clock.advance(61)
    assert person.authorize(authorize_params(sp.client_id, sp.redirect_uri)).status_code == 400
    sp.mode = "ok"
    assert (
        person.authorize(authorize_params(sp.client_id, sp.redirect_uri)).status_code == 400
    )  # negative answer cached
    assert sp.hits == 3


@pytest.mark.parametrize(
    "mode, change, words",
    [
        ("redirect", {}, "redirects are not followed"),
        ("huge", {}, "too large"),
        ("nested", {}, "not JSON"),
        ("chunkless", {"padding": "x" * 100_000}, "too large"),
        ("ok", {"client_id": "other.example.com"}, "client_id differs"),
        ("ok", {"redirect_uris": ["javascript:alert(1)"]}, "http(s) URL"),
        ("ok", {"redirect_uris": []}, "redirect_uris"),
        ("ok", {"id_token_signed_response_alg": "none"}, "id_token_signed_response_alg"),
    ],
)
def test_unusable_metadata_is_refused_on_a_page(
    srv: InProcessServer, sp: MetadataServer, mode: str, change: dict[str, Any], words: str
) -> None:
    sp.mode = mode
    sp.document = {**sp.document, **change}
    answer = Person(srv).authorize(authorize_params(sp.client_id, sp.redirect_uri))
    assert answer.status_code == 400 and "location" not in answer.headers
    assert words.replace("(", "").replace(")", "") in answer.text.replace("(", "").replace(")", ""), (
        answer.text[-800:]
    )
    assert sp.hits == 1  # a redirect is not followed (it would be a second request)


def test_metadata_text_is_escaped_and_bad_links_dropped(srv: InProcessServer, sp: MetadataServer) -> None:
    sp.document = {
        **sp.document,
        "client_name": "<script>alert(1)</script>",
        "client_uri": "javascript:alert(1)",
    }
    page = Person(srv).authorize(authorize_params(sp.client_id, sp.redirect_uri))
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in page.text and "&lt;script&gt;" in page.text
    assert "javascript:" not in page.text


@pytest.mark.parametrize(
    "client_id",
    [
        "127.0.0.1:{port}",
        "localhost:{port}",
        "10.1.2.3",
        "169.254.169.254",
        "192.168.0.1:8443",
        "0.0.0.0",
        "224.0.0.1",
    ],
)
def test_the_ssrf_guard_refuses_non_public_addresses(
    guarded: InProcessServer, sp: MetadataServer, client_id: str
) -> None:
    client_id = client_id.format(port=sp.port)
    answer = Person(guarded).authorize(authorize_params(client_id, f"https://{client_id}/api/callback"))
    assert answer.status_code == 400 and "non-public address" in answer.text
    assert sp.hits == 0


def test_code_exchange_of_a_domain_client(srv: InProcessServer, sp: MetadataServer) -> None:
    """The peer SP's way: a JSON body, no secret; `assertion` is the id_token."""
    person = Person(srv)
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(sp.client_id, sp.redirect_uri, challenge, scope=None))
    answer = exchange(srv, code, verifier, client_id=sp.client_id, redirect_uri=sp.redirect_uri, as_json=True)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["assertion"] == body["id_token"] and "refresh_token" not in body
    assert body["scope"] == "openid email profile"  # no scope asked: what the peer SP reads
    validate_id_token(srv, body["assertion"], sp.client_id, None)


def test_the_consent_page_names_the_domain_client(srv: InProcessServer, sp: MetadataServer) -> None:
    page = Person(srv).authorize(authorize_params(sp.client_id, sp.redirect_uri))
    assert "Tiny SP" in page.text and sp.client_id in page.text


@pytest.mark.parametrize(
    "address, public",
    [
        ("8.8.8.8", True),
        ("2001:4860:4860::8888", True),
        ("::ffff:8.8.8.8", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("100.64.0.1", False),
        ("169.254.169.254", False),
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("255.255.255.255", False),
        ("::1", False),
        ("::", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("fd00:ec2::254", False),
        ("ff02::1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:169.254.169.254", False),
        ("2002:7f00:1::", False),
        ("2002:a9fe:a9fe::", False),
        ("not-an-address", False),
    ],
)
def test_which_addresses_the_guard_lets_through(address: str, public: bool) -> None:
    """Mapped and tunnelled IPv6 forms are judged by the IPv4 address inside them."""
    from grantd.services.clients import public_address

    assert public_address(address) is public


def test_the_fetch_connects_to_the_address_that_was_checked(sp: MetadataServer) -> None:
    """One resolution, then the connection goes to that address (a name the system resolver does
    not know works only so); ``Host`` names the client."""
    from grantd.services.clients import fetch_metadata

    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    document = asyncio.run(
        fetch_metadata(f"sp.rebind.invalid:{sp.port}", allow_private=True, resolver=resolver)
    )
    assert document["client_name"] == "Tiny SP" and asked == ["sp.rebind.invalid"]
    assert sp.hosts == [f"sp.rebind.invalid:{sp.port}"]


def test_one_private_address_among_public_ones_is_enough_to_refuse(sp: MetadataServer) -> None:
    from grantd.services.clients import MetadataError, fetch_metadata

    async def resolver(host: str, port: int) -> list[str]:
        return ["8.8.8.8", "127.0.0.1"]

    with pytest.raises(MetadataError, match="non-public"):
        asyncio.run(fetch_metadata("sp.example.com", allow_private=False, resolver=resolver))
    assert sp.hits == 0
