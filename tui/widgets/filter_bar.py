"""The line above the table: which grants are shown, how they are sorted, and the text filter."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Input, Static


class FilterBar(Horizontal):
    @dataclass
    class Changed(Message):
        text: str

    @dataclass
    class Done(Message):
        """Enter or Escape in the filter input: the table takes the focus back."""

    DEFAULT_CSS = """
    FilterBar { height: 1; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="view-summary")
        yield Input(placeholder="/ filter", id="filter", compact=True)

    def show_summary(self, status_filter: str, shown: int, total: int, sort_label: str) -> None:
        summary = Text(no_wrap=True, overflow="ellipsis", end="")
        summary.append(status_filter.capitalize(), style="bold")
        summary.append(f" {shown}/{total}  sort {sort_label} ")
        self.query_one("#view-summary", Static).update(summary)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.post_message(self.Changed(event.value))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.Done())

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape":
            event.stop()
            self.post_message(self.Done())
