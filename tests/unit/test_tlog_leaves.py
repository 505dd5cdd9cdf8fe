"""The leaf encoding (RFC 8785 canonical JSON, one function per kind) and the hosts' receipts."""

from __future__ import annotations

import json

import jwt
import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from grantd.core.tlog import leaves as L
from grantd.core.tlog.leaves import LeafError, parse_leaf
from grantd.core.tlog.receipts import (
    RECEIPT_TYP,
    BadReceipt,
    UnknownHost,
    build_receipt,
    host_public_key_line,
    receipt_key,
    verify_receipt,
)
from grantd.sshkeys import parse_public_key

ALICE = {"kind": "person", "email": "alice@example.com", "pid": "prs_1"}
AGENT = {"kind": "agent", "email": "bot@example.com", "agent_id": "agt_1"}
ISSUER = "https://idp.example.com"


def test_a_leaf_is_the_canonical_json_of_its_members():
    raw = L.grant_reviewed(
        7,
        1764140000123,
        ALICE,
        "gr_1",
        decision="approve",
        via="web",
        req="sre",
        reason="ok – fine",
        grant_digest="sha256:ab",
        evidence={"webauthn": {"credential_id": "c", "signature": "s"}},
    )
    value = json.loads(raw)
    assert raw == rfc8785.dumps(value)
    assert raw.startswith(b'{"actor":{"email":"alice@example.com","kind":"person","pid":"prs_1"},"data":{')
    assert value == {
        "v": 1,
        "seq": 7,
        "ts": 1764140000123,
        "kind": "grant.reviewed",
        "grant_id": "gr_1",
        "actor": ALICE,
        "data": {
            "decision": "approve",
            "via": "web",
            "req": "sre",
            "reason": "ok – fine",
            "grant_digest": "sha256:ab",
            "evidence": {"webauthn": {"credential_id": "c", "signature": "s"}},
        },
    }
    assert "–".encode() in raw  # UTF-8, not \u escapes
    leaf = parse_leaf(raw)
    assert (leaf.seq, leaf.kind, leaf.grant_id, leaf.actor, leaf.raw) == (
        7,
        "grant.reviewed",
        "gr_1",
        ALICE,
        raw,
    )


def test_every_kind_has_its_function_and_round_trips():
    key = host_public_key_line(Ed25519PrivateKey.generate())
    made = [
        L.grant_created(
            1,
            1,
            AGENT,
            "g",
            request={"command": ["ls"], "target_host": "h"},
            cmd_hash="sha256:00",
            grant_type="once",
            policy_hash="sha256:11",
        ),
        L.grant_reviewed(2, 2, ALICE, "g", decision="deny", via="tui", evidence={"session": "s1"}),
        L.grant_auto_decided(
            3, 3, {"kind": "system"}, "g", decision="approve", rule="r1", reason="pre-approved"
        ),
        L.grant_escalated(4, 4, {"kind": "system"}, "g", level=1, notify=["sre"]),
        L.grant_approved(5, 5, ALICE, "g", grant_type="once", decided_by="alice@example.com", expires_at=99),
        L.grant_denied(6, 6, ALICE, "g", decided_by="alice@example.com", reason="no"),
        L.grant_revoked(7, 7, ALICE, "g"),
        L.grant_expired(8, 8, {"kind": "system"}, "g", status_before="pending"),
        L.grant_consumed(9, 9, AGENT, "g", authz_jti="j"),
        L.grant_used(10, 10, AGENT, "g", authz_jti="j"),
        L.delegation_created(11, 11, ALICE, delegation_id="d", details={"to": "bob@example.com"}),
        L.delegation_revoked(12, 12, ALICE, delegation_id="d"),
        L.agent_enrolled(13, 13, ALICE, agent_id="a", email="bot@example.com", public_key="ssh-ed25519 AAAA"),
        L.agent_key_replaced(14, 14, ALICE, agent_id="a", public_key="ssh-ed25519 BBBB"),
        L.agent_disabled(15, 15, ALICE, agent_id="a"),
        L.person_credential_added(
            16, 16, ALICE, email="alice@example.com", credential_id="c", public_key="pQE"
        ),
        L.policy_loaded(17, 17, {"kind": "system"}, policy_hash="sha256:22", policy_ids=["p"]),
        L.key_rotated(18, 18, {"kind": "management"}, purpose="log", kid="idp/grantd+01020304+AQ"),
        L.host_enrolled(19, 19, ALICE, host="web-1", public_key=key),
        L.exec_receipt(
            20, 20, "g", host="web-1", receipt="a.b.c", authz_jti="j", result="exited", exit_code=0
        ),
        L.audit_exported(21, 21, ALICE, size=20),
        L.log_restored(22, 22, {"kind": "management"}, from_size=30, lost_range=[20, 30]),
    ]
    assert sorted(parse_leaf(raw).kind for raw in made) == sorted(L.KINDS)
    for raw in made:
        assert parse_leaf(raw).raw == raw


@pytest.mark.parametrize(
    "build",
    [
        lambda: L.make_leaf("grant.hacked", seq=1, ts=1, actor=ALICE, data={}),
        lambda: L.make_leaf("grant.revoked", seq=1, ts=1, actor=ALICE, data={}),  # no grant_id
        lambda: L.make_leaf("agent.disabled", seq=1, ts=1, actor=ALICE, data={"agent_id": "a"}, grant_id="g"),
        lambda: L.make_leaf("grant.revoked", seq=-1, ts=1, actor=ALICE, data={}, grant_id="g"),
        lambda: L.make_leaf("grant.revoked", seq=True, ts=1, actor=ALICE, data={}, grant_id="g"),
        lambda: L.make_leaf("grant.revoked", seq=1, ts=1.5, actor=ALICE, data={}, grant_id="g"),
        lambda: L.make_leaf("grant.revoked", seq=1, ts=1, actor=ALICE, data={"x": 0.1}, grant_id="g"),
        lambda: L.make_leaf("grant.revoked", seq=1, ts=1, actor=ALICE, data={"x": 2**60}, grant_id="g"),
        lambda: L.make_leaf("grant.revoked", seq=1, ts=1, actor={"kind": "root"}, data={}, grant_id="g"),
        lambda: L.make_leaf(
            "grant.revoked", seq=1, ts=1, actor={"kind": "person", "email": 3}, data={}, grant_id="g"
        ),
        lambda: L.make_leaf("grant.revoked", seq=1, ts=1, actor=ALICE, data={"x": {1, 2}}, grant_id="g"),
        lambda: L.grant_reviewed(1, 1, ALICE, "g", decision="maybe", via="web"),
        lambda: L.make_leaf("grant.created", seq=1, ts=1, actor=AGENT, data={"request": {}}, grant_id="g"),
        lambda: L.exec_receipt(1, 1, "g", host="h", receipt="x", authz_jti="j", result="crashed"),
    ],
)
def test_invalid_leaves_are_refused(build):
    with pytest.raises(LeafError):
        build()


@pytest.mark.parametrize("value", [{1: "x"}, {"a": "b", 2: 3}, {"a": {1: "x"}}, [{1: "x"}]])
def test_object_keys_that_are_not_strings_are_named_flat_or_nested(value):
    """The float check's walk refuses a key that is not a string, and so does its one-loop path for
    a flat object (most leaves' data), with the same message."""
    with pytest.raises(LeafError, match="object keys are strings"):
        L._no_floats(value, "leaf.data")


def test_stored_bytes_must_be_exactly_a_canonical_valid_leaf():
    raw = L.grant_revoked(3, 4, ALICE, "g", reason="x")
    value = json.loads(raw)
    for bad in (
        json.dumps(value).encode(),  # spaces: same value, other bytes
        json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        .replace("x", "\\u0078")
        .encode(),
        raw.replace(b'"v":1', b'"v":2'),
        raw.replace(b'"v":1', b'"v":1.0'),
        raw[:-1],
        b"\xff" + raw,
        rfc8785.dumps({**value, "extra": 1}),
        rfc8785.dumps({k: v for k, v in value.items() if k != "actor"}),
        b"[" * 100000,
    ):
        with pytest.raises(LeafError):
            parse_leaf(bad)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=8),
        st.recursive(
            st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=10),
            lambda inner: (
                st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=8,
        ),
        max_size=4,
    ),
    st.integers(0, 2**53 - 1),
)
def test_any_data_round_trips_to_the_same_bytes(data, seq):
    raw = L.make_leaf("grant.revoked", seq=seq, ts=seq, actor=ALICE, data=data, grant_id="g")
    assert parse_leaf(raw).data == data
    assert (
        L.make_leaf("grant.revoked", seq=seq, ts=seq, actor=ALICE, data=json.loads(raw)["data"], grant_id="g")
        == raw
    )


_ASCII_HEAVY = st.text(st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=10)


@settings(max_examples=400, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | _ASCII_HEAVY | st.text(max_size=6),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(_ASCII_HEAVY | st.text(max_size=4), inner, max_size=4)
        ),
        max_leaves=12,
    )
)
def test_the_fast_canonical_encoding_is_rfc8785s(value):
    """Issue 23: ``canonical`` writes pure-ASCII values with the standard library (5x faster); for every
    value, control characters, quotes and backslashes in keys and strings included, the bytes are the
    rfc8785 library's."""
    assert L.canonical(value) == rfc8785.dumps(value)


# -- receipts ----------------------------------------------------------------------------------------------

HOST_KEY = Ed25519PrivateKey.generate()


def _receipt(key=HOST_KEY, **over):
    claims = dict(
        host="web-1",
        audience=ISSUER,
        grant_id="gr_1",
        authz_jti="jti_1",
        cmd_hash="sha256:aa",
        run_as="root",
        result="exited",
        exit_code=0,
        started_at=100,
        ended_at=101,
        duration_ms=1200,
        issued_at=101,
        seen_checkpoint={"size": 4, "root": "A" * 43 + "="},
    )
    claims.update(over)
    return build_receipt(key, **claims)


def _enrolled(host):
    return {"web-1": host_public_key_line(HOST_KEY)}.get(host)


def test_a_receipt_is_an_eddsa_jws_of_its_type_and_verifies_with_the_enrolled_ssh_key():
    token = _receipt()
    assert jwt.get_unverified_header(token) == {"alg": "EdDSA", "typ": RECEIPT_TYP}
    line = host_public_key_line(HOST_KEY)
    assert line.startswith("ssh-ed25519 ") and parse_public_key(line)[1] == line
    receipt = verify_receipt(token, ISSUER, _enrolled)
    assert receipt.host == "web-1" and receipt.claims["iss"] == "host:web-1"
    assert receipt.key == receipt_key(receipt.claims) and receipt.key[:3] == ("gr_1", "jti_1", "exited")
    # the same attempt is the same receipt; another attempt (other times, another status) is not
    assert verify_receipt(_receipt(), ISSUER, _enrolled).key == receipt.key
    assert verify_receipt(_receipt(exit_code=3), ISSUER, _enrolled).key != receipt.key
    refused = verify_receipt(
        _receipt(result="refused", exit_code=5, authz_jti="", reason="bad token"), ISSUER, _enrolled
    )
    assert refused.key[:3] == ("gr_1", "", "refused")


def test_receipts_that_must_be_refused():
    other = Ed25519PrivateKey.generate()
    with pytest.raises(UnknownHost):
        verify_receipt(_receipt(host="web-2"), ISSUER, _enrolled)
    with pytest.raises(BadReceipt) as bad_signature:  # signed by another key, claiming to be web-1
        verify_receipt(_receipt(key=other), ISSUER, _enrolled)
    assert not isinstance(bad_signature.value, UnknownHost)
    token = _receipt()
    head, body, sig = token.split(".")
    tampered_body = jwt.utils.base64url_encode(
        json.dumps({**json.loads(jwt.utils.base64url_decode(body)), "exit_code": 1}).encode()
    ).decode()
    for bad in (f"{head}.{tampered_body}.{sig}", token[:-3] + "AAA", "x", "a.b.c", "", "x" * 20000):
        with pytest.raises(BadReceipt):
            verify_receipt(bad, ISSUER, _enrolled)
    with pytest.raises(BadReceipt):
        verify_receipt(token, "https://other.example", _enrolled)
    # An ordinary JWT with the host's key but not of the receipt type is no receipt.
    plain = jwt.encode({"iss": "host:web-1", "aud": ISSUER, "iat": 1}, HOST_KEY, algorithm="EdDSA")
    with pytest.raises(BadReceipt):
        verify_receipt(plain, ISSUER, _enrolled)
    with pytest.raises(BadReceipt):  # alg none
        verify_receipt(
            jwt.encode({"iss": "host:web-1"}, None, algorithm="none", headers={"typ": RECEIPT_TYP}),
            ISSUER,
            _enrolled,
        )


@pytest.mark.parametrize(
    "over",
    [
        {"result": "crashed"},
        {"exit_code": None},
        {"exit_code": "0"},
        {"ended_at": 99},
        {"grant_id": ""},
        {"authz_jti": ""},
        {"duration_ms": -1},
        {"host": "web 1"},
        {"host": "-x"},
        {"seen_checkpoint": {"size": 1}},
        {"seen_checkpoint": {"size": 1, "root": "AAAA"}},
    ],
)
def test_bad_claims_are_refused_when_building(over):
    with pytest.raises(BadReceipt):
        _receipt(**over)
