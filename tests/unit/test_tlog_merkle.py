"""grantd.core.tlog.merkle against an independent implementation written here from RFC 6962 §2.1
(the recursive MTH, PATH and PROOF/SUBPROOF definitions, nothing shared with the server code), the
RFC 6962 test vectors, and property tests."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grantd.core.tlog import merkle
from grantd.core.tlog.merkle import CompactRange, MemoryTree, ProofError

# -- the reference: RFC 6962 §2.1, literally ------------------------------------------------------------


def ref_k(n: int) -> int:
    """The largest power of two smaller than n."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(d: list[bytes]) -> bytes:
    n = len(d)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = ref_k(n)
    return hashlib.sha256(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:])).digest()


def ref_path(m: int, d: list[bytes]) -> list[bytes]:
    n = len(d)
    if n == 1:
        return []
    k = ref_k(n)
    if m < k:
        return ref_path(m, d[:k]) + [ref_mth(d[k:])]
    return ref_path(m - k, d[k:]) + [ref_mth(d[:k])]


def ref_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [ref_mth(d)]
    k = ref_k(n)
    if m <= k:
        return ref_subproof(m, d[:k], b) + [ref_mth(d[k:])]
    return ref_subproof(m - k, d[k:], False) + [ref_mth(d[:k])]


def ref_proof(m: int, d: list[bytes]) -> list[bytes]:
    return ref_subproof(m, d, True)


N = 70
LEAVES = [f"leaf {i}".encode() * (i % 5 + 1) for i in range(N)]
TREE = MemoryTree.of_leaves(LEAVES)
ROOTS = {n: ref_mth(LEAVES[:n]) for n in range(N + 1)}


# -- RFC 6962 test vectors (certificate-transparency's, also in golang.org/x/mod and Trillian) ----------

h = bytes.fromhex
CT_LEAVES = [
    h(x)
    for x in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
CT_ROOTS = [
    h(x)
    for x in (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    )
]


def test_rfc6962_vectors():
    tree = MemoryTree.of_leaves(CT_LEAVES)
    assert merkle.EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert [tree.root(n) for n in range(1, 9)] == CT_ROOTS
    inclusion_5_8 = [
        h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
        h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
    ]
    assert tree.inclusion_proof(5, 8) == inclusion_5_8
    merkle.verify_inclusion(5, 8, merkle.leaf_hash(CT_LEAVES[5]), inclusion_5_8, CT_ROOTS[7])
    with pytest.raises(ProofError):
        merkle.verify_inclusion(4, 8, merkle.leaf_hash(CT_LEAVES[5]), inclusion_5_8, CT_ROOTS[7])
    assert tree.inclusion_proof(2, 3) == [CT_ROOTS[1]]
    consistency_6_8 = [
        h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
        h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
        h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
    ]
    assert tree.consistency_proof(6, 8) == consistency_6_8
    merkle.verify_consistency(6, 8, CT_ROOTS[5], CT_ROOTS[7], consistency_6_8)
    with pytest.raises(ProofError):
        merkle.verify_consistency(6, 8, CT_ROOTS[4], CT_ROOTS[7], consistency_6_8)
    consistency_2_5 = [
        h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
        h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
    ]
    assert tree.consistency_proof(2, 5) == consistency_2_5
    merkle.verify_consistency(2, 5, CT_ROOTS[1], CT_ROOTS[4], consistency_2_5)


# -- every (index, size) and (m, n) up to 70 leaves ------------------------------------------------------


def test_roots_match_the_rfc_definition_for_every_size():
    for n in range(N + 1):
        assert TREE.root(n) == ROOTS[n], n


def test_inclusion_proofs_for_every_index_and_size():
    for n in range(1, N + 1):
        for i in range(n):
            proof = TREE.inclusion_proof(i, n)
            assert proof == ref_path(i, LEAVES[:n]), (i, n)
            merkle.verify_inclusion(i, n, merkle.leaf_hash(LEAVES[i]), proof, ROOTS[n])


def test_consistency_proofs_for_every_pair_of_sizes():
    for n in range(0, N + 1):
        for m in range(0, n + 1):
            proof = TREE.consistency_proof(m, n)
            expected = [] if m in (0, n) else ref_proof(m, LEAVES[:n])
            assert proof == expected, (m, n)
            merkle.verify_consistency(m, n, ROOTS[m], ROOTS[n], proof)


def _mutations(proof: list[bytes]):
    for i in range(len(proof)):
        flipped = bytearray(proof[i])
        flipped[0] ^= 1
        yield proof[:i] + [bytes(flipped)] + proof[i + 1 :]
    if proof:
        yield proof[:-1]
        yield proof[1:]
        yield list(reversed(proof)) if len(proof) > 1 and proof[0] != proof[-1] else proof[:-1]
    yield [*proof, ROOTS[1]]


def test_every_broken_inclusion_proof_is_refused():
    for n in range(1, 34):
        for i in range(n):
            good = TREE.inclusion_proof(i, n)
            digest = merkle.leaf_hash(LEAVES[i])
            for bad in _mutations(good):
                with pytest.raises(ProofError):
                    merkle.verify_inclusion(i, n, digest, bad, ROOTS[n])
            with pytest.raises(ProofError):  # another leaf at this index
                merkle.verify_inclusion(i, n, merkle.leaf_hash(b"forged"), good, ROOTS[n])
            for j in range(n):  # the same proof for another index (only where both paths agree it may hold)
                if j != i and ref_path(j, LEAVES[:n]) != good:
                    with pytest.raises(ProofError):
                        merkle.verify_inclusion(j, n, digest, good, ROOTS[n])


def test_every_broken_consistency_proof_is_refused():
    for n in range(2, 34):
        for m in range(1, n):
            good = TREE.consistency_proof(m, n)
            for bad in _mutations(good):
                with pytest.raises(ProofError):
                    merkle.verify_consistency(m, n, ROOTS[m], ROOTS[n], bad)
            forked = ref_mth([*LEAVES[: m - 1], b"forked", *LEAVES[m:n]])
            with pytest.raises(ProofError):  # a fork: the new tree rewrote an old leaf
                merkle.verify_consistency(m, n, ROOTS[m], forked, good)
            with pytest.raises(ProofError):
                merkle.verify_consistency(m, n, ref_mth([b"x"] * m), ROOTS[n], good)


def test_equal_and_empty_sizes_and_out_of_range_requests():
    merkle.verify_consistency(5, 5, ROOTS[5], ROOTS[5], [])
    merkle.verify_consistency(0, 9, merkle.EMPTY_ROOT, ROOTS[9], [])
    with pytest.raises(ProofError):
        merkle.verify_consistency(5, 5, ROOTS[5], ROOTS[6], [])
    with pytest.raises(ProofError):
        merkle.verify_consistency(5, 5, ROOTS[5], ROOTS[5], [ROOTS[1]])
    with pytest.raises(ProofError):
        merkle.verify_consistency(0, 9, merkle.EMPTY_ROOT, ROOTS[9], [ROOTS[1]])
    with pytest.raises(ProofError):
        merkle.verify_consistency(3, 9, ROOTS[3], ROOTS[9], [])
    for index, size in ((5, 5), (-1, 3), (0, 0)):
        with pytest.raises(ProofError):
            TREE.inclusion_proof(index, size)
        with pytest.raises(ProofError):
            merkle.verify_inclusion(index, size, merkle.leaf_hash(b""), [], ROOTS[1])
    with pytest.raises(ProofError):
        TREE.consistency_proof(6, 5)
    with pytest.raises(ProofError):
        TREE.consistency_proof(3, N + 1)
    with pytest.raises(ProofError):
        merkle.verify_inclusion(0, 2, merkle.leaf_hash(b""), [b"short"], ROOTS[2])
    with pytest.raises(ProofError):
        merkle.range_nodes(1, 3)  # not aligned: never asked by the RFC's recursion


def test_a_store_missing_a_node_is_an_error_not_a_wrong_answer():
    nodes = dict(TREE.nodes)
    del nodes[(3, 0)]
    with pytest.raises(ProofError):
        merkle.inclusion_proof(9, 20, lambda coords: {c: nodes[c] for c in coords if c in nodes})


# -- the sequencer's compact range ---------------------------------------------------------------------


def test_compact_range_appends_write_each_complete_node_once_with_the_rfc_hash():
    compact = CompactRange()
    written: dict[tuple[int, int], bytes] = {}
    for n, leaf in enumerate(LEAVES, start=1):
        for level, index, digest in compact.append(merkle.leaf_hash(leaf)):
            assert (level, index) not in written
            written[(level, index)] = digest
            assert digest == ref_mth(LEAVES[index << level : (index + 1) << level])
        assert compact.root() == ROOTS[n]
        assert [(lv, ix) for lv, ix, _ in compact.peaks] == CompactRange.coords(n)
    assert written == TREE.nodes
    assert len(written) == 2 * N - bin(N).count("1")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=12), min_size=1, max_size=150), st.data())
def test_a_sequencer_resuming_from_the_store_gets_the_same_tree(leaves, data):
    """Integrate in random batches, reloading the compact range from the stored nodes each time (as
    a new sequencer process would): the nodes and root are those of the whole tree."""
    store: dict[tuple[int, int], bytes] = {}
    size = 0
    while size < len(leaves):
        batch = data.draw(st.integers(min_value=1, max_value=len(leaves) - size))
        compact = CompactRange.load(size, lambda coords: {c: store[c] for c in coords if c in store})
        for level, index, digest in compact.extend(merkle.leaf_hash(x) for x in leaves[size : size + batch]):
            store[(level, index)] = digest
        size += batch
        assert compact.root() == ref_mth(leaves[:size])

    def read(coords):
        return {c: store[c] for c in coords if c in store}

    assert merkle.root(len(leaves), read) == ref_mth(leaves)
    n = len(leaves)
    i = data.draw(st.integers(min_value=0, max_value=n - 1))
    assert merkle.inclusion_proof(i, n, read) == ref_path(i, leaves)
    m = data.draw(st.integers(min_value=0, max_value=n))
    assert merkle.consistency_proof(m, n, read) == ([] if m in (0, n) else ref_proof(m, leaves))


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=5000), st.data())
def test_proofs_verify_and_need_few_reads_for_large_sizes(size, data):
    """Proofs for arbitrary large trees (hashes of leaf numbers; no tree materialised beyond the
    nodes asked for) verify, and read O(log n) nodes."""
    store: dict[tuple[int, int], bytes] = {}
    compact = CompactRange()
    for level, index, digest in compact.extend(hashlib.sha256(b"%d" % i).digest() for i in range(size)):
        store[(level, index)] = digest
    reads: list[int] = []

    def read(coords):
        reads.append(len(coords))
        return {c: store[c] for c in coords}

    i = data.draw(st.integers(min_value=0, max_value=size - 1))
    m = data.draw(st.integers(min_value=0, max_value=size))
    root = merkle.root(size, read)
    assert root == compact.root()
    merkle.verify_inclusion(
        i, size, hashlib.sha256(b"%d" % i).digest(), merkle.inclusion_proof(i, size, read), root
    )
    merkle.verify_consistency(m, size, merkle.root(m, read), root, merkle.consistency_proof(m, size, read))
    bound = 2 * size.bit_length() ** 2
    assert max(reads) <= bound


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=12), min_size=1, max_size=150), st.data())
def test_a_store_keeping_only_leaf_hashes_and_the_upper_levels_answers_every_proof(leaves, data):
    """What the sequencer writes (``stored_nodes``: levels 1..3 dropped), read back as the service
    reads it (``stored_coords``, then ``with_low_levels``), in random batches reloading the compact
    range each time: the same roots and proofs as the whole tree, and only level 0 and levels from
    ``STORED_FROM`` up are ever asked of the store."""
    store: dict[tuple[int, int], bytes] = {}
    asked: set[tuple[int, int]] = set()

    def read(coords):
        found = merkle.with_low_levels(_ask(store, asked, merkle.stored_coords(coords)), coords)
        return {c: found[c] for c in coords if c in found}

    size = 0
    while size < len(leaves):
        batch = data.draw(st.integers(min_value=1, max_value=len(leaves) - size))
        compact = CompactRange.load(size, read)
        new = compact.extend(merkle.leaf_hash(x) for x in leaves[size : size + batch])
        for level, index, digest in new:
            if level == 0:
                store[(0, index)] = digest  # the leaf hash, stored with the leaf
        for level, index, digest in merkle.stored_nodes(new):
            assert level >= merkle.STORED_FROM
            store[(level, index)] = digest
        size += batch
        assert compact.root() == ref_mth(leaves[:size])
    n = len(leaves)
    assert merkle.root(n, read) == ref_mth(leaves)
    i = data.draw(st.integers(min_value=0, max_value=n - 1))
    assert merkle.inclusion_proof(i, n, read) == ref_path(i, leaves)
    m = data.draw(st.integers(min_value=0, max_value=n))
    assert merkle.consistency_proof(m, n, read) == ([] if m in (0, n) else ref_proof(m, leaves))
    assert all(level == 0 or level >= merkle.STORED_FROM for level, _ in asked)


def _ask(
    store: dict[tuple[int, int], bytes], asked: set[tuple[int, int]], coords: list[tuple[int, int]]
) -> dict[tuple[int, int], bytes]:
    """The store's answer to ``coords``, remembering what was asked."""
    asked.update(coords)
    return {c: store[c] for c in coords if c in store}


def test_a_low_node_whose_leaf_hashes_are_missing_stays_missing():
    """A level-2 node needs its four leaf hashes; with one gone it is not made up, and the proof that
    needs it fails (``ProofError``), as a missing stored node does."""
    found = {(0, i): TREE.nodes[(0, i)] for i in range(8) if i != 5}
    nodes = merkle.with_low_levels(found, [(2, 0), (2, 1)])
    assert nodes[(2, 0)] == TREE.nodes[(2, 0)]
    assert (2, 1) not in nodes
    with pytest.raises(ProofError):
        merkle.root(8, lambda coords: merkle.with_low_levels(found, coords))
