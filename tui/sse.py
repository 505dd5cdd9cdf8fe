"""A small, strict Server-Sent Events decoder (the WHATWG event-stream format, line by line)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event. ``id`` is the stream's last event id at dispatch time."""

    event: str
    data: str
    id: str | None
    retry_ms: int | None = None


class SseDecoder:
    """Feed it lines without their terminators; it returns an event when a blank line completes one.

    Comments (lines starting with ':', the server's heartbeat) are ignored, multiple ``data`` lines
    join with newlines, an ``id`` containing NUL is ignored, and ``retry`` sets the reconnect delay.
    """

    def __init__(self, last_event_id: str | None = None) -> None:
        self.last_event_id = last_event_id
        self.retry_ms: int | None = None
        self._event = ""
        self._data: list[str] = []
        self._has_data = False

    def feed_line(self, line: str) -> SseEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
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
