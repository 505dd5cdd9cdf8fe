"""A yes/no question (used before revoking, which cannot be undone)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("y,enter", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, title: str, question: Text) -> None:
        super().__init__()
        self.title_text = title
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="form") as box:
            box.border_title = self.title_text
            box.border_subtitle = "y: yes · n: no"
            yield Static(self.question)

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
