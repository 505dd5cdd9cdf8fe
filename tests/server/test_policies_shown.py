"""What people see of an approval policy (issue 22, D13): the approval page shows the requirements,
the votes (who, when, via), who may still approve and, when the viewer may not vote, the reason
instead of buttons that would fail; a rule's decision names the rule. A group member whom a pinned
block names sees the grant in the lists (``GET /api/grants``, the /grants inbox). Real server, real
SQLite, real sessions."""

from __future__ import annotations

import contextlib
import html
import json
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
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

SRE = ["ann@sre.example", "ben@sre.example", "cat@sre.example"]
OWNER = "own@sre.example"
CONFIG = f"""
[[groups]]
id = "sre"
members = [{", ".join(f'"{e}"' for e in SRE + [OWNER])}]

[[rules]]
id = "journal-ro"
effect = "approve"
reason = "read-only journalctl is pre-approved (CHG-1234)"
match.argv = [["journalctl", "**"]]

[[policies]]
id = "prod-root"
match.target_host = ["prod-*"]
forbid = ["owner", "approver"]
[[policies.require]]
id = "sre"
groups = ["sre"]
approve = 2
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    yield from server_with_people(tmp_path_factory.mktemp("shown"), CONFIG, [*SRE, OWNER])


@pytest.fixture(scope="module")
def bot(srv: InProcessServer) -> tuple[dict[str, Any], str]:
    return enrol_agent(srv, owner=OWNER)


def page(srv: InProcessServer, email: str, grant_id: str) -> tuple[int, str]:
    with cookie_client(srv, start_session(srv, email)) as http:
        r = http.get("/grant-approval", params={"grant_id": grant_id})
    return r.status_code, html.unescape(r.text)


def test_a_group_member_opens_the_page_votes_and_sees_one_of_two(srv: InProcessServer, bot: Any) -> None:
    grant = request_grant(srv, bot[1], target_host="prod-db-1")
    status, text = page(srv, SRE[0], grant["id"])
    # Before: the page checked only "may decide by default" and answered 404 to a named approver.
    assert status == 200, text
    assert 'data-form="approve"' in text and 'data-form="deny"' in text
    assert "0 of 2" in text and SRE[1] in text and SRE[2] in text  # who may still approve
    assert OWNER not in text.split("data-eligible")[1].split("</td>")[0]  # the owner is excluded
    with cookie_client(srv, start_session(srv, SRE[0])) as http:
        r = http.post(f"/api/grants/{grant['id']}/approve", json={"reason": "checked"})
        assert r.status_code == 200 and r.json()["grant"]["status"] == "pending", r.text
    status, text = page(srv, SRE[0], grant["id"])
    assert status == 200 and 'data-grant-status="pending"' in text
    assert "1 of 2" in text and "(1 missing)" in text
    vote = text.split('data-vote="approve"')[1].split("</li>")[0]
    assert SRE[0] in vote and "via web" in vote and "checked" in vote
    # Having voted, no buttons that would answer 409: the reason instead.
    assert 'data-form="approve"' not in text and "already reviewed" in text
    eligible = text.split("data-eligible")[1].split("</td>")[0]
    assert SRE[0] not in eligible and SRE[1] in eligible
    status, text = page(srv, SRE[1], grant["id"])  # the next one still has the buttons
    assert 'data-form="approve"' in text and "1 of 2" in text


def test_the_owner_sees_why_they_may_not_vote_instead_of_buttons(srv: InProcessServer, bot: Any) -> None:
    grant = request_grant(srv, bot[1], target_host="prod-db-2")
    status, text = page(srv, OWNER, grant["id"])
    assert status == 200
    # Before: the owner got the approve/deny buttons (policy.may_decide) and a 403 on pressing them.
    assert 'data-form="approve"' not in text and 'data-form="deny"' not in text
    assert "owner excluded" in text.split("data-refusal")[1].split("</strong>")[0]
    with cookie_client(srv, start_session(srv, OWNER)) as http:  # the reason shown is the one the route gives
        r = http.post(f"/api/grants/{grant['id']}/approve", json={})
        assert r.status_code == 403 and r.json()["reason"] == "owner excluded"


def test_an_outsider_still_gets_404(srv: InProcessServer, bot: Any) -> None:
    grant = request_grant(srv, bot[1], target_host="prod-db-3")
    person, http = signed_in_person(srv)
    with http:
        r = http.get("/grant-approval", params={"grant_id": grant["id"]})
    assert r.status_code == 404 and grant["id"] not in r.text


def test_a_rule_decision_names_the_rule_and_its_reason(srv: InProcessServer, bot: Any) -> None:
    grant = request_grant(srv, bot[1], command=["journalctl", "-u", "nginx"])
    assert grant["status"] == "approved"
    status, text = page(srv, OWNER, grant["id"])
    assert status == 200
    assert "journal-ro" in text.split("data-rule")[1].split("</dd>")[0]
    assert "read-only journalctl is pre-approved (CHG-1234)" in text


def test_without_a_policy_the_owner_still_decides_with_buttons(srv: InProcessServer, bot: Any) -> None:
    grant = request_grant(srv, bot[1], target_host="web-9")
    status, text = page(srv, OWNER, grant["id"])
    assert status == 200 and 'data-form="approve"' in text and "data-review" not in text
    status, text = page(srv, SRE[0], grant["id"])  # not named by a policy, not the owner: nothing to see
    assert status == 404


def test_a_group_member_finds_the_grants_they_may_approve_in_the_lists(
    srv: InProcessServer, bot: Any
) -> None:
    mine = request_grant(srv, bot[1], target_host="prod-list-1")
    other = request_grant(srv, bot[1], target_host="web-list-1")  # the default policy: owner and admins only
    with cookie_client(srv, start_session(srv, SRE[2])) as http:
        # Before: only by id (GET /api/grants/:id); the lists held the caller's own scope only.
        listed = {g["id"] for g in http.get("/api/grants", params={"limit": 100}).json()["data"]}
        assert mine["id"] in listed and other["id"] not in listed
        pending = {
            g["id"]
            for g in http.get("/api/grants", params={"status": "pending", "limit": 100}).json()["data"]
        }
        assert mine["id"] in pending
        inbox = html.unescape(http.get("/grants").text)
        assert mine["id"] in inbox and other["id"] not in inbox
    _, outsider = signed_in_person(srv)
    with outsider:  # a person no block names sees neither
        listed = {g["id"] for g in outsider.get("/api/grants", params={"limit": 100}).json()["data"]}
        assert mine["id"] not in listed and other["id"] not in listed
    with (
        cookie_client(srv, start_session(srv, SRE[0])) as a,
        cookie_client(srv, start_session(srv, SRE[1])) as b,
    ):
        assert a.post(f"/api/grants/{mine['id']}/approve", json={}).status_code == 200
        assert b.post(f"/api/grants/{mine['id']}/approve", json={}).status_code == 200
    with cookie_client(srv, start_session(srv, SRE[2])) as http:  # decided: out of the pending list
        pending = {
            g["id"]
            for g in http.get("/api/grants", params={"status": "pending", "limit": 100}).json()["data"]
        }
        assert mine["id"] not in pending


def test_a_group_member_sees_the_grants_events(srv: InProcessServer, bot: Any) -> None:
    seen: queue.Queue[str] = queue.Queue()
    opened = threading.Event()
    stop = threading.Event()

    def follow() -> None:
        with (
            cookie_client(srv, start_session(srv, SRE[2])) as http,
            http.stream("GET", "/api/grants/events", timeout=httpx.Timeout(10, read=30)) as response,
        ):
            opened.set()
            for line in response.iter_lines():
                if stop.is_set():
                    return
                if line.startswith("data:"):
                    seen.put(json.loads(line[5:])["grant"]["id"])

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    assert opened.wait(10)
    time.sleep(0.3)
    hidden = request_grant(srv, bot[1], target_host="web-stream-1")
    shown = request_grant(srv, bot[1], target_host="prod-stream-1")
    ids = []
    deadline = time.monotonic() + 15
    while shown["id"] not in ids and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            ids.append(seen.get(timeout=0.5))
    stop.set()
    # Before: the stream asked only "may see by default" (per requester): the member saw nothing.
    assert shown["id"] in ids and hidden["id"] not in ids


def test_list_items_carry_review_and_approvals_as_the_grant_does(srv: InProcessServer, bot: Any) -> None:
    grant = request_grant(srv, bot[1], target_host="prod-items-1")
    plain = request_grant(srv, bot[1], target_host="web-items-1")
    with cookie_client(srv, start_session(srv, SRE[0])) as http:
        assert http.post(f"/api/grants/{grant['id']}/approve", json={}).status_code == 200
    with srv.admin() as admin:
        items = {g["id"]: g for g in admin.get("/api/grants", params={"limit": 100}).json()["data"]}
        for gid in (grant["id"], plain["id"]):
            one = admin.get(f"/api/grants/{gid}").json()
            assert items[gid]["review"] == one["review"] and items[gid]["approvals"] == one["approvals"]
    item = items[grant["id"]]
    assert (
        item["review"]["requirements"][0]["approvals"] == [SRE[0]] and item["approvals"][0]["sub"] == SRE[0]
    )
    assert items[plain["id"]]["review"]["policy_ids"] == [] and items[plain["id"]]["approvals"] == []
    with cookie_client(srv, start_session(srv, SRE[1])) as http:  # the inbox says how far it is
        inbox = html.unescape(http.get("/grants").text)
    row = inbox.split(f'data-grant-id="{grant["id"]}"')[1].split("</li>")[0]
    assert "1 of 2 approvals" in row


def test_a_deny_rule_s_decision_names_the_rule_on_the_page(tmp_path: Any) -> None:
    config = (
        CONFIG
        + """
[[rules]]
id = "no-rm"
effect = "deny"
reason = "rm -rf is never reviewed"
match.argv = [["rm", "-rf", "**"]]
"""
    )
    server = InProcessServer(tmp_path, extra=config).start()
    try:
        create_person(server, OWNER)
        _, token = enrol_agent(server, owner=OWNER)
        grant = request_grant(server, token, command=["rm", "-rf", "/"])
        assert grant["status"] == "denied"
        status, text = page(server, OWNER, grant["id"])
        assert status == 200 and "no-rm" in text.split("data-rule")[1].split("</dd>")[0]
        assert "rm -rf is never reviewed" in text and 'data-form="approve"' not in text
    finally:
        server.stop()
