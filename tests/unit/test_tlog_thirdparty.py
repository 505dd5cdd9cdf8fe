"""A third-party verifier agrees (issue 23): sigstore-python's Merkle inclusion verifier (the one it
runs on Rekor's proofs) accepts grantd's inclusion proofs and refuses altered ones, and its
signed-note and checkpoint parser reads grantd's checkpoints as grantd wrote them."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import pytest
from sigstore._internal.merkle import verify_merkle_inclusion
from sigstore._internal.rekor.checkpoint import LogCheckpoint, SignedNote
from sigstore.errors import VerificationError

from grantd.core.tlog import leaves as L
from grantd.core.tlog.merkle import MemoryTree
from grantd.core.tlog.note import Checkpoint, Signer, key_id, sign_checkpoint

ACTOR = {"kind": "person", "email": "alice@example.com"}
LEAVES = [L.grant_revoked(i + 1, 1764140000000 + i, ACTOR, f"gr_{i}") for i in range(41)]
TREE = MemoryTree.of_leaves(LEAVES)


def _entry(index: int, size: int, body: bytes, hashes: list[bytes], root: bytes):
    proof = SimpleNamespace(log_index=index, tree_size=size, hashes=hashes, root_hash=root)
    return SimpleNamespace(_inner=SimpleNamespace(inclusion_proof=proof, canonicalized_body=body))


def test_sigstore_verifies_grantd_inclusion_proofs_for_every_index_and_size():
    for size in range(1, len(LEAVES) + 1):
        root = TREE.root(size)
        for index in range(size):
            proof = TREE.inclusion_proof(index, size)
            verify_merkle_inclusion(_entry(index, size, LEAVES[index], proof, root))


def test_sigstore_refuses_what_grantd_would_refuse():
    size, index = 37, 21
    root, proof = TREE.root(size), TREE.inclusion_proof(index, size)
    edited = LEAVES[index].replace(b"alice", b"mallory")
    for entry in (
        _entry(index, size, edited, proof, root),
        _entry(index, size, LEAVES[index], proof[:-1], root),
        _entry(index, size, LEAVES[index], [*proof[:2], bytes(32), *proof[3:]], root),
        _entry(index + 1, size, LEAVES[index], proof, root),
    ):
        with pytest.raises(VerificationError):
            verify_merkle_inclusion(entry)


def test_sigstore_reads_grantd_checkpoints():
    signer = Signer.generate("idp.example.com/grantd")
    checkpoint = Checkpoint(signer.name, TREE.size, TREE.root())
    note = sign_checkpoint(signer, checkpoint, None, [])
    signed = SignedNote.from_text(note)
    parsed = LogCheckpoint.from_text(signed.note)
    assert (parsed.origin, parsed.log_size, parsed.log_hash, parsed.other_content) == (
        signer.name,
        TREE.size,
        TREE.root().hex(),
        [],
    )
    [signature] = signed.signatures
    assert signature.name == signer.name
    assert signature.sig_hash == key_id(signer.name, signer.verifier.public)
    signer.private.public_key().verify(base64.b64decode(signature.signature), signed.note.encode())
