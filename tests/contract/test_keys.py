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
