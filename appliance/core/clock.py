"""The one source of "now". Services and the web layer ask the clock they were given, so a test
can hand them a ManualClock and move time without sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch (grant and delegation times, D1)."""

    def now_s(self) -> int:
        """Whole seconds since the epoch (JWT iat/exp)."""


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def now_s(self) -> int:
        return int(time.time())


class ManualClock:
    """A clock that moves only when told to (tests)."""

    def __init__(self, start_ms: int | None = None):
        self._now_ms = start_ms if start_ms is not None else int(time.time() * 1000)

    def now_ms(self) -> int:
        return self._now_ms

    def now_s(self) -> int:
        return self._now_ms // 1000

    def advance(self, seconds: float) -> None:
        self._now_ms += int(seconds * 1000)

    def set_ms(self, value: int) -> None:
        self._now_ms = value


SYSTEM_CLOCK = SystemClock()
