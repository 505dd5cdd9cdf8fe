"""CPU cost of the decision log's pure core (issue 23: the sequencer keeps up with 2,000 events a
second; a new event is in a signed checkpoint within about 1 s). In this process, no I/O: the
store's reads and writes come on top once the log has its tables.

    .venv/bin/python bench/tlog.py

Cases (best of 5 repeats, CPU time):
- a sequencer step: encode 2,000 leaves (RFC 8785), hash them and append them to the compact range
  of a log that already has 1,000,000 leaves, collecting every new complete node to store, and the new root;
- signing the checkpoint after it, consistency proof from the previous head checked first;
- proofs from the stored node hashes of that log: an inclusion proof and a consistency proof (and how
  many nodes each reads), and verifying them;
- the verifier recomputing the root of 100,000 leaves.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from grantd.core.tlog import leaves as L
from grantd.core.tlog.merkle import (
    CompactRange,
    MemoryTree,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from grantd.core.tlog.merkle import root as tree_root
from grantd.core.tlog.note import Checkpoint, Signer, open_checkpoint
from grantd.core.tlog.sequencer import integrate, next_checkpoint

BASE = 1_000_000
BATCH = 2_000
RUNS = 200
ACTOR = {"kind": "person", "email": "alice@example.com", "pid": "prs_0123456789"}


def best(function: Callable[[], object], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        function()
        times.append(time.process_time() - start)
    return min(times)


class Nodes:
    """A store that keeps only what a sequencer and proofs for sizes near BASE read: every complete
    node, computed lazily from a synthetic leaf sequence (the hash of its number), cached."""

    def __init__(self) -> None:
        self.cache: dict[tuple[int, int], bytes] = {}
        self.reads = 0

    def node(self, level: int, index: int) -> bytes:
        key = (level, index)
        if key not in self.cache:
            if level == 0:
                self.cache[key] = leaf_hash(b"%d" % index)
            else:
                left = self.node(level - 1, 2 * index)
                right = self.node(level - 1, 2 * index + 1)
                self.cache[key] = hashlib.sha256(b"\x01" + left + right).digest()
        return self.cache[key]

    def read(self, coords):
        self.reads += len(coords)
        return {c: self.node(*c) for c in coords}


def main() -> None:
    nodes = Nodes()
    start = CompactRange.load(BASE, nodes.read)
    signer = Signer.generate("idp.example.com/grantd")
    previous = Checkpoint(signer.name, BASE, start.root())
    events = [(BASE + i, 1764140000000 + i) for i in range(BATCH)]

    def encode():
        return [
            L.grant_reviewed(
                seq,
                ts,
                ACTOR,
                f"gr_{seq:020d}",
                decision="approve",
                via="web",
                req="sre",
                reason="planned maintenance CHG-1234",
                grant_digest="sha256:" + "ab" * 32,
            )
            for seq, ts in events
        ]

    raw = encode()

    def step():
        return integrate(start, raw)

    done = step()
    new_root, written = done.root, done.node_rows
    for level, index, digest in written:
        nodes.cache[(level, index)] = digest

    def sign():  # the stored nodes read, consistency with the previous head proved, then signed
        return next_checkpoint(signer, BASE + BATCH, previous, nodes.read)

    encode_s, integrate_s, sign_s = best(encode), best(step), best(sign)
    step = encode_s + integrate_s + sign_s
    print(
        f"sequencer step, {BATCH} events onto {BASE:,} leaves: encode {encode_s * 1000:.1f} ms, "
        f"hash+append+rows {integrate_s * 1000:.1f} ms ({len(written)} new nodes), prove+sign {sign_s * 1000:.2f} ms; "
        f"total {step * 1000:.1f} ms CPU (aim: far below 1 s)"
    )
    note = sign()
    print(f"opening the checkpoint: {best(lambda: open_checkpoint(note, [signer.verifier])) * 1e6:.0f} µs")

    size = BASE + BATCH
    for name, make, check in (
        (
            "inclusion proof",
            lambda: inclusion_proof(123_456, size, nodes.read),
            lambda p: verify_inclusion(123_456, size, leaf_hash(b"123456"), p, new_root),
        ),
        (
            "consistency proof",
            lambda: consistency_proof(777_777, size, nodes.read),
            lambda p: verify_consistency(777_777, size, tree_root(777_777, nodes.read), new_root, p),
        ),
    ):
        made = make()
        nodes.reads = 0
        make()
        reads = nodes.reads
        per_call = best(lambda make=make: [make() for _ in range(RUNS)]) / RUNS
        verify = best(lambda check=check, made=made: [check(made) for _ in range(RUNS)]) / RUNS
        print(
            f"{name} at size {size:,}: {len(made)} hashes from {reads} stored nodes, build {per_call * 1e6:.0f} µs, "
            f"verify {verify * 1e6:.0f} µs"
        )

    leaves_100k = [b"%d" % i for i in range(100_000)]
    print(
        f"verifier: root of 100,000 leaves recomputed in {best(lambda: MemoryTree.of_leaves(leaves_100k), 3):.2f} s CPU"
    )


if __name__ == "__main__":
    main()
