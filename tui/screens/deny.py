"""Deny a grant, with an optional reason."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from grantd.tui.format import action_summary, one_line
from grantd.tui.models import Grant

MAX_REASON = 500


class DenyScreen(ModalScreen[str | None]):
    """Dismisses with the reason ("" for none) on enter, or None on escape."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, grant: Grant) -> None:
        super().__init__()
        self.grant = grant

    def compose(self) -> ComposeResult:
        with Vertical(id="deny-box", classes="form") as box:
            box.border_title = "Deny grant"
            box.border_subtitle = "enter: deny · escape: cancel"
            summary = Text(end="")
            summary.append(one_line(self.grant.requester), style="bold")
            summary.append(f" on {one_line(self.grant.request.target_host)}\n")
            summary.append(action_summary(self.grant))
            yield Static(summary, classes="form-summary")
            yield Static("Reason (optional, shown to the agent):")
            yield Input(placeholder="reason", id="deny-reason", max_length=MAX_REASON)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)
