"""How an attempt of `grantd elevate` ends: the exit codes, ``Stop`` (exit code, stable error code,
reason) and the one JSON line on stderr; and ``deadline``, the hard bound on blocking work."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from typing import Any

EXIT_REFUSED = 5
EXIT_ERROR = 1
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127


class Stop(Exception):
    """Ends an attempt: exit code, stable error code and a readable reason."""

    def __init__(self, exit_code: int, error: str, reason: str):
        super().__init__(reason)
        self.exit_code = exit_code
        self.error = error
        self.reason = reason
        self.reasons: list[str] = [reason]
        self.quiet = False  # audited, but nothing on stderr: someone else already said why


def refused(error: str, reason: str) -> Stop:
    return Stop(EXIT_REFUSED, error, reason)


def config_error(reason: str) -> Stop:
    return Stop(EXIT_ERROR, "config", reason)


class DeadlineExceeded(Exception):
    """Raised inside a ``deadline`` block when its time is up (the caller turns it into a Stop)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """A hard bound on blocking work in the main thread (DNS, a FIFO nobody writes, a slow peer)."""

    def expired(signum: int, frame: Any) -> None:
        raise DeadlineExceeded()

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def emit(stop: Stop) -> None:
    """The one JSON line on stderr for a refusal or an error (none for a quiet Stop)."""
    if stop.quiet:
        return
    line: dict[str, Any] = {"error": stop.error, "reason": stop.reason}
    if len(stop.reasons) > 1:
        line["reasons"] = stop.reasons
    print(json.dumps(line), file=sys.stderr, flush=True)
