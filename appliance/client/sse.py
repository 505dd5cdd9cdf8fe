"""The one Server-Sent Events decoder of grantd's clients (the WHATWG event-stream format, line by line).

The approver console (grantd.tui.client, async) feeds it line by line and ignores comments; the
agent CLI's waiter (grantd.agent.wait) reads a whole stream with ``read`` and treats each comment
(the server's heartbeat) as a moment to re-check its grant.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event. ``id`` is the stream's last event id at dispatch time."""

    event: str
    data: str
    id: str | None
    retry_ms: int | None = None


@dataclass(frozen=True)
class SseComment:
    """A comment line (``: heartbeat``): no event, but proof the stream is alive."""

    text: str


class SseDecoder:
    """Feed it lines without their terminators; it returns an event when a blank line completes one.

    Comments (lines starting with ':', the server's heartbeat) dispatch nothing, multiple ``data`` lines
    join with newlines, an ``id`` containing NUL is ignored, and ``retry`` sets the reconnect delay.
    """

    def __init__(self, last_event_id: str | None = None) -> None:
        self.last_event_id = last_event_id
        self.retry_ms: int | None = None
        self._event = ""
        self._data: list[str] = []
        self._has_data = False

    def feed_line(self, line: str) -> SseEvent | None:
        """The event ``line`` completes, if any (comments are ignored)."""
        found = self.feed(line)
        return found if isinstance(found, SseEvent) else None

    def read(self, lines: Iterable[str]) -> Iterator[SseEvent | SseComment]:
        """Every event and comment of a stream, in order."""
        for line in lines:
            found = self.feed(line)
            if found is not None:
                yield found

    def feed(self, line: str) -> SseEvent | SseComment | None:
        """The event ``line`` completes, or the comment it is, or None."""
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return SseComment(line[1:].strip())
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "id":
            if "\x00" not in value:
                self.last_event_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self.retry_ms = int(value)
        return None

    def _dispatch(self) -> SseEvent | None:
        if not self._has_data:
            self._event = ""
            return None
        event = SseEvent(self._event or "message", "\n".join(self._data), self.last_event_id, self.retry_ms)
        self._event = ""
        self._data = []
        self._has_data = False
        return event
