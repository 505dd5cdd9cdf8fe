"""Every decision D14 lists is a leaf (issue 23): each vote, final or not, is ``grant.reviewed`` (and a
grant event, so every open inbox sees it), a timed or always consume is ``grant.used``, a pinned
policy review travels in ``grant.created``, and ``policy.loaded`` is logged at start whenever the
policies differ from the last logged. The server's own log then passes ``verify_log``'s semantic
checks. A real server on a free port (in process), real SQLite."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inproc import InProcessServer
from people_support import cookie_client, enrol_agent, request_grant, server_with_people, start_session

from grantd.core.tlog.leaves import Leaf, parse_leaf
from grantd.core.tlog.verify import verify_log

from server.test_audit_log import all_entries, checkpoint, vkeys

SRE = [f"sre{i}@sre.example" for i in range(1, 4)]
OWNER = "owner@sre.example"
POLICY = f"""
[audit]
sequencer_interval_ms = 50

[[groups]]
id = "sre"
members = [{", ".join(f'"{e}"' for e in SRE)}]

[[policies]]
id = "prod-two"
match.target_host = ["prod-*"]
[[policies.require]]
id = "sre"
groups = ["sre"]
approve = 2
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    yield from server_with_people(tmp_path_factory.mktemp("leaves"), POLICY, [*SRE, OWNER])


def leaves_until(srv: Any, done: Any, timeout: float = 5.0) -> tuple[str, list[Leaf]]:
    """The newest signed note and its leaves, once ``done(leaves)`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        note, size = checkpoint(srv, 1)
        leaves = [parse_leaf(e["leaf"].encode()) for e in all_entries(srv, size)]
        if done(leaves):
            return note, leaves
        assert time.monotonic() < deadline, [(x.kind, x.grant_id) for x in leaves[-10:]]
        time.sleep(0.05)


def kinds_of(leaves: list[Leaf], grant_id: str) -> list[str]:
    return [x.kind for x in leaves if x.grant_id == grant_id]


def verified(srv: Any, note: str, leaves_raw: list[bytes]) -> None:
    result = verify_log(note, vkeys(srv), None, leaves_raw, audience=srv.url)
    assert result.code == 0, result.reason


def raw_leaves(srv: Any, note: str) -> list[bytes]:
    size = int(note.split("\n")[1])
    return [e["leaf"].encode() for e in all_entries(srv, size)]


def test_each_use_of_a_timed_grant_is_a_grant_used_leaf_and_none_after_revocation(srv):
    _, token = enrol_agent(srv, owner=OWNER)
    grant = request_grant(srv, token, grant_type="timed", duration=600)
    with srv.admin() as http:
        authz = http.post(f"/api/grants/{grant['id']}/approve", json={}).json()["authz_jwt"]
    with srv.client(authz) as http:
        for _ in range(2):
            r = http.post(f"/api/grants/{grant['id']}/consume")
            assert r.status_code == 200 and r.json()["status"] == "valid", r.text
    with srv.admin() as http:
        assert http.post(f"/api/grants/{grant['id']}/revoke").status_code == 200
    with srv.client(authz) as http:
        assert http.post(f"/api/grants/{grant['id']}/consume").json().get("status") != "valid"
    expected = [
        "grant.created",
        "grant.reviewed",
        "grant.approved",
        "grant.used",
        "grant.used",
        "grant.revoked",
    ]
    note, leaves = leaves_until(srv, lambda got: kinds_of(got, grant["id"]) == expected)
    verified(srv, note, raw_leaves(srv, note))


def test_a_non_final_vote_is_a_leaf_and_an_event_every_inbox_sees(srv):
    _, token = enrol_agent(srv, owner=OWNER)
    grant = request_grant(srv, token, target_host="prod-db-1")
    assert grant["status"] == "pending"
    path = f"/api/grants/{grant['id']}"
    with srv.admin() as http:  # another reader's stream: the first vote must reach it
        with http.stream("GET", "/api/grants/events", headers={"Last-Event-ID": "0"}) as stream:
            with cookie_client(srv, start_session(srv, SRE[0])) as first:
                r = first.post(path + "/approve", json={})
                assert r.status_code == 200 and r.json()["grant"]["status"] == "pending", r.text
            seen: list[str] = []
            current = None
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    current = line.removeprefix("event: ")
                elif line.startswith("data: ") and grant["id"] in line and current:
                    seen.append(current)
                    if current == "grant.reviewed":
                        break
    assert seen == ["grant.created", "grant.reviewed"]
    _, leaves = leaves_until(srv, lambda got: "grant.reviewed" in kinds_of(got, grant["id"]))
    assert kinds_of(leaves, grant["id"]) == ["grant.created", "grant.reviewed"]
    created = next(x for x in leaves if x.grant_id == grant["id"])
    assert created.data["review"]["policy_ids"] == ["prod-two"]  # the pinned review travels in the leaf
    vote = [x for x in leaves if x.grant_id == grant["id"]][1]
    assert vote.actor["email"] == SRE[0] and vote.data == {"decision": "approve", "via": "web"}
    with cookie_client(srv, start_session(srv, SRE[1])) as second:
        r = second.post(path + "/approve", json={})
        assert r.json()["grant"]["status"] == "approved", r.text
    expected = ["grant.created", "grant.reviewed", "grant.reviewed", "grant.approved"]
    note, leaves = leaves_until(srv, lambda got: kinds_of(got, grant["id"]) == expected)
    verified(srv, note, raw_leaves(srv, note))  # two distinct approvers meet the pinned 2-of-sre


def test_an_approval_short_of_its_pinned_policy_in_the_log_is_a_semantic_failure(srv):
    """The check the server's log must pass fails when a vote leaf is missing: the verifier holds the
    approval to the review pinned in grant.created."""
    _, token = enrol_agent(srv, owner=OWNER)
    grant = request_grant(srv, token, target_host="prod-db-2")
    for voter in SRE[:2]:
        with cookie_client(srv, start_session(srv, voter)) as person:
            assert person.post(f"/api/grants/{grant['id']}/approve", json={}).status_code == 200
    expected = ["grant.created", "grant.reviewed", "grant.reviewed", "grant.approved"]
    note, _ = leaves_until(srv, lambda got: kinds_of(got, grant["id"]) == expected)
    raw = raw_leaves(srv, note)
    first_vote = next(i for i, x in enumerate(raw) if grant["id"].encode() in x and b'"grant.reviewed"' in x)
    # a verifier given a log without that vote (re-signed by a key it trusts) names the approval
    from grantd.core.tlog.merkle import MemoryTree
    from grantd.core.tlog.note import Checkpoint, Signer, sign_checkpoint
    from grantd.core.tlog.verify import SEMANTIC

    forged = raw[:first_vote] + raw[first_vote + 1 :]
    signer = Signer.generate("forger/grantd")
    tree = MemoryTree.of_leaves(forged)
    forged_note = sign_checkpoint(signer, Checkpoint("forger/grantd", tree.size, tree.root()), None, [])
    result = verify_log(forged_note, [signer.verifier.vkey], None, forged, audience=srv.url)
    assert result.code == SEMANTIC and "policy needs 2" in result.reason, result.reason


def policy_leaves(srv: Any) -> list[Leaf]:
    note, size = checkpoint(srv, 1)
    return [
        x
        for x in (parse_leaf(e["leaf"].encode()) for e in all_entries(srv, size))
        if x.kind == "policy.loaded"
    ]


def wait_policy_leaves(srv: Any, count: int) -> list[Leaf]:
    deadline = time.monotonic() + 5
    while len(found := policy_leaves(srv)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_policy_loaded_at_start_only_when_the_policies_changed(tmp_path: Path):
    directory = tmp_path / "pol"
    server = InProcessServer(directory, extra=POLICY).start()
    try:
        first = wait_policy_leaves(server, 1)
        assert len(first) == 1 and first[0].data["policy_ids"] == ["prod-two"]
    finally:
        server.stop()
    server = InProcessServer(directory, extra=POLICY).start()  # the same policies: nothing new
    try:
        with server.admin() as http:  # one more leaf after the start, so the sequencer caught up
            assert http.post("/api/hosts", json={"host": "h1", "publicKey": _host_line()}).status_code == 201
        _, leaves = leaves_until(server, lambda got: any(x.kind == "host.enrolled" for x in got))
        assert [x.kind for x in leaves].count("policy.loaded") == 1
    finally:
        server.stop()
    changed = POLICY.replace("approve = 2", "approve = 1")
    server = InProcessServer(directory, extra=changed).start()
    try:
        found = wait_policy_leaves(server, 2)
        assert len(found) == 2 and found[1].data["policy_hash"] != found[0].data["policy_hash"]
    finally:
        server.stop()


def _host_line() -> str:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from grantd.core.tlog.receipts import host_public_key_line

    return host_public_key_line(Ed25519PrivateKey.generate())
