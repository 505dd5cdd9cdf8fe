"""One line that says whether the console is live, reconnecting, polling or cut off."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from grantd.tui.messages import ConnectionState

_SYMBOL = {
    "connecting": "◌",
    "live": "●",
    "reconnecting": "◌",
    "polling": "◐",
    "offline": "○",
    "unauthorised": "✖",
}


class ConnectionStatus(Static):
    state: reactive[ConnectionState] = reactive(ConnectionState("connecting"))

    def render(self) -> Text:
        state = self.state
        words = state.mode
        if state.detail:
            words += f": {state.detail}"
        if state.retry_in is not None and state.mode in ("reconnecting", "offline", "unauthorised"):
            words += f" (retry in {state.retry_in:g}s)"
        return Text(f"{_SYMBOL.get(state.mode, '?')} {words}", no_wrap=True, overflow="ellipsis", end="")

    def watch_state(self, old: ConnectionState, new: ConnectionState) -> None:
        self.set_class(new.mode == "live", "-live")
        self.set_class(new.mode in ("reconnecting", "offline", "unauthorised"), "-down")
        self.set_class(new.mode == "polling", "-polling")
