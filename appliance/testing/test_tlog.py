"""store.tlog, store.hosts, store.receipts: the decision log's storage (D14, issue 23)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from grantd.core.tlog.merkle import CompactRange, MemoryTree, root
from grantd.core.tlog.sequencer import integrate
from grantd.store import Conflict
from grantd.store.tlog import AuditEvent, Host, TlogKey

from .factories import NOW

pytestmark = pytest.mark.anyio


def _event(kind: str = "exec.receipt", grant_id: str | None = "gr_1", at: int = NOW) -> AuditEvent:
    return AuditEvent(
        seq=0,
        kind=kind,
        grant_id=grant_id,
        actor={"kind": "host", "host": "web1"},
        data={"x": 1},
        created_at=at,
    )


def _key(kid: str, at: int = NOW) -> TlogKey:
    return TlogKey(
        kid=kid,
        name="idp.example.com/grantd",
        seed=f"seed-{kid}",
        public=f"pub-{kid}",
        created_at=at,
        retired_at=None,
    )


def _grant_of(index: int) -> tuple[str | None, int | None]:
    """Every even leaf is about grant gr_1 (created at NOW), every odd one about no grant."""
    return ("gr_1", NOW) if index % 2 == 0 else (None, None)


async def _integrate(
    store,
    holder: str,
    leaves: list[bytes],
    *,
    grant_seq: int = 0,
    event_seq: int = 0,
    grant_of: Callable[[int], tuple[str | None, int | None]] = _grant_of,
) -> bool:
    head = await store.tlog.head()
    stored = await store.tlog.nodes(CompactRange.coords(head["size"]))
    compact = CompactRange.load(head["size"], lambda coords: stored)
    step = integrate(compact, leaves)
    rows = [(i, leaf, digest, *grant_of(i)) for i, leaf, digest in step.leaf_rows]
    return await store.tlog.append(
        holder=holder,
        now=NOW,
        expect_size=head["size"],
        leaves=rows,
        nodes=step.node_rows,
        grant_seq=grant_seq,
        event_seq=event_seq,
    )


async def test_a_new_store_has_an_empty_log(store):
    head = await store.tlog.head()
    assert (head["size"], head["grant_seq"], head["event_seq"], head["holder"]) == (0, 0, 0, None)
    assert await store.tlog.latest_checkpoint() is None
    assert await store.tlog.entries(0, 10) == []


async def test_lease_has_exactly_one_winner_until_it_expires(store):
    results = await asyncio.gather(*(store.tlog.lease(f"p{i}", NOW, 5000) for i in range(20)))
    assert results.count(True) == 1
    winner = f"p{results.index(True)}"
    assert await store.tlog.lease(winner, NOW + 1000, 5000)  # renewal by the holder
    assert not await store.tlog.lease("other", NOW + 5999, 5000)
    assert await store.tlog.lease("other", NOW + 6000, 5000)  # expired: another may take it
    assert not await store.tlog.lease(winner, NOW + 6001, 5000)
    await store.tlog.release("other")
    assert await store.tlog.lease(winner, NOW + 6002, 5000)


async def test_append_writes_leaves_nodes_and_position_together(store):
    assert await store.tlog.lease("p1", NOW - 1, 60_000)
    leaves = [f"leaf {i}".encode() for i in range(7)]
    assert await _integrate(store, "p1", leaves, grant_seq=12, event_seq=3)
    head = await store.tlog.head()
    assert (head["size"], head["grant_seq"], head["event_seq"]) == (7, 12, 3)
    tree = MemoryTree.of_leaves(leaves)
    stored = await store.tlog.nodes(CompactRange.coords(7))
    assert root(7, lambda coords: stored) == tree.root()
    assert [(i, leaf) for i, leaf, _ in await store.tlog.entries(2, 5)] == [
        (2, b"leaf 2"),
        (3, b"leaf 3"),
        (4, b"leaf 4"),
    ]
    assert await store.tlog.grant_indexes("gr_1", 7, NOW) == [0, 2, 4, 6]
    assert await store.tlog.grant_indexes("gr_1", 5, NOW) == [0, 2, 4]
    more = [f"leaf {i}".encode() for i in range(7, 20)]
    assert await _integrate(store, "p1", more, grant_seq=30, event_seq=3)
    everything = {
        c: h for c, h in (await store.tlog.nodes([(lv, i) for lv in range(6) for i in range(21)])).items()
    }
    assert root(20, lambda coords: everything) == MemoryTree.of_leaves(leaves + more).root()


async def test_a_grants_leaves_are_found_by_its_id_and_creation_time(store):
    """A grant's leaves: those appended with its id and its created_at, and those with its id and no
    created_at (leaves of the log before the key had the time, receipts); a leaf of another grant
    with the same id and another created_at is not one of them."""
    assert await store.tlog.lease("p1", NOW - 1, 60_000)
    keys = [("gr_1", NOW), ("gr_2", NOW), ("gr_1", None), (None, None), ("gr_1", NOW + 5), ("gr_1", NOW)]
    leaves = [f"leaf {i}".encode() for i in range(len(keys))]
    assert await _integrate(store, "p1", leaves, grant_seq=6, grant_of=keys.__getitem__)
    assert await store.tlog.grant_indexes("gr_1", 6, NOW) == [0, 2, 5]
    assert await store.tlog.grant_indexes("gr_1", 5, NOW) == [0, 2]
    assert await store.tlog.grant_indexes("gr_1", 6, NOW + 5) == [2, 4]
    assert await store.tlog.grant_indexes("gr_1", 6, None) == [2]  # no such grant: the leaves without a time
    assert await store.tlog.grant_indexes("gr_2", 6, NOW) == [1]
    assert await store.tlog.grant_indexes("gr_3", 6, NOW) == []


async def test_level_0_nodes_are_the_leaf_hashes(store):
    """A backend keeps each leaf hash once (issue 23): the level-0 nodes ``append`` is given are
    answered from the leaves, with the nodes above them in one call; nothing beyond the size."""
    assert await store.tlog.lease("p1", NOW - 1, 60_000)
    leaves = [f"leaf {i}".encode() for i in range(5)]
    assert await _integrate(store, "p1", leaves)
    tree = MemoryTree.of_leaves(leaves)
    wanted = [(0, i) for i in range(7)] + [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
    found = await store.tlog.nodes(wanted)
    assert found == {c: tree.nodes[c] for c in wanted if c in tree.nodes}
    assert [found[(0, i)] for i in range(5)] == [h for _, _, h in await store.tlog.entries(0, 5)]
    assert (0, 5) not in found and (1, 2) not in found and (2, 1) not in found


async def test_a_large_step_is_written_whole(store):
    """A step of more rows than a backend writes per statement (SQLite: 200) keeps every row."""
    assert await store.tlog.lease("p1", NOW - 1, 60_000)
    leaves = [f"leaf {i}".encode() for i in range(451)]
    assert await _integrate(store, "p1", leaves)
    assert [leaf for _, leaf, _ in await store.tlog.entries(0, 451)] == leaves
    tree = MemoryTree.of_leaves(leaves)
    wanted = [(level, i) for level in range(10) for i in range(451 >> level)]
    assert await store.tlog.nodes(wanted) == {c: tree.nodes[c] for c in wanted}
    assert len(await store.tlog.grant_indexes("gr_1", 451, NOW)) == 226


async def test_append_refuses_without_the_lease_or_on_a_stale_size(store):
    assert not await _integrate(store, "nobody", [b"a"])  # no lease at all
    assert await store.tlog.lease("p1", NOW - 1, 60_000)
    assert not await _integrate(store, "p2", [b"a"])  # another holds it
    head = await store.tlog.head()
    compact = CompactRange(0, [])
    step = integrate(compact, [b"a"])
    rows = [(i, leaf, digest, None, None) for i, leaf, digest in step.leaf_rows]
    assert await store.tlog.append(
        holder="p1",
        now=NOW,
        expect_size=head["size"],
        leaves=rows,
        nodes=step.node_rows,
        grant_seq=1,
        event_seq=0,
    )
    # the same step again (a second sequencer computed it from the old size): nothing is written
    assert not await store.tlog.append(
        holder="p1",
        now=NOW,
        expect_size=head["size"],
        leaves=rows,
        nodes=step.node_rows,
        grant_seq=1,
        event_seq=0,
    )
    assert (await store.tlog.head())["size"] == 1
    assert len(await store.tlog.entries(0, 10)) == 1
    # an expired lease writes nothing either
    assert not await store.tlog.append(
        holder="p1", now=NOW + 120_000, expect_size=1, leaves=[], nodes=[], grant_seq=2, event_seq=0
    )


async def test_checkpoints_are_kept_once_per_size(store):
    assert await store.tlog.add_checkpoint(3, "note 3", NOW)
    assert await store.tlog.add_checkpoint(10, "note 10", NOW)
    assert not await store.tlog.add_checkpoint(3, "another note 3", NOW)
    assert await store.tlog.latest_checkpoint() == (10, "note 10")
    assert await store.tlog.checkpoints() == [(3, "note 3"), (10, "note 10")]


async def test_log_keys_one_first_key_rotation_keeps_public_halves(store):
    results = await asyncio.gather(*(store.tlog.add_first_key(_key(f"k{i}")) for i in range(10)))
    assert results.count(True) == 1
    first = f"k{results.index(True)}"
    assert await store.tlog.rotate_key(_key("new", NOW + 1), NOW + 5) == [first]
    keys = await store.tlog.keys()
    assert [k["kid"] for k in keys] == ["new", first]
    assert keys[1]["seed"] == "" and keys[1]["public"] == f"pub-{first}" and keys[1]["retired_at"] == NOW + 5
    assert keys[0]["seed"] == "seed-new" and keys[0]["retired_at"] is None
    events = await store.tlog.events_after(0, 10)
    assert [(e["kind"], e["data"]["kid"], e["data"]["purpose"]) for e in events] == [
        ("key.rotated", "new", "log")
    ]
    # the JWT keys are another table
    assert await store.keys.all() == []


async def test_hosts_enrol_once_with_their_event(store):
    host = Host(host="web1", public_key="ssh-ed25519 AAAA", enrolled_by="admin@example.com", created_at=NOW)
    assert await store.hosts.add(host, {"kind": "person", "email": "admin@example.com"}) == host
    with pytest.raises(Conflict) as raised:
        await store.hosts.add({**host, "public_key": "ssh-ed25519 BBBB"}, {"kind": "management"})
    assert raised.value.field == "host"
    assert await store.hosts.get("web1") == host
    assert await store.hosts.get("web2") is None
    assert await store.hosts.get("we\x00b1") is None
    events = await store.tlog.events_after(0, 10)
    assert [(e["kind"], e["data"], e["actor"]) for e in events] == [
        (
            "host.enrolled",
            {"host": "web1", "public_key": "ssh-ed25519 AAAA"},
            {"kind": "person", "email": "admin@example.com"},
        )
    ]


async def test_a_receipt_twice_adds_nothing(store):
    results = await asyncio.gather(
        *(store.receipts.add("gr_1 jti exited", _event(at=NOW + i)) for i in range(10))
    )
    assert results.count(True) == 1
    assert await store.receipts.add("gr_1 jti refused", _event())
    events = await store.tlog.events_after(0, 10)
    assert [e["kind"] for e in events] == ["exec.receipt", "exec.receipt"]
    assert events[0]["seq"] < events[1]["seq"]
    assert [e["seq"] for e in await store.tlog.events_after(events[0]["seq"], 10)] == [events[1]["seq"]]


async def test_delegation_changes_record_their_events_in_their_transaction(store):
    from .factories import delegation

    await store.delegations.create(delegation("dl_1", delegator="alice@example.com"))
    assert await store.delegations.revoke("dl_1", "bob@example.com", NOW + 5) is not None
    assert (
        await store.delegations.revoke("dl_1", "bob@example.com", NOW + 6) is None
    )  # nothing happened: no event
    events = await store.tlog.events_after(0, 10)
    assert [(e["kind"], e["actor"], e["data"]["delegation_id"]) for e in events] == [
        ("delegation.created", {"kind": "person", "email": "alice@example.com"}, "dl_1"),
        ("delegation.revoked", {"kind": "person", "email": "bob@example.com"}, "dl_1"),
    ]
    assert events[0]["data"]["details"]["delegate"] == "bot@agents.example.com"
    assert events[1]["created_at"] == NOW + 5


async def test_a_new_passkey_records_its_public_key_in_the_same_transaction(store):
    from .factories import credential, person

    await store.people.create(person("carol"))
    await store.credentials.add(credential("cred-1", "usr_carol"))
    with pytest.raises(Conflict):
        await store.credentials.add(credential("cred-1", "usr_carol"))  # refused: no second event
    events = await store.tlog.events_after(0, 10)
    assert [
        (e["kind"], e["data"]["credential_id"], e["data"]["email"], e["data"]["pid"]) for e in events
    ] == [("person.credential_added", "cred-1", "carol@example.com", "usr_carol")]
    assert events[0]["data"]["public_key"] == (await store.credentials.get("cred-1"))["public_key"]


async def test_a_jwt_key_rotation_records_its_event(store):
    from .factories import key

    assert await store.keys.add_first(key("k1", NOW))
    await store.keys.rotate(key("k2", NOW + 1), NOW + 5)
    events = await store.tlog.events_after(0, 10)
    assert [(e["kind"], e["data"]["purpose"], e["data"]["kid"], e["created_at"]) for e in events] == [
        ("key.rotated", "jwt", "k2", NOW + 5)
    ]


async def test_agent_changes_record_their_events_in_their_transaction(store):
    from grantd.core.lifecycle import Lapse

    from .factories import agent

    enrolled = await store.agents.create(agent("bot1"), frozenset(), by="alice@example.com")
    await store.agents.update(
        "agt_bot1", {"name": "renamed", "updated_at": NOW + 1}, by="alice@example.com"
    )  # no key: no event
    await store.agents.update(
        "agt_bot1",
        {"public_key": "ssh-ed25519 NEW", "key_id": "kid-new", "updated_at": NOW + 2},
        by="alice@example.com",
    )
    await store.agents.retire(
        "agt_bot1", delete=False, by="root@example.com", reason="off", now=NOW + 3, lapse=Lapse({})
    )
    events = await store.tlog.events_after(0, 10)
    assert [(e["kind"], e["actor"].get("email"), e["created_at"]) for e in events] == [
        ("agent.enrolled", "alice@example.com", enrolled["created_at"]),
        ("agent.key_replaced", "alice@example.com", NOW + 2),
        ("agent.disabled", "root@example.com", NOW + 3),
    ]
    assert (
        events[0]["data"]["public_key"] == enrolled["public_key"]
        and events[1]["data"]["public_key"] == "ssh-ed25519 NEW"
    )


def _policy_event(digest: str, at: int = NOW) -> AuditEvent:
    return AuditEvent(
        seq=0,
        kind="policy.loaded",
        grant_id=None,
        actor={"kind": "system"},
        data={"policy_hash": digest, "policy_ids": ["p"]},
        created_at=at,
    )


async def test_policy_loaded_only_when_the_hash_differs_from_the_last_one(store):
    """D14 ``policy.loaded``: processes starting together with the same policies record one event;
    the same hash again nothing; another hash one more; going back to the first one more again."""
    results = await asyncio.gather(*(store.tlog.policy_loaded(_policy_event("sha256:a")) for _ in range(8)))
    assert results.count(True) == 1
    assert await store.tlog.policy_loaded(_policy_event("sha256:a")) is False
    assert await store.tlog.policy_loaded(_policy_event("sha256:b")) is True
    assert await store.tlog.policy_loaded(_policy_event("sha256:a")) is True
    events = await store.tlog.events_after(0, 10)
    assert [(e["kind"], e["data"]["policy_hash"]) for e in events] == [
        ("policy.loaded", "sha256:a"),
        ("policy.loaded", "sha256:b"),
        ("policy.loaded", "sha256:a"),
    ]
