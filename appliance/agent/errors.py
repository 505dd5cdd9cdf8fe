"""The agent CLI's failures: a readable message, a stable kind for --json and an exit code."""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_PENDING = 75  # EX_TEMPFAIL, what the peer CLI uses for "ask again later"


class CliError(Exception):
    """A failure with a readable message, a stable kind for --json and an exit code."""

    def __init__(self, message: str, *, kind: str = "error", exit_code: int = EXIT_ERROR, **extra: Any):
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.exit_code = exit_code
        self.extra = extra
