"""Signing keys: created on first start, rotated with `grantd keys rotate` while the server runs."""

from __future__ import annotations

import json

import jwt
import pytest
from support import postgres as pg

from conftest import enroll, sign_in


def _jwks(srv) -> dict:
    with srv.client() as http:
        return http.get("/.well-known/jwks.json").json()


def _verify_with_jwks(srv, token: str) -> dict:
    keys = {k.key_id: k for k in jwt.PyJWKSet.from_dict(_jwks(srv)).keys}
    kid = jwt.get_unverified_header(token)["kid"]
    return jwt.decode(token, keys[kid].key, algorithms=["EdDSA"], audience="apes-cli", issuer=srv.url)


def test_rotation_signs_with_the_new_key_at_once_and_old_tokens_keep_verifying(server_factory, tmp_path):
    srv = server_factory().start()
    agent = enroll(srv, tmp_path)
    old_token = sign_in(srv, agent)
    old_kid = jwt.get_unverified_header(old_token)["kid"]
    listed = json.loads(srv.grantd("keys", "list", "--json", "--config", str(srv.config_path)).stdout)
    assert [(k["kid"], k["state"]) for k in listed] == [(old_kid, "active")]

    rotated = json.loads(srv.grantd("keys", "rotate", "--json", "--config", str(srv.config_path)).stdout)
    assert rotated["retired"] == [old_kid] and rotated["kid"] != old_kid

    # The running server signs with the new key immediately ...
    new_token = sign_in(srv, agent)
    assert jwt.get_unverified_header(new_token)["kid"] == rotated["kid"]
    # ... both keys are published, and a token signed by the old key still verifies and is accepted.
    assert {k["kid"] for k in _jwks(srv)["keys"]} == {old_kid, rotated["kid"]}
    assert _verify_with_jwks(srv, old_token)["sub"] == agent.email
    assert _verify_with_jwks(srv, new_token)["sub"] == agent.email
    with srv.client(old_token) as http:
        assert http.get("/api/me").status_code == 200

    states = {
        k["kid"]: k["state"]
        for k in json.loads(srv.grantd("keys", "list", "--json", "--config", str(srv.config_path)).stdout)
    }
    assert states == {rotated["kid"]: "active", old_kid: "published"}


def test_keys_survive_a_restart(server_factory, tmp_path):
    srv = server_factory().start()
    kids = {k["kid"] for k in _jwks(srv)["keys"]}
    agent = enroll(srv, tmp_path)
    token = sign_in(srv, agent)
    srv.stop()
    srv.start()
    assert {k["kid"] for k in _jwks(srv)["keys"]} == kids
    with srv.client(token) as http:
        assert http.get("/api/me").status_code == 200


@pg.sqlite_only(
    "grantd db backup through VACUUM INTO, read back with sqlite3 (PostgreSQL's pg_dump backup: "
    "tests/system/test_nodes.py::test_backup_is_a_private_pg_dump_that_restores)"
)
def test_db_backup_writes_a_usable_copy(server_factory, tmp_path):
    import sqlite3

    srv = server_factory().start()
    enroll(srv, tmp_path)
    target = tmp_path / "backup.db"
    srv.grantd("db", "backup", str(target), "--config", str(srv.config_path))
    with sqlite3.connect(target) as db:
        assert db.execute("SELECT count(*) FROM agents").fetchone()[0] == 1
        assert db.execute("SELECT count(*) FROM signing_keys").fetchone()[0] == 1


@pytest.mark.slow
def test_revoke_stops_a_key_everywhere_at_once(server_factory, tmp_path):
    """D12: a revoked key leaves the JWKS and nothing it signed verifies any more, in every server
    process; tokens freshly forged with it (a stolen key) are refused too."""
    import asyncio
    import time
    from concurrent.futures import ThreadPoolExecutor

    from grantd.config import load
    from grantd.plugin_manager import build_plugin_manager
    from grantd.services.context import open_services

    srv = server_factory(workers=2).start()
    agent = enroll(srv, tmp_path)
    old_token = sign_in(srv, agent)
    old_kid = jwt.get_unverified_header(old_token)["kid"]

    async def forge() -> str:  # what a thief holding the old private key could mint
        config = load(srv.config_path)
        services = await open_services(config, build_plugin_manager(config))
        try:
            claims = jwt.decode(old_token, options={"verify_signature": False})
            claims.update(iat=int(time.time()), exp=int(time.time()) + 600, jti="forged")
            return await services.tokens._sign(claims)
        finally:
            services.store.close()

    # its own thread and loop: another test in this worker may have left an event loop running here
    with ThreadPoolExecutor(1) as pool:
        forged = pool.submit(asyncio.run, forge()).result()
    revoked = json.loads(
        srv.grantd("keys", "revoke", old_kid, "--json", "--config", str(srv.config_path)).stdout
    )
    assert revoked["revoked"] == old_kid and revoked["new_active_kid"] not in (None, old_kid)
    # Every process re-reads its key list at least once a second (KeyRing.REFRESH_MS): within that,
    # requests on fresh connections (spread over both workers) must all be refused.
    deadline = time.monotonic() + 1.5
    while True:
        answers = []
        for _ in range(6):
            for token in (old_token, forged):
                with srv.client(token) as http:
                    answers.append(http.get("/api/me").status_code)
        if set(answers) == {401} or time.monotonic() > deadline:
            break
    assert set(answers) == {401}
    assert old_kid not in {k["kid"] for k in _jwks(srv)["keys"]}
    new_token = sign_in(srv, agent)
    assert jwt.get_unverified_header(new_token)["kid"] == revoked["new_active_kid"]
    with srv.client(new_token) as http:
        assert http.get("/api/me").status_code == 200
    missing = srv.grantd("keys", "revoke", "key-nope", "--config", str(srv.config_path), check=False)
    assert missing.returncode == 1 and "no signing key" in missing.stderr


RP_CLIENTS = """
[[oauth.clients]]
client_id = "rp-es256"
name = "RP (ES256)"
redirect_uris = ["https://rp.example.com/callback"]
id_token_signed_response_alg = "ES256"

[[oauth.clients]]
client_id = "rp-rs256"
name = "RP (RS256)"
redirect_uris = ["https://rp.example.com/callback"]
id_token_signed_response_alg = "RS256"
"""


@pytest.mark.slow
def test_configured_clients_keys_are_published_from_the_first_start(server_factory):
    """D9: a relying party that caches the JWKS when it starts must find its RS256/ES256 key there
    before any ID token was signed with it. Two worker processes start at once on one storage: both
    publish the same single key of each algorithm (creation is single-winner). Before: the JWKS held
    only the EdDSA key until the first ES256/RS256 ID token."""
    srv = server_factory(workers=2, extra=RP_CLIENTS).start()
    seen = []
    for _ in range(8):  # fresh connections, spread over both workers
        keys = _jwks(srv)["keys"]
        seen.append(sorted((k["alg"], k["kid"]) for k in keys))
        by_alg = {k["alg"]: k for k in keys}
        assert set(by_alg) == {"EdDSA", "ES256", "RS256"} and len(keys) == 3, keys
        assert all(k["use"] == "sig" for k in keys)
        assert by_alg["ES256"]["kty"] == "EC" and by_alg["ES256"]["crv"] == "P-256"
        assert by_alg["RS256"]["kty"] == "RSA" and by_alg["RS256"]["e"] == "AQAB"
        for key in keys:  # each one a usable public key of its algorithm
            assert jwt.PyJWK(key, algorithm=key["alg"]).algorithm_name == key["alg"]
    assert all(s == seen[0] for s in seen)
    listed = json.loads(srv.grantd("keys", "list", "--json", "--config", str(srv.config_path)).stdout)
    assert sorted((k["alg"], k["kid"]) for k in listed if k["state"] == "active") == seen[0]
    srv.stop()
    srv.start()  # a restart makes nothing new
    assert sorted((k["alg"], k["kid"]) for k in _jwks(srv)["keys"]) == seen[0]


def test_without_such_clients_only_the_eddsa_key_is_made(server_factory):
    srv = server_factory().start()
    assert [k["alg"] for k in _jwks(srv)["keys"]] == ["EdDSA"]


def test_concurrent_starts_agree_on_one_key_per_algorithm(tmp_path):
    """open_services in several event loops at once on one fresh database (several processes
    starting together): one key per algorithm in storage, and every keyring signs with it."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from grantd.config import load
    from grantd.plugin_manager import build_plugin_manager
    from grantd.services.context import open_services

    from conftest import make_server

    made = make_server(tmp_path / "race", extra=RP_CLIENTS)  # writes the config only; nothing is started

    async def start() -> dict[str, str]:
        config = load(made.config_path)
        services = await open_services(config, build_plugin_manager(config))
        try:
            return {alg: (await services.keyring.signing_key(alg)).kid for alg in ("EdDSA", "ES256", "RS256")}
        finally:
            services.store.close()

    with ThreadPoolExecutor(4) as pool:
        kids = [f.result() for f in [pool.submit(asyncio.run, start()) for _ in range(4)]]
    assert all(k == kids[0] for k in kids), kids

    async def stored() -> list[dict]:
        config = load(made.config_path)
        services = await open_services(config, build_plugin_manager(config))
        try:
            return await services.store.keys.all()
        finally:
            services.store.close()

    with ThreadPoolExecutor(1) as pool:
        rows = pool.submit(asyncio.run, stored()).result()
    assert sorted((r["alg"], r["kid"]) for r in rows) == sorted((alg, kid) for alg, kid in kids[0].items())
