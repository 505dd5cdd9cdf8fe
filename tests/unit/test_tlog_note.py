"""C2SP signed notes and tlog-checkpoints (grantd.core.tlog.note): the golang.org/x/mod/sumdb/note
vector byte for byte, the key id and vkey written from the spec here, several signatures, unknown
keys ignored, a known key's bad signature rejected, and no checkpoint signed that does not extend
the previous one."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grantd.core.tlog.merkle import MemoryTree
from grantd.core.tlog.note import (
    Checkpoint,
    InconsistentCheckpoint,
    NoteError,
    Signer,
    Verifier,
    open_checkpoint,
    open_note,
    parse_checkpoint,
    sign_checkpoint,
    sign_note,
)

# golang.org/x/mod/sumdb/note note_test.go (also the C2SP signed-note example).
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
)
GO_NOTE = (
    GO_TEXT
    + "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)

ORIGIN = "idp.example.com/grantd"


def spec_key_id(name: str, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\x0a" + b"\x01" + public).digest()[:4]


def test_the_go_reference_note_is_reproduced_byte_for_byte_and_verifies():
    signer = Signer.from_skey(GO_SKEY)
    assert signer.verifier.vkey == GO_VKEY
    assert signer.skey == GO_SKEY
    assert sign_note(GO_TEXT, [signer]) == GO_NOTE  # Ed25519 is deterministic (RFC 8032)
    opened = open_note(GO_NOTE, [Verifier.from_vkey(GO_VKEY)])
    assert opened.text == GO_TEXT and [v.name for v in opened.verified] == ["PeterNeumann"]
    with pytest.raises(NoteError):
        open_note(GO_NOTE.replace("cryptography", "cryptographY"), [Verifier.from_vkey(GO_VKEY)])


def test_key_id_and_vkey_are_the_spec_formula():
    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    signer = Signer(ORIGIN, private)
    verifier = signer.verifier
    assert verifier.key_id == spec_key_id(ORIGIN, public)
    material = base64.b64encode(bytes([1]) + public).decode()
    assert verifier.vkey == f"{ORIGIN}+{spec_key_id(ORIGIN, public).hex()}+{material}"
    assert Verifier.from_vkey(verifier.vkey) == verifier
    line = sign_note("a\n", [signer]).splitlines()[-1]
    dash, name, blob = line.split(" ")
    assert dash == "\u2014" and name == ORIGIN
    raw = base64.b64decode(blob)
    assert raw[:4] == spec_key_id(ORIGIN, public) and len(raw) == 4 + 64
    private.public_key().verify(raw[4:], b"a\n")


def test_mangled_vkeys_are_refused():
    good = GO_VKEY.encode()
    for i in range(len(good)):
        mangled = bytearray(good)
        mangled[i] = (mangled[i] + 1) % 128
        try:
            text = mangled.decode()
        except UnicodeDecodeError:
            continue
        with pytest.raises(NoteError):
            Verifier.from_vkey(text)
    for bad in (
        "",
        "PeterNeumann",
        "PeterNeumann+c74f20a3",
        "Peter Neumann+c74f20a3+ARpc",
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3+ApRc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    ):
        with pytest.raises(NoteError):
            Verifier.from_vkey(bad)


def test_unknown_signatures_are_ignored_a_known_bad_one_rejects_and_one_known_good_is_needed():
    log, witness, stranger = (
        Signer.generate(ORIGIN),
        Signer.generate("witness.example"),
        Signer.generate(ORIGIN),
    )
    text = Checkpoint(ORIGIN, 3, bytes(32)).text()
    note = sign_note(text, [stranger, witness, log])
    opened = open_note(note, [log.verifier])
    assert opened.verified == (log.verifier,) and len(opened.unverified) == 2
    assert open_note(note, [witness.verifier, log.verifier]).verified == (witness.verifier, log.verifier)
    with pytest.raises(NoteError, match="no known key"):
        open_note(sign_note(text, [stranger, witness]), [log.verifier])
    # A signature line with the log key's name and id but another signature: rejected, not skipped.
    good_line = log.signature_line(text)
    blob = base64.b64decode(good_line.split(" ")[2])
    forged = f"\u2014 {ORIGIN} {base64.b64encode(blob[:4] + bytes(64)).decode()}\n"
    with pytest.raises(NoteError, match="does not verify"):
        open_note(text + "\n" + good_line + forged, [log.verifier])
    # Many signatures (C2SP: a verifier accepts at least 16): the known one is found among them.
    many = sign_note(text, [Signer.generate(f"w{i}") for i in range(20)] + [log])
    assert open_note(many, [log.verifier]).verified == (log.verifier,)


@pytest.mark.parametrize(
    "note",
    [
        "",
        "a\n",
        "a\n\n",
        "a\n\n\u2014 x\n",
        "a\n\n\u2014 x AAAA\n",  # too short a signature
        "a\n\n- x AAAAAAAA\n",  # not an em dash
        "a\n\n\u2014 x AAAAAAAA",  # no final newline
        "a\n\n\u2014 x AAAAAAAA\n\n",
        "a\n\n\u2014 x !!!!!!!!\n",
        "a\n\n\u2014 a+b AAAAAAAA\n",
        "\x01\n\n\u2014 x AAAAAAAA\n",
    ],
)
def test_malformed_notes_are_refused(note):
    with pytest.raises(NoteError):
        open_note(note, [Verifier.from_vkey(GO_VKEY)])


def test_checkpoint_format_and_parse():
    tree = MemoryTree.of_leaves([b"a", b"b", b"c"])
    checkpoint = Checkpoint(ORIGIN, 3, tree.root())
    text = checkpoint.text()
    assert text == f"{ORIGIN}\n3\n{base64.b64encode(tree.root()).decode()}\n"
    assert parse_checkpoint(text) == checkpoint
    signer = Signer.generate(ORIGIN)
    note = sign_checkpoint(signer, checkpoint, None, [])
    assert note.startswith(text + "\n\u2014 " + ORIGIN + " ")
    assert open_checkpoint(note, [signer.verifier], ORIGIN) == checkpoint
    with pytest.raises(NoteError, match="not"):
        open_checkpoint(note, [signer.verifier], "other.example/grantd")
    root = base64.b64encode(tree.root()).decode()
    for bad in (
        f"{ORIGIN}\n03\n{root}\n",
        f"{ORIGIN}\n-3\n{root}\n",
        f"{ORIGIN}\n3\n",
        f"\n3\n{root}\n",
        f"{ORIGIN}\n3\n{root[:-4]}\n",
        f"{ORIGIN}\n3\n{root}",
        f"{ORIGIN}\nthree\n{root}\n",
        f"{ORIGIN}\n3\n{base64.b64encode(bytes(31)).decode()}\n",
    ):
        with pytest.raises(NoteError):
            parse_checkpoint(bad)


def test_the_log_never_signs_a_checkpoint_inconsistent_with_its_previous_one():
    leaves = [b"%d" % i for i in range(12)]
    tree = MemoryTree.of_leaves(leaves)
    signer = Signer.generate(ORIGIN)
    previous = Checkpoint(ORIGIN, 7, tree.root(7))
    grown = Checkpoint(ORIGIN, 12, tree.root(12))
    proof = tree.consistency_proof(7, 12)
    open_checkpoint(sign_checkpoint(signer, grown, previous, proof), [signer.verifier])
    sign_checkpoint(signer, previous, previous, [])  # re-signing the same head is consistent
    forked = MemoryTree.of_leaves([*leaves[:3], b"rewritten", *leaves[4:]])
    fork = Checkpoint(ORIGIN, 12, forked.root())
    with pytest.raises(InconsistentCheckpoint):  # a rewritten old leaf, whatever proof is offered
        sign_checkpoint(signer, fork, previous, forked.consistency_proof(7, 12))
    with pytest.raises(InconsistentCheckpoint):
        sign_checkpoint(signer, fork, previous, proof)
    with pytest.raises(InconsistentCheckpoint):  # a shrunk log
        sign_checkpoint(signer, Checkpoint(ORIGIN, 5, tree.root(5)), previous, [])
    with pytest.raises(InconsistentCheckpoint):  # the same size, another root
        sign_checkpoint(signer, Checkpoint(ORIGIN, 7, forked.root(7)), previous, [])
    with pytest.raises(InconsistentCheckpoint):
        sign_checkpoint(
            signer, Checkpoint(ORIGIN, 12, tree.root(12)), Checkpoint("other/log", 7, tree.root(7)), proof
        )
    with pytest.raises(NoteError):  # the key is named as the origin
        sign_checkpoint(Signer.generate("someone"), grown, previous, proof)
