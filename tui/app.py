"""The Textual application: the main screen fed by a GrantSource (the HTTP client in production),
after a sign-in screen when a person has no session yet (the device grant, docs/device.md)."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.app import App

from grantd.tui.client import GrantSource
from grantd.tui.feed import BACKOFF
from grantd.tui.screens.main import MainScreen
from grantd.tui.screens.signin import SignInScreen
from grantd.tui.signin import SessionCredential


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
        confirm_root: bool = False,
    ) -> None:
        super().__init__()
        self.source = source
        self.bell_on_new = bell
        self.confirm_root = confirm_root
        self.clock = clock
        self.poll_interval = poll_interval
        self.backoff = backoff
        if theme:
            self.theme = theme

    @staticmethod
    def theme_names() -> list[str]:
        from textual.theme import BUILTIN_THEMES

        return sorted(BUILTIN_THEMES)

    def _main_screen(self) -> MainScreen:
        return MainScreen(
            self.source,
            clock=self.clock,
            bell=self.bell_on_new,
            poll_interval=self.poll_interval,
            backoff=self.backoff,
            confirm_root=self.confirm_root,
        )

    def get_default_screen(self) -> MainScreen | SignInScreen:
        credential = self.source.credential
        if isinstance(credential, SessionCredential) and credential.session is None:
            return SignInScreen(credential)  # a person signs in first (device grant), then MainScreen
        return self._main_screen()

    def signed_in(self) -> None:
        """The person approved the sign-in: the grant list, as them (their name in the header)."""
        # Pushed over the sign-in screen (Textual cannot switch away from the default screen); that
        # one stays below, never seen again: quitting ends both.
        self.push_screen(self._main_screen())

    @property
    def person(self) -> str | None:
        """Who the console acts as when a person signed in (their name and e-mail), else None."""
        credential = self.source.credential
        return credential.label if isinstance(credential, SessionCredential) and credential.session else None

    @property
    def main(self) -> MainScreen:
        screen = next((s for s in self.screen_stack if isinstance(s, MainScreen)), None)
        assert screen is not None, "not signed in yet"
        return screen

    async def on_unmount(self) -> None:
        await self.source.aclose()
        credential = self.source.credential
        if isinstance(credential, SessionCredential):
            await credential.signin.aclose()
