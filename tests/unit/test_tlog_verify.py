"""The logic of `grantd audit verify` (grantd.core.tlog.verify) and the export directory: a clean log
verifies (0); a changed leaf, a shrunk log, a fork, a bad signature are cryptographic (2, the first
bad index named); a log that is intact but says what must not happen is semantic (3)."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grantd.core.review import DEFAULT_REVIEW
from grantd.core.tlog import leaves as L
from grantd.core.tlog.export import ExportError, export_files, load_export, read_export, write_export
from grantd.core.tlog.merkle import MemoryTree, leaf_hash
from grantd.core.tlog.note import Checkpoint, Signer, sign_checkpoint
from grantd.core.tlog.receipts import build_receipt, host_public_key_line
from grantd.core.tlog.verify import (
    CRYPTO,
    OK,
    SEMANTIC,
    locate_first_bad,
    state_of,
    verify_export,
    verify_log,
)

ORIGIN = "idp.example.com/grantd"
ISSUER = "https://idp.example.com"
ALICE = {"kind": "person", "email": "alice@example.com", "pid": "prs_a"}
BOB = {"kind": "person", "email": "bob@example.com", "pid": "prs_b"}
AGENT = {"kind": "agent", "email": "bot@example.com", "agent_id": "agt_1"}
SYSTEM = {"kind": "system"}
HOST_KEY = Ed25519PrivateKey.generate()


class Log:
    """A log as the server will keep it: leaves, the tree, signed checkpoints."""

    def __init__(self):
        self.signer = Signer.generate(ORIGIN)
        self.leaves: list[bytes] = []
        self.seq = 0
        self.notes: list[str] = []
        self.last: Checkpoint | None = None

    def add(self, build, *args, **kwargs) -> int:
        self.seq += 1
        self.leaves.append(build(self.seq, 1764140000000 + self.seq, *args, **kwargs))
        return len(self.leaves) - 1

    def checkpoint(self) -> str:
        tree = MemoryTree.of_leaves(self.leaves)
        head = Checkpoint(ORIGIN, tree.size, tree.root())
        proof = tree.consistency_proof(self.last.size) if self.last else []
        note = sign_checkpoint(self.signer, head, self.last, proof)
        self.last = head
        self.notes.append(note)
        return note

    @property
    def vkey(self) -> str:
        return self.signer.verifier.vkey

    def receipt(self, grant_id, jti, result="exited", exit_code=0, host="web-1", key=HOST_KEY) -> int:
        token = build_receipt(
            key,
            host=host,
            audience=ISSUER,
            grant_id=grant_id,
            authz_jti=jti,
            cmd_hash="sha256:c1",
            run_as="root",
            result=result,
            exit_code=exit_code,
            started_at=1,
            ended_at=2,
            duration_ms=1000,
            issued_at=2,
        )
        return self.add(
            L.exec_receipt,
            grant_id,
            host=host,
            receipt=token,
            authz_jti=jti,
            result=result,
            exit_code=exit_code,
        )


def a_busy_log() -> Log:
    log = Log()
    log.add(L.policy_loaded, SYSTEM, policy_hash="sha256:00")
    log.add(L.host_enrolled, ALICE, host="web-1", public_key=host_public_key_line(HOST_KEY))
    for n in range(6):
        gid = f"gr_{n}"
        log.add(
            L.grant_created,
            AGENT,
            gid,
            request={"command": ["ls", str(n)]},
            cmd_hash="sha256:c1",
            grant_type="once" if n % 2 == 0 else "timed",
            review=DEFAULT_REVIEW.as_dict(),
        )
        log.add(L.grant_reviewed, ALICE, gid, decision="approve", via="web")
        log.add(
            L.grant_approved,
            ALICE,
            gid,
            grant_type="once" if n % 2 == 0 else "timed",
            decided_by="alice@example.com",
        )
        log.add(L.grant_consumed if n % 2 == 0 else L.grant_used, AGENT, gid, authz_jti=f"j{n}")
        log.receipt(gid, f"j{n}")
    log.add(L.grant_created, AGENT, "gr_denied", request={}, cmd_hash=None, grant_type="once")
    log.add(L.grant_reviewed, BOB, "gr_denied", decision="deny", via="api")
    log.add(L.grant_denied, BOB, "gr_denied", decided_by="bob@example.com")
    log.receipt("gr_denied", "", result="refused", exit_code=5)
    return log


def test_a_clean_log_verifies_and_gives_the_state_to_keep():
    log = a_busy_log()
    first = verify_log(log.checkpoint(), [log.vkey], None, log.leaves, audience=ISSUER)
    assert (first.code, first.bad_index) == (OK, None), first.reason
    log.add(L.grant_revoked, ALICE, "gr_1")
    log.add(L.audit_exported, ALICE)
    tree = MemoryTree.of_leaves(log.leaves)
    again = verify_log(
        log.checkpoint(),
        [log.vkey],
        first.state,
        log.leaves,
        audience=ISSUER,
        consistency_proof=tree.consistency_proof(first.checkpoint.size),
    )
    assert again.code == OK, again.reason
    assert again.state == {
        "origin": ORIGIN,
        "size": len(log.leaves),
        "root": base64.b64encode(tree.root()).decode(),
    }
    # Without a consistency proof the leaves prove it; more leaves than the checkpoint are ignored.
    assert verify_log(log.notes[-1], [log.vkey], first.state, [*log.leaves, b"later"]).code == OK


def test_an_edited_leaf_is_caught_and_named():
    log = a_busy_log()
    note = log.checkpoint()
    stored_hashes = [leaf_hash(x) for x in log.leaves]
    edited = list(log.leaves)
    edited[8] = edited[8].replace(b'"approve"', b'"deny"')  # a vote rewritten in the database
    assert edited[8] != log.leaves[8]
    result = verify_log(note, [log.vkey], None, edited, claimed_leaf_hashes=stored_hashes)
    assert (result.code, result.bad_index, result.exact) == (CRYPTO, 8, True), result.reason
    assert "leaf 8" in result.reason
    # The stored hashes rewritten too: the complete-subtree hashes (tiles) still name it.
    tree = MemoryTree.of_leaves(log.leaves)
    rewritten = [leaf_hash(x) for x in edited]
    result = verify_log(note, [log.vkey], None, edited, claimed_leaf_hashes=rewritten, nodes=tree.read)
    assert (result.code, result.bad_index, result.exact) == (CRYPTO, 8, True)
    # With nothing but an earlier checkpoint: at or after its size.
    early = verify_log(log.notes[0], [log.vkey], None, log.leaves)
    assert early.code == OK
    log2_leaves = list(log.leaves)
    log2_leaves[-2] = log2_leaves[-2].replace(b"gr_denied", b"gr_Denied")
    result = verify_log(note, [log.vkey], None, log2_leaves, earlier=[])
    assert (result.code, result.bad_index, result.exact) == (CRYPTO, 0, False)
    with_state = verify_log(note, [log.vkey], early.state, log2_leaves)
    assert with_state.code == CRYPTO  # the whole log signed once: no earlier head narrows it


def test_untrusted_hashes_that_do_not_fold_to_the_signed_root_are_not_believed():
    log = a_busy_log()
    note = log.checkpoint()
    edited = list(log.leaves)
    edited[2] = edited[2].replace(b'"ls"', b'"rm"')
    assert edited[2] != log.leaves[2]
    lying = [leaf_hash(x) for x in edited]
    lying[20] = bytes(32)  # an attacker points at another index
    result = verify_log(
        note,
        [log.vkey],
        None,
        edited,
        claimed_leaf_hashes=lying,
        nodes=lambda coords: {c: bytes(32) for c in coords},
    )
    assert result.code == CRYPTO and not result.exact and result.bad_index == 0
    hashes = [leaf_hash(x) for x in edited]
    assert locate_first_bad(hashes, len(hashes), log.last.root, claimed_leaf_hashes=lying) == (0, False)


def test_a_shrunk_log_and_a_fork_fail_consistency_with_the_saved_state():
    log = a_busy_log()
    saved = verify_log(log.checkpoint(), [log.vkey], None, log.leaves).state
    # The newest leaves deleted, the server restarted with a fresh log key state: it signs the smaller head.
    shrunk = Log()
    shrunk.signer = log.signer
    shrunk.leaves = log.leaves[:-3]
    result = verify_log(shrunk.checkpoint(), [log.vkey], saved, shrunk.leaves)
    assert result.code == CRYPTO and "shrank" in result.reason and result.bad_index == len(log.leaves) - 3
    # ... and then grew again past the saved size with other leaves: a fork.
    shrunk.add(L.grant_revoked, ALICE, "gr_1")
    shrunk.add(L.grant_revoked, ALICE, "gr_3")
    shrunk.add(L.grant_revoked, ALICE, "gr_5")
    shrunk.add(L.audit_exported, ALICE)
    forked_note = shrunk.checkpoint()
    result = verify_log(forked_note, [log.vkey], saved, shrunk.leaves)
    assert result.code == CRYPTO and "forked" in result.reason
    tree = MemoryTree.of_leaves(shrunk.leaves)
    result = verify_log(
        forked_note, [log.vkey], saved, shrunk.leaves, consistency_proof=tree.consistency_proof(saved["size"])
    )
    assert result.code == CRYPTO and "consistency" in result.reason
    assert (
        verify_log(
            forked_note,
            [log.vkey],
            {"origin": "other/log", **{k: saved[k] for k in ("size", "root")}},
            shrunk.leaves,
        ).code
        == CRYPTO
    )


def test_signature_problems_are_cryptographic():
    log = a_busy_log()
    note = log.checkpoint()
    stranger = Signer.generate(ORIGIN)
    assert verify_log(note, [stranger.verifier.vkey], None, log.leaves).code == CRYPTO
    assert (
        verify_log(
            note.replace(f"\n{len(log.leaves)}\n", f"\n{len(log.leaves) + 1}\n", 1),
            [log.vkey],
            None,
            log.leaves,
        ).code
        == CRYPTO
    )
    assert verify_log(note, [], None, log.leaves).code == CRYPTO
    assert verify_log(note, ["garbage"], None, log.leaves).code == CRYPTO
    assert verify_log(note, [log.vkey], None, log.leaves[:-1]).code == CRYPTO  # leaves missing
    assert verify_log(note, [log.vkey], {"size": "x"}, log.leaves).code == CRYPTO
    assert verify_log(note, [log.vkey], None, log.leaves, origin="other.example/grantd").code == CRYPTO
    # A cosignature by an unknown witness is ignored.
    witness = Signer.generate("witness.example")
    text = note.split("\n\n")[0] + "\n"
    cosigned = note + witness.signature_line(text)
    assert verify_log(cosigned, [log.vkey], None, log.leaves).code == OK


def _semantic(log: Log, **kwargs):
    return verify_log(log.checkpoint(), [log.vkey], None, log.leaves, audience=ISSUER, **kwargs)


def test_a_once_grant_consumed_twice_is_semantic():
    log = a_busy_log()
    bad = log.add(L.grant_consumed, AGENT, "gr_0", authz_jti="again")
    result = _semantic(log)
    assert (result.code, result.bad_index) == (SEMANTIC, bad) and "consumed twice" in result.reason


@pytest.mark.parametrize(
    "case",
    [
        "approval without votes",
        "approval short of its policy",
        "one person voting twice",
        "vote after the decision",
        "denial without a deny vote",
        "used after revocation",
        "pinned policy never loaded",
        "decided twice",
        "consumed unapproved",
        "used once grant",
        "grant never created",
        "seq goes back",
        "receipt unknown host",
        "receipt bad signature",
        "receipt unapproved grant",
        "receipt twice",
        "receipt without consume",
        "receipt fields differ",
    ],
)
def test_semantic_violations_name_their_leaf(case):
    log = a_busy_log()
    other_key = Ed25519PrivateKey.generate()
    if case == "approval without votes":
        log.add(L.grant_created, AGENT, "g", request={}, cmd_hash=None, grant_type="once")
        bad = log.add(L.grant_approved, ALICE, "g", grant_type="once", decided_by="alice@example.com")
    elif case == "approval short of its policy":
        review = DEFAULT_REVIEW.as_dict()
        review["requirements"] = [{**review["requirements"][0], "approve": 2}]
        log.add(L.grant_created, AGENT, "g", request={}, cmd_hash=None, grant_type="once", review=review)
        log.add(L.grant_reviewed, ALICE, "g", decision="approve", via="web")
        bad = log.add(L.grant_approved, ALICE, "g", grant_type="once", decided_by="alice@example.com")
    elif case == "one person voting twice":
        log.add(L.grant_created, AGENT, "g", request={}, cmd_hash=None, grant_type="once")
        log.add(L.grant_reviewed, ALICE, "g", decision="approve", via="web")
        bad = log.add(L.grant_reviewed, ALICE, "g", decision="approve", via="tui")
    elif case == "vote after the decision":
        bad = log.add(L.grant_reviewed, ALICE, "gr_denied", decision="approve", via="web")
    elif case == "denial without a deny vote":
        log.add(L.grant_created, AGENT, "g", request={}, cmd_hash=None, grant_type="once")
        log.add(L.grant_reviewed, ALICE, "g", decision="approve", via="web")
        bad = log.add(L.grant_denied, BOB, "g", decided_by="bob@example.com")
    elif case == "used after revocation":
        log.add(L.grant_revoked, ALICE, "gr_1")
        bad = log.add(L.grant_used, AGENT, "gr_1")
    elif case == "pinned policy never loaded":
        log.add(L.policy_loaded, {"kind": "system"}, policy_hash="sha256:" + "0" * 64, policy_ids=["prod"])
        review = {**DEFAULT_REVIEW.as_dict(), "policy_ids": ["prod", "other"]}
        bad = log.add(
            L.grant_created, AGENT, "g", request={}, cmd_hash=None, grant_type="once", review=review
        )
    elif case == "decided twice":
        bad = log.add(L.grant_approved, BOB, "gr_denied", grant_type="once", decided_by="bob@example.com")
    elif case == "consumed unapproved":
        bad = log.add(L.grant_consumed, AGENT, "gr_denied")
    elif case == "used once grant":
        bad = log.add(L.grant_used, AGENT, "gr_2")
    elif case == "grant never created":
        bad = log.add(L.grant_revoked, ALICE, "gr_ghost")
    elif case == "seq goes back":
        log.seq -= 5
        bad = log.add(L.grant_revoked, ALICE, "gr_1")
    elif case == "receipt unknown host":
        bad = log.receipt("gr_1", "j1b", host="web-9")
    elif case == "receipt bad signature":
        bad = log.receipt("gr_1", "j1b", key=other_key)
    elif case == "receipt unapproved grant":
        bad = log.receipt("gr_denied", "jx")
    elif case == "receipt twice":
        bad = log.receipt("gr_1", "j1")
    elif case == "receipt without consume":
        log.add(L.grant_created, AGENT, "g", request={}, cmd_hash="sha256:c1", grant_type="timed")
        log.add(L.grant_reviewed, ALICE, "g", decision="approve", via="web")
        log.add(L.grant_approved, ALICE, "g", grant_type="timed", decided_by="alice@example.com")
        bad = log.receipt("g", "jg")
    elif case == "receipt fields differ":
        token = build_receipt(
            HOST_KEY,
            host="web-1",
            audience=ISSUER,
            grant_id="gr_1",
            authz_jti="j9",
            cmd_hash="sha256:c1",
            run_as="root",
            result="exited",
            exit_code=1,
            started_at=1,
            ended_at=2,
            duration_ms=1,
            issued_at=2,
        )
        bad = log.add(
            L.exec_receipt, "gr_1", host="web-1", receipt=token, authz_jti="j9", result="exited", exit_code=0
        )
    result = _semantic(log)
    assert (result.code, result.bad_index) == (SEMANTIC, bad), result.reason
    log.leaves = log.leaves[:bad]  # the same log without that leaf is clean
    log.last = None
    assert _semantic(log).code == OK


def test_an_invalid_leaf_the_log_signed_is_semantic():
    log = a_busy_log()
    bad = len(log.leaves)
    log.leaves.append(b'{"not": "a leaf"}')
    result = _semantic(log)
    assert (result.code, result.bad_index) == (SEMANTIC, bad)


def test_the_approval_hook_decides_on_pinned_policies():
    log = a_busy_log()
    seen = []

    def strict(history, approved):
        seen.append((history.grant_id, len(history.votes), approved.kind))
        return "not in the sre group" if history.grant_id == "gr_3" else None

    result = _semantic(log, approval_check=strict)
    assert result.code == SEMANTIC and "gr_3: not in the sre group" in result.reason
    assert seen[:4] == [
        ("gr_0", 1, "grant.approved"),
        ("gr_1", 1, "grant.approved"),
        ("gr_2", 1, "grant.approved"),
        ("gr_3", 1, "grant.approved"),
    ]


# -- the export directory ----------------------------------------------------------------------------------


def test_export_round_trip_and_offline_verify(tmp_path):
    log = a_busy_log()
    log.checkpoint()
    log.add(L.grant_revoked, ALICE, "gr_1")
    log.checkpoint()
    write_export(tmp_path, export_files(log.leaves, log.notes, [log.vkey]))
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        f"{len(log.leaves) - 1:020d}.txt",
        f"{len(log.leaves):020d}.txt",
    ]
    line = json.loads((tmp_path / "leaves.jsonl").read_text().splitlines()[4])
    assert line["index"] == 4 and line["leaf"].encode() == log.leaves[4]
    assert base64.b64decode(line["leaf_hash"]) == leaf_hash(log.leaves[4])
    export = load_export(tmp_path)
    assert export.leaves == log.leaves and export.checkpoint == log.notes[-1] and export.keys == [log.vkey]
    result = verify_export(export, [log.vkey], None, audience=ISSUER)
    assert result.code == OK, result.reason
    # A later export of the grown log adds files; an old checkpoint file is never rewritten.
    log.add(L.grant_revoked, ALICE, "gr_3")
    log.checkpoint()
    write_export(tmp_path, export_files(log.leaves, log.notes, [log.vkey]))
    assert verify_export(load_export(tmp_path), [log.vkey], result.state).code == OK
    with pytest.raises(ExportError):
        write_export(
            tmp_path,
            {f"checkpoints/{1:020d}.txt": b"other"} | {"checkpoints/" + f"{len(log.leaves):020d}.txt": b"x"},
        )


def test_an_edited_export_is_caught_with_its_index(tmp_path):
    log = a_busy_log()
    log.checkpoint()
    write_export(tmp_path, export_files(log.leaves, log.notes, [log.vkey]))
    path = tmp_path / "leaves.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[13])
    assert "alice" in row["leaf"]
    row["leaf"] = row["leaf"].replace("alice", "mallory")
    lines[13] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    result = verify_export(load_export(tmp_path), [log.vkey], None)
    assert (result.code, result.bad_index, result.exact) == (CRYPTO, 13, True)
    # Leaves deleted from the end of the export: fewer leaves than the checkpoint.
    path.write_text("\n".join(lines[:-2]) + "\n")
    assert verify_export(load_export(tmp_path), [log.vkey], None).code == CRYPTO


def test_an_export_whose_newest_checkpoint_forks_an_older_one_is_caught():
    log = a_busy_log()
    log.checkpoint()
    fork = Log()
    fork.signer = log.signer  # a compromised server re-signing a rewritten history
    fork.leaves = [*log.leaves[:5], L.grant_revoked(999, 1, ALICE, "gr_0"), *log.leaves[6:], b"x"]
    fork_note = fork.checkpoint()
    files = export_files(fork.leaves, [log.notes[0], fork_note])
    result = verify_export(read_export(files), [log.vkey], None)
    assert result.code == CRYPTO and "forked" in result.reason


@pytest.mark.parametrize(
    "files",
    [
        {},
        {"leaves.jsonl": b"", "checkpoint": b"nope"},
        {"leaves.jsonl": b'{"index": 1, "leaf": "x"}\n', "checkpoint": b""},
        {"leaves.jsonl": b"\xff", "checkpoint": b""},
        {"leaves.jsonl": b'{"index": 0, "leaf": "x", "leaf_hash": "!"}\n', "checkpoint": b""},
    ],
)
def test_malformed_exports_are_refused(files):
    with pytest.raises(ExportError):
        read_export(files)


def test_state_round_trip():
    checkpoint = Checkpoint(ORIGIN, 5, bytes(range(32)))
    assert state_of(checkpoint) == {
        "origin": ORIGIN,
        "size": 5,
        "root": base64.b64encode(bytes(range(32))).decode(),
    }


def test_passkey_evidence_must_name_a_logged_credential_of_the_voter_and_pass_the_hook():
    webauthn = {
        "webauthn": {
            "credential_id": "cred_a",
            "authenticator_data": "AA",
            "client_data_json": "e30",
            "signature": "sig",
        }
    }

    def log_with(credential_owner: str | None, voter=ALICE) -> tuple[Log, int]:
        log = a_busy_log()
        if credential_owner:
            log.add(
                L.person_credential_added,
                ALICE,
                email=credential_owner,
                credential_id="cred_a",
                public_key="pQE",
            )
        log.add(L.grant_created, AGENT, "g", request={}, cmd_hash=None, grant_type="once")
        return log, log.add(L.grant_reviewed, voter, "g", decision="approve", via="web", evidence=webauthn)

    log, vote = log_with("alice@example.com")
    seen = []
    assert _semantic(log, evidence_check=lambda v, c: seen.append((v.seq, c.data["public_key"]))).code == OK
    assert seen == [(parse_seq(log.leaves[vote]), "pQE")]
    log, vote = log_with("alice@example.com")
    result = _semantic(log, evidence_check=lambda v, c: "the assertion does not verify")
    assert (result.code, result.bad_index) == (SEMANTIC, vote) and "does not verify" in result.reason
    log, vote = log_with(None)
    assert (_semantic(log).code, _semantic(log).bad_index) == (SEMANTIC, vote)
    log, vote = log_with("alice@example.com", voter=BOB)
    result = _semantic(log)
    assert (result.code, result.bad_index) == (SEMANTIC, vote) and "another person" in result.reason
    log = a_busy_log()
    log.add(
        L.person_credential_added, ALICE, email="alice@example.com", credential_id="cred_a", public_key="pQE"
    )
    bad = log.add(
        L.person_credential_added, BOB, email="bob@example.com", credential_id="cred_a", public_key="pQF"
    )
    assert (_semantic(log).code, _semantic(log).bad_index) == (SEMANTIC, bad)


def parse_seq(raw: bytes) -> int:
    return json.loads(raw)["seq"]


def test_backfilled_leaves_only_open_the_log():
    """Grants that existed before the log get backfilled leaves at its start; a backfilled approval
    is not held to a policy (no votes exist), so backfill anywhere later would be a bypass."""
    log = Log()
    log.add(
        lambda seq, ts: L.backfilled(
            L.grant_created(seq, ts, AGENT, "old", request={}, cmd_hash=None, grant_type="timed")
        )
    )
    log.add(
        lambda seq, ts: L.backfilled(
            L.grant_approved(seq, ts, ALICE, "old", grant_type="timed", decided_by="alice@example.com")
        )
    )
    log.add(L.grant_used, AGENT, "old")
    assert json.loads(log.leaves[0])["data"]["backfilled"] is True
    assert _semantic(log).code == OK
    log.add(L.grant_created, AGENT, "new", request={}, cmd_hash=None, grant_type="once")
    bad = log.add(
        lambda seq, ts: L.backfilled(
            L.grant_approved(seq, ts, ALICE, "new", grant_type="once", decided_by="alice@example.com")
        )
    )
    result = _semantic(log)
    assert (result.code, result.bad_index) == (SEMANTIC, bad) and "backfill" in result.reason
    log.leaves = log.leaves[:bad]
    log.last = None
    bad = log.add(
        lambda seq, ts: L.make_leaf(
            "grant.revoked", seq=seq, ts=ts, actor=ALICE, data={"backfilled": 1}, grant_id="old"
        )
    )
    assert (_semantic(log).code, _semantic(log).bad_index) == (SEMANTIC, bad)


def test_without_a_hash_reference_an_earlier_checkpoint_narrows_the_bad_leaf_down():
    log = a_busy_log()
    state = verify_log(log.checkpoint(), [log.vkey], None, log.leaves).state
    kept = len(log.leaves)
    for n in range(5):
        log.add(L.grant_revoked, ALICE, f"gr_{n}")
    note = log.checkpoint()
    edited = list(log.leaves)
    edited[kept + 3] = edited[kept + 3].replace(b"gr_3", b"gr_9")
    result = verify_log(note, [log.vkey], state, edited)
    assert (result.code, result.bad_index, result.exact) == (CRYPTO, kept, False)
    assert f"index {kept} or later" in result.reason
    edited = list(log.leaves)
    edited[2] = edited[2].replace(b'"ls"', b'"rm"')
    result = verify_log(note, [log.vkey], state, edited)  # before the saved head: no narrowing
    assert (result.code, result.bad_index, result.exact) == (CRYPTO, 0, False)


def _timing_out(log: Log, gid: str, on_timeout: str, denied_after_ms: int) -> int:
    """A grant pinned to a policy with a 60 s ``pending_ttl`` that the system denies ``denied_after_ms``
    after its creation for "no quorum before timeout"; the denial's index."""
    review = {**DEFAULT_REVIEW.as_dict(), "policy_ids": ["db"], "pending_ttl": 60, "on_timeout": on_timeout}
    log.add(L.grant_created, AGENT, gid, request={}, cmd_hash=None, grant_type="once", review=review)
    created_ts = 1764140000000 + log.seq
    log.seq += 1
    log.leaves.append(
        L.grant_denied(
            log.seq,
            created_ts + denied_after_ms,
            SYSTEM,
            gid,
            decided_by="",
            reason="no quorum before timeout",
        )
    )
    return len(log.leaves) - 1


def test_a_denial_for_its_pinned_timeout_is_a_basis_only_when_the_policy_says_so_and_the_time_has_come():
    """D13's ``on_timeout = "deny"``: the system denies a grant without a vote once its pinned
    ``pending_ttl`` has passed; the verifier accepts that (exit 0), and only that."""
    log = a_busy_log()
    log.add(L.policy_loaded, SYSTEM, policy_hash="sha256:01", policy_ids=["db"])
    _timing_out(log, "g_timeout", "deny", 61_000)
    assert _semantic(log).code == 0, _semantic(log).reason
    early = _timing_out(log, "g_early", "deny", 30_000)
    result = _semantic(log)
    assert (result.code, result.bad_index) == (SEMANTIC, early) and "before its pinned" in result.reason
    log = a_busy_log()
    log.add(L.policy_loaded, SYSTEM, policy_hash="sha256:01", policy_ids=["db"])
    expiring = _timing_out(log, "g_expire", "expire", 61_000)
    result = _semantic(log)
    assert (result.code, result.bad_index) == (SEMANTIC, expiring) and "does not have" in result.reason
