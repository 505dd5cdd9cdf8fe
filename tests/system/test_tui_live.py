"""The approver console driven with Pilot against real grantd servers (grants requested over HTTP by real agents)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from textual.widgets import Static

from grantd.tui.app import GrantConsole
from grantd.tui.cli import resolve_connection
from grantd.tui.client import BearerCredential, GrantdClient, ManagementTokenCredential
from grantd.tui.models import Grant
from grantd.tui.screens.confirm import ConfirmScreen
from grantd.tui.screens.deny import DenyScreen
from grantd.tui.screens.override import OverrideScreen
from grantd.tui.widgets.connection_status import ConnectionStatus
from grantd.tui.widgets.grant_detail import GrantDetail
from grantd.tui.widgets.grant_table import GrantTable

from conftest import Agent, Server, signed_in

pytestmark = pytest.mark.anyio

COMMAND = ["systemctl", "restart", "nginx"]
SIZE = (120, 40)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def console_for(server: Server, *, credential: Any = None, **kwargs: Any) -> GrantConsole:
    client = GrantdClient(
        server.url,
        credential or ManagementTokenCredential.from_file(server.directory / "management-token"),
        **{k: kwargs.pop(k) for k in ("events_path",) if k in kwargs},
    )
    kwargs.setdefault("backoff", (0.2, 0.5, 1.0))
    return GrantConsole(client, **kwargs)


async def wait_for(pilot: Any, predicate: Callable[[], object], what: str, timeout: float = 30.0) -> float:
    """Let the app run until `predicate()` holds; returns the seconds it took."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.01)
    return time.monotonic() - start


def mode(app: GrantConsole) -> str:
    return app.main.query_one(ConnectionStatus).state.mode


def row(app: GrantConsole, grant_id: str) -> Grant | None:
    return app.main.query_one(GrantTable).shown(grant_id)


async def request_grant(server: Server, agent: Agent, **fields: Any) -> dict[str, Any]:
    body = {"target_host": "web-1", "audience": "escapes", "command": COMMAND, "reason": "deploy", **fields}
    async with httpx.AsyncClient(
        base_url=server.url, headers={"Authorization": f"Bearer {agent.token}"}, timeout=20
    ) as http:
        r = await http.post("/api/grants", json=body)
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


async def server_grant(server: Server, grant_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(
        base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout=20
    ) as http:
        r = await http.get(f"/api/grants/{grant_id}")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def admin_post(server: Server, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(
        base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout=20
    ) as http:
        return await http.post(path, json=body or {})


async def live(pilot: Any) -> None:
    await wait_for(
        pilot, lambda: mode(pilot.app) == "live" and pilot.app.main.initial_loaded, "the event stream"
    )


async def select(pilot: Any, grant_id: str) -> None:
    await wait_for(pilot, lambda: row(pilot.app, grant_id) is not None, f"row {grant_id}")
    assert pilot.app.main.query_one(GrantTable).select(grant_id)
    await pilot.pause()


async def test_requested_grant_appears_within_a_second_and_a_approves(server: Server, agent: Agent) -> None:
    app = console_for(server, bell=True)
    rings: list[int] = []
    app.bell = lambda: rings.append(1)  # type: ignore[method-assign]  # a headless terminal has no bell to hear
    async with app.run_test(size=SIZE) as pilot:
        await live(pilot)
        grant = await request_grant(server, agent)
        took = await wait_for(pilot, lambda: row(app, grant["id"]) is not None, "the new grant's row")
        assert took < 1.0, f"the grant took {took:.2f}s to appear"
        assert grant["id"] in app.main.new_ids  # highlighted as new
        assert rings == [1]

        await select(pilot, grant["id"])
        await pilot.press("a")
        await wait_for(pilot, lambda: row(app, grant["id"]).status == "approved", "the approved row")  # type: ignore[union-attr]
        assert (await server_grant(server, grant["id"]))["status"] == "approved"
        assert grant["id"] not in app.main.new_ids


async def test_d_denies_with_a_reason(server: Server, agent: Agent) -> None:
    app = console_for(server)
    async with app.run_test(size=SIZE) as pilot:
        await live(pilot)
        grant = await request_grant(server, agent)
        await select(pilot, grant["id"])
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, DenyScreen), "the deny form")
        await pilot.press(*"not today", "enter")
        await wait_for(pilot, lambda: row(app, grant["id"]).status == "denied", "the denied row")  # type: ignore[union-attr]
        stored = await server_grant(server, grant["id"])
        assert stored["status"] == "denied"
        assert stored["decision_reason"] == "not today"


async def test_override_form_approves_timed_with_a_duration(server: Server, agent: Agent) -> None:
    app = console_for(server)
    async with app.run_test(size=SIZE) as pilot:
        await live(pilot)
        grant = await request_grant(server, agent)  # asks for "once"
        await select(pilot, grant["id"])
        await pilot.press("o")
        await wait_for(pilot, lambda: isinstance(app.screen, OverrideScreen), "the override form")
        await pilot.press("down")  # once -> timed
        await pilot.press("tab", *"15m", "enter")  # tab selects the prefilled duration; typing replaces it
        await wait_for(pilot, lambda: row(app, grant["id"]).status == "approved", "the approved row")  # type: ignore[union-attr]
        stored = await server_grant(server, grant["id"])
        assert stored["status"] == "approved"
        assert stored["request"]["grant_type"] == "timed"
        assert stored["request"]["duration"] == 900
        assert stored["expires_at"] - stored["decided_at"] == pytest.approx(900_000, abs=2_000)


async def test_grant_decided_elsewhere_updates_the_row_and_a_late_decision_says_so(
    server: Server, agent: Agent
) -> None:
    app = console_for(server)
    async with app.run_test(size=SIZE) as pilot:
        await live(pilot)
        grant = await request_grant(server, agent)
        await select(pilot, grant["id"])
        stale = row(app, grant["id"])
        assert stale is not None and stale.is_pending

        r = await admin_post(server, f"/api/grants/{grant['id']}/approve")
        assert r.status_code == 200, r.text
        await wait_for(pilot, lambda: row(app, grant["id"]).status == "approved", "the row to show approved")  # type: ignore[union-attr]
        assert row(app, grant["id"]).decided_by is not None  # type: ignore[union-attr]

        # `a` on a row that is no longer pending is refused locally ...
        await pilot.press("a")
        await wait_for(
            pilot, lambda: any("Only pending" in n.message for n in app._notifications), "a local refusal"
        )
        # ... and a decision sent with a stale view (someone else was faster) reports the server's 400.
        r = await admin_post(server, f"/api/grants/{grant['id']}/revoke")
        assert r.status_code == 200, r.text
        app.main.decide(stale, "deny")
        await wait_for(
            pilot, lambda: any("already decided" in n.message for n in app._notifications), "the 400 notice"
        )
        await wait_for(pilot, lambda: row(app, grant["id"]).status == "revoked", "the re-read row")  # type: ignore[union-attr]


async def test_history_filter_and_detail_pane(server: Server, tmp_path: Path) -> None:
    requester = signed_in(
        server, tmp_path / "keys", owner="owner@example.com", approver="approver@example.com"
    )
    hostile = ["sh", "-c", "echo ok\n\x1b[2Krm -rf /", "\u202eevil"]
    app = console_for(server)
    async with app.run_test(size=SIZE) as pilot:
        await live(pilot)
        first = await request_grant(server, requester, command=hostile)
        assert (
            await admin_post(server, f"/api/grants/{first['id']}/deny", {"reason": "no"})
        ).status_code == 200
        second = await request_grant(server, requester, command=hostile, run_as="root")
        await select(pilot, second["id"])
        detail = app.main.query_one(GrantDetail)
        await wait_for(
            pilot, lambda: detail.agent is not None and detail.earlier is not None, "the detail context"
        )
        assert detail.agent is not None and detail.agent.owner == "owner@example.com"
        assert detail.agent.approver == "approver@example.com"
        assert [g.id for g in detail.earlier or []] == [first["id"]]
        shown = detail.render_text().plain
        assert '[2] "echo ok\\n\\x1b[2Krm -rf /"' in shown and '[3] "\\u202eevil"' in shown
        assert "\x1b" not in shown and "\u202e" not in shown
        assert second["request"]["cmd_hash"] in shown if "cmd_hash" in second.get("request", {}) else True
        assert "owner@example.com" in shown and "root" in shown

        # history: decided grants only; the text filter narrows by requester
        await pilot.press("h")
        await wait_for(pilot, lambda: row(app, first["id"]) is not None, "the denied grant in the history")
        assert row(app, second["id"]) is None
        await pilot.press("slash", *requester.email.split("@")[0], "enter")
        table = app.main.query_one(GrantTable)
        assert set(table.grant_ids_in_order()) == {first["id"]}
        await pilot.press("slash", *"no-such-agent", "enter")  # focusing the filter selects its text
        assert table.row_count == 0
        await pilot.press("slash", "backspace", "enter", "h")
        await wait_for(pilot, lambda: row(app, second["id"]) is not None, "the pending view again")


async def test_server_restart_reconnects_and_nothing_is_lost(server_factory: Any, tmp_path: Path) -> None:
    srv = server_factory("restart").start()
    requester = signed_in(srv, tmp_path / "keys")
    app = console_for(srv)
    async with app.run_test(size=SIZE) as pilot:
        await live(pilot)
        before = await request_grant(srv, requester)
        await wait_for(pilot, lambda: row(app, before["id"]) is not None, "the first grant")
        assert app.main.feed.last_event_id is not None

        await asyncio.to_thread(srv.stop)
        await wait_for(pilot, lambda: mode(app) in ("reconnecting", "offline"), "the console to notice")
        await asyncio.to_thread(srv.start)
        # Requested as soon as the server is back, probably before the console has reconnected.
        after = await request_grant(srv, requester)
        await wait_for(
            pilot,
            lambda: row(app, after["id"]) is not None,
            "the grant requested after the restart",
            timeout=60,
        )
        await wait_for(pilot, lambda: mode(app) == "live", "live again")
        assert row(app, before["id"]) is not None

        await select(pilot, after["id"])
        await pilot.press("a")
        await wait_for(pilot, lambda: row(app, after["id"]).status == "approved", "the approval")  # type: ignore[union-attr]
        assert (await server_grant(srv, after["id"]))["status"] == "approved"


async def test_polls_when_the_event_stream_is_unavailable(server: Server, agent: Agent) -> None:
    # A real 404 from our server stands for a server (or proxy) without the event stream.
    app = console_for(server, events_path="/api/no-grant-event-stream", poll_interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: mode(app) == "polling", "polling mode")
        grant = await request_grant(server, agent)
        await wait_for(pilot, lambda: row(app, grant["id"]) is not None, "the polled grant")


async def test_a_wrong_credential_is_shown_not_retried_silently(server: Server) -> None:
    app = console_for(server, credential=BearerCredential("not-the-token"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: mode(app) == "unauthorised", "the unauthorised state")
        assert "401" in app.main.query_one(ConnectionStatus).state.detail


def test_cli_reads_url_and_token_from_the_config(server: Server, tmp_path: Path) -> None:
    import argparse

    args = argparse.Namespace(url=None, config=str(server.config_path), token_file=None)
    assert resolve_connection(args) == (server.url, server.token)
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    args = argparse.Namespace(url="http://elsewhere:1", config=None, token_file=token_file)
    assert resolve_connection(args) == ("http://elsewhere:1", "from-file")
    result = server.grantd("tui", "--help")
    assert "--token-file" in result.stdout and "--token " not in result.stdout
    assert "--management-token" in result.stdout and "--session-file" in result.stdout
    env = {k: v for k, v in server.env.items() if k != "GRANTD_CONFIG"}
    result = subprocess.run(
        [*server.command, "tui", "--url", server.url, "--management-token"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "no credential" in result.stderr
    env = {k: v for k, v in env.items() if k not in ("GRANTD_ISSUER", "GRANTD_SESSION_FILE")}
    result = subprocess.run(
        [*server.command, "tui", "--session-file", str(tmp_path / "none.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "no server" in result.stderr


def test_cli_acts_as_a_person_by_default(tmp_path: Path) -> None:
    """No --management-token/--token-file: the console uses the person's stored session (or signs them in)."""
    import argparse

    from grantd.tui.cli import person_credential, resolve_person
    from grantd.tui.signin import SessionCredential, SessionFile, StoredSession

    session_file = tmp_path / "grantd" / "session.json"
    SessionFile(session_file).save(
        StoredSession("http://idp.test:1", "r", "a", 1, "pat@example.com", "Pat Example")
    )
    args = argparse.Namespace(url=None, config=None, session_file=session_file)
    connection = resolve_person(args)  # no config in tmp_path: the stored session names the server
    assert connection.url == "http://idp.test:1" and connection.token is None
    credential = person_credential(connection.url, session_file)
    assert isinstance(credential, SessionCredential) and credential.label == "Pat Example <pat@example.com>"
    other = person_credential("http://elsewhere.test:2", session_file)  # another server: sign in there
    assert isinstance(other, SessionCredential) and other.session is None


async def test_the_console_signs_a_person_in_with_the_device_grant(tmp_path: Path) -> None:
    """No stored session: the sign-in screen shows the code and URL; once a person approves it (over
    HTTP here, in Chromium in tests/system/browser/test_device_tui.py), the header names them and the list
    holds what they may decide, and its decisions are recorded under them."""
    from inproc import InProcessServer
    from people_support import create_person, enrol_agent, start_session
    from people_support import request_grant as person_agent_grant

    from grantd.tui.screens.main import MainScreen
    from grantd.tui.screens.signin import SignInScreen
    from grantd.tui.signin import DeviceSignIn, SessionCredential, SessionFile

    srv = await asyncio.to_thread(lambda: InProcessServer(tmp_path / "srv").start())
    try:
        person = await asyncio.to_thread(create_person, srv, None, name="Pat Example")
        cookie = await asyncio.to_thread(start_session, srv, person["email"])
        _, mine = await asyncio.to_thread(enrol_agent, srv, owner=person["email"])
        other_owner = await asyncio.to_thread(create_person, srv)
        _, foreign = await asyncio.to_thread(enrol_agent, srv, owner=other_owner["email"])

        async def wait_on_server_clock(seconds: float) -> None:
            srv.clock.advance(seconds)  # the server's clock moves as far as the console waits
            await asyncio.sleep(0.2)  # (a little real time too: 600 s of codes last 24 s here)

        store = SessionFile(tmp_path / "cfg" / "session.json")
        credential = SessionCredential(DeviceSignIn(srv.url, sleep=wait_on_server_clock), store)
        app = GrantConsole(GrantdClient(srv.url, credential), backoff=(0.2, 0.5, 1.0))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(
                pilot,
                lambda: isinstance(app.screen, SignInScreen) and app.screen.authorization is not None,
                "the code on the sign-in screen",
            )
            screen = app.screen
            assert isinstance(screen, SignInScreen) and screen.authorization is not None
            code = screen.authorization.user_code
            assert code in str(screen.query_one("#signin-code", Static).render())
            assert f"{srv.url}/device" in str(screen.query_one("#signin-url", Static).render())
            async with httpx.AsyncClient(base_url=srv.url, cookies={"grantd_session": cookie}) as browser:
                # Denied first: the screen says so and offers r, which starts over with a new code.
                r = await browser.post("/api/device/decide", json={"user_code": code, "approve": False})
                assert r.status_code == 200, r.text
                await wait_for(pilot, lambda: screen.error is not None, "the denial on the sign-in screen")
                assert "denied" in str(screen.query_one("#signin-state", Static).render())
                await pilot.press("r")
                await wait_for(
                    pilot,
                    lambda: screen.authorization is not None and screen.authorization.user_code != code,
                    "a new code",
                )
                code = screen.authorization.user_code  # type: ignore[union-attr]
                r = await browser.post("/api/device/decide", json={"user_code": code, "approve": True})
            assert r.status_code == 200, r.text

            await wait_for(
                pilot,
                lambda: isinstance(app.screen, MainScreen) and app.screen.initial_loaded,
                "the main screen",
            )
            await live(pilot)
            header = str(app.main.query_one("#server-label", Static).render())
            assert f"Pat Example <{person['email']}>" in header
            assert store.load() is not None and store.load().email == person["email"]  # type: ignore[union-attr]

            own = await asyncio.to_thread(person_agent_grant, srv, mine)
            other = await asyncio.to_thread(person_agent_grant, srv, foreign)
            await select(pilot, own["id"])
            await pilot.press("a")
            await wait_for(pilot, lambda: row(app, own["id"]).status == "approved", "the approval")  # type: ignore[union-attr]
            decided = await server_grant(srv, own["id"])  # type: ignore[arg-type]
            assert decided["decided_by"] == person["email"]
            await pilot.press("R")
            await pilot.pause(0.3)
            assert other["id"] not in app.main.grants  # not theirs to decide: the server never sent it

        # Started again, the console reuses the stored session: straight to the list, as the person.
        again = GrantConsole(
            GrantdClient(srv.url, SessionCredential(DeviceSignIn(srv.url), store, store.load()))
        )
        async with again.run_test(size=SIZE) as pilot:
            assert isinstance(again.screen, MainScreen)
            await live(pilot)
            assert f"Pat Example <{person['email']}>" in str(
                again.main.query_one("#server-label", Static).render()
            )
    finally:
        await asyncio.to_thread(srv.stop)


# -- what a newcomer tripped over (issue 13) -------------------------------------------------------


def summary(app: GrantConsole) -> str:
    return str(app.main.query_one("#view-summary", Static).render())


async def test_the_counters_say_what_they_count(server_factory: Any, tmp_path: Path) -> None:
    """Both pending grants decided: the header must not still say "Pending 2/2"."""
    server = server_factory("counters").start()
    requester = signed_in(server, tmp_path / "keys")
    app = console_for(server)
    async with app.run_test(size=SIZE) as pilot:
        await live(pilot)
        first = await request_grant(server, requester, command=["true", "1"])
        second = await request_grant(server, requester, command=["true", "2"])
        await wait_for(
            pilot,
            lambda: row(app, second["id"]) is not None and row(app, first["id"]) is not None,
            "both rows",
        )
        await wait_for(pilot, lambda: "Pending: 2 waiting " in summary(app), "two waiting")
        for grant in (first, second):
            await select(pilot, grant["id"])  # the approver's own cursor move: `a` acts at once
            await pilot.press("a")
            await wait_for(pilot, lambda g=grant: row(app, g["id"]).status == "approved", "the approved row")  # type: ignore[union-attr]
        # the decided rows stay in view until R, and the header says so instead of "2/2"
        await wait_for(
            pilot,
            lambda: "Pending: 0 waiting · 2 just decided" in summary(app),
            "the counters after deciding",
        )
        assert "2/2" not in summary(app)
        await pilot.press("h")
        await wait_for(pilot, lambda: "Decided: 2 grants " in summary(app), "the history count")


async def test_escape_clears_the_text_filter_so_it_does_not_follow_into_history(
    server: Server, agent: Agent
) -> None:
    app = console_for(server)
    async with app.run_test(size=SIZE) as pilot:
        await live(pilot)
        decided = await request_grant(server, agent, command=["true", "filtered"])
        assert (await admin_post(server, f"/api/grants/{decided['id']}/deny")).status_code == 200
        pending = await request_grant(server, agent)
        await wait_for(pilot, lambda: row(app, pending["id"]) is not None, "the pending row")
        table = app.main.query_one(GrantTable)

        # "/" + text + escape: the filter is gone (not just the focus), in this view and the next
        await pilot.press("slash", *"no-such-thing")
        assert table.row_count == 0 and "0 match" in summary(app)
        await pilot.press("escape")
        await pilot.pause()
        assert app.main.text_filter == "" and app.main.query_one("#filter").value == ""  # type: ignore[attr-defined]
        assert app.focused is table and row(app, pending["id"]) is not None
        await pilot.press("h")
        await wait_for(pilot, lambda: row(app, decided["id"]) is not None, "the history, unfiltered")
        assert "match" not in summary(app)

        # enter keeps a filter (shown in the header as "… match"); escape on the list clears it
        await pilot.press("slash", *"no-such-thing", "enter")
        assert app.focused is table and table.row_count == 0 and "· 0 match" in summary(app)
        await pilot.press("escape")
        await pilot.pause()
        assert app.main.text_filter == "" and row(app, decided["id"]) is not None


async def test_a_grant_arriving_above_the_cursor_cannot_be_approved_by_mistake(
    server_factory: Any, tmp_path: Path
) -> None:
    """The cursor stays on the grant the approver chose when a newer one lands on the top row; `a`
    then names that grant and asks, so a key pressed while looking at the new top row approves nothing."""
    server = server_factory("above").start()
    agent = signed_in(server, tmp_path / "keys")
    app = console_for(server)
    async with app.run_test(size=SIZE) as pilot:
        await live(pilot)
        older = await request_grant(server, agent, command=["systemctl", "restart", "older"])
        await wait_for(pilot, lambda: row(app, older["id"]) is not None, "the older grant's row")
        table = app.main.query_one(GrantTable)
        await pilot.press("up")  # the approver's own key on the top row: the older grant, the only one so far
        await pilot.pause()
        assert table.selected_id == older["id"] and table.cursor_row == 0 and not table.shifted

        newer = await request_grant(server, agent, command=["rm", "-rf", "/srv/newer"])
        await wait_for(pilot, lambda: row(app, newer["id"]) is not None, "the new grant's row")
        await pilot.pause()
        assert table.grant_ids_in_order()[0] == newer["id"]  # newest first: it took the top row
        assert table.selected_id == older["id"]  # the selection stayed on the same grant id ...
        assert app.main.query_one(GrantDetail).grant.id == older["id"]  # type: ignore[union-attr]  # ... shown in the detail pane
        assert table.shifted

        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        question = str(app.screen.query_one(Static).render())
        assert "restart older" in question and older["id"] in question and "newer" not in question
        await pilot.press("n")
        await pilot.pause()
        assert (await server_grant(server, older["id"]))["status"] == "pending"
        assert (await server_grant(server, newer["id"]))["status"] == "pending"

        # asked and answered: now `a` acts at once, on the grant in the detail pane, and only on it
        await pilot.press("a")
        await wait_for(pilot, lambda: row(app, older["id"]).status == "approved", "the approved row")  # type: ignore[union-attr]
        assert (await server_grant(server, newer["id"]))["status"] == "pending"

        # moving the cursor yourself means you chose: no question
        await pilot.press("up")  # the older grant is the second row: up goes to the newer one
        await pilot.pause()
        assert table.selected_id == newer["id"] and not table.shifted
        await pilot.press("a")
        await wait_for(pilot, lambda: row(app, newer["id"]).status == "approved", "the second approval")
        assert not isinstance(app.screen, ConfirmScreen)
