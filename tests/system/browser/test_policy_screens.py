"""An approval policy on the grant screens (issue 22, D13), in Chromium with passkeys, against a real
``grantd serve`` configured with "two of sre, not the owner":

- a group member opens the approval page (a named approver: 404 before), sees the requirement
  "0 of 2" and who may still approve, approves; the page reloads showing "1 of 2", the vote (who,
  when, via web) and the grant still pending, and instead of buttons that would fail, why they may
  not vote again;
- the owner, excluded by the policy, sees "owner excluded" instead of the buttons;
- the inbox lists the grant for the second member with "1 of 2 approvals";
- with the policy panel, who/where and the buttons stay in the first viewport (390x844, 1280x800).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conftest import Server, enroll, sign_in
from system.browser.conftest import DESKTOP, PHONE, localhost_server, registration_url, shoot
from system.browser.test_grants_pages import request_grant

SRE = ["ann@policy.example", "ben@policy.example"]
OWNER = "own@policy.example"
CONFIG = f"""
[[groups]]
id = "sre"
members = [{", ".join(f'"{e}"' for e in SRE + [OWNER])}]

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
def policy_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = localhost_server(tmp_path_factory.mktemp("policy-site"), extra=CONFIG).start()
    yield server
    server.stop()


def _registered(server: Server, new_person: Any, email: str) -> Any:
    person = new_person(server, email)
    person.register(registration_url(server, email, name=email.split("@")[0].title()))
    return person


def test_votes_and_who_may_still_approve_on_the_approval_page(policy_site, new_person, tmp_path):
    ann, ben, owner = (_registered(policy_site, new_person, e) for e in (*SRE, OWNER))
    agent = enroll(policy_site, tmp_path / "keys", owner=OWNER, approver=OWNER)
    sign_in(policy_site, agent)
    grant = request_grant(policy_site, agent, ["systemctl", "restart", "nginx"], target_host="prod-db-1")
    assert grant["status"] == "pending"
    page = ann.page

    ann.goto(f"/grant-approval?grant_id={grant['id']}")
    panel = page.locator("[data-review]")
    assert "0 of 2" in panel.locator("[data-count]").inner_text()
    eligible = panel.locator("[data-eligible]").inner_text()
    assert SRE[0] in eligible and SRE[1] in eligible and OWNER not in eligible
    for label, size in (("phone", PHONE), ("desktop", DESKTOP)):  # the panel does not push the buttons away
        page.set_viewport_size(size)
        box = page.get_by_role("button", name="Approve").bounding_box()
        assert box is not None and box["y"] + box["height"] <= size["height"], (label, box)
    page.set_viewport_size(DESKTOP)

    page.get_by_role("button", name="Approve").click()
    page.locator("[data-refusal]").wait_for()  # the page reloaded after the vote
    assert page.locator("[data-grant-status]").get_attribute("data-grant-status") == "pending"
    assert "1 of 2" in page.locator("[data-review] [data-count]").inner_text()
    vote = page.locator("[data-vote=approve]").inner_text()
    assert SRE[0] in vote and "via web" in vote
    assert page.locator("[data-refusal]").inner_text() == "already reviewed"
    assert page.get_by_role("button", name="Approve").count() == 0
    shoot(ann, "grant-approval-policy-one-of-two")

    owner.goto(f"/grant-approval?grant_id={grant['id']}")
    assert owner.page.locator("[data-refusal]").inner_text() == "owner excluded"
    assert owner.page.get_by_role("button", name="Approve").count() == 0
    assert owner.page.get_by_role("button", name="Deny").count() == 0

    ben.goto("/grants")
    entry = ben.page.locator(f"[data-grant-id='{grant['id']}']")
    assert "1 of 2 approvals" in entry.inner_text()
    entry.locator("a.entry-link").click()
    ben.page.get_by_role("button", name="Approve").click()
    ben.page.locator("[data-decision]").wait_for()
    assert ben.page.locator("[data-grant-status]").get_attribute("data-grant-status") == "approved"
    assert "2 of 2" in ben.page.locator("[data-review] [data-count]").inner_text()
