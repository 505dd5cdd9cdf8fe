"""The approver console with Pilot (`run_test()`): blank and look-alike characters (issue 19 item 8),
and what issue 20 item 9 found: "root (default)", a worded disconnected state with the time since,
columns that keep the target at 80 columns and widen the command at 120, and the opt-in
confirmation before approving a command that runs as root (`--confirm-root`).

The console is fed by the fixed GrantSource of the snapshot tests (a server is in test_tui_live.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from textual.widgets.data_table import ColumnKey

from grantd.core.display import is_hidden
from grantd.tui.app import GrantConsole
from grantd.tui.client import Decision
from grantd.tui.messages import ConnectionChanged, ConnectionState
from grantd.tui.models import AgentInfo, Grant
from grantd.tui.screens.confirm import ConfirmScreen
from grantd.tui.widgets.connection_status import ConnectionStatus
from grantd.tui.widgets.grant_table import ACTION_MIN, GrantTable, column_widths

from unit.test_display import BLANKS, HOMOGLYPH
from unit.test_tui_snapshots import GRANTS, NOW, FixtureSource, screen_text, settled

LOOK_ALIKE = {
    **GRANTS[0],
    "id": "g-0005-look-alikes",
    "requester": "agent+deploy@example.com",
    "request": {
        **GRANTS[0]["request"],
        "command": [HOMOGLYPH, "restart", *(f"x{ch}y" for ch in BLANKS)],
        "target_host": "web\u3164-1",
        "reason": "rotate\u2800logs",
        "run_as": "deploy",
    },
    "created_at": NOW - 1_000,
}


class Recording(FixtureSource):
    """The fixture source with one more grant that records approvals and answers them."""

    def __init__(self, *extra: dict[str, Any]) -> None:
        super().__init__()
        self.grants = [Grant.from_json(g) for g in (*extra, *GRANTS)]
        self.approved: list[str] = []

    async def approve(
        self, grant_id: str, *, grant_type: str | None = None, duration: int | None = None
    ) -> Decision:
        self.approved.append(grant_id)
        return Decision(grant_id, {"status": "approved", "decided_by": "pat@example.com", "decided_at": NOW})

    async def agent(self, ident: str) -> AgentInfo:
        info = await super().agent(ident)
        if ident == "agent+deploy@example.com":
            return AgentInfo.from_json(
                {
                    "agent_id": "a-1",
                    "email": ident,
                    "name": "Deploy\u3164bot",
                    "owner": "alice@example.com",
                    "approver": "ops@example.com",
                    "status": "active",
                }
            )
        return info


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def run(app: GrantConsole, size: tuple[int, int], steps: Any) -> Any:
    async def go() -> Any:
        async with app.run_test(size=size) as pilot:
            await settled(pilot)
            return await steps(pilot)

    return asyncio.run(go())


def test_blank_and_look_alike_characters_are_escaped_marked_and_listed_by_code_point() -> None:
    source = Recording(LOOK_ALIKE)
    app = GrantConsole(source, clock=lambda: NOW)

    async def steps(pilot: Any) -> tuple[str, str, str]:
        table = pilot.app.main.query_one(GrantTable)
        assert table.selected_id == LOOK_ALIKE["id"]  # the newest
        listed = screen_text(pilot.app)
        await pilot.press("enter")  # the details full screen
        await pilot.pause(0.2)
        detail = pilot.app.main.query_one("#detail")
        return listed, screen_text(pilot.app), detail.render_text().plain

    listed, shown, detail = run(app, (160, 60), steps)
    for screen in (listed, shown):
        for ch in screen:
            assert ch == "\n" or not is_hidden(ch), f"U+{ord(ch):04X} reached the terminal raw"
    row = next(line for line in listed.splitlines() if "web\\u3164-1" in line)
    assert row.lstrip().startswith("!"), row  # the marker: this grant holds non-ASCII characters
    plain = next(line for line in listed.splitlines() if "web-1.example.com" in line)
    assert not plain.lstrip().startswith("!"), plain  # plain ASCII: no marker
    assert HOMOGLYPH in detail and "U+0435 CYRILLIC SMALL LETTER IE" in detail
    for ch in BLANKS:
        assert f"U+{ord(ch):04X}" in detail, f"U+{ord(ch):04X} is not listed in the detail view"
    assert "U+3164 HANGUL FILLER" in detail  # the host, the agent's name
    assert "agent Deploy\\u3164bot" in detail and "rotate\\u2800logs" in detail


def test_the_default_run_as_reads_root_as_on_the_page() -> None:
    async def steps(pilot: Any) -> str:
        return str(pilot.app.main.query_one("#detail").render_text().plain)

    detail = run(GrantConsole(Recording(), clock=lambda: NOW), (120, 40), steps)
    assert "run as root (default)" in detail and "(default)" not in detail.replace("root (default)", "")


def test_a_dropped_link_says_reconnecting_and_for_how_long() -> None:
    clock = Clock()

    async def steps(pilot: Any) -> list[str]:
        main = pilot.app.main
        main.post_message(ConnectionChanged(ConnectionState("reconnecting", "cannot connect", retry_in=4)))
        await pilot.pause(0.1)
        clock.now += 12_000
        main.post_message(ConnectionChanged(ConnectionState("reconnecting")))  # the next attempt: still down
        await pilot.pause(0.1)
        status = main.query_one(ConnectionStatus)
        status.refresh()
        await pilot.pause(0.1)
        first = str(status.render().plain)
        clock.now += 60_000
        status.refresh()
        await pilot.pause(0.1)
        later = str(status.render().plain)
        header = screen_text(pilot.app).splitlines()[0]
        main.post_message(ConnectionChanged(ConnectionState("live")))
        await pilot.pause(0.1)
        return [first, later, header, str(status.render().plain)]

    first, later, header, live = run(GrantConsole(Recording(), clock=clock), (80, 24), steps)
    assert first == "◌ reconnecting… down 12s", first
    assert later == "◌ reconnecting… down 1m", later
    assert "reconnecting… down 1m" in header, header  # at 80 columns, in words, not a bare glyph
    assert live == "● live"


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_the_target_is_whole_at_80_columns_and_the_command_widens_at_120(size: tuple[int, int]) -> None:
    async def steps(pilot: Any) -> tuple[str, int]:
        table = pilot.app.main.query_one(GrantTable)
        return screen_text(pilot.app), table.columns[ColumnKey("action")].width

    shown, action = run(GrantConsole(Recording(), clock=lambda: NOW), size, steps)
    table_rows = "\n".join(shown.splitlines()[:8])
    assert "web-1.example.com" in table_rows and "bi.example.com" in table_rows
    if size[0] >= 120:
        assert action >= 40, action  # was 28 at any width up to 150 columns
        assert 'sh -c "echo ok\\n\\x1b[2Krm -rf /var/lib/db"' in table_rows


def test_column_widths_share_the_room_and_the_command_keeps_a_minimum() -> None:
    needed = {"requester": 25, "host": 17, "reason": 20}
    narrow, wide = column_widths(80, 1, needed), column_widths(120, 1, needed)
    assert narrow["host"] == 17 and wide["host"] == 17
    assert narrow["action"] >= ACTION_MIN and wide["action"] >= 40
    tiny = column_widths(40, 1, needed)
    assert tiny["action"] == ACTION_MIN and tiny["requester"] == 12 and tiny["host"] == len("Target host")
    # a short host name never cuts the column's header ("Target hos" at 100 columns)
    assert column_widths(100, 1, {"requester": 20, "host": 5, "reason": 10})["host"] == len("Target host")


def test_confirm_root_asks_before_approving_a_root_command_and_only_then() -> None:
    as_deploy = {
        **GRANTS[0],
        "id": "g-0006-as-deploy",
        "request": {**GRANTS[0]["request"], "run_as": "deploy"},
        "created_at": NOW - 500,
    }
    source = Recording(as_deploy)

    async def steps(pilot: Any) -> None:
        main = pilot.app.main
        table = main.query_one(GrantTable)
        assert table.selected_id == "g-0006-as-deploy"
        await pilot.press("a")  # runs as deploy: approved at once
        await pilot.pause(0.2)
        assert source.approved == ["g-0006-as-deploy"]
        table.select("g-0002-sneaky")  # no run_as: root
        await pilot.pause(0.1)
        await pilot.press("a")
        await pilot.pause(0.2)
        assert isinstance(pilot.app.screen, ConfirmScreen)
        assert "runs as root" in screen_text(pilot.app)
        assert source.approved == ["g-0006-as-deploy"]  # nothing approved yet
        await pilot.press("n")
        await pilot.pause(0.2)
        assert source.approved == ["g-0006-as-deploy"]
        await pilot.press("a")
        await pilot.pause(0.2)
        await pilot.press("y")
        await pilot.pause(0.3)
        assert source.approved == ["g-0006-as-deploy", "g-0002-sneaky"]
        table.select("g-0001-restart-nginx")  # run_as "root"
        await pilot.pause(0.1)
        await pilot.press("o")  # approve with changes: the same question after the form
        await pilot.pause(0.2)
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert isinstance(pilot.app.screen, ConfirmScreen)
        await pilot.press("y")
        await pilot.pause(0.3)
        assert source.approved[-1] == "g-0001-restart-nginx"

    run(GrantConsole(source, clock=lambda: NOW, confirm_root=True), (120, 40), steps)


def test_without_confirm_root_a_root_command_is_approved_with_one_key() -> None:
    source = Recording()

    async def steps(pilot: Any) -> None:
        await pilot.press("a")
        await pilot.pause(0.3)
        assert not isinstance(pilot.app.screen, ConfirmScreen)

    run(GrantConsole(source, clock=lambda: NOW), (120, 40), steps)
    assert source.approved == ["g-0002-sneaky"]


def test_a_status_or_grant_type_from_a_hostile_server_is_escaped_where_it_is_drawn() -> None:
    grant = Grant.from_json(
        {
            **GRANTS[0],
            "status": "pending\x1b[2J",
            "request": {**GRANTS[0]["request"], "grant_type": "once\u202e\x07"},
        }
    )
    assert grant.status == "pending\\x1b[2J" and grant.request.grant_type == "once\\u202e\\x07"
    assert (
        Grant.from_json(GRANTS[1]).status == "pending"
        and Grant.from_json(GRANTS[1]).request.grant_type == "timed"
    )
    assert grant.with_decision({"status": "approved\x9b"}).status == "approved\\x9b"
