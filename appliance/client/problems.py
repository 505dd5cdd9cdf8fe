"""The one reader of an error answer, for every grantd client.

The server answers errors as problem+json (RFC 9457: ``title``, ``detail``), its OAuth endpoints as
RFC 6749 §5.2 errors (``error``, ``error_description``). Whatever a client shows of it is the
server's words, so they are escaped here (grantd.core.display, D18) and nowhere else: a client
never prints a body field raw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from grantd.core.display import escape_text

# Where the words for a person are, most specific first (problem+json, then OAuth, then anything else).
_WORDS = ("detail", "error_description", "title", "message", "error")


class Answer(Protocol):
    """What is read of an HTTP answer (an httpx.Response, sync or async, whose body has been read)."""

    @property
    def status_code(self) -> int: ...

    @property
    def reason_phrase(self) -> str: ...

    def json(self) -> Any: ...


@dataclass(frozen=True)
class Problem:
    """An error answer. Every text field is already escaped for a terminal; ``body`` is the parsed JSON."""

    status: int
    reason: str  # the HTTP reason phrase ("" when there is none)
    detail: str | None  # the server's words for a person, if it sent any
    error: str | None  # the OAuth error code (``invalid_grant``, ``slow_down``, ...), if it sent one
    body: Any = None

    @property
    def text(self) -> str:
        """One line for a person: the server's words, else ``HTTP 502 Bad Gateway``."""
        return self.detail or f"HTTP {self.status} {self.reason}".strip()

    @property
    def code(self) -> str:
        """The OAuth error code, else ``http_<status>``."""
        return self.error or f"http_{self.status}"


def read_problem(response: Answer) -> Problem:
    """The problem in ``response`` (any status; a body that is not JSON has no words)."""
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    detail = error = None
    if isinstance(body, dict):
        detail = next(
            (escape_text(body[key]) for key in _WORDS if isinstance(body.get(key), str) and body[key]), None
        )
        if isinstance(body.get("error"), str) and body["error"]:
            error = escape_text(body["error"])
    return Problem(response.status_code, escape_text(response.reason_phrase or ""), detail, error, body)
