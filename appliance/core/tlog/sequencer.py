"""One sequencer step as pure code: what the storage layer writes, and the checkpoint it may sign.

The store's part (not built yet; docs/audit.md): hold the single-winner lease, read the new events
and the compact range, call ``integrate``, write ``Step.leaf_rows`` and ``Step.node_rows`` (and mark
the events integrated) in **one transaction**, then call ``next_checkpoint`` with a reader of the
committed nodes and store the note. A crash before the commit leaves the old state, from which the
next winner computes the same step again (``integrate`` depends only on the stored state and the
events); a crash after it leaves leaves and nodes that agree. ``next_checkpoint`` checks consistency
with the previous signed checkpoint against the stored nodes before signing, so a store that lost
or rewrote leaves makes it raise ``InconsistentCheckpoint`` instead of signing a fork.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from grantd.core.tlog.merkle import CompactRange, NodeReader, consistency_proof
from grantd.core.tlog.merkle import root as tree_root
from grantd.core.tlog.note import Checkpoint, InconsistentCheckpoint, Signer, sign_checkpoint


@dataclass(frozen=True)
class Step:
    first: int  # the first new leaf's index
    leaves: Sequence[bytes]
    hashes: list[bytes]  # each leaf's hash, in the same order
    node_rows: list[tuple[int, int, bytes]]  # (level, index, hash) for tlog_nodes
    size: int
    root: bytes

    @property
    def leaf_rows(self) -> list[tuple[int, bytes, bytes]]:
        """(index, leaf, leaf hash) for tlog_leaves."""
        return list(zip(range(self.first, self.size), self.leaves, self.hashes, strict=True))


def integrate(compact: CompactRange, leaves: Sequence[bytes]) -> Step:
    """Append ``leaves`` (already encoded, in event order) to a copy of ``compact``; the caller's range
    is not changed (so a failed commit leaves it as stored)."""
    working = CompactRange(compact.size, list(compact.peaks))
    first = working.size
    sha256 = hashlib.sha256
    hashes = [sha256(b"\x00" + leaf).digest() for leaf in leaves]  # leaf_hash, inlined
    nodes = working.extend(hashes)
    return Step(first, leaves, hashes, nodes, working.size, working.root())


def next_checkpoint(signer: Signer, size: int, previous: Checkpoint | None, read: NodeReader) -> str:
    """Sign the head of the first ``size`` stored leaves, after proving from the stored nodes that it
    extends ``previous`` (the last checkpoint this log signed). ``InconsistentCheckpoint`` when it does
    not, ``ProofError`` when the store lacks a node it needs: either way nothing is signed."""
    if previous is not None and size < previous.size:
        raise InconsistentCheckpoint(
            f"refusing to sign: the store has {size} leaves, the last checkpoint {previous.size}"
        )
    head = Checkpoint(signer.name, size, tree_root(size, read))
    proof = consistency_proof(previous.size, size, read) if previous is not None else []
    return sign_checkpoint(signer, head, previous, proof)
