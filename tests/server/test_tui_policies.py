"""The console under an approval policy (issue 22, D13), driven with Pilot against a real in-process
server with real SQLite: the list marks a partially approved grant "1/2", the detail pane shows the
requirement, the votes (who, when, via) and who may still approve (GET /api/grants/:id/reviewers,
read in a worker), a vote that does not decide leaves the grant pending, and a refused vote shows the
server's reason from its problem body, escaped."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from inproc import InProcessServer
from people_support import enrol_agent, request_grant, server_with_people

from grantd.tui.app import GrantConsole
from grantd.tui.client import BearerCredential, GrantdClient
from grantd.tui.widgets.grant_detail import GrantDetail
from grantd.tui.widgets.grant_table import GrantTable

pytestmark = pytest.mark.anyio

SRE = ["ann@tui.example", "ben@tui.example", "cat@tui.example"]
OWNER = "own@tui.example"
CONFIG = f"""
[[groups]]
id = "sre"
members = [{", ".join(f'"{e}"' for e in SRE + [OWNER])}]

[[policies]]
id = "prod"
match.target_host = ["prod-*"]
forbid = ["owner", "approver"]
[[policies.require]]
id = "sre"
groups = ["sre"]
approve = 2
"""
SIZE = (140, 45)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    yield from server_with_people(tmp_path_factory.mktemp("tui-policies"), CONFIG, [*SRE, OWNER])


@pytest.fixture(scope="module")
def bot(srv: InProcessServer) -> tuple[dict[str, Any], str]:
    return enrol_agent(srv, owner=OWNER)


def person_token(srv: InProcessServer, email: str) -> str:
    """An API access token of the person, as the console's sign-in gets one (a refresh family)."""
    person = srv.call(srv.services.store.people.get(email))
    now = srv.clock.now_ms()
    family = f"rtf_tui_{person['person_id']}_{now}"
    srv.call(
        srv.services.store.refresh_tokens.create(
            {
                "token_hash": family,
                "family_id": family,
                "client_id": "apes-cli",
                "person_id": person["person_id"],
                "scope": "openid",
                "auth_time": now // 1000,
                "created_at": now,
                "expires_at": now + 86_400_000,
                "used_at": None,
                "revoked_at": None,
            }
        )
    )
    return str(
        srv.call(
            srv.services.tokens.mint_access(
                person, client_id="apes-cli", api_access=True, scope="openid", sid=family, ttl=3600
            )
        )
    )


def console(srv: InProcessServer, email: str) -> GrantConsole:
    return GrantConsole(
        GrantdClient(srv.url, BearerCredential(person_token(srv, email))), backoff=(0.2, 0.5, 1.0)
    )


async def wait_for(pilot: Any, predicate: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.02)


def detail_text(app: GrantConsole) -> str:
    return app.main.query_one(GrantDetail).render_text().plain


def status_cell(app: GrantConsole, grant_id: str) -> str:
    table = app.main.query_one(GrantTable)
    return str(table.get_cell(grant_id, "status"))


async def open_grant(pilot: Any, grant_id: str) -> None:
    app = pilot.app
    await wait_for(
        pilot,
        lambda: app.main.initial_loaded and app.main.query_one(GrantTable).shown(grant_id),
        "the grant's row",
    )
    assert app.main.query_one(GrantTable).select(grant_id)
    await pilot.pause()


async def test_a_vote_shows_one_of_two_and_who_may_still_approve(srv: InProcessServer, bot: Any) -> None:
    grant = request_grant(srv, bot[1], target_host="prod-tui-1", run_as="deploy")
    app = console(srv, SRE[0])
    async with app.run_test(size=SIZE) as pilot:
        # Before: the console listed only the person's own scope and drew no review at all.
        await open_grant(pilot, grant["id"])
        assert status_cell(app, grant["id"]) == "pend 0/2"
        await wait_for(
            pilot,
            lambda: "May approve" in detail_text(app) and "loading" not in detail_text(app),
            "who may still approve",
        )
        text = detail_text(app)
        assert "Policy      prod" in text and "0 of 2 approvals for prod/sre" in text
        may = text.split("May approve")[1]
        assert SRE[0] in may and SRE[1] in may and OWNER not in may and "(2 missing)" in may
        await pilot.press("a")
        await wait_for(pilot, lambda: status_cell(app, grant["id"]) == "pend 1/2", "the list's 1/2")
        await wait_for(pilot, lambda: "1 of 2 approvals" in detail_text(app), "the detail's 1 of 2")
        await wait_for(pilot, lambda: "(1 missing)" in detail_text(app), "the reviewers read again")
        text = detail_text(app)
        assert f"Approved    by {SRE[0]}" in text and "via tui" in text
        assert SRE[0] not in text.split("May approve")[1]
        assert app.main.query_one(GrantTable).shown(grant["id"]).status == "pending"  # type: ignore[union-attr]
    with srv.admin() as admin:
        shown = admin.get(f"/api/grants/{grant['id']}").json()
    assert shown["status"] == "pending" and shown["approvals"][0]["via"] == "tui"


async def test_a_refused_vote_shows_the_reason_from_the_problem(srv: InProcessServer, bot: Any) -> None:
    grant = request_grant(srv, bot[1], target_host="prod-tui-2", run_as="deploy")
    app = console(srv, OWNER)
    notes: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        app.main.notify = lambda message, **kw: notes.append(str(message))  # type: ignore[method-assign]
        await open_grant(pilot, grant["id"])
        await pilot.press("a")
        await wait_for(pilot, lambda: any("owner excluded" in n for n in notes), "the refusal's reason")
        assert app.main.query_one(GrantTable).shown(grant["id"]).status == "pending"  # type: ignore[union-attr]


def test_a_review_s_strings_are_drawn_escaped() -> None:
    """A hostile server (or a config typo) cannot put terminal escapes into the pane through the review."""
    from grantd.tui.models import Grant, Reviewers

    evil = "x\x1b[2J\u202e@e.com"
    grant = Grant.from_json(
        {
            "id": "g1",
            "requester": "bot@e.com",
            "status": "pending",
            "created_at": 1,
            "request": {"target_host": "prod-1", "audience": "a", "grant_type": "once", "command": ["ls"]},
            "review": {
                "policy_ids": [evil],
                "requirements": [
                    {"id": evil, "approve": 2, "deny": 1, "approvals": [evil], "denials": [evil]}
                ],
            },
            "approvals": [{"sub": evil, "at": 1000, "via": evil, "requirement": evil}],
        }
    )
    assert grant.quorum == "1/2"
    pane = GrantDetail()
    pane.grant, pane.now_ms = grant, 2000
    pane.reviewers = Reviewers.from_json(
        {
            "requirements": [
                {
                    "id": evil,
                    "approve": 2,
                    "deny": 1,
                    "approvals": [],
                    "denials": [],
                    "missing": 1,
                    "eligible": [{"email": evil, "name": evil}],
                }
            ]
        }
    )
    text = pane.render_text().plain
    assert "\x1b" not in text and "\u202e" not in text
    assert "x\\x1b[2J\\u202e@e.com" in text
    assert text.count("x\\x1b[2J") >= 6  # policy, requirement, denial, vote and its via, who may approve
