"""Layout snapshots of the approver console (pytest-textual-snapshot), at 80x24 and 120x40.

The console is fed from a fixed list of grant dicts parsed by the same `Grant.from_json` the HTTP
client uses, with a frozen clock, so every run renders the same screen. (Everything that talks to a
server is tested against a real one in test_tui_live.py.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from grantd.client.sse import SseEvent
from grantd.tui.app import GrantConsole
from grantd.tui.client import BearerCredential, Decision
from grantd.tui.models import AgentInfo, Grant
from grantd.tui.signin import DeviceAuthorization, DeviceSignIn, SessionCredential, SessionFile, StoredSession

NOW = 1_795_000_000_000  # 2026-11-18 ... (frozen)
MIN = 60_000

GRANTS: list[dict[str, Any]] = [
    {
        "id": "g-0001-restart-nginx",
        "type": "command",
        "requester": "agent+deploy@example.com",
        "request": {
            "requester": "agent+deploy@example.com",
            "target_host": "web-1.example.com",
            "audience": "escapes",
            "grant_type": "once",
            "command": ["systemctl", "restart", "nginx"],
            "reason": "roll out release 2026.11",
            "run_as": "root",
            "cmd_hash": "sha256:8f14e45fceea167a5a36dedd4bea2543e3b2b8f1c8f3a0b4d5e6f708192a3b4c",
        },
        "status": "pending",
        "created_at": NOW - 2 * MIN,
        "decided_by": None,
        "decided_at": None,
        "expires_at": None,
        "used_at": None,
        "decision_reason": None,
        "delegation_id": None,
    },
    {
        "id": "g-0002-sneaky",
        "type": "command",
        "requester": "agent+ci@example.com",
        "request": {
            "requester": "agent+ci@example.com",
            "target_host": "db-2",
            "audience": "escapes",
            "grant_type": "timed",
            "duration": 3600,
            "command": ["sh", "-c", "echo ok\n\x1b[2Krm -rf /var/lib/db", "tab\there", "\u202eevil"],
            "reason": "cleanup\x1b[31m",
            "cmd_hash": "sha256:0c1d2e3f405162738495a6b7c8d9e0f10c1d2e3f405162738495a6b7c8d9e0f1",
        },
        "status": "pending",
        "created_at": NOW - 45_000,
        "decided_by": None,
        "decided_at": None,
        "expires_at": None,
        "used_at": None,
        "decision_reason": None,
        "delegation_id": None,
    },
    {
        "id": "g-0003-perms",
        "type": "permissions",
        "requester": "agent+reports@example.com",
        "request": {
            "requester": "agent+reports@example.com",
            "target_host": "bi.example.com",
            "audience": "reports-api",
            "grant_type": "always",
            "permissions": ["reports:read", "reports:export"],
            "reason": "nightly export",
        },
        "status": "pending",
        "created_at": NOW - 3 * 3600_000,
        "decided_by": None,
        "decided_at": None,
        "expires_at": None,
        "used_at": None,
        "decision_reason": None,
        "delegation_id": None,
    },
    {
        "id": "g-0000-earlier",
        "type": "command",
        "requester": "agent+deploy@example.com",
        "request": {
            "requester": "agent+deploy@example.com",
            "target_host": "web-1.example.com",
            "audience": "escapes",
            "grant_type": "once",
            "command": ["systemctl", "restart", "nginx"],
            "run_as": "root",
            "cmd_hash": "sha256:8f14e45fceea167a5a36dedd4bea2543e3b2b8f1c8f3a0b4d5e6f708192a3b4c",
        },
        "status": "consumed",
        "created_at": NOW - 2 * 86400_000,
        "decided_by": "alice@example.com",
        "decided_at": NOW - 2 * 86400_000 + MIN,
        "expires_at": None,
        "used_at": NOW - 2 * 86400_000 + 2 * MIN,
        "decision_reason": None,
        "delegation_id": None,
    },
]

AGENTS = {
    "agent+deploy@example.com": {
        "agent_id": "a-1",
        "email": "agent+deploy@example.com",
        "name": "Deploy bot",
        "owner": "alice@example.com",
        "approver": "ops@example.com",
        "status": "active",
    },
    "agent+ci@example.com": {
        "agent_id": "a-2",
        "email": "agent+ci@example.com",
        "name": "CI",
        "owner": "bob@example.com",
        "approver": "bob@example.com",
        "status": "active",
    },
    "agent+reports@example.com": {
        "agent_id": "a-3",
        "email": "agent+reports@example.com",
        "name": "Reports",
        "owner": "carol@example.com",
        "approver": "ops@example.com",
        "status": "active",
    },
}


class FixtureSource:
    """A read-only GrantSource over the fixed data above: lists answer, the event stream stays open and quiet."""

    base_url = "https://idp.example.com"

    def __init__(self) -> None:
        self.credential = BearerCredential("fixture-token", label="management token")
        self.grants = [Grant.from_json(g) for g in GRANTS]

    async def list_grants(
        self, *, status: str | None = None, requester: str | None = None, max_items: int = 1000
    ) -> list[Grant]:
        return [
            g
            for g in self.grants
            if (status is None or g.status == status) and (requester is None or g.requester == requester)
        ]

    async def get_grant(self, grant_id: str) -> Grant:
        return next(g for g in self.grants if g.id == grant_id)

    async def approve(
        self, grant_id: str, *, grant_type: str | None = None, duration: int | None = None
    ) -> Decision:
        raise AssertionError("snapshot tests do not decide")

    async def deny(self, grant_id: str, *, reason: str | None = None) -> Decision:
        raise AssertionError("snapshot tests do not decide")

    async def revoke(self, grant_id: str) -> Decision:
        raise AssertionError("snapshot tests do not decide")

    async def agent(self, ident: str) -> AgentInfo:
        return AgentInfo.from_json(AGENTS[ident])

    async def events(
        self, last_event_id: str | None = None, *, on_open: Callable[[], Awaitable[None]] | None = None
    ) -> AsyncIterator[SseEvent]:
        if on_open is not None:
            await on_open()
        await asyncio.Event().wait()
        yield SseEvent("never", "", None)  # pragma: no cover - unreachable

    async def aclose(self) -> None:
        return None


def make_app(theme: str | None = None) -> GrantConsole:
    return GrantConsole(FixtureSource(), clock=lambda: NOW, theme=theme)


async def settled(pilot: Any) -> None:
    """Wait until the list is loaded and the detail pane has its agent and earlier grants."""
    app = pilot.app
    for _ in range(200):
        await pilot.pause(0.02)
        main = app.main
        detail = main.query_one("#detail")
        if (
            main.initial_loaded
            and detail.grant is not None
            and detail.earlier is not None
            and detail.agent is not None
        ):
            return
    raise AssertionError("the console did not settle")


SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]


@pytest.mark.parametrize("size", SIZES)
def test_main_screen(snap_compare: Any, size: tuple[int, int]) -> None:
    """Pending grants, newest first; the hostile command is escaped in the list and the details."""
    assert snap_compare(make_app(), terminal_size=size, run_before=settled)


@pytest.mark.parametrize("size", SIZES)
def test_detail_pane(snap_compare: Any, size: tuple[int, int]) -> None:
    """Enter shows the selected grant's details full screen: argv one per line, owner/approver, history."""

    async def run_before(pilot: Any) -> None:
        await pilot.press("down")
        await settled(pilot)
        await pilot.press("enter")

    assert snap_compare(make_app(), terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_override_form(snap_compare: Any, size: tuple[int, int]) -> None:
    """o opens the approve-with-changes form over the list."""

    async def run_before(pilot: Any) -> None:
        await settled(pilot)
        await pilot.press("o")

    assert snap_compare(make_app(), terminal_size=size, run_before=run_before)


class WaitingSignIn(DeviceSignIn):
    """The device grant's first half only: a fixed code is shown, the approval never comes."""

    async def sign_in(self, show: Callable[[DeviceAuthorization], object], scope: str = "") -> StoredSession:
        show(
            DeviceAuthorization(
                "device-code",
                "BCDF-GHJK",
                f"{self.issuer}/device",
                f"{self.issuer}/device?user_code=BCDF-GHJK",
                600,
                5,
            )
        )
        await asyncio.Event().wait()
        raise AssertionError("unreachable")  # pragma: no cover


def person_app(tmp_path: Any, *, signed_in: bool) -> GrantConsole:
    source = FixtureSource()
    session = (
        StoredSession(source.base_url, "r", "a", 2**40, "pat@example.com", "Pat Example")
        if signed_in
        else None
    )
    source.credential = SessionCredential(
        WaitingSignIn(source.base_url), SessionFile(tmp_path / "session.json"), session
    )  # type: ignore[assignment]
    return GrantConsole(source, clock=lambda: NOW)


def test_sign_in_screen(snap_compare: Any, tmp_path: Any) -> None:
    """`grantd tui` without a session: the code and where to enter it, centred, at 80x24."""

    async def run_before(pilot: Any) -> None:
        for _ in range(100):
            await pilot.pause(0.02)
            if getattr(pilot.app.screen, "authorization", None) is not None:
                return

    assert snap_compare(person_app(tmp_path, signed_in=False), terminal_size=(80, 24), run_before=run_before)


def test_main_screen_of_a_person(snap_compare: Any, tmp_path: Any) -> None:
    """Signed in as a person: the header names them instead of "management token"."""
    assert snap_compare(person_app(tmp_path, signed_in=True), terminal_size=(80, 24), run_before=settled)


def test_main_screen_light_theme(snap_compare: Any) -> None:
    """The same screen in a light theme (only theme variables are used, so it stays readable)."""
    assert snap_compare(make_app(theme="textual-light"), terminal_size=(80, 24), run_before=settled)


NEWER = {
    **GRANTS[0],
    "id": "g-0004-arrived-later",
    "requester": "agent+intruder@example.com",
    "request": {
        **GRANTS[0]["request"],
        "requester": "agent+intruder@example.com",
        "command": ["rm", "-rf", "/srv"],
        "reason": "tidy",
    },
    "created_at": NOW - 1_000,
}


@pytest.mark.parametrize("size", SIZES)
def test_list_moved_under_the_cursor_asks_first(snap_compare: Any, size: tuple[int, int]) -> None:
    """A newer grant lands on the top row while the approver's cursor is on another one: `a` names
    the grant it would approve (the highlighted one, in the detail pane) and asks."""
    from grantd.tui.messages import GrantChanged

    async def run_before(pilot: Any) -> None:
        await settled(pilot)
        pilot.app.main.post_message(GrantChanged(Grant.from_json(NEWER), "event"))
        await pilot.pause(0.1)
        await pilot.press("a")
        await pilot.pause(0.1)

    assert snap_compare(make_app(), terminal_size=size, run_before=run_before)


def screen_text(app: GrantConsole) -> str:
    import io

    from rich.console import Console

    width, height = app.size
    console = Console(
        width=width,
        height=height,
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
        record=True,
        legacy_windows=False,
    )
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_footer_keeps_help_and_quit_and_the_header_counts_in_words(size: tuple[int, int]) -> None:
    async def check() -> list[str]:
        app = make_app()
        async with app.run_test(size=size) as pilot:
            await settled(pilot)
            # the footer lays its keys out after the first refresh; on a loaded machine that takes a while
            for _ in range(50):
                await pilot.pause(0.1)
                lines = screen_text(app).splitlines()
                footer = next((line for line in reversed(lines) if line.strip()), "")
                if "q Quit" in footer and "a Approve" in footer:
                    break
            return lines

    lines = asyncio.run(check())
    footer = next(line for line in reversed(lines) if line.strip())
    for key in ("a Approve", "d Deny", "/ Filter", "? Help", "q Quit"):
        assert key in footer, footer
    assert "Pending: 3 waiting" in lines[1]
