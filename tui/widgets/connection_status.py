"""One line that says whether the console is live, reconnecting, polling or cut off, and for how long."""

from __future__ import annotations

import time

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from grantd.tui.format import age, one_line
from grantd.tui.messages import ConnectionState

_SYMBOL = {
    "connecting": "◌",
    "live": "●",
    "reconnecting": "◌",
    "polling": "◐",
    "offline": "○",
    "unauthorised": "✖",
}
_WORDS = {"connecting": "connecting…", "reconnecting": "reconnecting…"}
DOWN = ("reconnecting", "offline", "unauthorised")


class ConnectionStatus(Static):
    """The words, not just a glyph (issue 20 item 9): "◌ reconnecting… down 12s: cannot connect · retry in 4s"."""

    state: reactive[ConnectionState] = reactive(ConnectionState("connecting"))

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id)
        self.down_since: int | None = None  # when the link went down (ms), kept across retries

    def _now(self) -> int:
        clock = getattr(self.app, "clock", None)
        return int(clock()) if callable(clock) else int(time.time() * 1000)

    def on_mount(self) -> None:
        self.set_interval(1.0, self.refresh)  # the time since the link went down keeps counting

    def render(self) -> Text:
        state = self.state
        words = _WORDS.get(state.mode, state.mode)
        if state.mode in DOWN and self.down_since is not None:
            words += f" down {age(self._now(), self.down_since)}"
        if state.detail:
            words += f": {one_line(state.detail)}"
        if state.retry_in is not None and state.mode in DOWN:
            words += f" · retry in {state.retry_in:g}s"
        return Text(f"{_SYMBOL.get(state.mode, '?')} {words}", no_wrap=True, overflow="ellipsis", end="")

    def watch_state(self, old: ConnectionState, new: ConnectionState) -> None:
        if new.mode in DOWN:
            if self.down_since is None:
                self.down_since = self._now()
        elif new.mode != "connecting":
            self.down_since = None
        self.set_class(new.mode == "live", "-live")
        self.set_class(new.mode in DOWN, "-down")
        self.set_class(new.mode == "polling", "-polling")
