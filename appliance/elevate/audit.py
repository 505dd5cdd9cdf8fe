"""The audit log: no audit, no elevation (the log is opened before anything else can happen)."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime
from typing import Any

from grantd.elevate.errors import config_error


class Audit:
    """One JSON line per attempt (event "attempt": result allowed, refused or error), and for an
    allowed one a second when the command has ended (event "exit"). Appended with O_APPEND, one
    write(2) per line, so lines of concurrent runs never mix."""

    def __init__(self, path: str):
        self.path = path
        self.fd: int | None = None
        self.record: dict[str, Any] = {}
        self.written = False

    def open(self) -> None:
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            os.makedirs(directory, mode=0o750, exist_ok=True)
        self.fd = os.open(
            self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640
        )
        st = os.fstat(self.fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            os.close(self.fd)
            self.fd = None
            raise config_error(
                f"audit log {self.path} must be a regular root-owned file, not group/world-writable"
            )

    def write(self, result: str, reason: str | None, **extra: Any) -> None:
        if self.fd is None or self.written:
            return
        self._line({"event": "attempt", **extra, "result": result, "reason": reason})
        self.written = True

    def exit(self, result: str, reason: str | None, **extra: Any) -> None:
        """How an allowed command ended: its exit status or the signal that ended it."""
        if self.fd is not None:
            self._line({"event": "exit", **extra, "result": result, "reason": reason})

    def host_key_made(self, path: str, public_line: str) -> None:
        """``--init-host`` made the host key: one line (event "host_key") naming the caller."""
        if self.fd is not None:
            self._line(
                {"event": "host_key", "result": "created", "host_key": path, "public_key": public_line}
            )

    def _line(self, fields: dict[str, Any]) -> None:
        assert self.fd is not None
        line = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), **self.record, **fields}
        os.write(self.fd, (json.dumps(line, separators=(",", ":"), default=str) + "\n").encode())
