"""Approve with another grant type and duration than the agent asked for."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from grantd.tui.format import action_summary, duration, one_line, parse_duration
from grantd.tui.models import GRANT_TYPES, Grant


@dataclass(frozen=True)
class Override:
    grant_type: str
    duration: int | None


class OverrideScreen(ModalScreen[Override | None]):
    """Dismisses with an Override on enter (when valid), or None on escape."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "submit", "Approve")]

    def __init__(self, grant: Grant, default_timed: int = 3600) -> None:
        super().__init__()
        self.grant = grant
        self.default_timed = default_timed

    def compose(self) -> ComposeResult:
        request = self.grant.request
        with Vertical(id="override-box", classes="form") as box:
            box.border_title = "Approve with changes"
            box.border_subtitle = "enter: approve · escape: cancel"
            summary = Text(end="")
            summary.append(one_line(self.grant.requester), style="bold")
            summary.append(f" on {one_line(request.target_host)}\n")
            summary.append(action_summary(self.grant))
            summary.append(f"\nasked for: {request.grant_type}")
            if request.duration:
                summary.append(f" {duration(request.duration)}")
            yield Static(summary, classes="form-summary")
            with Horizontal(id="override-fields"):
                yield OptionList(*(Option(t, id=t) for t in GRANT_TYPES), id="override-type")
                with Vertical(id="override-duration-box"):
                    yield Static("Duration (for timed): 90s, 15m, 8h, 2d")
                    yield Input(
                        value=str(request.duration or self.default_timed),
                        placeholder="e.g. 1h",
                        id="override-duration",
                        compact=True,
                    )
                    yield Static("", id="override-error")

    def on_mount(self) -> None:
        types = self.query_one("#override-type", OptionList)
        requested = self.grant.request.grant_type
        types.highlighted = GRANT_TYPES.index(requested) if requested in GRANT_TYPES else 0
        types.focus()

    def _selected_type(self) -> str:
        index = self.query_one("#override-type", OptionList).highlighted
        return GRANT_TYPES[index] if index is not None else self.grant.request.grant_type

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.query_one("#override-duration", Input).disabled = event.option_id != "timed"

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.action_submit()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_submit()

    def action_submit(self) -> None:
        grant_type = self._selected_type()
        error = self.query_one("#override-error", Static)
        if grant_type != "timed":
            self.dismiss(Override(grant_type, None))
            return
        seconds = parse_duration(self.query_one("#override-duration", Input).value)
        if not seconds:
            error.update(Text("a timed grant needs a duration such as 30m or 8h", style="bold"))
            self.query_one("#override-duration", Input).focus()
            return
        self.dismiss(Override("timed", seconds))

    def action_cancel(self) -> None:
        self.dismiss(None)
