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
        """Enter (filter kept) or Escape (filter cleared) in the filter input: the table takes the focus back."""

    DEFAULT_CSS = """
    FilterBar { height: 1; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="view-summary")
        yield Input(placeholder="/ filter", id="filter", compact=True)

    def show_summary(self, view: str, counts: str, sort_label: str) -> None:
        """`view` is the status filter's name, `counts` says in words what the rows are
        ("3 waiting", "0 waiting · 2 just decided", "11 grants · 0 match"), never a bare ratio."""
        summary = Text(no_wrap=True, overflow="ellipsis", end="")
        summary.append(view.capitalize(), style="bold")
        summary.append(f": {counts}  sort {sort_label} ")
        self.query_one("#view-summary", Static).update(summary)

    @property
    def text(self) -> str:
        return self.query_one("#filter", Input).value

    def clear(self) -> None:
        """Empty the text filter (Escape): nothing stays applied out of sight."""
        field = self.query_one("#filter", Input)
        if field.value:
            field.value = ""
        self.post_message(self.Changed(""))

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.post_message(self.Changed(event.value))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.Done())

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape":
            event.stop()
            self.clear()
            self.post_message(self.Done())
