"""RFC 6962 / RFC 9162 §2.1 Merkle tree hashing, proofs from stored subtree hashes, and verification.

Hashes: a leaf is ``SHA-256(0x00 || leaf)``, an inner node ``SHA-256(0x01 || left || right)``; the
tree of n leaves splits at k, the largest power of two smaller than n (RFC 9162 §2.1.1).

What a store keeps: the hash of *complete* subtrees, i.e. the node at ``(level, index)`` is the root
of leaves ``[index·2^level, (index+1)·2^level)``; level 0 is the leaf hashes (kept with the leaves),
levels from ``STORED_FROM`` up are ``tlog_nodes(level, index, hash)`` rows, and the few levels
between are hashed again from the leaf hashes when needed (``stored_coords``, ``with_low_levels``).
A node is written once, when its last leaf arrives, and never changes; about n/8 node rows for n
leaves. From these the root of any size and every proof is computed with O(log n) reads
(``range_nodes`` says which): the tree of RFC 9162 only ever needs ranges that split into aligned
complete subtrees. ``CompactRange`` is the sequencer's state: the complete subtrees along
the right edge (one per set bit of the size), from which appending a batch yields the new nodes to
store and the new root without reading or rehashing anything else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()  # MTH({}) = SHA-256() (RFC 9162 §2.1.1)

Coord = tuple[int, int]  # (level, index) of a complete subtree
# Reads the hashes of complete subtrees; a store answers with one query (a missing node is an error).
NodeReader = Callable[[Sequence[Coord]], Mapping[Coord, bytes]]


class ProofError(ValueError):
    """A proof does not verify, or a proof/size request is out of range."""


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n ≥ 2)."""
    return 1 << ((n - 1).bit_length() - 1)


# -- which complete subtrees a range, a root or a proof needs ------------------------------------------


def range_nodes(start: int, end: int) -> list[Coord]:
    """The complete subtrees, left to right, whose right fold is MTH(D[start:end]).

    Valid for every range the RFC's recursion produces (start is a multiple of the largest power of
    two not above end - start); ``ProofError`` otherwise.
    """
    if not 0 <= start < end:
        raise ProofError(f"empty or negative range [{start}, {end})")
    coords = []
    position, remaining = start, end - start
    while remaining:
        level = remaining.bit_length() - 1
        size = 1 << level
        if position % size:
            raise ProofError(f"range [{start}, {end}) is not made of aligned subtrees")
        coords.append((level, position >> level))
        position += size
        remaining -= size
    return coords


def fold(hashes: Sequence[bytes]) -> bytes:
    """MTH of a range from its complete subtrees (left to right, sizes strictly decreasing)."""
    result = hashes[-1]
    for left in reversed(hashes[:-1]):
        result = node_hash(left, result)
    return result


def _inclusion_ranges(index: int, start: int, end: int) -> list[tuple[int, int]]:
    """PATH(m, D[start:end]) of RFC 6962 §2.1.1 as leaf ranges, the order the proof lists them."""
    if end - start == 1:
        return []
    k = _split(end - start)
    if index - start < k:
        return [*_inclusion_ranges(index, start, start + k), (start + k, end)]
    return [*_inclusion_ranges(index, start + k, end), (start, start + k)]


def _consistency_ranges(m: int, start: int, end: int, complete: bool) -> list[tuple[int, int]]:
    """SUBPROOF(m, D[start:end], b) of RFC 6962 §2.1.2 as leaf ranges."""
    n = end - start
    if m == n:
        return [] if complete else [(start, end)]
    k = _split(n)
    if m <= k:
        return [*_consistency_ranges(m, start, start + k, complete), (start + k, end)]
    return [*_consistency_ranges(m - k, start + k, end, False), (start, start + k)]


def inclusion_ranges(index: int, size: int) -> list[tuple[int, int]]:
    if not 0 <= index < size:
        raise ProofError(f"index {index} is not below tree size {size}")
    return _inclusion_ranges(index, 0, size)


def consistency_ranges(old_size: int, new_size: int) -> list[tuple[int, int]]:
    if not 0 <= old_size <= new_size:
        raise ProofError(f"sizes {old_size} and {new_size} are not in order")
    if old_size in (0, new_size):
        return []  # RFC 9162 §2.1.4: nothing to prove for an empty or equal old tree
    return _consistency_ranges(old_size, 0, new_size, True)


def _hash_ranges(ranges: Sequence[tuple[int, int]], read: NodeReader) -> list[bytes]:
    wanted = [range_nodes(a, b) for a, b in ranges]
    found = read(sorted({coord for coords in wanted for coord in coords}))
    try:
        return [fold([found[coord] for coord in coords]) for coords in wanted]
    except KeyError as missing:
        raise ProofError(f"the store has no node {missing.args[0]}") from None


def root(size: int, read: NodeReader) -> bytes:
    """The tree head of the first ``size`` leaves."""
    if size == 0:
        return EMPTY_ROOT
    return _hash_ranges([(0, size)], read)[0]


def inclusion_proof(index: int, size: int, read: NodeReader) -> list[bytes]:
    """RFC 9162 §2.1.3.1 inclusion proof of leaf ``index`` in the tree of ``size`` leaves."""
    return _hash_ranges(inclusion_ranges(index, size), read)


def consistency_proof(old_size: int, new_size: int, read: NodeReader) -> list[bytes]:
    """RFC 9162 §2.1.4.1 consistency proof from the tree of ``old_size`` to ``new_size`` leaves."""
    return _hash_ranges(consistency_ranges(old_size, new_size), read)


# -- verification (RFC 9162 §2.1.3.2 and §2.1.4.2, step by step) ---------------------------------------


def root_from_inclusion(index: int, size: int, leaf_digest: bytes, proof: Sequence[bytes]) -> bytes:
    """The root an inclusion proof leads to (RFC 9162 §2.1.3.2); ``ProofError`` if it cannot be one."""
    if not 0 <= index < size:
        raise ProofError(f"index {index} is not below tree size {size}")
    if any(len(h) != HASH_SIZE for h in (leaf_digest, *proof)):
        raise ProofError("a hash is not 32 bytes")
    fn, sn = index, size - 1
    r = leaf_digest
    for p in proof:
        if sn == 0:
            raise ProofError("the inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the inclusion proof is too short")
    return r


def verify_inclusion(
    index: int, size: int, leaf_digest: bytes, proof: Sequence[bytes], expected_root: bytes
) -> None:
    if root_from_inclusion(index, size, leaf_digest, proof) != expected_root:
        raise ProofError(f"the inclusion proof of leaf {index} does not lead to the root of size {size}")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 §2.1.4.2; ``ProofError`` unless the tree of new_size extends the tree of old_size."""
    if not 0 <= old_size <= new_size:
        raise ProofError(f"sizes {old_size} and {new_size} are not in order")
    if any(len(h) != HASH_SIZE for h in (old_root, new_root, *proof)):
        raise ProofError("a hash is not 32 bytes")
    if old_size == new_size:
        if proof:
            raise ProofError("a consistency proof between equal sizes must be empty")
        if old_root != new_root:
            raise ProofError(f"two different roots for size {old_size}")
        return
    if old_size == 0:
        if proof:
            raise ProofError("a consistency proof from the empty tree must be empty")
        return
    if not proof:
        raise ProofError("the consistency proof is empty")
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is the first node of the path
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the consistency proof is too short")
    if fr != old_root:
        raise ProofError(f"the consistency proof does not lead to the old root of size {old_size}")
    if sr != new_root:
        raise ProofError(f"the consistency proof does not lead to the new root of size {new_size}")


# -- what a store keeps: leaf hashes, and the nodes from STORED_FROM up ---------------------------------

# A store keeps the leaf hashes (level 0) and the complete subtrees from this level up; a node of
# levels 1..3 is hashed again from its at most 8 leaf hashes whenever it is needed (issue 23: the
# sequencer writes one node row per 8 leaves instead of about one per leaf; a proof or a root reads
# at most 14 more leaf hashes for it). Rows of lower levels that a store already holds are not read.
STORED_FROM = 4


def stored_coords(coords: Iterable[Coord]) -> list[Coord]:
    """What to read from a store to answer ``coords``: a node below ``STORED_FROM`` is asked for as
    the leaf hashes under it."""
    wanted: set[Coord] = set()
    for level, index in coords:
        if 0 < level < STORED_FROM:
            first = index << level
            wanted.update((0, i) for i in range(first, first + (1 << level)))
        else:
            wanted.add((level, index))
    return sorted(wanted)


def with_low_levels(found: Mapping[Coord, bytes], coords: Iterable[Coord]) -> dict[Coord, bytes]:
    """``found`` (a store's answer to ``stored_coords(coords)``) with the nodes of ``coords`` below
    ``STORED_FROM`` hashed from their leaf hashes; a node whose leaves are missing stays missing."""
    nodes = dict(found)
    for level, index in coords:
        if 0 < level < STORED_FROM:
            first = index << level
            try:
                hashes = [found[(0, i)] for i in range(first, first + (1 << level))]
            except KeyError:
                continue  # the caller reports the node as missing (``ProofError``)
            while len(hashes) > 1:
                hashes = [node_hash(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
            nodes[(level, index)] = hashes[0]
    return nodes


def stored_nodes(nodes: Iterable[tuple[int, int, bytes]]) -> list[tuple[int, int, bytes]]:
    """The new nodes a store writes: level 0 goes with the leaves, levels 1..3 are not kept."""
    return [node for node in nodes if node[0] >= STORED_FROM]


# -- the sequencer's state and an in-memory tree --------------------------------------------------------


@dataclass
class CompactRange:
    """The complete subtrees covering leaves [0, size): one per set bit of size, largest first.

    A store rebuilds it from ``tlog_nodes`` with ``CompactRange.load(size, read)`` (at most log2(size)
    reads); ``append`` returns every new complete node, which the store writes with the leaves in the
    same transaction. Nothing else is read or rehashed.
    """

    size: int = 0
    peaks: list[tuple[int, int, bytes]] = field(default_factory=list)  # (level, index, hash)

    @staticmethod
    def coords(size: int) -> list[Coord]:
        return range_nodes(0, size) if size else []

    @classmethod
    def load(cls, size: int, read: NodeReader) -> CompactRange:
        coords = cls.coords(size)
        found = read(coords)
        try:
            return cls(size, [(level, index, found[(level, index)]) for level, index in coords])
        except KeyError as missing:
            raise ProofError(f"the store has no node {missing.args[0]}") from None

    def append(self, digest: bytes) -> list[tuple[int, int, bytes]]:
        """Add one leaf hash; return the complete nodes it finishes (its own level-0 node first)."""
        return self.extend((digest,))

    def extend(self, digests: Iterable[bytes]) -> list[tuple[int, int, bytes]]:
        """``append`` of each digest in turn, in one loop (the sequencer's per-leaf cost, issue 23)."""
        new: list[tuple[int, int, bytes]] = []
        peaks, sha256 = self.peaks, hashlib.sha256
        for digest in digests:
            if len(digest) != HASH_SIZE:
                raise ValueError("a leaf hash is 32 bytes")
            level, index = 0, self.size
            new.append((0, index, digest))
            while peaks and peaks[-1][0] == level:
                left = peaks.pop()[2]
                level, index = level + 1, index >> 1
                digest = sha256(b"\x01" + left + digest).digest()  # node_hash(left, digest)
                new.append((level, index, digest))
            peaks.append((level, index, digest))
            self.size += 1
        return new

    def root(self) -> bytes:
        return fold([h for _, _, h in self.peaks]) if self.peaks else EMPTY_ROOT


class MemoryTree:
    """Every complete node in a dict: what a store keeps, in memory (tests, the verifier, exports)."""

    def __init__(self, leaf_hashes: Iterable[bytes] = ()):
        self.nodes: dict[Coord, bytes] = {}
        self.range = CompactRange()
        self.extend(leaf_hashes)

    @classmethod
    def of_leaves(cls, leaves: Iterable[bytes]) -> MemoryTree:
        return cls(leaf_hash(leaf) for leaf in leaves)

    @property
    def size(self) -> int:
        return self.range.size

    def extend(self, leaf_hashes: Iterable[bytes]) -> None:
        for level, index, digest in self.range.extend(leaf_hashes):
            self.nodes[(level, index)] = digest

    def read(self, coords: Sequence[Coord]) -> Mapping[Coord, bytes]:
        return {coord: self.nodes[coord] for coord in coords if coord in self.nodes}

    def root(self, size: int | None = None) -> bytes:
        size = self.size if size is None else size
        if size > self.size:
            raise ProofError(f"size {size} is beyond the tree's {self.size} leaves")
        return root(size, self.read)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        size = self.size if size is None else size
        if size > self.size:
            raise ProofError(f"size {size} is beyond the tree's {self.size} leaves")
        return inclusion_proof(index, size, self.read)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        new_size = self.size if new_size is None else new_size
        if new_size > self.size:
            raise ProofError(f"size {new_size} is beyond the tree's {self.size} leaves")
        return consistency_proof(old_size, new_size, self.read)
