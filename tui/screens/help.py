"""The key reference (`?`)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("Deciding", ""),
    ("a", "approve the selected pending grant as requested"),
    ("o  A", "approve with another grant type / duration (form)"),
    ("d", "deny (optional reason)"),
    ("r", "revoke an approved grant (asks first)"),
    ("Viewing", ""),
    ("↑ ↓ PgUp PgDn", "move in the list"),
    ("enter", "details full screen (escape: back)"),
    ("tab", "move focus (list, details, filter)"),
    ("/", "filter by text (enter keeps it, escape clears it)"),
    ("f", "next status filter (pending, decided, all, one status)"),
    ("h", "history (decided grants) / back to pending"),
    ("s  S", "next sort column / reverse the order"),
    ("R  F5", "reload from the server"),
    ("escape", "back to the list; on the list: clear the text filter"),
    ("?", "this help"),
    ("q", "quit"),
)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q,question_mark,enter", "dismiss_help", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        text = Text(end="")
        for key, meaning in KEYS:
            if not meaning:
                text.append(f"{key}\n", style="bold underline")
                continue
            text.append(f"  {key:<15}", style="bold")
            text.append(f"{meaning}\n")
        text.append(
            "\nArguments are quoted; control characters, escape sequences and invisible Unicode are "
            "written as \\n \\t \\x1b \\u202e …, so nothing can hide in the terminal."
        )
        with VerticalScroll(id="help-box") as box:
            box.border_title = "grantd tui — keys"
            box.border_subtitle = "escape to close"
            yield Static(text)

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
