"""store.keys: the signing keys (D3, D12)."""

from __future__ import annotations

import asyncio

import pytest

from .factories import NOW, key

pytestmark = pytest.mark.anyio


async def test_add_first_has_exactly_one_winner(store):
    results = await asyncio.gather(*(store.keys.add_first(key(f"k{i}")) for i in range(20)))
    assert results.count(True) == 1
    winner = f"k{results.index(True)}"
    assert [k["kid"] for k in await store.keys.all()] == [winner]
    assert await store.keys.active_kid() == winner
    assert await store.keys.add_first(key("late")) is False


async def test_no_key_no_active_kid(store):
    assert await store.keys.active_kid() is None
    assert await store.keys.all() == []


async def test_rotate_retires_and_deletes_private_keys(store):
    assert await store.keys.add_first(key("k1", NOW))
    assert await store.keys.rotate(key("k2", NOW + 1), NOW + 5) == ["k1"]
    keys = await store.keys.all()
    assert [k["kid"] for k in keys] == ["k2", "k1"]  # newest first
    new, old = keys
    assert old["retired_at"] == NOW + 5 and old["private_pem"] == ""
    assert old["public_jwk"] == {"kid": "k1", "x": "k1"}  # still published: it verifies
    assert new["retired_at"] is None and new["private_pem"] == "-----PRIVATE k2-----"
    assert await store.keys.active_kid() == "k2"
    assert await store.keys.add_first(key("k3")) is False


async def test_drop_retired_before(store):
    await store.keys.add_first(key("k1", NOW))
    await store.keys.rotate(key("k2", NOW + 1), NOW + 10)
    await store.keys.rotate(key("k3", NOW + 2), NOW + 20)
    assert await store.keys.drop_retired_before(NOW + 10) == 0  # strictly before
    assert await store.keys.drop_retired_before(NOW + 15) == 1
    assert [k["kid"] for k in await store.keys.all()] == ["k3", "k2"]
    assert await store.keys.drop_retired_before(NOW + 100) == 1
    assert [k["kid"] for k in await store.keys.all()] == ["k3"]  # the active key is never dropped


async def test_revoke_deletes_a_key_at_once(store):
    await store.keys.add_first(key("k1", NOW))
    await store.keys.rotate(key("k2", NOW + 1), NOW + 10)
    assert await store.keys.revoke("k1", NOW + 11) is True
    assert [k["kid"] for k in await store.keys.all()] == ["k2"]
    assert await store.keys.revoke("k1", NOW + 12) is False
    assert await store.keys.revoke("k2", NOW + 13) is True
    assert await store.keys.active_kid() is None
    assert await store.keys.add_first(key("k4", NOW + 14)) is True


# -- keys of several algorithms (D3: id tokens EdDSA by default, ES256/RS256 when a client asks) --------
async def test_active_kid_per_algorithm(store):
    assert await store.keys.add_first(key("ed1", NOW))
    assert await store.keys.active_kid("ES256") is None
    assert await store.keys.add_first(
        key("es1", NOW + 1, alg="ES256")
    )  # the first ES256 key: another algorithm
    assert await store.keys.add_first(key("rs1", NOW + 2, alg="RS256"))
    assert await store.keys.active_kid() == "ed1"  # callers that name no algorithm get the EdDSA key
    assert await store.keys.active_kid("EdDSA") == "ed1"
    assert await store.keys.active_kid("ES256") == "es1"
    assert await store.keys.active_kid("RS256") == "rs1"
    assert await store.keys.active_kid("HS256") is None
    assert [k["kid"] for k in await store.keys.all()] == [
        "rs1",
        "es1",
        "ed1",
    ]  # every algorithm, newest first
    assert await store.keys.add_first(key("es2", NOW + 3, alg="ES256")) is False


async def test_rotate_retires_only_keys_of_its_algorithm(store):
    await store.keys.add_first(key("ed1", NOW))
    await store.keys.add_first(key("es1", NOW + 1, alg="ES256"))
    assert await store.keys.rotate(key("es2", NOW + 2, alg="ES256"), NOW + 5) == ["es1"]
    by_kid = {k["kid"]: k for k in await store.keys.all()}
    assert by_kid["es1"]["retired_at"] == NOW + 5 and by_kid["es1"]["private_pem"] == ""
    assert by_kid["ed1"]["retired_at"] is None and by_kid["ed1"]["private_pem"] == "-----PRIVATE ed1-----"
    assert await store.keys.active_kid("ES256") == "es2"
    assert await store.keys.active_kid() == "ed1"
    assert await store.keys.rotate(key("ed2", NOW + 3), NOW + 6) == ["ed1"]
    assert await store.keys.active_kid() == "ed2"
    assert await store.keys.active_kid("ES256") == "es2"
    # a rotation may bring an algorithm's first key
    assert await store.keys.rotate(key("rs1", NOW + 4, alg="RS256"), NOW + 7) == []
    assert await store.keys.active_kid("RS256") == "rs1"


async def test_add_first_per_algorithm_has_exactly_one_winner_each(store):
    results = await asyncio.gather(
        *(store.keys.add_first(key(f"{alg}-{i}", alg=alg)) for i in range(10) for alg in ("EdDSA", "ES256"))
    )
    assert results.count(True) == 2
    kids = {k["alg"]: k["kid"] for k in await store.keys.all()}
    assert set(kids) == {"EdDSA", "ES256"}
    assert await store.keys.active_kid("EdDSA") == kids["EdDSA"]
    assert await store.keys.active_kid("ES256") == kids["ES256"]
