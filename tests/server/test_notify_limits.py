"""Push bombing and escalation (D15, issue 24): over a route's ``per_approver_limit`` the rest of
the window is held and sent as one digest; an approval policy's escalation levels reach their
``notify`` targets on the channels routed for that level, once across processes (the sweep's
conditional update writes the rows in its transaction)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from people_support import create_person, enrol_agent, fresh, request_grant, signed_in_person
from support.notify_doubles import SmtpSink

from server.test_notify_outbox import CHANNELS, mails_to, rows_of, wait_for


@pytest.fixture
def sink() -> Iterator[SmtpSink]:
    smtp = SmtpSink().start()
    yield smtp
    smtp.stop()


def _server(tmp_path: Any, sink: SmtpSink, extra: str) -> Any:
    from inproc import InProcessServer

    return InProcessServer(tmp_path / "srv", extra=CHANNELS.format(port=sink.port) + extra).start()


LIMITED = """
[[notify.routes]]
channels = ["mail"]
per_approver_limit = "2/min"
"""


def test_a_flood_to_one_approver_is_cut_at_the_limit_with_one_digest(tmp_path, sink):
    srv = _server(tmp_path, sink, LIMITED)
    try:
        owner, browser = signed_in_person(srv, fresh("owner"))
        _, token = enrol_agent(srv, owner=owner["email"])
        grants = [request_grant(srv, token, command=["ls", str(i)]) for i in range(5)]
        wait_for(lambda: len(mails_to(sink, owner["email"])) == 2)
        statuses = [
            [r["status"] for r in rows_of(srv, g["id"]) if r["recipient"] == owner["email"]] for g in grants
        ]
        assert [s[0] for s in statuses[2:]] == ["held", "held", "held"]
        shown = browser.get(f"/api/grants/{grants[4]['id']}/notifications").json()["data"]
        mine = [n for n in shown if n["recipient"] == owner["email"]]
        assert [(n["status"], n["digest"]) for n in mine] == [("pending", "held")]  # D15's statuses only
        srv.clock.advance(30)  # later in the same window: held too, for the same digest
        grants += [request_grant(srv, token, command=["ls", str(i)]) for i in range(5, 7)]
        srv.clock.advance(31)  # the window of the first held one has passed: everything held, one digest
        mails = wait_for(lambda: len(mails_to(sink, owner["email"])) == 3 and mails_to(sink, owner["email"]))
        digest = mails[2].message
        assert digest["Subject"] == "[grantd] 5 requests wait for your decision"
        body = digest.get_content()
        assert body.count("Waiting: ") == 5 and f"{srv.url}/grants" in body
        shown = browser.get(f"/api/grants/{grants[4]['id']}/notifications").json()["data"]
        mine = [n for n in shown if n["recipient"] == owner["email"]]
        assert [(n["status"], n["digest"]) for n in mine] == [("sent", "sent")]
        srv.clock.advance(61)
        srv.call(srv.app.ctx.services.store.notify.release_held(srv.clock.now_ms(), 10))  # nothing left
        assert len(mails_to(sink, owner["email"])) == 3
    finally:
        srv.stop()


def test_escalation_levels_reach_their_targets(tmp_path, sink):
    lead = fresh("lead")
    policy = f"""
[[groups]]
id = "leads"
members = ["{lead}"]

[[policies]]
id = "web"
match.target_host = ["web-*"]
[[policies.require]]
id = "owner"
groups = ["@owner"]
approve = 1
[[policies.escalate]]
after = "10m"
notify = ["leads"]

[[notify.routes]]
match.policies = ["web"]
match.levels = [1]
channels = ["mail"]
"""
    srv = _server(tmp_path, sink, policy)
    try:
        create_person(srv, lead)
        owner = create_person(srv, fresh("owner"))
        _, token = enrol_agent(srv, owner=owner["email"])
        grant = request_grant(srv, token)
        wait_for(lambda: mails_to(sink, owner["email"]))
        assert mails_to(sink, lead) == []  # not yet: level 0 goes to the eligible approvers
        srv.clock.advance(601)
        from grantd.services.grant_sweeps import sweep_reviews

        srv.call(sweep_reviews(srv.services))  # the expiry sweep's step; every process runs it
        assert srv.call(sweep_reviews(srv.services)) == 0  # a level happens once
        (mail,) = wait_for(lambda: mails_to(sink, lead))
        assert mail.message["Subject"].startswith("[grantd] Still waiting (level 1)")
        rows = [(r["recipient"], r["kind"], r["level"]) for r in rows_of(srv, grant["id"])]
        assert (lead, "escalated", 1) in rows and rows.count((lead, "escalated", 1)) == 1
    finally:
        srv.stop()
