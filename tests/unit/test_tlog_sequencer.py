"""The sequencer step (grantd.core.tlog.sequencer) against a dict standing in for the two tables:
a crash before the commit loses nothing and the next step computes the same rows; a store that lost
or rewrote leaves never gets a checkpoint signed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grantd.core.tlog import leaves as L
from grantd.core.tlog.merkle import CompactRange, MemoryTree
from grantd.core.tlog.note import (
    InconsistentCheckpoint,
    Signer,
    open_checkpoint,
    parse_checkpoint,
    parse_note,
)
from grantd.core.tlog.sequencer import integrate, next_checkpoint
from grantd.core.tlog.verify import OK, verify_log

ORIGIN = "idp.example.com/grantd"
ACTOR = {"kind": "system"}


class Store:
    def __init__(self):
        self.leaves: dict[int, bytes] = {}
        self.nodes: dict[tuple[int, int], bytes] = {}
        self.checkpoint: str | None = None

    @property
    def size(self) -> int:
        return len(self.leaves)

    def read(self, coords):
        return {c: self.nodes[c] for c in coords if c in self.nodes}

    def commit(self, step):
        for index, leaf, _ in step.leaf_rows:
            self.leaves[index] = leaf
        for level, index, digest in step.node_rows:
            assert (level, index) not in self.nodes  # written once
            self.nodes[(level, index)] = digest


def events(start: int, count: int) -> list[bytes]:
    return [
        L.policy_loaded(start + i + 1, start + i, ACTOR, policy_hash=f"sha256:{start + i:064x}")
        for i in range(count)
    ]


def previous(store: Store, signer: Signer):
    return parse_checkpoint(parse_note(store.checkpoint)[0]) if store.checkpoint else None


def run_step(store: Store, signer: Signer, batch: list[bytes], crash_before_commit: bool = False):
    step = integrate(CompactRange.load(store.size, store.read), batch)
    if crash_before_commit:
        return step
    store.commit(step)
    store.checkpoint = next_checkpoint(signer, store.size, previous(store, signer), store.read)
    return step


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.booleans()), min_size=1, max_size=12))
def test_steps_with_crashes_lose_nothing_and_every_checkpoint_verifies(batches):
    store, signer = Store(), Signer.generate(ORIGIN)
    sent = 0
    for count, crash in batches:
        batch = events(sent, count)
        if crash:  # killed before the commit: nothing stored, the same events come again
            lost = run_step(store, signer, batch, crash_before_commit=True)
            redo = run_step(store, signer, batch)
            assert (redo.node_rows, redo.root) == (lost.node_rows, lost.root)
        else:
            run_step(store, signer, batch)
        sent += count
        head = open_checkpoint(store.checkpoint, [signer.verifier], ORIGIN)
        assert head.size == sent == store.size
        leaves = [store.leaves[i] for i in range(store.size)]
        assert head.root == MemoryTree.of_leaves(leaves).root()
    assert verify_log(store.checkpoint, [signer.verifier.vkey], None, leaves).code == OK


def test_a_store_that_lost_or_rewrote_leaves_gets_no_checkpoint():
    store, signer = Store(), Signer.generate(ORIGIN)
    run_step(store, signer, events(0, 20))
    signed = previous(store, signer)
    # The newest leaves and their nodes deleted (a restore, an attacker), then new events arrive.
    shrunk = Store()
    shrunk.checkpoint = store.checkpoint
    for i in range(13):
        shrunk.leaves[i] = store.leaves[i]
    shrunk.nodes = {(lv, ix): h for (lv, ix), h in store.nodes.items() if (ix + 1) << lv <= 13}
    with pytest.raises(InconsistentCheckpoint):
        next_checkpoint(signer, shrunk.size, signed, shrunk.read)
    shrunk.commit(integrate(CompactRange.load(shrunk.size, shrunk.read), events(100, 10)))
    assert shrunk.size > signed.size
    with pytest.raises(InconsistentCheckpoint):  # grown again past it, with other leaves: a fork
        next_checkpoint(signer, shrunk.size, signed, shrunk.read)
    # A rewritten node: the same.
    store.nodes[(4, 0)] = bytes(32)  # the node the old head stands on
    run = integrate(CompactRange.load(store.size, store.read), events(20, 5))
    store.commit(run)
    with pytest.raises(InconsistentCheckpoint):
        next_checkpoint(signer, store.size, signed, store.read)
