"""Messages the network side posts to the UI: small dataclasses, handled on the app's message loop."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from grantd.tui.models import AgentInfo, Grant, Reviewers


@dataclass(frozen=True)
class ConnectionState:
    """What the status bar shows about the server link."""

    mode: str  # connecting | live | reconnecting | polling | offline | unauthorised
    detail: str = ""
    retry_in: float | None = None


@dataclass
class ConnectionChanged(Message):
    state: ConnectionState


@dataclass
class GrantsLoaded(Message):
    """A fresh list for a view (`pending` or `history`); `complete` means nothing else is in that view."""

    view: str
    grants: list[Grant]


@dataclass
class GrantChanged(Message):
    """One grant as the server now has it (from an event, a decision, or a re-read)."""

    grant: Grant
    origin: str  # "event" | "decision" | "refresh"


@dataclass
class DetailLoaded(Message):
    """Context for the detail pane: the requesting agent and its earlier grants for the same action."""

    grant_id: str
    agent: AgentInfo | None
    agent_error: str | None
    earlier: list[Grant]
    earlier_error: str | None
    reviewers: Reviewers | None = None  # a pending grant under a policy (D13): who may still approve
    reviewers_error: str | None = None


@dataclass
class ReviewersLoaded(Message):
    """Who may still approve a grant under a policy (D13), read again after a vote."""

    grant_id: str
    reviewers: Reviewers | None
    reviewers_error: str | None
