"""``Store.restore``: a backup comes back whole, the previous contents are kept, and a file that is
not a backup changes nothing. Every backend."""

from __future__ import annotations

import os
import stat

import pytest

from grantd.store import StoreError

from .factories import agent, grant, key

pytestmark = pytest.mark.anyio


async def test_restore_brings_back_the_backup_and_keeps_the_previous_contents(store, tmp_path):
    await store.keys.add_first(key("k1"))
    await store.agents.create(agent("before"), frozenset())
    await store.grants.create(grant("g-before"), ["grant.created"])
    backup = tmp_path / "backup.db"
    await store.backup(str(backup))
    await store.agents.create(agent("after"), frozenset())
    await store.grants.create(grant("g-after"), ["grant.created"])

    kept = await store.restore(str(backup))

    assert await store.agents.get("agt_before") is not None
    assert await store.agents.get("agt_after") is None
    assert await store.grants.get("g-before") is not None and await store.grants.get("g-after") is None
    assert [k["kid"] for k in await store.keys.all()] == ["k1"]
    assert os.path.exists(kept) and stat.S_IMODE(os.stat(kept).st_mode) == 0o600
    with pytest.raises(StoreError, match="exists"):
        await store.restore(str(backup))  # an earlier kept copy is never overwritten


async def test_a_file_that_is_not_a_backup_changes_nothing(store, tmp_path):
    await store.agents.create(agent("stays"), frozenset())
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError):
        await store.restore(str(junk))
    assert await store.agents.get("agt_stays") is not None


async def test_backup_carries_oauth_records_and_guest_sessions(store, tmp_path):
    from .factories import NOW, consent, device_code, guest_session, refresh_token, sha

    await store.onetime.put("code", sha("c1"), {"client_id": "apes-cli"}, NOW + 60_000, NOW)
    token = await store.refresh_tokens.create(refresh_token("r1"))
    device = await store.device_codes.create(device_code("d1"))
    remembered = await store.consents.remember(consent())
    guest = await store.sessions.create(guest_session("g1"))
    backup = tmp_path / "backup.db"
    await store.backup(str(backup))
    await store.onetime.take("code", sha("c1"), NOW)
    await store.refresh_tokens.revoke_family(token["family_id"], NOW + 1)
    await store.consents.withdraw("usr_alice", "sp.example.com", NOW + 1)
    await store.sessions.revoke_family(guest["family_id"], NOW + 1)

    await store.restore(str(backup))

    assert await store.onetime.take("code", sha("c1"), NOW + 2) == {"client_id": "apes-cli"}
    assert await store.refresh_tokens.get(sha("r1")) == token
    assert await store.device_codes.get_by_user_code(device["user_code"], NOW + 2) == device
    assert await store.consents.get("usr_alice", "sp.example.com") == remembered
    assert await store.sessions.get("g1", NOW + 2) == guest
