"""Approval policies wired into the server (issue 22, D13), end to end on a real HTTP server with
real storage: rules decide at creation, a policy's quorum holds across votes, exclusions answer
403 with their reason, one vote per person (409 on every path), decided grants 400, the AuthZ-JWT
names every approver, concurrent final votes have exactly one winner."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest
from inproc import InProcessServer
from people_support import (
    cookie_client,
    create_person,
    enrol_agent,
    request_grant,
    server_with_people,
    signed_in_person,
    start_session,
)

from conftest import problem

SRE = [f"sre{i}@sre.example" for i in range(1, 21)]
OWNER = "owner@sre.example"
DOMAIN_CONFIG = f"""
[[groups]]
id = "sre"
members = [{", ".join(f'"{e}"' for e in SRE + [OWNER])}]

[[rules]]
id = "no-rm"
effect = "deny"
reason = "rm -rf is never pre-approved nor reviewed"
match.argv = [["rm", "-rf", "**"]]

[[rules]]
id = "journal-ro"
effect = "approve"
reason = "read-only journalctl is pre-approved (CHG-1234)"
match.argv = [["journalctl", "**"], ["rm", "**"]]
max_grant_type = "once"

[[policies]]
id = "prod-root"
description = "root on prod needs two SREs who do not own the agent"
match.target_host = ["prod-*"]
match.run_as = ["root"]
forbid = ["owner", "approver"]
[[policies.require]]
id = "sre"
groups = ["sre"]
approve = 2

[[policies]]
id = "why"
match.target_host = ["why-*"]
require_reason = true
[[policies.require]]
id = "sre-why"
groups = ["sre"]
approve = 1
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    yield from server_with_people(tmp_path_factory.mktemp("policies"), DOMAIN_CONFIG, [*SRE, OWNER])


@pytest.fixture(scope="module")
def bot(srv: InProcessServer) -> tuple[dict[str, Any], str]:
    return enrol_agent(srv, owner=OWNER)


def person(srv: InProcessServer, email: str) -> httpx.Client:
    return cookie_client(srv, start_session(srv, email))


def prod_root(srv: InProcessServer, token: str, **fields: Any) -> dict[str, Any]:
    return request_grant(srv, token, target_host="prod-db-1", run_as="root", **fields)


def claims(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})  # type: ignore[no-any-return]


def test_two_of_sre_not_the_owner(srv: InProcessServer, bot: tuple[dict[str, Any], str]) -> None:
    _, token = bot
    grant = prod_root(srv, token)
    assert grant["status"] == "pending"
    assert grant["review"]["policy_ids"] == ["prod-root"] and grant["review"]["policy_hash"].startswith(
        "sha256:"
    )
    assert grant["review"]["requirements"] == [
        {"id": "prod-root/sre", "approve": 2, "deny": 1, "approvals": [], "denials": []}
    ]
    path = f"/api/grants/{grant['id']}"

    with person(srv, OWNER) as owner:  # the owner sees the grant and is in sre, but is excluded
        r = owner.post(path + "/approve", json={})
        assert r.status_code == 403 and problem(r)["reason"] == "owner excluded"
        r = owner.post(path + "/deny", json={})  # exclusions bind deny votes as well
        assert r.status_code == 403 and problem(r)["reason"] == "owner excluded"
    with srv.admin() as admin:  # an administrator sees it; the management token may not vote here
        r = admin.post(path + "/approve", json={})
        assert r.status_code == 403 and problem(r)["reason"] == "management token not allowed"
    with srv.client(token) as agent:  # the requesting agent sees it and never votes
        r = agent.post(path + "/review", json={"decision": "approve"})
        assert r.status_code == 403 and problem(r)["reason"] == "agents never vote"
    _, outsider = signed_in_person(srv)
    with outsider:  # a person who may not see it learns nothing
        assert outsider.post(path + "/approve", json={}).status_code == 404
        assert outsider.get(path).status_code == 404

    with person(srv, SRE[0]) as first:
        assert first.get(path).status_code == 200  # a named approver sees it
        r = first.post(path + "/review", json={"decision": "approve", "reason": "looked at it"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["grant"]["status"] == "pending" and "authz_jwt" not in body
        assert body["review"]["requirements"][0]["approvals"] == [SRE[0]]
        shown = first.get(path).json()
        assert shown["status"] == "pending" and [a["sub"] for a in shown["approvals"]] == [SRE[0]]
        assert (
            shown["approvals"][0]["via"] == "web" and shown["approvals"][0]["requirement"] == "prod-root/sre"
        )
        # the same person again: 409 on every path
        for route, payload in (("/approve", {}), ("/deny", {}), ("/review", {"decision": "approve"})):
            r = first.post(path + route, json=payload)
            assert r.status_code == 409 and problem(r)["reason"] == "already reviewed", (route, r.text)
        r = first.post("/api/grants/batch", json={"operations": [{"id": grant["id"], "action": "approve"}]})
        assert r.status_code == 200 and r.json()["results"][0]["error"]["status"] == 409

    with person(srv, SRE[1]) as second:
        r = second.post(path + "/approve", json={})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["grant"]["status"] == "approved" and body["grant"]["decided_by"] == SRE[1]
        jwt_claims = claims(body["authz_jwt"])
        assert [a["sub"] for a in jwt_claims["approvals"]] == [SRE[0], SRE[1]]
        assert jwt_claims["quorum"] == "2/2" and jwt_claims["decided_by"] == SRE[1]
        assert jwt_claims["policy"] == {"ids": ["prod-root"], "hash": grant["review"]["policy_hash"]}
    with person(srv, SRE[2]) as late:
        r = late.post(path + "/approve", json={})
        assert r.status_code == 400 and problem(r)["detail"] == "grant already decided"


def test_one_eligible_denial_denies_under_a_policy(
    srv: InProcessServer, bot: tuple[dict[str, Any], str]
) -> None:
    grant = prod_root(srv, bot[1])
    with person(srv, SRE[3]) as sre:
        r = sre.post(f"/api/grants/{grant['id']}/review", json={"decision": "deny", "reason": "not now"})
    assert r.status_code == 200, r.text
    assert r.json()["grant"]["status"] == "denied" and r.json()["grant"]["decision_reason"] == "not now"
    assert r.json()["grant"]["decided_by"] == SRE[3]


def test_a_deny_rule_beats_an_approve_rule_and_says_why(
    srv: InProcessServer, bot: tuple[dict[str, Any], str]
) -> None:
    grant = request_grant(srv, bot[1], command=["rm", "-rf", "/tmp/x"])
    assert grant["status"] == "denied" and grant["decided_by"] == "policy:no-rm"
    assert grant["decision_reason"] == "rm -rf is never pre-approved nor reviewed"
    assert "authz_jwt" not in grant
    # D13: a rule decision, deny or approve, shows as {kind: "rule", rule, reason} in approvals
    (shown,) = grant["approvals"]
    assert (shown["kind"], shown["rule"], shown["reason"]) == ("rule", "no-rm", grant["decision_reason"])


def test_an_empty_reason_where_one_is_required_is_no_reason(
    srv: InProcessServer, bot: tuple[dict[str, Any], str]
) -> None:
    """D13: under require_reason a vote without a reason is 403 "reason required"; an empty or blank
    reason is no reason (not a 400 about the field)."""
    grant = request_grant(srv, bot[1], target_host="why-1")
    with person(srv, SRE[6]) as sre:
        for body in ({}, {"reason": ""}, {"reason": "   "}):
            r = sre.post(f"/api/grants/{grant['id']}/approve", json=body)
            assert r.status_code == 403 and problem(r)["reason"] == "reason required", (body, r.text)
        r = sre.post(f"/api/grants/{grant['id']}/approve", json={"reason": "CHG-42"})
        assert r.status_code == 200 and r.json()["grant"]["status"] == "approved", r.text


def test_an_approve_rule_approves_at_once_with_its_reason(
    srv: InProcessServer, bot: tuple[dict[str, Any], str]
) -> None:
    grant = request_grant(srv, bot[1], command=["journalctl", "-u", "nginx"])
    assert grant["status"] == "approved" and grant["decided_by"] == "policy:journal-ro"
    assert grant["decision_reason"] == "read-only journalctl is pre-approved (CHG-1234)"
    assert grant["approvals"][0]["kind"] == "rule" and grant["approvals"][0]["rule"] == "journal-ro"
    token_claims = claims(grant["authz_jwt"])
    assert token_claims["decided_by"] == "policy:journal-ro" and token_claims["approvals"][0]["via"] == "rule"
    # the token as grantd elevate reads it (D13): a rule, no person; the opt-in decides on each host
    from grantd.elevate.approvals import approval_reasons, approvers_of

    assert (
        token_claims["approvals"][0]["kind"] == "rule"
        and token_claims["approvals"][0]["rule"] == "journal-ro"
    )
    found = approvers_of(token_claims)
    assert found.rules == ("journal-ro",) and found.people == ()
    for allowed in (["policy:journal-ro"], ["policy:*"]):
        assert approval_reasons(token_claims, {"allowed_approvers": allowed}) == [], allowed
    assert approval_reasons(token_claims, {"allowed_approvers": ["*"]})[0].startswith(
        "rule-approved grant not allowed"
    )
    # above the rule's max_grant_type: not pre-approved, the default policy reviews it
    timed = request_grant(srv, bot[1], command=["journalctl", "-f"], grant_type="timed", duration=60)
    assert timed["status"] == "pending" and timed["review"]["policy_ids"] == []


def test_an_owner_removed_from_the_group_after_voting_no_longer_counts(srv: InProcessServer) -> None:
    """Exclusions are re-checked at finalisation: the first voter became the agent's approver
    after voting (forbid approver), so the second vote does not complete the quorum."""
    agent, token = enrol_agent(srv, owner=OWNER, approver=OWNER)
    grant = prod_root(srv, token)
    path = f"/api/grants/{grant['id']}"
    with person(srv, SRE[4]) as first:
        assert first.post(path + "/approve", json={}).status_code == 200
    with srv.admin() as admin:
        r = admin.put(f"/api/admin/agents/{agent['agent_id']}", json={"approver": SRE[4]})
        assert r.status_code == 200, r.text
    with person(srv, SRE[5]) as second:
        r = second.post(path + "/approve", json={})
    assert r.status_code == 200, r.text
    assert r.json()["grant"]["status"] == "pending"  # SRE[4]'s vote no longer holds
    assert r.json()["review"]["requirements"][0]["approvals"] == [SRE[5]]


def test_twenty_concurrent_votes_have_exactly_one_final_winner(
    srv: InProcessServer, bot: tuple[dict[str, Any], str]
) -> None:
    grant = prod_root(srv, bot[1])
    path = f"/api/grants/{grant['id']}/approve"
    clients = [person(srv, email) for email in SRE]

    def cast(client: httpx.Client) -> httpx.Response:
        with client:
            return client.post(path, json={})

    with concurrent.futures.ThreadPoolExecutor(len(clients)) as pool:
        answers = list(pool.map(cast, clients))
    assert all(a.status_code in (200, 400) for a in answers), [a.text for a in answers]
    winners = [a for a in answers if a.status_code == 200 and "authz_jwt" in a.json()]
    assert len(winners) == 1
    with srv.admin() as admin:
        final = admin.get(f"/api/grants/{grant['id']}").json()
    assert final["status"] == "approved"
    assert final["decided_by"] == winners[0].json()["grant"]["decided_by"]
    events = srv.call(srv.services.store.grants.events_after(0, 100_000))
    assert sum(1 for e in events if e["grant_id"] == grant["id"] and e["event"] == "grant.approved") == 1


def test_without_a_matching_policy_one_vote_by_the_owner_decides(
    srv: InProcessServer, bot: tuple[dict[str, Any], str]
) -> None:
    grant = request_grant(srv, bot[1], target_host="staging-1")
    assert grant["review"]["policy_ids"] == [] and grant["review"]["requirements"][0]["id"] == "default"
    with person(srv, OWNER) as owner:
        r = owner.post(f"/api/grants/{grant['id']}/approve", json={})
    assert r.status_code == 200 and r.json()["grant"]["status"] == "approved"
    assert claims(r.json()["authz_jwt"])["quorum"] == "1/1"


def test_review_body_is_checked(srv: InProcessServer, bot: tuple[dict[str, Any], str]) -> None:
    grant = prod_root(srv, bot[1])
    with person(srv, SRE[6]) as sre:
        for body in ({}, {"decision": "maybe"}, {"decision": 1}):
            r = sre.post(f"/api/grants/{grant['id']}/review", json=body)
            assert r.status_code == 400, r.text
            assert problem(r)["field"] == "decision"


def test_reviewers_say_who_may_still_approve(srv: InProcessServer, bot: tuple[dict[str, Any], str]) -> None:
    grant = prod_root(srv, bot[1])
    path = f"/api/grants/{grant['id']}/reviewers"
    with person(srv, SRE[7]) as sre:
        before = sre.get(path)
        assert before.status_code == 200, before.text
        requirement = before.json()["requirements"][0]
        assert requirement["id"] == "prod-root/sre" and requirement["missing"] == 2
        emails = [e["email"] for e in requirement["eligible"]]
        assert emails == sorted(SRE) and OWNER not in emails  # the owner is excluded
        assert sre.post(f"/api/grants/{grant['id']}/approve", json={}).status_code == 200
        after = sre.get(path).json()["requirements"][0]
        assert after["missing"] == 1 and after["approvals"] == [SRE[7]]
        assert SRE[7] not in [e["email"] for e in after["eligible"]]
    _, outsider = signed_in_person(srv)
    with outsider:
        assert outsider.get(path).status_code == 404


def test_evaluate_shows_the_outcome_and_creates_nothing(
    srv: InProcessServer, bot: tuple[dict[str, Any], str]
) -> None:
    agent, token = bot
    body = {
        "requester": agent["email"],
        "target_host": "prod-db-2",
        "audience": "escapes",
        "run_as": "root",
        "command": ["systemctl", "restart", "nginx"],
    }
    before = srv.call(srv.services.store.grants.last_event_seq())
    with srv.admin() as admin:
        r = admin.post("/api/policies/evaluate", json=body)
        assert r.status_code == 200, r.text
        found = r.json()
        assert found["outcome"] == "needs_review" and found["policies_matched"] == ["prod-root"]
        assert found["requirements"][0]["approve"] == 2
        assert [e["email"] for e in found["eligible_approvers"][0]["eligible"]] == sorted(SRE)
        denied = admin.post(
            "/api/policies/evaluate",
            json={**body, "requester": agent["agent_id"], "command": ["rm", "-rf", "/"]},
        ).json()
        assert denied["outcome"] == "auto_deny" and denied["rules_matched"] == ["no-rm"]
        assert denied["reason"] == "rm -rf is never pre-approved nor reviewed"
        approved = admin.post("/api/policies/evaluate", json={**body, "command": ["journalctl"]}).json()
        assert approved["outcome"] == "auto_approve" and approved["rules_matched"] == ["journal-ro"]
        assert admin.post("/api/policies/evaluate", json={"target_host": "x"}).status_code == 400
        # D2: an unknown agent is 404; a person may be named as the requester
        unknown = admin.post("/api/policies/evaluate", json={**body, "requester": "nobody@example.com"})
        assert unknown.status_code == 404 and problem(unknown)["detail"] == "agent not found", unknown.text
        as_person = admin.post("/api/policies/evaluate", json={**body, "requester": SRE[0]})
        assert as_person.status_code == 200, as_person.text
    assert srv.call(srv.services.store.grants.last_event_seq()) == before  # nothing created
    with person(srv, SRE[8]) as sre:  # not an administrator
        assert sre.post("/api/policies/evaluate", json=body).status_code == 403
    with srv.client(token) as as_agent:
        assert as_agent.post("/api/policies/evaluate", json=body).status_code == 403


ESCALATING = """
[[groups]]
id = "leads"
members = ["lead@esc.example"]

[[groups]]
id = "dbas"
members = ["dba1@esc.example", "dba2@esc.example"]

[[policies]]
id = "db"
match.target_host = ["db-*"]
pending_ttl = "1h"
on_timeout = "deny"
[[policies.require]]
id = "dba"
groups = ["dbas"]
approve = 1
[[policies.escalate]]
after = "15m"
notify = ["leads"]
add_approvers = ["leads"]
[[policies.escalate]]
after = "30m"
notify = ["@admins"]
"""


def test_the_lists_judge_one_policy_sets_grants_by_their_own_escalation_level(tmp_path: Any) -> None:
    """Grants pinned to one policy set share a review; the lists judge it once per level (issue 27),
    so the lead added by the first escalation sees the escalated grant and not the newer one."""
    from grantd.services import grant_sweeps

    server = InProcessServer(tmp_path / "esc", extra=ESCALATING).start()
    try:
        create_person(server, "lead@esc.example")
        _, token = enrol_agent(server, owner="owner@esc.example")
        older = request_grant(server, token, target_host="db-1")
        server.clock.advance(15 * 60)
        assert server.call(grant_sweeps.sweep_reviews(server.services)) == 1
        newer = request_grant(server, token, target_host="db-2")  # the same review, level 0
        with person(server, "lead@esc.example") as lead:
            listed = [g["id"] for g in lead.get("/api/grants", params={"status": "pending"}).json()["data"]]
        assert listed == [older["id"]] and newer["id"] not in listed
        groups = server.call(server.services.store.grants.pending_review_groups(10))
        assert sorted((g["escalation_level"], g["grant_ids"]) for g in groups) == [
            (0, [newer["id"]]),
            (1, [older["id"]]),
        ]
        assert (
            groups[0]["review"] == groups[1]["review"]
        )  # one review for both: the level alone tells them apart
    finally:
        server.stop()


def test_escalation_once_per_level_then_no_quorum_before_timeout(tmp_path: Any) -> None:
    from grantd.services import grant_sweeps as grants_service

    server = InProcessServer(tmp_path / "esc", extra=ESCALATING).start()
    try:
        for email in ("lead@esc.example", "dba1@esc.example", "dba2@esc.example"):
            create_person(server, email)
        _, token = enrol_agent(server, owner="owner@esc.example")
        grant = request_grant(server, token, target_host="db-1")
        other = request_grant(server, token, target_host="db-2")
        assert grant["review"]["next_escalation_at"] == grant["created_at"] // 1000 * 1000 + 15 * 60_000
        path = f"/api/grants/{grant['id']}"
        with person(server, "lead@esc.example") as lead:  # not yet an approver: does not even see it
            assert lead.post(path + "/approve", json={}).status_code == 404

        def sweep() -> int:
            return server.call(grants_service.sweep_reviews(server.services))  # type: ignore[no-any-return]

        def escalations() -> list[tuple[str, int]]:
            events = server.call(server.services.store.grants.events_after(0, 1000))
            return [
                (e["grant_id"], e["grant"]["escalation_level"])
                for e in events
                if e["event"] == "grant.escalated"
            ]

        assert sweep() == 0 and escalations() == []
        server.clock.advance(15 * 60)
        assert sweep() == 2 and sweep() == 0  # once per level, however often the sweep runs
        assert sorted(escalations()) == sorted([(grant["id"], 1), (other["id"], 1)])
        with person(server, "lead@esc.example") as lead:  # level 1 added the leads as approvers
            r = lead.post(path + "/approve", json={})
            assert r.status_code == 200, r.text
            assert r.json()["grant"]["status"] == "approved"
            assert r.json()["review"]["escalation_level"] == 1
        server.clock.advance(15 * 60)
        assert sweep() == 1 and escalations()[-1] == (other["id"], 2)
        server.clock.advance(30 * 60)
        assert sweep() == 1
        with server.admin() as admin:
            timed_out = admin.get(f"/api/grants/{other['id']}").json()
        assert timed_out["status"] == "denied" and timed_out["decision_reason"] == "no quorum before timeout"
        assert timed_out["decided_by"] is None and timed_out["approvals"] == []
        assert sweep() == 0
        # D14: each escalation is a leaf, and a log whose grant the system denied for its pinned
        # timeout verifies (exit 0): the timeout is the denial's basis, as a deny vote or rule is
        from server.test_audit_leaves_wired import leaves_until, verified

        def denied(leaves: list[Any]) -> bool:
            return any(x.kind == "grant.denied" and x.grant_id == other["id"] for x in leaves)

        note, leaves = leaves_until(server, denied)
        levels = [
            x.data["level"] for x in leaves if x.kind == "grant.escalated" and x.grant_id == other["id"]
        ]
        assert levels == [1, 2]
        verified(server, note, [x.raw for x in leaves])
    finally:
        server.stop()


UNHURRIED = """
[[policies]]
id = "web"
match.target_host = ["web-*"]
[[policies.require]]
id = "dba"
groups = ["dbas"]
approve = 1
"""


def test_the_sweep_reads_only_what_came_due_and_nothing_waits_behind_older_grants(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Grants under a policy with no escalation and no timeout are never read by the sweep, so they
    cannot crowd out a newer grant whose escalation came due (the sweep looked at the oldest
    SWEEP_REVIEWS pending pinned grants, due or not: with more waiting, it never reached it); and
    between due times a sweep reads no grant at all (issue 27)."""
    from grantd.services import grant_sweeps

    monkeypatch.setattr(grant_sweeps, "SWEEP_REVIEWS", 2)
    server = InProcessServer(tmp_path / "esc", extra=ESCALATING + UNHURRIED).start()
    try:
        _, token = enrol_agent(server, owner="owner@esc.example")
        for i in range(3):
            request_grant(server, token, target_host=f"web-{i}")
        db = request_grant(server, token, target_host="db-1")
        read: list[str] = []
        get = server.services.store.grants.get

        async def counted(grant_id: str) -> Any:
            read.append(grant_id)
            return await get(grant_id)

        monkeypatch.setattr(server.services.store.grants, "get", counted)
        assert server.call(grant_sweeps.sweep_reviews(server.services)) == 0 and read == []
        server.clock.advance(15 * 60)
        assert server.call(grant_sweeps.sweep_reviews(server.services)) == 1 and read == [db["id"]]
        server.clock.advance(60)
        assert server.call(grant_sweeps.sweep_reviews(server.services)) == 0 and read == [db["id"]]
        server.clock.advance(14 * 60)  # the second level
        assert server.call(grant_sweeps.sweep_reviews(server.services)) == 1
        with server.admin() as admin:
            assert admin.get(f"/api/grants/{db['id']}").json()["review"]["escalation_level"] == 2
        server.clock.advance(30 * 60)  # the pinned timeout: denied, and never looked at again
        assert server.call(grant_sweeps.sweep_reviews(server.services)) == 1
        server.clock.advance(24 * 3600)
        assert server.call(grant_sweeps.sweep_reviews(server.services)) == 0 and read == [db["id"]] * 3
    finally:
        server.stop()


def test_grantd_policy_test_prints_the_outcome_and_who_could_approve(
    srv: InProcessServer, bot: tuple[dict[str, Any], str], tmp_path: Any
) -> None:
    import json
    import os
    import subprocess

    from conftest import GRANTD, ROOT

    token_file = tmp_path / "token"
    token_file.write_text(srv.token)
    base = [
        *GRANTD,
        "policy",
        "test",
        "--url",
        srv.url,
        "--token-file",
        str(token_file),
        "--agent",
        bot[0]["email"],
    ]
    env = {**os.environ, "GRANTD_CONFIG": ""}
    before = srv.call(srv.services.store.grants.last_event_seq())
    shown = subprocess.run(
        [*base, "--host", "prod-db-3", "--run-as", "root", "--", "systemctl", "restart", "nginx"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "outcome: needs_review" in shown.stdout and "policies matched: prod-root" in shown.stdout
    assert "requirement prod-root/sre: 2 approval(s) of sre" in shown.stdout and f"  {SRE[0]}" in shown.stdout
    assert OWNER not in shown.stdout
    as_json = subprocess.run(
        [*base, "--json", "--host", "web-1", "--", "rm", "-rf", "/"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert as_json.returncode == 0, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert answer["outcome"] == "auto_deny" and answer["rules_matched"] == ["no-rm"]
    assert srv.call(srv.services.store.grants.last_event_seq()) == before  # nothing created
    refused = subprocess.run(
        [*base, "--", "id"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env=env | {"GRANTD_CONFIG": ""},
        input="",
    )
    assert refused.returncode == 0  # the default policy: still an answer
    bad = subprocess.run(
        [*GRANTD, "policy", "test", "--url", srv.url, "--token-file", str(token_file), "--agent", "x"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert bad.returncode == 2 and "give the command after --" in bad.stderr


def test_the_console_votes_as_tui_and_a_browser_as_web(
    srv: InProcessServer, bot: tuple[dict[str, Any], str]
) -> None:
    import asyncio

    from grantd.tui.client import GrantdClient, ManagementTokenCredential

    grant = request_grant(srv, bot[1], target_host="staging-2")  # the default policy: the token may vote

    async def approve() -> Any:
        async with GrantdClient(srv.url, ManagementTokenCredential(srv.token)) as client:
            return await client.approve(grant["id"])

    decision = asyncio.run(approve())
    assert decision.authz_jwt is not None
    with srv.admin() as admin:
        shown = admin.get(f"/api/grants/{grant['id']}").json()
    assert shown["approvals"] == [
        {"sub": "admin@example.com", "at": shown["decided_at"], "via": "tui", "requirement": "default"}
    ]
    assert claims(decision.authz_jwt)["approvals"][0]["via"] == "tui"
    other = request_grant(srv, bot[1], target_host="staging-3")
    with person(srv, OWNER) as owner:  # a browser session is `web`, whatever the body says
        assert owner.post(f"/api/grants/{other['id']}/approve", json={"via": "tui"}).status_code == 200
        assert owner.get(f"/api/grants/{other['id']}").json()["approvals"][0]["via"] == "web"


def test_a_delegation_counts_only_where_the_policy_allows_it(tmp_path: Any) -> None:
    """D13: a delegation is one vote, and only under policies with allow_delegation = true; under
    any other policy a covering delegation approves nothing (the grant waits for its quorum)."""
    config = """
[[groups]]
id = "ops"
members = ["ops1@deleg.example", "ops2@deleg.example"]

[[policies]]
id = "strict"
match.target_host = ["strict-*"]
[[policies.require]]
id = "ops"
groups = ["ops"]
approve = 1

[[policies]]
id = "relaxed"
match.target_host = ["relaxed-*"]
allow_delegation = true
[[policies.require]]
id = "ops"
groups = ["ops"]
approve = 1

[[policies]]
id = "relaxed-two"
match.target_host = ["relaxed2-*"]
allow_delegation = true
[[policies.require]]
id = "ops"
groups = ["ops"]
approve = 2
"""
    server = InProcessServer(tmp_path / "deleg", extra=config).start()
    try:
        for email in ("ops1@deleg.example", "ops2@deleg.example"):
            create_person(server, email)
        agent, token = enrol_agent(server, owner="ops1@deleg.example", approver="ops2@deleg.example")
        with person(server, "ops1@deleg.example") as ops1:
            r = ops1.post(
                "/api/delegations",
                json={
                    "delegate": agent["email"],
                    "audience": "escapes",
                    "approval": "once",
                    "duration": 3600,
                },
            )
            assert r.status_code == 201, r.text
        strict = request_grant(server, token, target_host="strict-1")
        assert strict["status"] == "pending" and strict["approvals"] == []
        relaxed = request_grant(server, token, target_host="relaxed-1")
        assert relaxed["status"] == "approved" and relaxed["decided_by"] == "ops1@deleg.example"
        assert (
            relaxed["approvals"][0]["via"] == "delegation"
            and relaxed["approvals"][0]["requirement"] == "relaxed/ops"
        )
        two = request_grant(server, token, target_host="relaxed2-1")
        assert two["status"] == "pending"  # the delegation is one vote of two
        assert [(a["sub"], a["via"]) for a in two["approvals"]] == [("ops1@deleg.example", "delegation")]
        with person(server, "ops1@deleg.example") as ops1:  # the delegator already voted through it
            r = ops1.post(f"/api/grants/{two['id']}/approve", json={})
            assert r.status_code == 409, r.text
        with person(server, "ops2@deleg.example") as ops2:
            r = ops2.post(f"/api/grants/{two['id']}/approve", json={})
            assert r.status_code == 200, r.text
            assert (
                r.json()["grant"]["status"] == "approved"
                and r.json()["grant"]["decided_by"] == "ops2@deleg.example"
            )
            assert [a["via"] for a in r.json()["review"]["approvals"]] == ["delegation", "web"]
            # D13: the answer's grant is grant JSON as GET shows it, with its review and approvals
            with server.admin() as admin:
                shown = admin.get(f"/api/grants/{two['id']}").json()
            answered = r.json()["grant"]
            assert answered["approvals"] == shown["approvals"] == r.json()["review"]["approvals"]
            assert answered["review"]["requirements"] == shown["review"]["requirements"]
    finally:
        server.stop()


def _shown_by_get_and_token(srv: InProcessServer, token: str, grant_id: str) -> tuple[dict[str, Any], Any]:
    """The grant's review and approvals as GET shows them, and the AuthZ-JWT claims D13 adds as the
    token route mints them (None while it is not approved)."""
    with srv.client(token) as agent:
        shown = agent.get(f"/api/grants/{grant_id}").json()
        minted = agent.post(f"/api/grants/{grant_id}/token")
    review = {**shown["review"], "approvals": shown["approvals"]}
    if minted.status_code != 200:
        return review, None
    found = claims(minted.json()["authz_jwt"])
    return review, {k: found[k] for k in ("approvals", "policy", "quorum")}


def test_a_votes_answer_is_what_get_and_the_token_route_show(
    srv: InProcessServer, bot: tuple[dict[str, Any], str]
) -> None:
    """A vote's answer reuses the tally that decided it (or the finalising one) where the inputs
    are the same: its review, approvals and AuthZ-JWT claims are exactly GET's and the token
    route's, for the default policy's owner (counted as an approver only to decide), the management
    token and an administrator, and under a policy's quorum (a first vote, then the deciding one)."""
    _, token = bot

    def check(answer: httpx.Response, grant_id: str) -> None:
        assert answer.status_code == 200, answer.text
        review, minted = _shown_by_get_and_token(srv, token, grant_id)
        assert answer.json()["review"] == review
        if minted is None:
            assert "authz_jwt" not in answer.json()
        else:
            found = claims(answer.json()["authz_jwt"])
            assert {k: found[k] for k in ("approvals", "policy", "quorum")} == minted

    for decide in ("owner", "management", "deny"):
        grant = request_grant(srv, token, target_host=f"staging-{decide}", grant_type="always")
        path = f"/api/grants/{grant['id']}"
        if decide == "owner":
            with person(srv, OWNER) as owner:
                check(owner.post(path + "/approve", json={"grant_type": "once"}), grant["id"])
        elif decide == "management":
            with srv.admin() as admin:
                check(admin.post(path + "/approve", json={"via": "tui"}), grant["id"])
        else:
            with srv.admin() as admin:
                check(admin.post(path + "/deny", json={"reason": "no"}), grant["id"])

    grant = prod_root(srv, token)
    path = f"/api/grants/{grant['id']}"
    with person(srv, SRE[6]) as first:
        check(first.post(path + "/review", json={"decision": "approve", "reason": "ok"}), grant["id"])
    with person(srv, SRE[7]) as second:
        answer = second.post(path + "/approve", json={})
        assert answer.json()["grant"]["status"] == "approved"
        check(answer, grant["id"])
