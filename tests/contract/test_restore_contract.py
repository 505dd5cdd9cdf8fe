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
