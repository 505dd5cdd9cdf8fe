"""The Textual application: one main screen fed by a GrantSource (the HTTP client in production)."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.app import App

from grantd.tui.client import GrantSource
from grantd.tui.feed import BACKOFF
from grantd.tui.screens.main import MainScreen


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class GrantConsole(App[None]):
    """`grantd tui`. Everything network-bound runs in workers on the main screen."""

    CSS_PATH = "console.tcss"
    TITLE = "grantd approvals"
    ENABLE_COMMAND_PALETTE = True
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (150, "-wide")]

    def __init__(
        self,
        source: GrantSource,
        *,
        bell: bool = False,
        clock: Callable[[], int] = wall_clock_ms,
        theme: str | None = None,
        poll_interval: float = 5.0,
        backoff: tuple[float, ...] = BACKOFF,
    ) -> None:
        super().__init__()
        self.source = source
        self.bell_on_new = bell
        self.clock = clock
        self.poll_interval = poll_interval
        self.backoff = backoff
        if theme:
            self.theme = theme

    @staticmethod
    def theme_names() -> list[str]:
        from textual.theme import BUILTIN_THEMES

        return sorted(BUILTIN_THEMES)

    def get_default_screen(self) -> MainScreen:
        return MainScreen(
            self.source, clock=self.clock, bell=self.bell_on_new, poll_interval=self.poll_interval, backoff=self.backoff
        )

    @property
    def main(self) -> MainScreen:
        screen = self.screen_stack[0]
        assert isinstance(screen, MainScreen)
        return screen

    async def on_unmount(self) -> None:
        await self.source.aclose()
